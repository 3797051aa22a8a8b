"""The CLI end to end on tiny inputs, and its bad-input exits (one line, exit 2, before any work)."""

import json

import pytest

from iclr25_simhand.cli import main


@pytest.fixture(autouse=True)
def _quiet_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def test_pretrain_finetune_evaluate_chain(tmp_path):
    enc = tmp_path / "pre"
    assert main(["pretrain", "--pool", "16", "--size", "16", "--steps", "2", "--batch-size", "8", "--quiet",
                 "--out", str(enc)]) == 0  # fmt: skip
    res = json.loads((enc / "results.json").read_text())
    assert (enc / "encoder.pt").is_file() and res["metrics"]["final_loss"] > 0
    assert (enc / "samples.png").stat().st_size > 0  # the renderer sheet with 2-D skeletons
    ft = tmp_path / "ft"
    assert main(["finetune", "--encoder", str(enc / "encoder.pt"), "--train", "8", "--test", "4", "--size", "16",
                 "--steps", "2", "--quiet", "--out", str(ft)]) == 0  # fmt: skip
    m = json.loads((ft / "results.json").read_text())["metrics"]
    assert m["pa_mpjpe_mm"] <= m["mpjpe_mm"]
    ev = tmp_path / "ev"
    assert main(["evaluate", "--checkpoint", str(ft / "model.pt"), "--test", "4", "--size", "16", "--quiet",
                 "--out", str(ev)]) == 0  # fmt: skip
    m2 = json.loads((ev / "results.json").read_text())["metrics"]
    assert m2["mpjpe_mm"] == pytest.approx(m["mpjpe_mm"], rel=1e-4)  # same seed -> same test renders


@pytest.mark.slow
def test_reproduce_tiny_runs(tmp_path):
    out = tmp_path / "r"
    assert main(["reproduce", "--size", "tiny", "--seeds", "2", "--fractions", "1.0", "--quiet",
                 "--out", str(out)]) == 0  # fmt: skip
    res = json.loads((out / "results.json").read_text())
    assert {r["method"] for r in res["tables"]["summary"]} == {"scratch", "SimCLR", "PeCLR", "SiM", "SiM-W"}
    assert res["tables"]["comparisons"][0]["role"] == "primary" and res["metrics"]["verdict"]
    assert all(r["pretrain_loss"] is None for r in res["tables"]["per_seed"] if r["method"] == "scratch")


@pytest.mark.parametrize(
    "argv",
    [
        ["pretrain", "--temperature", "-0.5"],
        ["pretrain", "--batch-size", "1"],
        ["pretrain", "--pool", "4", "--batch-size", "8"],
        ["pretrain", "--method", "byol"],
        ["finetune", "--fraction", "0"],
        ["finetune", "--encoder", "/nonexistent/encoder.pt"],
        ["evaluate", "--checkpoint", "/nonexistent/model.pt"],
        ["reproduce", "--fractions", "1.5"],
        ["bench", "--batch-sizes", "1"],
    ],
)
def test_bad_input_exits_2_with_one_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err and len(err.splitlines()) == 1


def test_bench_interleaves_its_arms_and_reports_the_training_step(tmp_path):
    import json
    import statistics

    out = tmp_path / "bench"
    argv = ["bench", "--batch-sizes", "8", "--pool-sizes", "40", "--train-batch", "4", "--repeats", "2"]
    assert main([*argv, "--quiet", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    run = res["metrics"]["bench_run"]
    arms = [
        "ntxent n=8",
        "weighted n=8",
        "brute n=40",
        "mined n=40",
        "pretrain step simclr",
        "pretrain step simw",
    ]
    # issue 43: every round runs every arm once, the order rotated between rounds (not one arm's repeats in a block)
    assert [sorted(r) for r in run["order"]] == [sorted(arms)] * 2 and run["order"][0] != run["order"][1]
    rows = {(r["what"][:8], r["n"]): r for r in res["tables"]["bench"]}
    loss = rows[("pair wei", 8)]
    t_base, t_ours = run["times_s"]["ntxent n=8"], run["times_s"]["weighted n=8"]
    assert loss["ratio"] == pytest.approx(
        statistics.median([o / b for b, o in zip(t_base, t_ours)]), rel=1e-12
    )
    steps = {r["method"]: r for r in res["tables"]["training step"]}
    assert set(steps) == {"simclr", "simw"} and steps["simw"]["processes"] == 1
    assert steps["simw"]["ddp_grad_bytes_per_step"] == steps["simw"]["gather_bytes_per_step"] == 0
