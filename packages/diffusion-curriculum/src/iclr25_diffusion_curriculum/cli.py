"""``iclr25-diffusion-curriculum``: train with a curriculum sampler, reproduce the paper's comparison, bench."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iclr25_diffusion_curriculum import __version__
from iclr25_shared.cli import CommonOptions, check_choice, check_range, progress, run

PROG = "iclr25-diffusion-curriculum"
DESCRIPTION = (
    "Easy-to-hard timestep curriculum for diffusion training (Kim et al., ICLR 2025, arXiv:2403.10348): "
    "train a small diffusers UNet with uniform / curriculum / reverse timestep sampling, reproduce the comparison "
    "on Fashion-MNIST, and measure the sampler's overhead."
)


def _check_channels(channels: tuple[int, ...], image_size: int) -> None:
    if not channels or any(c < 8 or c % 8 for c in channels):
        raise ValueError(f"channels must be positive multiples of 8, got {channels}")
    factor = 2 ** (len(channels) - 1)
    if image_size % factor:
        raise ValueError(
            f"image_size must be divisible by {factor} for {len(channels)} UNet levels, got {image_size}"
        )


@dataclass(frozen=True, kw_only=True)
class _CurriculumOptions(CommonOptions):
    num_train_timesteps: int = 1000
    """T of the DDPM scheduler."""
    num_clusters: int = 10
    """N, the number of timestep clusters (= curriculum stages)."""
    patience: int = 20
    """τ: consecutive non-improving loss updates before the next stage."""
    max_steps_per_stage: int | None = 50
    """Cap on training steps per stage (None: no cap)."""
    ema: float = 0.9
    """Smoothing of the loss the pacer watches, in [0, 1)."""
    threads: int | None = None
    """torch intra-op CPU threads (None: torch's default). 1 is much faster on a busy machine."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("num_train_timesteps", self.num_train_timesteps, low=1)
        check_range("num_clusters", self.num_clusters, low=1, high=self.num_train_timesteps)
        check_range("patience", self.patience, low=1)
        if self.max_steps_per_stage is not None:
            check_range("max_steps_per_stage", self.max_steps_per_stage, low=1)
        check_range("ema", self.ema, low=0.0, high=1.0, high_inclusive=False)
        if self.threads is not None:
            check_range("threads", self.threads, low=1)


@dataclass(frozen=True, kw_only=True)
class TrainConfig(_CurriculumOptions):
    """Train a small diffusers UNet2DModel + DDPMScheduler with a uniform, curriculum or reverse timestep sampler."""

    dataset: Literal["fashion-mnist", "digits"] = "fashion-mnist"
    """Real images: Fashion-MNIST (shared loader) or scikit-learn's 8×8 digits."""
    sampler: Literal["uniform", "curriculum", "reverse"] = "curriculum"
    """Timestep sampling: uniform (baseline), curriculum (easy/high t first), reverse (hard/low t first, control)."""
    steps: int = 500
    """Optimizer steps."""
    batch_size: int = 64
    """Images per step."""
    lr: float = 2e-3
    """Adam learning rate."""
    image_size: int | None = None
    """Image side in pixels (default 16 for fashion-mnist, 8 for digits)."""
    channels: tuple[int, ...] = (16, 32, 32)
    """UNet block widths (multiples of 8; one down-sampling per extra level)."""
    snr_gamma: float | None = None
    """Min-SNR-γ loss weighting (e.g. 5.0); None trains with the plain ε-MSE."""
    timestep_range: tuple[int, int] | None = None
    """Train only on timesteps BEGIN … END-1 (0 <= BEGIN < END <= T); the clusters split this range."""
    num_samples: int = 64
    """Images in the saved sample grid."""
    num_inference_steps: int = 50
    """DDIM steps for the samples."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("dataset", self.dataset, ("fashion-mnist", "digits"))
        check_choice("sampler", self.sampler, ("uniform", "curriculum", "reverse"))
        check_range("steps", self.steps, low=1)
        check_range("batch_size", self.batch_size, low=1)
        check_range("lr", self.lr, low=0.0, low_inclusive=False)
        if self.image_size is not None:
            check_range("image_size", self.image_size, low=4, high=64)
        _check_channels(self.channels, self.size)
        if self.snr_gamma is not None:
            check_range("snr_gamma", self.snr_gamma, low=0.0, low_inclusive=False)
        if self.timestep_range is not None:
            from iclr25_diffusion_curriculum._clusters import TimestepClusters

            TimestepClusters(self.num_train_timesteps, self.num_clusters, timestep_range=self.timestep_range)
        check_range("num_samples", self.num_samples, low=1, high=1024)
        check_range("num_inference_steps", self.num_inference_steps, low=1, high=self.num_train_timesteps)

    @property
    def size(self) -> int:
        return (
            self.image_size if self.image_size is not None else (16 if self.dataset == "fashion-mnist" else 8)
        )


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(_CurriculumOptions):
    """Uniform vs curriculum vs reverse on Fashion-MNIST at equal steps (FID, per-cluster loss, difficulty plot).

    Several seeds per method; reports final FID and held-out loss (overall and per cluster), the steps each method
    needs to reach the uniform run's final FID, sample grids and the difficulty analysis of the uniform runs."""

    steps: int = 1000
    """Training steps per run."""
    num_seeds: int = 2
    """Seeds per method (seed, seed+1, …)."""
    batch_size: int = 64
    """Images per step."""
    lr: float = 2e-3
    """Adam learning rate."""
    image_size: int = 16
    """Fashion-MNIST is resized to this side (28 is native)."""
    channels: tuple[int, ...] = (8, 16, 16)
    """UNet block widths."""
    snr_gamma: float | None = None
    """Min-SNR-γ weighting for every method (orthogonality check); None: plain ε-MSE."""
    num_checkpoints: int = 4
    """Evaluations (FID, held-out loss) spread evenly over training."""
    num_fid_samples: int = 500
    """Generated images per FID evaluation."""
    num_inference_steps: int = 20
    """DDIM steps for generation."""
    heldout_images: int = 500
    """Test images for the held-out loss (each noised once per cluster)."""
    analysis_bins: int = 12
    """Step windows of the difficulty analysis."""
    full: bool = False
    """Longer run: 28 px, 6 000 steps, 3 seeds, 2 000 FID samples, τ=100, cap 300, EMA 0.98 (hours on CPU)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("steps", self.steps, low=1)
        check_range("num_seeds", self.num_seeds, low=1)
        check_range("batch_size", self.batch_size, low=1)
        check_range("lr", self.lr, low=0.0, low_inclusive=False)
        check_range("image_size", self.image_size, low=4, high=64)
        _check_channels(self.channels, self.image_size)
        if self.snr_gamma is not None:
            check_range("snr_gamma", self.snr_gamma, low=0.0, low_inclusive=False)
        check_range("num_checkpoints", self.num_checkpoints, low=1, high=self.steps)
        check_range("num_fid_samples", self.num_fid_samples, low=10)
        check_range("num_inference_steps", self.num_inference_steps, low=1, high=self.num_train_timesteps)
        check_range("heldout_images", self.heldout_images, low=1, high=10_000)
        check_range("analysis_bins", self.analysis_bins, low=2, high=self.steps)

    def effective(self) -> ReproduceConfig:
        """The config actually run: ``--full`` swaps in the full-size values."""
        if not self.full:
            return self
        return dataclasses.replace(
            self,
            image_size=28,
            channels=(32, 64),
            steps=6000,
            num_seeds=3,
            num_fid_samples=2000,
            patience=100,
            max_steps_per_stage=300,
            ema=0.98,
            num_checkpoints=8,
            heldout_images=2000,
            full=False,
        )


@dataclass(frozen=True, kw_only=True)
class BenchConfig(_CurriculumOptions):
    """Per-step overhead of the curriculum sampler (sample + pacer update) against a training step and torch.randint."""

    steps: int = 20
    """Timed training steps."""
    warmup: int = 3
    """Untimed training steps first."""
    sampler_calls: int = 2000
    """Timed sampler calls."""
    batch_size: int = 64
    """Batch size."""
    image_size: int = 16
    """Image side."""
    channels: tuple[int, ...] = (8, 16, 16)
    """UNet block widths."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("steps", self.steps, low=1)
        check_range("warmup", self.warmup, low=0)
        check_range("sampler_calls", self.sampler_calls, low=1)
        check_range("batch_size", self.batch_size, low=1)
        check_range("image_size", self.image_size, low=4, high=64)
        _check_channels(self.channels, self.image_size)


# ----------------------------------------------------------------------------------------------------------------


def _set_threads(threads: int | None) -> None:
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def _log(cfg: CommonOptions):
    def log(msg: str) -> None:
        if not cfg.quiet:
            print(msg, file=sys.stderr)

    return log


def _bar(cfg: CommonOptions):
    def bar(it, *, total=None, desc=""):
        return progress(it, total=total, desc=desc, quiet=cfg.quiet)

    return bar


def _record(command: str, cfg, device, metrics, tables=None, timings=None, notes=None):
    from iclr25_shared.results import RunRecord, package_versions

    return RunRecord(
        command=f"{PROG} {command}",
        config=cfg,
        metrics=metrics,
        tables=tables or {},
        timings=timings or {},
        notes=notes or [],
        device=str(device),
        versions=package_versions(["torch", "diffusers", "iclr25-diffusion-curriculum"]),
    )


def _print_metrics(metrics: dict) -> None:
    for k, v in metrics.items():
        print(f"{k}: {v:.6g}" if isinstance(v, float) else f"{k}: {v}")


def train(cfg: TrainConfig) -> int:
    import numpy as np
    import torch
    from diffusers import DDPMScheduler

    from iclr25_diffusion_curriculum._experiment import make_sampler
    from iclr25_diffusion_curriculum._training import (
        generate,
        load_images,
        make_unet,
        save_grid,
        train_diffusion,
    )
    from iclr25_shared.device import resolve_device, seed_everything

    device = resolve_device(cfg.device)
    _set_threads(cfg.threads)
    log = _log(cfg)
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
    log(f"{cfg.dataset}: {images.shape[0]} images at {cfg.size}px; {sampler!r}; device {device}")
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
        progress=lambda it: progress(it, total=cfg.steps, desc=f"train ({cfg.sampler})", quiet=cfg.quiet),
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
    _print_metrics({k: v for k, v in metrics.items() if k != "stage_schedule"})
    if cfg.out is None:
        return 0
    samples = generate(
        model,
        scheduler,
        cfg.num_samples,
        num_inference_steps=cfg.num_inference_steps,
        seed=cfg.seed,
        device=device,
    )
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out, prefix=".model."))
    try:
        model.save_pretrained(tmp / "unet")
        scheduler.save_pretrained(tmp / "scheduler")
        (tmp / "sampler_state.json").write_text(
            json.dumps(sampler.state_dict(), indent=2, default=_json_default)
        )
        for name in ("unet", "scheduler", "sampler_state.json"):
            target = out / name
            old = out / f".{name}.old"
            if target.exists():
                target.rename(old)
            (tmp / name).rename(target)
            if old.is_dir():
                shutil.rmtree(old)
            elif old.exists():
                old.unlink()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    save_grid(samples, out / "samples.png")
    tables = {}
    if cfg.sampler == "uniform":  # the paper's difficulty analysis needs every cluster throughout the run
        from iclr25_diffusion_curriculum._analysis import cluster_loss_curves, convergence_steps
        from iclr25_diffusion_curriculum._experiment import plot_difficulty

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
        plot_difficulty(ends, curves, out / "difficulty.png")
    rec = _record(
        "train",
        cfg,
        device,
        metrics,
        tables,
        timings={"train_s": seconds},
        notes=["model: unet/ (diffusers UNet2DModel), scheduler/, sampler_state.json, samples.png"],
    )
    rec.save(out)
    log(f"wrote {out}/unet, scheduler, sampler_state.json, samples.png, results.json")
    return 0


