"""``pretrain``: pre-train a backbone and write ``backbone.pt`` + ``backbone.json`` into ``--out``."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

# torch warns about its own deprecated torch.jit.script when torch_geometric is imported; not actionable here.
warnings.filterwarnings("ignore", message=r"`torch\.jit\.script", category=FutureWarning)

# numpy first, from Python (as in ``_experiment``): a Ctrl-C landing in torch's C-extension import is then raised.
import numpy  # noqa: E402, F401

from iclr25_edgeprompt._backbone import save_backbone  # noqa: E402
from iclr25_edgeprompt._experiment import (  # noqa: E402
    _backbone_config,
    _check,
    _load,
    _pretrain_settings,
    _setup,
    pretrain_backbone,
    pretraining_graphs,
)
from iclr25_shared.cli import Result, RunContext, UsageError  # noqa: E402

if TYPE_CHECKING:
    from iclr25_edgeprompt.cli import PretrainConfig

__all__ = ["pretrain_command"]


def pretrain_command(cfg: PretrainConfig, ctx: RunContext) -> Result:
    """``pretrain``: pre-train a backbone and write ``backbone.pt`` + ``backbone.json`` into ``--out``."""
    if not ctx.writes:
        raise UsageError(
            "out: pretrain writes the checkpoint (backbone.pt, backbone.json) there; pass --out DIR"
        )
    device = _setup(ctx)
    data = _load(cfg, split="train")
    graphs = pretraining_graphs(data, cfg.strategy)
    ctx.log.info(
        f"pre-training a {cfg.conv} backbone with {cfg.strategy} on {len(graphs)} graphs of {data.name}"
    )
    backbone, history = pretrain_backbone(
        graphs,
        _backbone_config(cfg, data),
        _pretrain_settings(cfg),
        seed=cfg.seed,
        device=device,
        callback=_check,
    )
    path = save_backbone(
        backbone,
        ctx.path("backbone.pt"),
        dataset=data.name,
        strategy=cfg.strategy,
        epochs=cfg.pretrain_epochs,
        seed=cfg.seed,
        final_loss=history[-1],
    )
    ctx.log.info(f"loss {history[0]:.4f} -> {history[-1]:.4f}")
    assert cfg.out is not None
    return Result(
        metrics={
            "final_loss": history[-1],
            "first_loss": history[0],
            "checkpoint": str(cfg.out / path.name),
        },
        tables={"loss": [{"epoch": i, "loss": v} for i, v in enumerate(history)]},
    )
