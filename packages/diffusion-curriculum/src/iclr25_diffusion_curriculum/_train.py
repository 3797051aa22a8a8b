"""``train``: fit a small diffusers UNet with a uniform, curriculum or reverse timestep sampler."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from iclr25_diffusion_curriculum._analysis import cluster_loss_curves, convergence_steps
from iclr25_diffusion_curriculum._experiment import make_sampler, plot_difficulty
from iclr25_diffusion_curriculum._training import generate, load_images, make_unet, save_grid, train_diffusion
from iclr25_shared.cli import Result, RunContext
from iclr25_shared.device import seed_everything

__all__ = ["train"]


def train(cfg: Any, ctx: RunContext) -> Result:
    """``train``: fit a small UNet2DModel + DDPMScheduler with the chosen timestep sampler.

    With ``--out``: ``unet/`` and ``scheduler/`` (diffusers ``from_pretrained`` folders), ``sampler_state.json``, a
    DDIM ``samples.png`` grid, and for ``--sampler uniform`` the difficulty analysis (``difficulty.png`` + table).
    """
    from diffusers import DDPMScheduler

    device = ctx.torch_device()
    seed_everything(cfg.seed)
    images, _ = load_images(cfg.dataset, "train", cfg.size)
    model = make_unet(cfg.size, cfg.channels)
    scheduler = DDPMScheduler(num_train_timesteps=cfg.num_train_timesteps)
    sampler = make_sampler(
        cfg.sampler,
        num_train_timesteps=cfg.num_train_timesteps,
        num_clusters=cfg.num_clusters,
        patience=cfg.patience,
        max_steps_per_stage=cfg.max_steps_per_stage,
        ema=cfg.ema,
        timestep_range=cfg.timestep_range,
    )
    ctx.log.info(f"{cfg.dataset}: {images.shape[0]} images at {cfg.size}px; {sampler!r}; device {device}")
    start = time.perf_counter()
    tlog = train_diffusion(
        model,
        scheduler,
        images,
        sampler,
        steps=cfg.steps,
        batch_size=cfg.batch_size,
        lr=cfg.lr,
        generator=torch.Generator().manual_seed(cfg.seed),
        device=device,
        snr_gamma=cfg.snr_gamma,
        ema_decay=cfg.weight_ema,
        sync_every=cfg.sync_every,
        progress=lambda it: ctx.progress(it, total=cfg.steps, desc=f"train ({cfg.sampler})"),
    )
    seconds = time.perf_counter() - start
    tail = max(1, cfg.steps // 10)
    metrics = {
        "final_loss_last10pct": float(np.mean(tlog.losses[-tail:])),
        "first_loss": float(tlog.losses[0]),
        "final_stage": sampler.stage,
        "num_stages": sampler.num_stages,
        "skipped_nonfinite_steps": tlog.skipped,
        "stage_schedule": [list(r) for r in sampler.stage_schedule()],
    }
    tables: dict[str, list[dict[str, Any]]] = {}
    if cfg.sampler == "uniform":  # the paper's difficulty analysis needs every cluster throughout the run
        bins = min(12, cfg.steps)
        ends, curves = cluster_loss_curves(
            tlog.sample_steps, tlog.sample_timesteps, tlog.sample_losses, sampler.clusters, num_bins=bins
        )
        conv = convergence_steps(ends, curves)
        b = sampler.clusters.boundaries.tolist()
        tables["Difficulty analysis (per timestep cluster)"] = [
            {
                "cluster": f"C{i + 1} t∈[{b[i]},{b[i + 1] - 1}]",
                "first-window loss": float(curves[0, i]),
                "last-window loss": float(curves[-1, i]),
                "steps to 90% of drop": float(conv[i]),
            }
            for i in range(sampler.num_stages)
        ]
        if ctx.writes:
            plot_difficulty(ends, curves, ctx.path("difficulty.png"))
    notes = []
    if ctx.writes:
        samples = generate(
            model if tlog.ema_model is None else tlog.ema_model,
            scheduler,
            cfg.num_samples,
            num_inference_steps=cfg.num_inference_steps,
            seed=cfg.seed,
            device=device,
        )
        model.save_pretrained(ctx.path("unet"))
        if tlog.ema_model is not None:
            tlog.ema_model.save_pretrained(ctx.path("unet_ema"))
        scheduler.save_pretrained(ctx.path("scheduler"))
        ctx.save_json("sampler_state.json", sampler.state_dict())
        save_grid(samples, ctx.path("samples.png"))
        ema_note = ", unet_ema/ (EMA weights; samples.png uses them)" if tlog.ema_model is not None else ""
        notes.append(
            f"model: unet/ (diffusers UNet2DModel){ema_note}, scheduler/, sampler_state.json, samples.png"
        )
    return Result(metrics=metrics, tables=tables, timings={"train_s": seconds}, notes=notes)
