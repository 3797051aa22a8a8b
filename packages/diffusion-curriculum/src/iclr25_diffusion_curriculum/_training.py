"""A small diffusers training loop, evaluation and sampling used by the CLI and the reproduction.

The method itself is the timestep sampler; everything here is ordinary DDPM training with diffusers'
``UNet2DModel`` + ``DDPMScheduler`` and DDIM sampling.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from iclr25_diffusion_curriculum._clusters import TimestepClusters
from iclr25_diffusion_curriculum._sampler import CurriculumSampler
from iclr25_diffusion_curriculum._weighting import min_snr_weights, snr_from_alphas_cumprod

__all__ = [
    "TrainLog",
    "generate",
    "heldout_loss",
    "load_images",
    "make_unet",
    "save_grid",
    "train_diffusion",
]

DATASETS = ("fashion-mnist", "digits")


def load_images(dataset: str, split: str, image_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Real images scaled to ``[-1, 1]``.

    Args:
        dataset: ``"fashion-mnist"`` (28×28, shared loader: Debian package or cache) or ``"digits"`` (sklearn 8×8;
            ``split="train"`` is the first 1 500 images, ``"test"`` the remaining 297).
        split: ``"train"`` or ``"test"``.
        image_size: output side; images are resized with antialiased bilinear interpolation when it differs.

    Returns:
        ``(images, labels)``: ``(n, 1, image_size, image_size)`` float32 in ``[-1, 1]`` and ``(n,)`` int64.

    Raises:
        ValueError: unknown dataset/split. DatasetUnavailable: Fashion-MNIST is not installed.
    """
    from iclr25_shared import data

    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {', '.join(DATASETS)}; got {dataset!r}")
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if dataset == "fashion-mnist":
        raw, labels = data.fashion_mnist(split)
        x = torch.from_numpy(raw.astype(np.float32) / 255.0)
    else:
        raw, labels = data.digits()
        cut = 1500
        raw, labels = (raw[:cut], labels[:cut]) if split == "train" else (raw[cut:], labels[cut:])
        x = torch.from_numpy(raw.astype(np.float32))
    x = x.unsqueeze(1)
    if x.shape[-1] != image_size:
        x = F.interpolate(
            x, size=(image_size, image_size), mode="bilinear", antialias=True, align_corners=False
        )
    return (x.clamp(0, 1) * 2 - 1).contiguous(), torch.from_numpy(np.asarray(labels, dtype=np.int64))


def make_unet(image_size: int, channels: tuple[int, ...] = (16, 32, 32), *, layers_per_block: int = 1) -> Any:
    """A small diffusers ``UNet2DModel`` (1 channel, no attention) for ``image_size``² images.

    Raises:
        ValueError: ``image_size`` is not divisible by ``2**(len(channels) - 1)`` or channels are not multiples of 8.
    """
    from diffusers import UNet2DModel

    factor = 2 ** (len(channels) - 1)
    if image_size % factor:
        raise ValueError(
            f"image_size must be divisible by {factor} for {len(channels)} UNet levels, got {image_size}"
        )
    if any(c % 8 for c in channels):
        raise ValueError(f"UNet channels must be multiples of 8 (GroupNorm with 8 groups), got {channels}")
    n = len(channels)
    return UNet2DModel(
        sample_size=image_size,
        in_channels=1,
        out_channels=1,
        block_out_channels=tuple(channels),
        layers_per_block=layers_per_block,
        down_block_types=("DownBlock2D",) * n,
        up_block_types=("UpBlock2D",) * n,
        add_attention=False,
        norm_num_groups=8,
    )


@dataclasses.dataclass
class TrainLog:
    """What :func:`train_diffusion` records.

    Attributes:
        losses: ``(steps,)`` the optimised (weighted) batch loss per step.
        sample_steps, sample_timesteps, sample_losses: ``(steps·B,)`` per-sample step index, timestep and
            unweighted ε-MSE (the input of :func:`cluster_loss_curves`).
        stages: ``(steps,)`` the curriculum stage used at each step.
        skipped: steps whose loss was non-finite (no optimiser step was taken).
        ema_model: the exponential moving average of the weights (a copy of the model), or ``None`` without
            ``ema_decay``.
    """

    losses: np.ndarray
    sample_steps: np.ndarray
    sample_timesteps: np.ndarray
    sample_losses: np.ndarray
    stages: np.ndarray
    skipped: int = 0
    ema_model: Any = None


