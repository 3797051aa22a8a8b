"""The command line: bad input exits 2 with one line before any work; generate end to end on tiny models."""

import json

import pytest
import torch

from iclr25_lantern.cli import main


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["generate", "--delta", "-0.1"], "delta must be"),
        (["generate", "--k", "256"], "k must be an integer in [0, V - 1 = 255]"),
        (["generate", "--k", "-1"], "k must be"),
        (["generate", "--lam", "0.5"], "lam must be"),
        (["generate", "--temperature", "-1"], "temperature must be"),
        (["generate", "--gamma", "0"], "gamma must be"),
        (["generate", "--model", "smollm2", "--cfg-scale", "2"], "cfg_scale must be 1"),
        (["generate", "--model", "smollm2", "--k", "49152"], "V - 1 = 49151"),
        (["reproduce", "--codebook-size", "8"], "codebook_size must be"),
        (["reproduce", "--seeds", "0"], "seeds must be"),
        (["bench", "--k", "300"], "k must be an integer in [0, V - 1 = 255]"),
        (["bench", "--deltas", "0.1", "0"], "delta must be"),
        (["generate", "--delta", "3"], "delta must be in [0, 1]"),
        (["generate", "--delta", "1.5", "--lam", "2"], "pass --lam 1.5 instead of --delta"),
        (["bench", "--deltas", "2"], "pass --lams 2 for the lambda mode"),
        (["bench", "--lams", "1"], "lam must be"),
        (["bench", "--quality-images", "5"], "quality_images must be"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, needle, capsys, tmp_path):
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err
    assert not out.exists()


def _write_tiny_models(folder, vocab=16):
    from iclr25_lantern._models import VQVAE, FeatureCNN, TokenTransformer, TransformerConfig

    torch.manual_seed(0)
    vq = VQVAE(vocab, 4)
    t = TokenTransformer(TransformerConfig(vocab, dim=16, layers=1, heads=2))
    d = TokenTransformer(TransformerConfig(vocab, dim=8, layers=1, heads=2))
    blob = {
        "vq": vq.state_dict(), "vq_shape": (vocab, 4), "target": t.state_dict(), "target_cfg": t.cfg.__dict__,
        "drafter": d.state_dict(), "drafter_cfg": d.cfg.__dict__, "clf": FeatureCNN().state_dict(),
    }  # fmt: skip
    folder.mkdir()
    torch.save(blob, folder / "models.pt")


