"""Data-parallel pre-training (issue 39): ``train_lm`` under 2 gloo processes equals the one-process run.

Every rank draws the same global batch of windows and trains on its share (``rank::world_size``), DDP averages the
gradients, and the training loss and evaluation sums are all-reduced. Against the one-process run on the same global
batch, the arithmetic differs only in the order of float32 additions: the gradient is ``(g_0 + g_1) / 2`` over two
half-batches instead of one sum over the whole batch, and the evaluation sums are added in two parts. Over 6 AdamW
steps on this tiny model that moves losses by ~1e-6 relative (measured: <= 1e-7 relative on the training losses), so the tests use
``rtol = 1e-4``: 100x the rounding, and far below the effect of a wrong split (training on half the batch only, or
on a different batch, moves the loss by ~1e-2 here; checked by ``test_the_tolerance_separates_a_wrong_split``).

The 2-process tests are in the slow tier (each start of 2 fresh processes importing torch and transformers took
~70 s on the shared 2-core machine); the fast tier keeps the one-process checks of the split and the tolerance.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
import torch

from iclr25_hyper_connections import _experiment
from iclr25_hyper_connections._experiment import Corpus, ModelSpec, Variant, train_lm
from iclr25_shared.testing import RankFailed, run_ranks, torchrun_argv

SPEC = ModelSpec(dim=16, num_layers=2, num_heads=2, context=12)
STEPS = 6
BATCH = 4
RTOL = 1e-4
TRAIN_TOKENS = 3000


def _corpus() -> Corpus:
    g = torch.Generator().manual_seed(7)
    # a learnable stream (a noisy repeating pattern), so the loss moves in 6 steps
    base = torch.arange(4000) % 37
    noise = torch.randint(0, 256, (4000,), generator=g)
    keep = torch.rand(4000, generator=g) < 0.8
    tokens = torch.where(keep, base, noise).to(torch.int64)
    return Corpus(tokens[:TRAIN_TOKENS], tokens[TRAIN_TOKENS:], 256, "bytes", (1, 1))


def _train(batch_size: int = BATCH, variant: str = "dhc2", fail: str = "") -> dict:
    """Train on this process's rank (one process or one of a group); what it saw and what it returns."""
    from iclr25_shared.distributed import ByteCounter, world

    torch.set_num_threads(1)
    here = world()
    seen: list[int] = []
    real_windows = _experiment._windows

    def counting_windows(tokens, starts, length):  # the training windows this rank forwards
        if len(tokens) == TRAIN_TOKENS:
            seen.append(len(starts))
        return real_windows(tokens, starts, length)

    _experiment._windows = counting_windows
    real_ce = torch.nn.functional.cross_entropy
    calls = {"train": 0}

    def failing_ce(logits, target, *args, **kwargs):
        loss = real_ce(logits, target, *args, **kwargs)
        if logits.requires_grad and here.rank == 1:
            calls["train"] += 1
            if calls["train"] == 3 and fail == "nan":
                return loss * float("nan")
            if calls["train"] == 3 and fail == "raise":
                raise RuntimeError("injected failure on rank 1")
        return loss

    torch.nn.functional.cross_entropy = failing_ce
    counter = ByteCounter()
    try:
        res = train_lm(
            _corpus(),
            SPEC,
            Variant.parse(variant),
            steps=STEPS,
            batch_size=batch_size,
            lr=1e-2,
            weight_decay=0.1,
            warmup=2,
            eval_every=3,
            eval_batches=3,  # 3 evaluation batches over 2 ranks: unequal shares, summed
            seed=0,
            device=torch.device("cpu"),
            checkpoints=(3, STEPS),
            comm_hook=counter.hook,
        )
    except FloatingPointError as exc:
        return {"error": str(exc)}
    finally:
        _experiment._windows = real_windows
        torch.nn.functional.cross_entropy = real_ce
    return {
        "rank": here.rank,
        "curve": res.curve,
        "final": res.final_val_loss,
        "checkpoints": res.checkpoint_losses,
        "similarity": res.sublayer_similarity,
        "windows": seen,
        "bytes": counter.bytes,
        "calls": counter.calls,
    }