def _to_device(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``x`` (drawn on the host, from the host generator, so every device sees the same batches) on ``device``.

    On CUDA through pinned memory and a non-blocking copy: a plain copy from pageable memory synchronises the host
    with the GPU (three times per step, which made ``sync_every > 1`` moot). The caching host allocator keeps the
    pinned block until the copy has finished.
    """
    if device.type != "cuda" or x.device.type != "cpu":
        return x.to(device)
    return x.pin_memory().to(device, non_blocking=True)


def train_diffusion(
    model: torch.nn.Module,
    scheduler: Any,
    images: torch.Tensor,
    sampler: CurriculumSampler,
    *,
    steps: int,
    batch_size: int,
    lr: float = 2e-3,
    generator: torch.Generator,
    device: torch.device,
    snr_gamma: float | None = None,
    ema_decay: float | None = None,
    sync_every: int = 1,
    on_step: Callable[[int, torch.nn.Module], None] | None = None,
    progress: Callable[[Any], Any] = lambda it: it,
) -> TrainLog:
    """Standard ε-prediction DDPM training where the timesteps come from ``sampler``.

    Each step: draw a batch of images and ε from ``generator``, ``t = sampler.sample(B)``,
    ``x_t = scheduler.add_noise(x_0, ε, t)``, loss ``= mean(w · ‖ε̂ − ε‖²)`` with ``w = 1`` or Min-SNR-γ weights,
    an Adam step, then ``sampler.update(loss)``.

    Device synchronisation: the per-sample timesteps and losses stay on ``device`` until the end of training; the
    batch loss is read back once every ``sync_every`` steps (one transfer of the last ``sync_every`` losses),
    which feeds the pacer in order and detects non-finite losses. With ``sync_every = 1`` (default) the pacer sees
    each loss before the next step, as in the paper (§4.2), and a non-finite loss skips that optimiser step. With
    ``sync_every = k > 1`` a stage change takes effect up to ``k − 1`` steps late (losses of steps drawn in an
    earlier stage than the pacer's current one are not fed to it, so every stage is judged on its own losses), and
    a non-finite loss raises ``FloatingPointError`` at the next read (the step was already taken).

    Args:
        ema_decay: keep an exponential moving average of the weights with this decay (``diffusers``'
            ``EMAModel``: the decay ramps as ``min(ema_decay, (1 + k)/(10 + k))`` from optimiser step ``k``); the
            EMA copy is returned as ``TrainLog.ema_model`` and is what ``on_step`` receives. ``None``: no EMA.
        sync_every: steps between loss read-backs (see above), ``>= 1``.
        on_step: ``on_step(k, eval_model)`` after step ``k`` (1-based); ``eval_model`` is the EMA copy when
            ``ema_decay`` is set, else ``model``.

    Raises:
        ValueError: the scheduler's ``num_train_timesteps`` differs from the sampler's clusters, or a bad argument.
        FloatingPointError: a non-finite loss with ``sync_every > 1``.
    """
    from iclr25_shared.checks import check_float, check_int

    check_int("steps", steps, low=1)
    check_int("batch_size", batch_size, low=1)
    check_int("sync_every", sync_every, low=1)
    if ema_decay is not None:
        check_float("ema_decay", ema_decay, low=0.0, high=1.0, high_inclusive=False)
    sampler.check_scheduler(scheduler)
    if not sampler.clusters.discrete:
        raise ValueError("train_diffusion trains a discrete DDPM; use scheme='uniform' clusters")
    model.to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    ema = ema_model = None
    if ema_decay is not None:
        import copy

        from diffusers.training_utils import EMAModel

        ema_model = copy.deepcopy(model).eval()
        for p in ema_model.parameters():
            p.requires_grad_(False)
        ema = EMAModel(model.parameters(), decay=ema_decay)
    alphas = scheduler.alphas_cumprod.to(device)
    n = images.shape[0]
    stages = np.zeros(steps, np.int16)
    d_losses = torch.zeros(steps, dtype=torch.float32, device=device)
    d_t = torch.zeros((steps, batch_size), dtype=torch.int64, device=device)
    d_sample_loss = torch.zeros((steps, batch_size), dtype=torch.float32, device=device)
    skipped = 0
    read_upto = 0

    def read_back(upto: int) -> None:
        nonlocal read_upto, skipped
        values = d_losses[read_upto:upto].cpu().numpy()
        for j, value in enumerate(values):
            if not np.isfinite(value):
                if sync_every > 1:
                    raise FloatingPointError(
                        f"non-finite loss {value} at step {read_upto + j + 1} (sync_every={sync_every}: the "
                        "optimiser step was taken); rerun with sync_every=1 to skip such steps"
                    )
                skipped += 1
            if int(stages[read_upto + j]) == sampler.stage:  # a loss from an earlier stage is stale: not fed
                sampler.update(float(value))
        read_upto = upto

    for k in progress(range(steps)):
        idx = torch.randint(0, n, (batch_size,), generator=generator)
        x0 = _to_device(images[idx], device)
        noise = _to_device(torch.randn(x0.shape, generator=generator), device)
        stages[k] = sampler.stage
        t = _to_device(sampler.sample(batch_size, generator), device)
        x_t = scheduler.add_noise(x0, noise, t)
        pred = model(x_t, t).sample
        per_sample = (pred - noise).pow(2).flatten(1).mean(1)
        if snr_gamma is not None:
            weights = min_snr_weights(snr_from_alphas_cumprod(alphas, t), snr_gamma, "epsilon")
            loss = (weights * per_sample).mean()
        else:
            loss = per_sample.mean()
        d_t[k] = t
        d_sample_loss[k] = per_sample.detach()
        d_losses[k] = loss.detach()
        take_step = True
        if sync_every == 1:
            take_step = bool(torch.isfinite(d_losses[k]))  # the one read-back per step (pacer + NaN guard)
        if take_step:
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if ema is not None:
                ema.step(model.parameters())
        if (k + 1) % sync_every == 0 or k + 1 == steps:
            read_back(k + 1)
        if on_step is not None:
            eval_model = model
            if ema is not None:
                ema.copy_to(ema_model.parameters())
                eval_model = ema_model
            on_step(k + 1, eval_model)
    if ema is not None:
        ema.copy_to(ema_model.parameters())
    s_steps = np.repeat(np.arange(steps, dtype=np.int32), batch_size)
    s_t = d_t.cpu().numpy().astype(np.int32).reshape(-1)
    s_loss = d_sample_loss.cpu().numpy().reshape(-1)
    return TrainLog(d_losses.cpu().numpy(), s_steps, s_t, s_loss, stages, skipped, ema_model)


@torch.no_grad()
def heldout_loss(
    model: torch.nn.Module,
    scheduler: Any,
    images: torch.Tensor,
    clusters: TimestepClusters,
    *,
    seed: int,
    device: torch.device,
    batch_size: int = 512,
) -> np.ndarray:
    """Held-out ε-MSE per cluster: every image is noised once at a timestep drawn uniformly inside each cluster.

    Timesteps and noise come from ``seed`` only, so every model is scored on the same noisy inputs.

    Returns:
        ``(N,)`` float64 mean loss of cluster ``i`` (0-based, lowest t first). The overall (uniform-t) held-out
        loss is their mass-weighted mean, ``loss @ clusters.mass()``.
    """
    model.eval()
    g = torch.Generator().manual_seed(seed)
    out = np.zeros(clusters.num_clusters)
    for i in range(clusters.num_clusters):
        t_all = clusters.sample(i, i + 1, images.shape[0], generator=g)
        noise_all = torch.randn(images.shape, generator=g)
        total = 0.0
        for s in range(0, images.shape[0], batch_size):
            x0, t = images[s : s + batch_size].to(device), t_all[s : s + batch_size].to(device)
            noise = noise_all[s : s + batch_size].to(device)
            pred = model(scheduler.add_noise(x0, noise, t), t).sample
            total += float((pred - noise).pow(2).flatten(1).mean(1).sum())
        out[i] = total / images.shape[0]
    model.train()
    return out


@torch.no_grad()
def generate(
    model: torch.nn.Module,
    scheduler: Any,
    num_samples: int,
    *,
    num_inference_steps: int,
    seed: int,
    device: torch.device,
    batch_size: int = 500,
) -> torch.Tensor:
    """Deterministic DDIM sampling (η = 0) with ``num_inference_steps`` steps from the training scheduler's config.

    Returns:
        ``(num_samples, 1, H, W)`` float32 images in ``[-1, 1]`` on the CPU.
    """
    from diffusers import DDIMScheduler

    ddim = DDIMScheduler.from_config(scheduler.config)
    ddim.set_timesteps(num_inference_steps)
    model.eval()
    g = torch.Generator().manual_seed(seed)
    size = model.config.sample_size
    outs = []
    for s in range(0, num_samples, batch_size):
        b = min(batch_size, num_samples - s)
        x = torch.randn((b, 1, size, size), generator=g).to(device)
        for t in ddim.timesteps:
            eps = model(x, t.to(device).expand(b)).sample
            x = ddim.step(eps, t, x, eta=0.0).prev_sample
        outs.append(x.clamp(-1, 1).cpu())
    model.train()
    return torch.cat(outs)


def save_grid(images: torch.Tensor, path: str | os.PathLike[str], *, nrow: int = 8, scale: int = 2) -> Path:
    """Save ``(n, 1, H, W)`` images in ``[-1, 1]`` as a PNG grid (``iclr25_shared.results.atomic_write_bytes``)."""
    from PIL import Image

    x = ((images.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).numpy()[:, 0]
    n, h, w = x.shape
    rows = (n + nrow - 1) // nrow
    grid = np.zeros((rows * (h + 1) + 1, nrow * (w + 1) + 1), np.uint8)
    for i in range(n):
        r, c = divmod(i, nrow)
        grid[1 + r * (h + 1) : 1 + r * (h + 1) + h, 1 + c * (w + 1) : 1 + c * (w + 1) + w] = x[i]
    img = Image.fromarray(grid).resize(
        (grid.shape[1] * scale, grid.shape[0] * scale), Image.Resampling.NEAREST
    )
    import io

    from iclr25_shared.results import atomic_write_bytes

    buffer = io.BytesIO()
    img.save(buffer, format="PNG")
    return atomic_write_bytes(path, buffer.getvalue())
