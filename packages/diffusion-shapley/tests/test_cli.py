"""The command line end to end on tiny settings (real Fashion-MNIST), and every bad input the issue lists."""

import json

import numpy as np
import pytest

from iclr25_diffusion_shapley.cli import main
from iclr25_shared.data import fashion_mnist
from iclr25_shared.testing import require

TINY = [
    "--per-class",
    "6",
    "--classifier-images",
    "60",
    "--hidden",
    "16",
    "--batch-size",
    "8",
    "--retrain-steps",
    "2",
    "--prune-steps",
    "1",
    "--ft-steps",
    "1",
    "--unlearn-steps",
    "1",
    "--num-samples",
    "8",
    "--sampling-steps",
    "2",
    "--kernel-samples",
    "4",
    "--quiet",
]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--contributors", "0,1"], "contributors must name at least 2"),
        (["--contributors", "0,1", ","], "has no classes, so no data"),
        (["--contributors", "0,1", "10"], "must be an integer in \\[0, 9\\]"),
        (["--contributors", "0,1", "1,2"], "class 1 is in contributor 0 and contributor 1"),
        (["--pruning-ratio", "1.0"], "pruning_ratio"),
        (["--pruning-ratio", "-0.1"], "pruning_ratio"),
        (["--property", "share:12"], "property must be one of"),
        (["--per-class", "0"], "per_class"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, field, capsys, tmp_path):
    out = tmp_path / "run"
    assert main(["attribute", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    import re

    assert re.search(field, err), err
    assert not out.exists()


def test_reproduce_refuses_an_unknown_property(capsys):
    assert main(["reproduce", "--properties", "entropy", "aesthetics"]) == 2
    assert "properties must be one of" in capsys.readouterr().err


@pytest.fixture(scope="module")
def fmnist():
    return require(fashion_mnist, "test")


@pytest.mark.parametrize(("method", "estimator"), [("retrain", "exact"), ("sparse-ft", "kernel-shap")])
def test_attribute_end_to_end_is_efficient(fmnist, tmp_path, method, estimator):
    out = tmp_path / "run"
    argv = ["attribute", "--contributors", "0", "1", "7", "--method", method, "--estimator", estimator, *TINY]
    assert main([*argv, "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    phi = np.load(out / "attributions.npy")
    assert phi.shape == (3,)
    m = res["metrics"]
    assert np.sum(phi) == pytest.approx(m["v_full"] - m["v_empty"], abs=1e-9)
    assert res["tables"]["attributions"][0]["contributor"] == "T-shirt/top"


@pytest.mark.slow
def test_reproduce_and_bench_end_to_end(fmnist, tmp_path):
    out = tmp_path / "repro"
    argv = ["reproduce", "--contributors", "0", "1", "7", "--seeds", "2", *TINY, "--out", str(out)]
    assert main(argv) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["metrics"]["entropy.efficiency_gap_sparse_ft_max"] < 1e-9
    assert (out / "seed_0.json").exists() and (out / "seed_1.json").exists()
    assert (
        main(["bench", "--contributors", "0", "1", "--subsets", "1", *TINY, "--out", str(tmp_path / "b")])
        == 0
    )


def test_data_root_must_hold_the_fashion_mnist_files_or_exit_2_naming_it(tmp_path, capsys, monkeypatch):
    # Regression: --data-root was only checked to be a folder: one without the IDX files silently trained on the
    # system's or the cache's copy instead, and a corrupt file failed in the middle of the run.
    import gzip

    from iclr25_diffusion_shapley import cli
    from iclr25_shared import cache_dir

    files = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz")
    files += ("t10k-labels-idx1-ubyte.gz",)

    calls = []
    for name, (cls, _) in list(cli.COMMANDS.items()):
        monkeypatch.setitem(cli.COMMANDS, name, (cls, lambda cfg, ctx: calls.append(cfg)))
    empty = tmp_path / "empty"
    empty.mkdir()
    truncated = tmp_path / "truncated"
    truncated.mkdir()
    for n in files:  # an IDX header that promises 5 labels, then 3 bytes
        (truncated / n).write_bytes(gzip.compress(b"\0\0\x08\x01" + (5).to_bytes(4, "big") + b"abc"))
    out = tmp_path / "out"
    for folder, needle in (
        (empty, "has no train-images-idx3-ubyte.gz"),
        (truncated, "train-images-idx3-ubyte.gz"),
    ):
        for command in cli.COMMANDS:
            assert main([command, "--data-root", str(folder), "--out", str(out)]) == 2, (command, folder)
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and "--data-root" in err[0] and str(folder) in err[0] and needle in err[0], (
                err
            )
    assert not calls and not out.exists()
    real = cache_dir("fashion-mnist")
    if all((real / n).is_file() for n in files):  # the real files pass
        assert main(["attribute", "--data-root", str(real), "--quiet"]) == 0 and len(calls) == 1


def test_data_root_whose_files_are_cut_short_exits_2_naming_the_file_before_training(tmp_path, capsys):
    # The check before the run reads the files' IDX headers only; a file whose header is right but whose body was
    # cut short is refused when it is read, the first thing the run does: exit 2 naming the option and the file,
    # no model trained and nothing written.
    import gzip

    headers = {
        "train-images-idx3-ubyte.gz": b"\0\0\x08\x03"
        + b"".join(n.to_bytes(4, "big") for n in (60_000, 28, 28)),
        "train-labels-idx1-ubyte.gz": b"\0\0\x08\x01" + (60_000).to_bytes(4, "big"),
        "t10k-images-idx3-ubyte.gz": b"\0\0\x08\x03"
        + b"".join(n.to_bytes(4, "big") for n in (10_000, 28, 28)),
        "t10k-labels-idx1-ubyte.gz": b"\0\0\x08\x01" + (10_000).to_bytes(4, "big"),
    }
    folder = tmp_path / "FashionMNIST" / "raw"  # torchvision's layout below the folder given
    folder.mkdir(parents=True)
    for name, header in headers.items():
        (folder / name).write_bytes(gzip.compress(header + b"abc"))
    out = tmp_path / "out"
    assert main(["attribute", "--data-root", str(tmp_path), *TINY, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--data-root" in err[0] and "train-images-idx3-ubyte.gz" in err[0], err
    assert not out.exists()


@pytest.mark.slow  # ~1 min: the classifier and the pruned model are built first
def test_bench_splits_the_per_subset_ratio_into_steps_and_pruned_network(fmnist, tmp_path):
    # issue 43: the per-subset ratio was one number timed all-retrain-first; now interleaved arms on the same
    # coalitions, and the ratio split into fewer steps (dense fine-tune at sparse-FT's steps) and the pruned network
    out = tmp_path / "b"
    argv = ["bench", "--models", "mlp", "--contributors", "0", "1", "--subsets", "1", "--repeats", "2", *TINY]
    assert main([*argv, "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    arms = {
        r["arm"]: r
        for r in res["tables"]["seconds per coalition (interleaved rounds, same coalition per round)"]
    }
    assert arms["dense fine-tune"]["steps"] == arms["sparse-ft"]["steps"] == 1  # --ft-steps: held equal
    assert arms["retrain"]["steps"] == 2 and arms["sparse-ft"]["params"] < arms["dense fine-tune"]["params"]
    split = res["tables"]["per-subset ratio split into its two causes"]
    assert [r["ratio"].split(":")[0] for r in split] == ["per subset", "steps", "pruned network", "check"]
    assert all(r["median"] > 0 for r in split)
    order = res["metrics"]["bench"]["mlp"]["order"]
    assert len(order) == 2 and order[0] != order[1]  # interleaved: the arm order rotates between rounds


def test_size_gpu_applies_the_preset_to_options_left_at_their_defaults():
    from iclr25_diffusion_shapley.cli import GPU_SIZE, ReproduceConfig

    quick = ReproduceConfig()
    assert quick.sized() is quick
    gpu = ReproduceConfig(size="gpu", per_class=50).sized()
    assert gpu.per_class == 50 != GPU_SIZE["per_class"]  # given explicitly: wins over the preset
    assert {k: getattr(gpu, k) for k in GPU_SIZE if k != "per_class"} == {
        k: v for k, v in GPU_SIZE.items() if k != "per_class"
    }
    assert gpu.retrain_steps >= 2 * quick.retrain_steps and gpu.batch_size >= 4 * quick.batch_size
