"""``distill``: one guidance strategy on Wikipedia topic classification (teacher, conversion, guided
fine-tuning)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from iclr25_cald._experiment import _START_NOTE, _accuracy, _fine_tune_teacher, _join, _run_strategy, _setup
from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_cald.cli import DistillConfig


def distill_cmd(cfg: DistillConfig, ctx: RunContext) -> Result:
    """One guidance strategy on Wikipedia topic classification: teacher, conversion, guided fine-tuning."""
    t0 = time.perf_counter()
    _join(cfg, ctx)
    s = _setup(cfg, ctx)
    teacher, waypoints = _fine_tune_teacher(
        cfg, s, ctx, save_every=max(1, cfg.teacher_steps // 4) if cfg.strategy == "waypoint" else 0
    )
    teacher_acc = _accuracy(teacher, s["eval"])
    row = _run_strategy(cfg.strategy, cfg, s, teacher, cfg.seed, ctx, waypoints=waypoints or None)
    return Result(
        metrics={
            "teacher_accuracy": teacher_acc,
            "student_accuracy": row["accuracy"],
            "layer_distance_to_teacher": row["layer_distance_to_target_teacher"],
        },
        tables={"run": [row]},
        timings={"total": time.perf_counter() - t0},
        notes=[_START_NOTE[cfg.student_start]],
    )
