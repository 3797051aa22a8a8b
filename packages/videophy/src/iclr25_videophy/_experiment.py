"""What the CLI runs: generate, evaluate, leaderboard (each ``fn(cfg, ctx) -> Result``); reproduce and bench live
in ``_reproduce.py`` and ``_bench.py`` and share the constants here."""

from __future__ import annotations

import contextlib
import math
import time
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iclr25_shared.cli import Result, RunContext
from iclr25_shared.errors import InputError
from iclr25_shared.inputs import validating
from iclr25_videophy._checks import read_labels_input, read_mapping_input, read_prompts_input

if TYPE_CHECKING:
    from iclr25_videophy.cli import (
        EvaluateConfig,
        GenerateConfig,
        LeaderboardConfig,
    )

# Table 2 of the paper / the authors' README leaderboard (human evaluation, %): joint, SA, PC.
PAPER_LEADERBOARD = {
    "CogVideoX-5B": (39.6, 63.3, 53.0),
    "Pika": (19.7, 41.1, 36.5),
    "VideoCrafter2": (19.0, 48.5, 34.6),
    "CogVideoX-2B": (18.6, 47.2, 34.1),
    "LaVIE": (15.7, 48.7, 28.0),
    "Luma Dream Machine": (13.6, 61.9, 21.8),
    "Lumiere-T2I2V": (12.5, 48.5, 25.0),
    "SVD-T2I2V": (11.9, 42.4, 30.8),
    "ZeroScope": (11.9, 30.2, 32.6),
    "Lumiere-T2V": (9.0, 38.4, 27.9),
    "Gen-2": (7.6, 26.6, 27.2),
    "OpenSora": (4.9, 18.0, 23.5),
}

DEFAULT_PROMPTS = (
    "An apple falls and bounces on the hard ground.",
    "Water pours from a glass jug into a cup, filling it to the brim.",
    'A rubber ball, "slightly deflated", rolls down a ramp; it stops at the bottom.',
)


def _example_labels() -> Path:
    return Path(str(files("iclr25_videophy") / "data" / "videophy_train_example.csv"))


def _round(rows: list[dict[str, Any]], nd: int = 1) -> list[dict[str, Any]]:
    return [
        {k: (round(v, nd) if isinstance(v, float) and not math.isnan(v) else v) for k, v in r.items()}
        for r in rows
    ]


# --------------------------------------------------------------------------------------------------- generate


def generate(cfg: GenerateConfig, ctx: RunContext) -> Result:
    """Run a diffusers pipeline (or the tiny random one) over the prompt set; write videos + mapping.csv."""
    from iclr25_shared.distributed import check_same, init_process_group
    from iclr25_videophy._generate import DiffusersGenerator
    from iclr25_videophy._generate import generate as run_generation
    from iclr25_videophy._io import Prompt

    here = init_process_group(
        ctx.torch_device()
    )  # torchrun / accelerate launch: the videos are farmed over ranks
    if here.is_distributed:
        if cfg.videos_dir is None:
            raise InputError(
                "--videos-dir is required under torchrun / accelerate launch: every rank writes its videos there"
            )
        check_same(repr(cfg), "configuration")
    if cfg.videos_dir is None and not ctx.writes:
        raise InputError("--videos-dir (or --out) is required: where to write the videos")
    prompts = read_prompts_input(cfg.prompts) if cfg.prompts is not None else []
    prompts += [Prompt(p) for p in cfg.prompt]
    if cfg.prompts is None and not cfg.prompt:
        prompts = [Prompt(p) for p in DEFAULT_PROMPTS]
    if (
        cfg.videos_dir is not None
    ):  # a previous run's mapping is the user's file: check it before the model loads
        previous = Path(cfg.videos_dir) / "mapping.csv"
        if previous.exists() and not cfg.resume:
            raise InputError(f"--videos-dir: {str(previous)!r} exists; pass --resume to continue that run")
        if previous.exists():
            read_mapping_input(previous, label="--videos-dir", complete=False)
    device = ctx.torch_device()
    if cfg.pipeline == "tiny-random":
        from iclr25_videophy._tiny import tiny_text_to_video_pipeline

        pipe = tiny_text_to_video_pipeline(cfg.seed, device)
        source = cfg.source or "tiny-random"
    else:
        from diffusers import DiffusionPipeline

        pipe = DiffusionPipeline.from_pretrained(cfg.pipeline, local_files_only=True).to(device)
        source = cfg.source or Path(cfg.pipeline).name
    extra = {k: v for k, v in (("height", cfg.height), ("width", cfg.width)) if v}
    gen = DiffusersGenerator(pipe, num_frames=cfg.num_frames, num_inference_steps=cfg.steps, **extra)
    videos_dir = cfg.videos_dir if cfg.videos_dir is not None else ctx.path("videos")
    t0 = time.perf_counter()
    entries = run_generation(
        gen,
        prompts,
        videos_dir,
        videos_per_prompt=cfg.videos_per_prompt,
        seed=cfg.seed,
        fps=cfg.fps,
        source=source,
        resume=cfg.resume,
        progress=lambda it: ctx.progress(it, desc="videos"),
    )
    return Result(
        metrics={
            "videos": len(entries),
            "prompts": len(prompts),
            "mapping": str(Path(videos_dir) / "mapping.csv"),
        },
        tables={
            "videos": [{"caption": p.caption[:60], "video": Path(v).name, "source": s} for v, p, s in entries]
        },
        timings={"generate": time.perf_counter() - t0},
    )


# --------------------------------------------------------------------------------------------------- evaluate


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


# ------------------------------------------------------------------------------------------------ leaderboard


def leaderboard(cfg: LeaderboardConfig, ctx: RunContext) -> Result:
    """Leaderboard and breakdowns from a label file."""
    from iclr25_videophy._aggregate import aggregate, dedupe
    from iclr25_videophy._aggregate import leaderboard as rank

    path = cfg.labels if cfg.labels is not None else _example_labels()
    rows = read_labels_input(path)
    # the label file's rows checked against --mode: conflicting duplicates, missing or out-of-range scores
    with validating(f"--labels {str(path)!r}"):
        unique, dropped = dedupe(rows)
        board = rank(unique, mode=cfg.mode, threshold=cfg.threshold)
    tables = {"leaderboard": _round(board)}
    if cfg.breakdown:
        for key in ("states_of_matter", "complexity"):
            if any(getattr(j, key) not in ("", None) for j in unique):
                tables[f"by_{key}"] = _round(
                    aggregate(
                        unique,
                        mode=cfg.mode,
                        threshold=cfg.threshold,
                        by=("source", key),
                        warn_constant=False,
                    )
                )
    notes = [f"{dropped} duplicated rows dropped"] if dropped else []
    if cfg.labels is None:
        notes.append("default input: the 7 human-labelled example rows of the authors' repository (MIT)")
    return Result(metrics={"videos": len(unique), "labels": str(path)}, tables=tables, notes=notes)
