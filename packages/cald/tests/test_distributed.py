"""Data-parallel distillation (issue 39): 2 gloo processes on the CPU equal one process on the same global batches.

``distill`` under an initialised group of 2 wraps the student (and a trajectory teacher) in DDP and trains each
rank on its round-robin half of every batch; a frozen target teacher is replicated. The models are float64 with
right padding of different lengths per row, so the masked layerwise loss's per-rank token weighting is exercised.

Tolerance (2 ranks vs 1 process), on every parameter after 4 AdamW steps and on every history value. The
arithmetic differs only in reduction order: each rank sums its half of the batch's loss terms, DDP averages the two
gradients ((g0 + g1) / 2 instead of one sum over the batch), the token weights are products and quotients of the
same counts.

- Sequence classification (float64 end to end): rtol 1e-9 / atol 1e-11. Float64 rounding is ~1e-16 relative per
  operation; Adam's update divides by sqrt(v), which amplifies relative differences of small gradient entries,
  hence 1e-9 rather than 1e-15.
- Causal LM (token-level task loss and logits KL): rtol 1e-5 / atol 1e-6. Both losses are computed in float32 even
  for a float64 model (transformers' causal-LM loss upcasts the logits with ``.float()``, ``logits_kl`` likewise),
  so the two runs differ at float32 resolution: measured 2.4e-7 on the step-0 task loss (3.69) and at most 3.4e-8
  on a parameter after 4 steps; the bounds leave 30x room.

The two ranks themselves end bit-identical (the same averaged gradient, the same optimizer arithmetic).

Process start-up (2 fresh processes importing torch and transformers) is tens of seconds on the shared 2-core
machine, so these tests are in the slow tier.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import tiny_llama

from iclr25_cald import Guidance, MambaConfig, convert, distill

STEPS = 4
TOL = {"classify": (1e-9, 1e-11), "lm": (1e-5, 1e-6)}  # (rtol, atol): see the module docstring


def _batches(rows=4, seq=12, n=3, labels=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(1, 40, (rows, seq), generator=g)
        lengths = torch.randint(seq // 2, seq + 1, (rows, 1), generator=g)
        mask = (torch.arange(seq) < lengths).long()
        out.append(
            {
                "input_ids": ids.masked_fill(mask == 0, 0),
                "attention_mask": mask,
                "labels": torch.randint(0, labels, (rows,), generator=g),
            }
        )
    return out


def _lm_batches(**kw):
    """Token-level labels (a causal LM's next-token loss): a per-token mean, weighted by each rank's tokens."""
    return [
        {**b, "labels": b["input_ids"].masked_fill(b["attention_mask"] == 0, -100)} for b in _batches(**kw)
    ]


def case(name: str) -> dict:
    """One training run; the same code in one process and on every rank (``distill`` sees the group)."""
    torch.manual_seed(0)
    if name == "lm-mamba-target":  # a causal LM: token-level task loss, logits KL over real tokens
        teacher = tiny_llama(2, dtype=torch.float64, seq=12)
        student = convert(teacher, "mamba", mamba=MambaConfig(d_state=4, expand=1), seed=1).model
        guidance = Guidance("target", alpha_layer=1.0, alpha_logits=0.5)
        batches = _lm_batches()
    else:
        teacher = tiny_llama(2, dtype=torch.float64, seq=12, labels=3)
        mixer = "linformer" if "linformer" in name else "mamba"
        kw = (
            {"k": 6, "max_seq_len": 12}
            if mixer == "linformer"
            else {"mamba": MambaConfig(d_state=4, expand=1)}
        )
        student = convert(teacher, mixer, seed=1, **kw).model
        guidance = Guidance(name.rsplit("-", 1)[1], alpha_layer=1.0, teacher_lr=1e-3)
        batches = _batches()
    res = distill(
        student,
        batches,
        steps=STEPS,
        guidance=guidance,
        teacher=copy.deepcopy(teacher),
        lr=1e-2,
        warmup_steps=1,
        trainable=lambda n, _p: "embed_tokens" not in n,
    )
    out = {"student": {k: v.clone() for k, v in res.student.state_dict().items()}, "history": res.history}
    if res.teacher is not None and guidance.strategy == "trajectory":
        out["teacher"] = {k: v.clone() for k, v in res.teacher.state_dict().items()}
    return out


CASES = ("classify-linformer-target", "classify-mamba-trajectory", "lm-mamba-target")


def all_cases() -> dict:
    return {name: case(name) for name in CASES}


def _assert_close_states(got: dict, want: dict, what: str, tol: tuple[float, float]) -> None:
    assert got.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=tol[0], atol=tol[1], msg=f"{what}: {k}")


@pytest.mark.slow
def test_two_processes_equal_one_process():
    from iclr25_shared.testing import run_ranks

    want = all_cases()
    ranks = run_ranks(all_cases, world_size=2, timeout_s=300)
    for name in CASES:
        tol = TOL[name.split("-")[0]]
        for r in ranks:
            _assert_close_states(r[name]["student"], want[name]["student"], f"{name} student", tol)
            if "teacher" in want[name]:
                _assert_close_states(r[name]["teacher"], want[name]["teacher"], f"{name} teacher", tol)
            assert len(r[name]["history"]) == STEPS
            for got_rec, want_rec in zip(r[name]["history"], want[name]["history"]):
                assert got_rec.keys() == want_rec.keys()
                for key in want_rec:
                    assert got_rec[key] == pytest.approx(want_rec[key], rel=tol[0], abs=tol[1]), (name, key)
        for k, v in ranks[0][name]["student"].items():  # the replicas stay bit-identical
            assert torch.equal(v, ranks[1][name]["student"][k]), (name, k)
    # the guided student moved: a run that did not train would also "agree"
    start = convert(
        tiny_llama(2, dtype=torch.float64, seq=12, labels=3), "linformer", k=6, max_seq_len=12, seed=1
    )
    moved = want["classify-linformer-target"]["student"]["model.layers.0.mlp.up_proj.weight"]
    assert not torch.allclose(moved, start.model.state_dict()["model.layers.0.mlp.up_proj.weight"])


def failing_rank(bad: int) -> str:
    """Every rank trains; rank ``bad`` raises in its second step, while the others wait in DDP's all-reduce."""
    teacher = tiny_llama(2, dtype=torch.float64, seq=12, labels=3)
    student = convert(teacher, "linformer", k=6, max_seq_len=12, seed=1).model
    rank = int(os.environ["RANK"])

    def on_step(step, _record):
        if rank == bad and step == 1:
            raise RuntimeError(f"rank {rank}'s data loader broke at step {step}")

    distill(student, _batches(), steps=STEPS, guidance=Guidance("target"), teacher=teacher, on_step=on_step)
    return "finished"


@pytest.mark.slow
def test_a_failure_on_one_rank_stops_every_rank_with_one_error():
    from iclr25_shared.testing import RankFailed, run_ranks

    t0 = time.monotonic()
    with pytest.raises(RankFailed) as info:
        run_ranks(failing_rank, 1, world_size=2, timeout_s=120)
    assert info.value.rank == 1
    assert "data loader broke at step 1" in str(info.value)
    assert (
        time.monotonic() - t0 < 110
    )  # rank 0, blocked in an all-reduce, was stopped: no hang to the deadline


def non_finite_on_one_rank() -> str:
    """Rank 1's replica goes non-finite after step 0: the reduced loss is non-finite, so every rank raises at
    step 1 before any update (none is left waiting in the all-reduce)."""
    teacher = tiny_llama(2, dtype=torch.float64, seq=12, labels=3)
    student = convert(teacher, "linformer", k=6, max_seq_len=12, seed=1).model
    rank = int(os.environ["RANK"])

    def on_step(step, _record):
        if rank == 1 and step == 0:
            with torch.no_grad():
                student.score.weight.fill_(float("nan"))

    try:
        distill(
            student, _batches(), steps=STEPS, guidance=Guidance("target"), teacher=teacher, on_step=on_step
        )
    except FloatingPointError as exc:
        return str(exc)
    return "no error"


@pytest.mark.slow
def test_a_non_finite_loss_on_one_rank_stops_every_rank_at_the_same_step():
    from iclr25_shared.testing import run_ranks

    messages = run_ranks(non_finite_on_one_rank, world_size=2, timeout_s=120)
    assert all(m.startswith("non-finite student loss at step 1") for m in messages), messages


def uneven_batch() -> str:
    teacher = tiny_llama(2, dtype=torch.float64, seq=12, labels=3)
    student = convert(teacher, "linformer", k=6, max_seq_len=12, seed=1).model
    try:
        distill(student, _batches(rows=3), steps=1, guidance=Guidance("target"), teacher=teacher)
    except ValueError as exc:
        return str(exc)
    return "no error"


@pytest.mark.slow
def test_a_batch_that_does_not_split_evenly_is_refused_on_every_rank():
    from iclr25_shared.testing import run_ranks

    messages = run_ranks(uneven_batch, world_size=2, timeout_s=120)
    assert all("a batch of 3 rows does not split evenly over 2 processes" in m for m in messages), messages


def test_distributed_true_without_a_process_group_is_refused():
    teacher = tiny_llama(2, dtype=torch.float64, seq=12, labels=3)
    student = convert(teacher, "linformer", k=6, max_seq_len=12, seed=1).model
    with pytest.raises(ValueError, match="initialised torch.distributed process group"):
        distill(student, _batches(), steps=1, guidance=Guidance("target"), teacher=teacher, distributed=True)


@pytest.mark.slow
def test_torchrun_distill_equals_one_process_and_only_rank_0_writes(tiny_model_dir, wiki_file, tmp_path):
    from iclr25_shared.testing import torchrun_argv

    common = [
        "distill",
        "--model",
        str(tiny_model_dir),
        "--data",
        str(wiki_file),
        "--train-examples",
        "24",
        "--eval-examples",
        "12",
        "--batch-size",
        "4",
        "--steps",
        "3",
        "--teacher-steps",
        "3",
        "--seq-len",
        "16",
        "--k",
        "4",
        "--strategy",
        "trajectory",
        "--device",
        "cpu",
        "--quiet",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one = subprocess.run(
        [sys.executable, "-m", "iclr25_cald", *common, "--out", str(tmp_path / "one")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert one.returncode == 0, one.stderr
    two = subprocess.run(
        torchrun_argv(2, "iclr25_cald", *common, "--out", str(tmp_path / "two")),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    a = json.loads((tmp_path / "one" / "results.json").read_text())
    b = json.loads((tmp_path / "two" / "results.json").read_text())
    for key in ("teacher_accuracy", "student_accuracy"):
        assert a["metrics"][key] == b["metrics"][key]
    assert b["metrics"]["layer_distance_to_teacher"] == pytest.approx(
        a["metrics"]["layer_distance_to_teacher"], rel=1e-4
    )
    ra, rb = a["tables"]["run"][0], b["tables"]["run"][0]
    assert rb["final_task_loss"] == pytest.approx(ra["final_task_loss"], rel=1e-4)  # float32 model
    # only rank 0 wrote (one results folder, nothing else beside it) and printed the result
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "two"]
    assert two.stdout.count("student_accuracy") == one.stdout.count("student_accuracy") == 1
    # a batch that does not split over the processes is refused before any work, on every rank (exit 2)
    bad = subprocess.run(
        torchrun_argv(
            2,
            "iclr25_cald",
            *[("3" if a == "4" and common[i - 1] == "--batch-size" else a) for i, a in enumerate(common)],
        ),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert bad.returncode != 0
    assert "--batch-size: 3 is not a multiple of the 2 processes" in bad.stderr


@pytest.mark.slow
def test_bench_ddp_rows_count_the_gradient_bytes_at_1_and_2_processes(tmp_path):
    """The bench's 2-process row failed (DDP refused the byte-counting hook's annotations); now each process count
    reports its step time and the bytes it all-reduced: every trainable float32 gradient once per step at 2
    processes (ByteCounter), nothing at 1, plus the loop's 3 float64 loss values (task, layer, total)."""
    from iclr25_cald.cli import main

    out = tmp_path / "b"
    argv = [
        "bench",
        "--lengths",
        "8",
        "--k",
        "4",
        "--repeats",
        "1",
        "--ddp-processes",
        "1",
        "2",
        "--ddp-steps",
        "2",
    ]
    assert main([*argv, "--out", str(out), "--quiet"]) == 0
    rows = {r["processes"]: r for r in json.loads((out / "results.json").read_text())["tables"]["ddp"]}
    assert rows[1]["gradient_bytes_per_step"] == 0 and rows[1]["per_rank_batch"] == 8
    assert rows[2]["per_rank_batch"] == 4
    assert rows[2]["gradient_bytes_per_step"] == 4 * rows[2]["trainable_parameters"]
    assert rows[2]["loop_bytes_per_step"] == 3 * 8
    assert all(r["step_seconds_median"] > 0 for r in rows.values())
