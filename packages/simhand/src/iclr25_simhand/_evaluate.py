"""``evaluate``: MPJPE / PA-MPJPE (mm) of a fine-tuned ``model.pt`` on rendered test hands (held-out photos)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from iclr25_shared.cli import Result, RunContext
from iclr25_simhand._training import _TEST_BACKGROUNDS, _load_model, evaluate_encoder

if TYPE_CHECKING:
    from iclr25_simhand.cli import EvaluateConfig


def evaluate(cfg: EvaluateConfig, ctx: RunContext) -> Result:
    """MPJPE / PA-MPJPE (mm) of a fine-tuned ``model.pt`` on rendered test hands (held-out photos)."""
    device = ctx.torch_device()
    model = _load_model(cfg.checkpoint, cfg.size, "--checkpoint", device, fine_tuned=True)
    from iclr25_simhand._render import BACKGROUNDS, load_backgrounds, render_hands

    k = len(BACKGROUNDS)
    test = render_hands(cfg.test, size=cfg.size, seed=cfg.seed * 3 + 2, backgrounds=load_backgrounds(),
                        background_ids=np.arange(k - _TEST_BACKGROUNDS, k))  # fmt: skip
    return Result(metrics=evaluate_encoder(model, test, device))
