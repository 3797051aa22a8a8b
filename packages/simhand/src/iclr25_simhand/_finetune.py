"""``finetune``: fine-tune an encoder (or train from scratch) on rendered labelled hands; ``model.pt``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from iclr25_shared.cli import Result, RunContext
from iclr25_simhand._training import (
    _backbone,
    _load_model,
    _save_model,
    evaluate_encoder,
    finetune_encoder,
    make_data,
)

if TYPE_CHECKING:
    from iclr25_simhand.cli import FinetuneConfig


def finetune(cfg: FinetuneConfig, ctx: RunContext) -> Result:
    """Fine-tune (from ``--encoder`` or scratch) on rendered labelled hands; evaluate; save ``model.pt``."""
    device = ctx.join_group(seed=cfg.seed)
    if cfg.encoder is not None:  # the checkpoint and its size are checked before any rendering
        model = _load_model(cfg.encoder, cfg.size, "--encoder", device)
    else:
        import torch

        from iclr25_simhand._model import HandEncoder

        torch.manual_seed(cfg.seed)
        model = HandEncoder(_backbone(cfg.width)).to(device)
    data = make_data(pool=2, train=cfg.train, test=cfg.test, size=cfg.size, seed=cfg.seed)
    t0 = time.perf_counter()
    finetune_encoder(model, data.train, fraction=cfg.fraction, steps=cfg.steps, batch_size=cfg.batch_size,
                     lr=cfg.lr, seed=cfg.seed, device=device)  # fmt: skip
    t_ft = time.perf_counter() - t0
    metrics = evaluate_encoder(model, data.test, device)
    width = model.backbone.body[0].out_channels
    metrics["checkpoint"] = _save_model(ctx, model, "model.pt", {"width": width, "size": cfg.size})
    return Result(metrics=metrics, timings={"finetune": t_ft})
