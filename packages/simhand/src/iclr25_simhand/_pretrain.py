"""``pretrain``: contrastive pre-training of one method on a rendered pool; ``encoder.pt`` and a sample sheet."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_shared.cli import Result, RunContext
from iclr25_simhand._training import _TEST_BACKGROUNDS, _save_model, pretrain_encoder

if TYPE_CHECKING:
    from iclr25_simhand.cli import PretrainConfig


def pretrain(cfg: PretrainConfig, ctx: RunContext) -> Result:
    """Pre-train one method on a rendered pool; save ``encoder.pt`` (state_dict + meta) to ``--out``."""
    device = ctx.join_group(seed=cfg.seed)
    t0 = time.perf_counter()
    from iclr25_simhand._render import BACKGROUNDS, load_backgrounds, render_hands

    ids = np.arange(len(BACKGROUNDS) - _TEST_BACKGROUNDS)
    pool = render_hands(
        cfg.pool, size=cfg.size, seed=cfg.seed, backgrounds=load_backgrounds(), background_ids=ids
    )
    t_render = time.perf_counter() - t0
    model, losses = pretrain_encoder(
        cfg.method, pool, steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr, temperature=cfg.temperature,
        width=cfg.width, seed=cfg.seed, device=device, weight_kind=cfg.weights, progress=ctx.progress,
    )  # fmt: skip
    meta = {"method": cfg.method, "width": cfg.width, "size": cfg.size}
    saved = _save_model(ctx, model, "encoder.pt", meta)
    if ctx.writes:
        _save_samples(ctx.path("samples.png"), pool, count=min(16, cfg.pool))
    return Result(
        metrics={"method": cfg.method, "first_loss": losses[0] if losses else None,
                 "final_loss": float(np.mean(losses[-10:])) if losses else None, "checkpoint": saved},
        timings={"render": t_render, "pretrain": time.perf_counter() - t0 - t_render},
    )  # fmt: skip


def sample_sheet(batch: Any, count: int = 16, columns: int = 8, zoom: int = 3) -> np.ndarray:
    """``(rows * size * zoom, columns * size * 2 * zoom, 3)`` uint8 sheet: each image beside a copy with its
    2-D skeleton drawn (joints from ``batch.keypoints2d``), for eyeballing the renderer."""
    from skimage.draw import disk, line
    from skimage.transform import rescale

    from iclr25_simhand._render import PARENTS

    count = min(count, batch.images.shape[0])
    tiles = []
    for i in range(count):
        img = rescale(batch.images[i].transpose(1, 2, 0), zoom, order=0, channel_axis=-1)
        sk = img.copy()
        kp = (batch.keypoints2d[i] + 0.5) * zoom - 0.5
        s = sk.shape[0]
        for j in range(1, 21):
            a, b = np.rint(kp[PARENTS[j]]).astype(int), np.rint(kp[j]).astype(int)
            rr, cc = line(a[1], a[0], b[1], b[0])
            ok = (rr >= 0) & (rr < s) & (cc >= 0) & (cc < s)
            sk[rr[ok], cc[ok]] = (0.1, 1.0, 0.2) if j < 5 else (1.0, 0.1, 0.1)
        for j in range(21):
            rr, cc = disk((kp[j, 1], kp[j, 0]), 1.2, shape=(s, s))
            sk[rr, cc] = (0.1, 0.3, 1.0)
        tiles.append(np.concatenate([img, sk], axis=1))
    rows = []
    blank = np.ones_like(tiles[0])
    for r in range(0, count, columns):
        row = tiles[r : r + columns]
        row += [blank] * (columns - len(row))
        rows.append(np.concatenate(row, axis=1))
    sheet = np.concatenate(rows, axis=0)
    return (np.clip(sheet, 0, 1) * 255).astype(np.uint8)


def _save_samples(path: Path, batch: Any, count: int) -> None:
    from skimage.io import imsave

    imsave(path, sample_sheet(batch, count=count, columns=4), check_contrast=False)
