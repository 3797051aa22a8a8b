"""``generate``: run a diffusers pipeline (or the tiny random one) over the prompt set; videos + ``mapping.csv``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from iclr25_shared.cli import Result, RunContext
from iclr25_shared.errors import InputError
from iclr25_videophy._checks import read_mapping_input, read_prompts_input
from iclr25_videophy._common import DEFAULT_PROMPTS

if TYPE_CHECKING:
    from iclr25_videophy.cli import GenerateConfig


def generate(cfg: GenerateConfig, ctx: RunContext) -> Result:
    """Run a diffusers pipeline (or the tiny random one) over the prompt set; write videos + mapping.csv."""
    from iclr25_shared.distributed import check_same, init_process_group
    from iclr25_videophy._generation import DiffusersGenerator
    from iclr25_videophy._generation import generate as run_generation
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