def test_generate_end_to_end_on_saved_tiny_models(tmp_path, capsys):
    models = tmp_path / "models"
    _write_tiny_models(models)
    out = tmp_path / "out"
    argv = [
        "generate",
        "--models",
        str(models),
        "--k",
        "4",
        "--delta",
        "0.3",
        "--samples",
        "3",
        "--out",
        str(out),
    ]
    assert main([*argv, "--quiet"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["metrics"]["mean_accepted_length"] >= 1.0
    assert 0.0 <= res["metrics"]["acceptance_rate"] <= 1.0
    assert (out / "samples.png").is_file() and (out / "tokens.npy").is_file()
    import numpy as np

    tokens = np.load(out / "tokens.npy")
    assert tokens.shape == (3, 49) and tokens.min() >= 0 and tokens.max() < 16


def test_generate_refuses_k_above_the_loaded_codebook(tmp_path, capsys):
    models = tmp_path / "models"
    _write_tiny_models(models, vocab=16)
    assert main(["generate", "--models", str(models), "--k", "16", "--quiet"]) == 2
    assert "V - 1 = 15" in capsys.readouterr().err


def test_generate_refuses_a_folder_without_models(tmp_path, capsys):
    assert main(["generate", "--models", str(tmp_path), "--quiet"]) == 2
    assert "models.pt" in capsys.readouterr().err


@pytest.mark.slow
def test_reproduce_tiny_runs_on_fashion_mnist(tmp_path):
    from iclr25_shared.data import fashion_mnist
    from iclr25_shared.testing import require

    require(fashion_mnist, "test")
    out = tmp_path / "r"
    assert main(["reproduce", "--size", "tiny", "--seeds", "2", "--out", str(out), "--quiet"]) == 0
    rows = json.loads((out / "results.json").read_text())["tables"]["sweep"]
    assert [r["method"] for r in rows][:2] == ["target-only AR", "standard SD (delta=0)"]
    assert (out / "speedup.png").is_file() and (out / "models.pt").is_file()


def test_generate_with_temperature_zero_and_lantern_warns_before_decoding(tmp_path, capsys):
    models = tmp_path / "models"
    _write_tiny_models(models)
    argv = [
        "generate",
        "--models",
        str(models),
        "--k",
        "4",
        "--delta",
        "0.3",
        "--temperature",
        "0",
        "--samples",
        "1",
    ]
    with pytest.warns(UserWarning, match="LANTERN#6"):
        assert main(argv) == 0
    assert "temperature 0" in capsys.readouterr().err


def test_bench_interleaves_the_arms_and_measures_quality_with_intervals(tmp_path):
    models = tmp_path / "models"
    _write_tiny_models(models)
    out = tmp_path / "bench"
    argv = ["bench", "--models", str(models), "--k", "3", "--deltas", "0.1", "--lams", "2", "--images", "1",
            "--repeats", "3", "--quality-images", "20", "--out", str(out), "--quiet"]  # fmt: skip
    assert main(argv) == 0
    res = json.loads((out / "results.json").read_text())
    names = ["target-only AR", "standard SD (delta=0)", "LANTERN k=3 delta=0.1", "LANTERN k=3 lambda=2"]
    speed, quality = res["tables"]["speed"], res["tables"]["quality"]
    assert [r["method"] for r in speed] == names and [r["method"] for r in quality] == names
    bench = res["metrics"]["bench"]
    assert bench["order"][0] == names and bench["order"][1] == [*names[1:], names[0]]  # rotated each round
    assert all(len(bench["times_s"][n]) == 3 for n in names)
    for row in speed:  # tokens/s = tokens of one call (1 image, 49 tokens) over the arm's median seconds
        assert row["tokens/s"] == pytest.approx(49 / bench["median_s"][row["method"]])
    assert speed[0]["target calls"] == 49 and speed[1]["speed-up vs SD [95% CI]"].startswith("1.000")
    tau_gain = quality[2]["tau (tokens/target call)"] / quality[1]["tau (tokens/target call)"]
    cost = float(speed[2]["round cost vs SD [95% CI]"].split()[0])
    shown = float(speed[2]["speed-up vs SD at the quality tau [95% CI]"].split()[0])
    # both numbers are printed to 3 decimals: the cost's rounding (<= 5e-4 / cost relative) and the shown value's
    assert shown == pytest.approx(tau_gain / cost, rel=5e-4 / cost + 5e-4 / shown + 1e-6)
    assert all(r["images"] == 20 for r in quality)
    assert [type(r["in quality band"]) for r in quality] == [str, str, bool, bool]
    steps = res["tables"]["acceptance_step"]
    assert [r["method"] for r in steps] == names[1:]
    profile = res["tables"]["profile"]
    assert [r["method"] for r in profile] == names[1:]
    for row in profile:  # the parts and the rest add up to the round
        parts = sum(v for k, v in row.items() if k not in ("method", "round (us/round)"))
        assert parts == pytest.approx(row["round (us/round)"])


# -- the boundary: a user's models folder and data folder (issue 37) -----------------------------------------------


def _one_line(capsys):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _pickled_module(path):  # a whole nn.Module: only an unsafe load (weights_only=False) could read it
    from iclr25_lantern._models import FeatureCNN

    torch.save(FeatureCNN(), path)


@pytest.mark.parametrize(
    "content", [b"\x89junk, not a checkpoint\n", b"PK\x03\x04truncated zip", _pickled_module]
)
def test_a_corrupt_models_pt_exits_2_naming_it_without_unsafe_advice(tmp_path, capsys, content):
    models = tmp_path / "models"
    models.mkdir()
    if callable(content):
        content(models / "models.pt")
    else:
        (models / "models.pt").write_bytes(content)
    out = tmp_path / "out"
    for command in ("generate", "bench"):
        assert main([command, "--models", str(models), "--out", str(out), "--quiet"]) == 2
        err = _one_line(capsys)
        assert "models.pt" in err and "weights_only=False" not in err, err
    assert not out.exists()


def test_a_nan_weight_models_pt_exits_2_naming_the_file_and_the_tensor(tmp_path, capsys):
    models = tmp_path / "models"
    _write_tiny_models(models)
    blob = torch.load(models / "models.pt", weights_only=True)
    blob["target"]["head.weight"][0, 0] = float("nan")
    torch.save(blob, models / "models.pt")
    assert main(["generate", "--models", str(models), "--k", "4", "--samples", "1", "--quiet"]) == 2
    err = _one_line(capsys)
    assert "models.pt" in err and "target.head.weight" in err and "NaN or inf" in err, err


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda b: b.pop("drafter"), "no 'drafter'"),
        (lambda b: b.__setitem__("target_cfg", {"vocab": 3}), "target_cfg"),
        (lambda b: b["clf"].pop("out.weight"), "clf"),
        (lambda b: b.__setitem__("vq_shape", (16, 5)), "vq"),
        (lambda b: b.clear() or b.update({"weights": torch.zeros(2)}), "no 'vq'"),
    ],
)
def test_a_models_pt_of_the_wrong_layout_exits_2(tmp_path, capsys, edit, needle):
    models = tmp_path / "models"
    _write_tiny_models(models)
    blob = torch.load(models / "models.pt", weights_only=True)
    edit(blob)
    torch.save(blob, models / "models.pt")
    assert main(["generate", "--models", str(models), "--k", "4", "--samples", "1", "--quiet"]) == 2
    err = _one_line(capsys)
    assert "models.pt" in err and needle in err, err