def _assert_close(dist: dict, one: dict) -> None:
    assert [r["step"] for r in dist["curve"]] == [r["step"] for r in one["curve"]]
    for a, b in zip(dist["curve"], one["curve"], strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert math.isclose(a[key], b[key], rel_tol=RTOL), (key, a, b)
    assert math.isclose(dist["final"], one["final"], rel_tol=RTOL)
    assert dist["checkpoints"].keys() == one["checkpoints"].keys()
    for k in one["checkpoints"]:
        assert math.isclose(dist["checkpoints"][k], one["checkpoints"][k], rel_tol=RTOL)
    assert dist["similarity"] == pytest.approx(one["similarity"], rel=1e-3, abs=1e-4)


@pytest.fixture(scope="module")
def one_process() -> dict:
    return _train()


@pytest.fixture(scope="module")
def two_ranks() -> list[dict]:
    return run_ranks(_train, world_size=2, timeout_s=240)


@pytest.mark.slow
def test_two_ranks_equal_the_one_process_run(two_ranks: list[dict], one_process: dict) -> None:
    for out in two_ranks:
        _assert_close(out, one_process)
    # every rank reports the same (reduced) numbers, bit for bit
    assert two_ranks[0]["curve"] == two_ranks[1]["curve"]
    assert two_ranks[0]["final"] == two_ranks[1]["final"]


@pytest.mark.slow
def test_each_rank_trains_on_half_of_the_global_batch_and_gradients_are_all_reduced(
    two_ranks: list[dict], one_process: dict
) -> None:
    assert one_process["windows"] == [BATCH] * STEPS
    assert one_process["bytes"] == 0  # one process: no DDP, nothing communicated
    for out in two_ranks:
        assert out["windows"] == [BATCH // 2] * STEPS
        # DDP all-reduces every trainable parameter's float32 gradient once per step (the first step too)
        assert out["bytes"] > 0 and out["calls"] >= STEPS


def test_the_tolerance_separates_a_wrong_split(one_process: dict) -> None:
    """Training on half the batch (what a rank would do without the gradient all-reduce) is far outside RTOL."""
    half = _train(batch_size=BATCH // 2)
    with pytest.raises(AssertionError):
        _assert_close(half, one_process)


def test_batch_size_must_split_evenly_over_the_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    # world() reads the launcher's environment when no group is initialised: rank 0 of 2, refused before any DDP
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(ValueError, match="batch_size=3 must be a multiple of the number of processes"):
        _train(batch_size=3)


@pytest.mark.slow
def test_a_non_finite_loss_on_one_rank_stops_every_rank_at_the_same_step() -> None:
    outs = run_ranks(_train, BATCH, "dhc2", "nan", world_size=2, timeout_s=240)
    assert outs[0] == outs[1]
    assert "loss became nan at step 2" in outs[0]["error"]


@pytest.mark.slow
def test_a_crash_on_one_rank_stops_every_rank_with_one_error() -> None:
    with pytest.raises(RankFailed, match="rank 1 failed: RuntimeError: injected failure on rank 1"):
        run_ranks(_train, BATCH, "dhc2", "raise", world_size=2, timeout_s=240)


TINY = [
    "--dim",
    "16",
    "--num-layers",
    "2",
    "--num-heads",
    "2",
    "--context",
    "16",
    "--batch-size",
    "4",
    "--max-docs",
    "40",
    "--eval-every",
    "2",
    "--eval-batches",
    "3",
    "--steps",
    "4",
    "--variant",
    "dhc2",
    "--quiet",
]


@pytest.mark.slow
def test_torchrun_train_equals_the_one_process_cli_run_and_only_rank_0_writes(tmp_path: Path) -> None:
    from iclr25_hyper_connections.cli import main

    assert main(["train", *TINY, "--out", str(tmp_path / "one")]) == 0
    argv = torchrun_argv(2, "iclr25_hyper_connections", "train", *TINY, "--out", str(tmp_path / "two"))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=400, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    one = json.loads((tmp_path / "one" / "results.json").read_text())
    two = json.loads((tmp_path / "two" / "results.json").read_text())
    assert math.isclose(two["metrics"]["final_val_loss"], one["metrics"]["final_val_loss"], rel_tol=RTOL)
    for a, b in zip(two["tables"]["loss curve"], one["tables"]["loss curve"], strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=RTOL)
    # one results folder, no temporary siblings left by the other rank
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "two"]
