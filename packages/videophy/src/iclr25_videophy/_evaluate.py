"""``evaluate``: score the videos of a mapping (or the real clips) and aggregate; ``labels.csv`` in the test
format."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iclr25_shared.cli import Result, RunContext
from iclr25_shared.inputs import validating
from iclr25_videophy._checks import read_labels_input, read_mapping_input, read_prompts_input
from iclr25_videophy._common import _round

if TYPE_CHECKING:
    from iclr25_videophy.cli import EvaluateConfig


def _entries_for(cfg: EvaluateConfig) -> list[tuple[str, Any, str]]:
    from iclr25_videophy._clips import real_clips
    from iclr25_videophy._io import Prompt, match_videos

    if cfg.mapping is not None:
        return read_mapping_input(cfg.mapping)
    if cfg.videos is not None:
        assert cfg.prompts is not None
        prompts = read_prompts_input(cfg.prompts)
        with validating("--videos/--prompts"):  # a prompt no file name matches is the user's (named) problem
            return match_videos(prompts, cfg.videos)
    return [(str(c.path), Prompt(c.caption), "real") for c in real_clips(opencv_folder=cfg.opencv_data)]


def _human_labels(cfg: EvaluateConfig, entries: list[tuple[str, Any, str]]) -> Any:
    """The label file as an evaluator, checked against the videos before anything is scored: every video has a
    label for each task it is used for, in [0, 1] (or 1..5), and no video has two different labels."""
    from iclr25_videophy._evaluators import HumanLabels

    with validating(f"--labels {str(cfg.labels)!r}"):
        labels = HumanLabels(read_labels_input(cfg.labels))
        videos = [e[0] for e in entries]
        for task in sorted({t for t, kind in (("sa", cfg.sa), ("pc", cfg.pc)) if kind == "labels"}):
            scores = labels.score(videos, [e[1].caption for e in entries], task)
            for video, s in zip(videos, scores):
                if not (0.0 <= s <= 5.0):  # also nan: an empty cell
                    raise ValueError(f"video {video!r} has {task.upper()} label {s}; expected 0..1 or 1..5")
    return labels


def _evaluator(kind: str, cfg: Any, labels: Any) -> Any:
    from iclr25_videophy._evaluators import TemporalCoherence

    if kind == "none":
        return None
    if kind == "labels":
        return labels
    return TemporalCoherence(num_frames=cfg.num_frames)


def evaluate(cfg: EvaluateConfig, ctx: RunContext) -> Result:
    """Score the videos of a mapping (or the real clips) and aggregate; writes labels.csv in the test format."""
    from iclr25_shared.distributed import check_same, init_process_group
    from iclr25_videophy._aggregate import aggregate
    from iclr25_videophy._evaluators import evaluate_videos
    from iclr25_videophy._io import write_labels

    if init_process_group(ctx.torch_device()).is_distributed:  # the videos are farmed over the ranks
        check_same(repr(cfg), "configuration")
    entries = _entries_for(cfg)
    labels = _human_labels(cfg, entries) if "labels" in (cfg.sa, cfg.pc) else None
    ctx.log.info(f"scoring {len(entries)} videos (SA: {cfg.sa}, PC: {cfg.pc})")
    t0 = time.perf_counter()
    judgements = evaluate_videos(
        entries,
        sa=_evaluator(cfg.sa, cfg, labels),
        pc=_evaluator(cfg.pc, cfg, labels),
        source=cfg.source or None,
    )
    elapsed = time.perf_counter() - t0
    if ctx.writes:
        write_labels(ctx.path("labels.csv"), judgements, threshold=cfg.threshold)
    # labels from a file may not fit --mode (1..5 scores in threshold mode, a video labelled twice differently)
    with validating("--labels/--mode") if labels is not None else contextlib.nullcontext():
        rows = aggregate(judgements, mode=cfg.mode, threshold=cfg.threshold)
    per_video = [
        {
            "video": Path(j.videopath).name,
            "caption": j.caption[:50],
            "source": j.source,
            "sa": j.sa,
            "pc": j.pc,
        }
        for j in judgements
    ]
    return Result(
        metrics={"videos": len(judgements)},
        tables={"aggregate": _round(rows), "videos": _round(per_video, 3)},
        timings={"evaluate": elapsed},
        notes=["labels.csv (published test format, with sa_score/pc_score) is in --out"]
        if ctx.writes
        else [],
    )
