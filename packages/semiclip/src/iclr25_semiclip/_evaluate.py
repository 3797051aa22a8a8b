"""``evaluate``: zero-shot accuracy and recall@k on Fashion-MNIST test of a saved ``model.pt``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from iclr25_semiclip import _experiment as ex
from iclr25_shared.cli import Result, RunContext
from iclr25_shared.errors import InputError

if TYPE_CHECKING:
    from iclr25_semiclip.cli import EvaluateConfig


def evaluate(cfg: EvaluateConfig, ctx: RunContext) -> Result:
    """Zero-shot accuracy and recall@k on Fashion-MNIST test of a saved checkpoint."""
    import torch
    from torch import nn

    from iclr25_semiclip._model import SemiCLIPHead

    if cfg.checkpoint is None:
        raise InputError("evaluate needs --checkpoint (the model.pt written by `train --out DIR`)")
    device = ctx.torch_device()
    state = ex.read_checkpoint(cfg.checkpoint, label="--checkpoint")
    meta, head_state = state["meta"], state["head"]
    text_path = Path(meta["text_tower"]) if meta.get("text_tower") else None
    images = ex._fashion_images(1, cfg.test_size, cfg.data_root)
    image_tower, text_tower = ex._towers(meta["towers"], device, meta["resolution"], text_path)
    head = SemiCLIPHead(meta["image_dim"], text_tower.dim, dim=meta["dim"])
    if "concept_emb" in head_state:
        head.concept_emb = nn.Parameter(torch.empty_like(head_state["concept_emb"]))
        head.concept_logit_scale = nn.Parameter(torch.empty_like(head_state["concept_logit_scale"]))
    try:
        head.load_state_dict(head_state)
    except RuntimeError:  # weights of another shape than its own metadata says
        raise InputError(
            f"--checkpoint: {str(cfg.checkpoint)!r} holds head weights that do not fit its metadata "
            f"(image_dim {meta['image_dim']}, dim {meta['dim']}, text tower width {text_tower.dim})"
        ) from None
    head.to(device)
    data = ex._fashion(images, image_tower, meta["towers"], device, ctx)
    return Result(metrics=ex._eval_fashion(head, data, ex._TextBank(text_tower)))