def _json_default(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    raise TypeError(type(v).__name__)


def reproduce(cfg: ReproduceConfig) -> int:
    from iclr25_diffusion_curriculum._experiment import reproduce_experiment
    from iclr25_shared.device import resolve_device, seed_everything

    device = resolve_device(cfg.device)
    _set_threads(cfg.threads)
    seed_everything(cfg.seed)
    eff = cfg.effective()
    start = time.perf_counter()
    res = reproduce_experiment(eff, device=device, progress=_bar(cfg), log=_log(cfg))
    res["timings"]["total_s"] = time.perf_counter() - start
    from iclr25_shared.results import markdown_table

    for name, rows in res["tables"].items():
        print(f"\n## {name}\n\n{markdown_table(rows)}")
    print()
    _print_metrics(res["metrics"])
    if cfg.out is not None:
        out = Path(cfg.out)
        out.mkdir(parents=True, exist_ok=True)
        written = res["write_artifacts"](out)
        rec = _record(
            "reproduce",
            eff,
            device,
            res["metrics"],
            res["tables"],
            res["timings"],
            res["notes"] + [f"plots: {', '.join(written)}"],
        )
        rec.save(out)
    return 0


def bench(cfg: BenchConfig) -> int:
    from iclr25_diffusion_curriculum._experiment import bench_sampler
    from iclr25_shared.device import resolve_device, seed_everything

    device = resolve_device(cfg.device)
    _set_threads(cfg.threads)
    seed_everything(cfg.seed)
    res = bench_sampler(cfg, device=device, log=_log(cfg))
    _print_metrics(res["metrics"])
    if cfg.out is not None:
        _record("bench", cfg, device, res["metrics"], res["tables"]).save(cfg.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``iclr25-diffusion-curriculum``; returns the exit code."""
    return run(
        PROG,
        {
            "train": (TrainConfig, train),
            "reproduce": (ReproduceConfig, reproduce),
            "bench": (BenchConfig, bench),
        },
        argv,
        default="train",
        description=DESCRIPTION,
        version=__version__,
    )