def test_models_pt_as_saved_by_reproduce_loads_with_weights_only(tmp_path):
    """The saved format is state dicts plus plain numbers, tuples and dicts: weights_only=True loads it."""
    from iclr25_lantern._common import _load_models, _save_models
    from iclr25_lantern._models import VQVAE, FeatureCNN, TokenTransformer, TransformerConfig
    from iclr25_shared.cli import RunContext

    models = {
        "vq": VQVAE(16, 4),
        "target": TokenTransformer(TransformerConfig(16, dim=16, layers=1, heads=2)),
        "drafter": TokenTransformer(TransformerConfig(16, dim=8, layers=1, heads=2)),
        "clf": FeatureCNN(),
    }
    staging = tmp_path / "staging"
    staging.mkdir()
    _save_models(models, RunContext("iclr25-lantern reproduce", None, staging=staging))
    blob = torch.load(staging / "models.pt", map_location="cpu", weights_only=True)
    assert blob["vq_shape"] == (16, 4) and blob["target_cfg"]["dim"] == 16
    loaded = _load_models(staging)
    assert loaded["drafter"].cfg == models["drafter"].cfg
    assert torch.equal(loaded["vq"].codebook, models["vq"].codebook)


@pytest.mark.parametrize("command", ["generate", "reproduce", "bench"])
def test_a_data_folder_without_fashion_mnist_exits_2_before_training(tmp_path, capsys, command):
    data = tmp_path / "data"
    data.mkdir()
    (data / "notes.txt").write_text("no IDX files here")
    assert main([command, "--data", str(data), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = _one_line(capsys)
    assert str(data) in err and "train-images-idx3-ubyte.gz" in err, err
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                 "t10k-labels-idx1-ubyte.gz"):  # fmt: skip
        (data / name).write_bytes(b"junk, not gzip")
    assert main([command, "--data", str(data), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = _one_line(capsys)
    assert "idx" in err and "gzip" in err, err
    assert not (tmp_path / "o").exists()


def test_reproduce_refuses_a_codebook_smaller_than_its_largest_k_before_training(capsys):
    assert main(["reproduce", "--codebook-size", "32", "--quiet"]) == 2
    assert "V - 1 = 31" in _one_line(capsys)


def test_the_config_knows_the_largest_k_of_each_reproduce_grid():
    from iclr25_lantern._common import SIZES
    from iclr25_lantern.cli import LARGEST_K

    assert {name: max(k for k, _, _ in size.grid) for name, size in SIZES.items()} == LARGEST_K
