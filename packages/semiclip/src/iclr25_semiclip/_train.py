"""``train``: stage 1 then stage 2 of SemiCLIP on Fashion-MNIST (or the user's pairs + images); ``model.pt``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_semiclip import _experiment as ex
from iclr25_shared.cli import Result, RunContext
from iclr25_shared.errors import InputError

if TYPE_CHECKING:
    import torch

    from iclr25_semiclip._model import ImageTower, SemiCLIPHead
    from iclr25_semiclip.cli import TrainConfig


@dataclass
class _Inputs:
    """What ``train`` fits on: the labelled image features and captions, the unlabelled weak and strong views, and
    the Fashion-MNIST features (``None`` on the user's own pairs)."""

    labelled: torch.Tensor
    captions: list[str]
    weak: torch.Tensor
    strong: torch.Tensor
    data: Any


def train(cfg: TrainConfig, ctx: RunContext) -> Result:
    """Stage 1 then stage 2 of SemiCLIP on Fashion-MNIST (or the user's pairs + images); evaluate; save model.pt."""
    device = ctx.join_group(seed=cfg.seed)
    files = _read_files(cfg)
    ctx.log.info("loading the %s towers ...", cfg.towers)
    image_tower, text_tower = ex._towers(cfg.towers, device, cfg.resolution, cfg.text_tower)
    text = ex._TextBank(text_tower)
    got = _encode(cfg, files, image_tower, device, ctx)
    if cfg.stage2_steps > 0 and got.weak.shape[0] == 0:
        raise InputError(
            "--labelled-fraction 1 leaves no unlabelled image for stage 2; lower it or pass --stage2-steps 0"
        )
    method = "semiclip" if cfg.stage2_steps > 0 else "stage1"
    head, surrogate, info = ex._fit(
        method,
        labelled_image=got.labelled,
        captions=got.captions,
        unlabelled_weak=got.weak,
        unlabelled_strong=got.strong,
        text=text,
        tower=text_tower,
        stage1_steps=cfg.stage1_steps,
        stage2_steps=cfg.stage2_steps,
        settings=ex._settings(cfg),
        seed=cfg.seed,
        dim=cfg.dim,
        min_count=cfg.min_count,
        max_frequency=cfg.max_frequency,
    )
    metrics = _metrics(head, info, got, text)
    meta = {
        "towers": cfg.towers,
        "text_tower": str(cfg.text_tower) if cfg.text_tower else None,
        "resolution": cfg.resolution,
        "dim": cfg.dim,
        "image_dim": int(got.labelled.shape[1]),
    }
    ex._checkpoint(ctx, head, surrogate, info["concepts"], meta)
    return Result(metrics=metrics, timings={"train": info["seconds"]}, notes=_notes(cfg, ctx, method))


def _read_files(cfg: TrainConfig) -> Any:
    """The user's pairs and images (validated, with their concept set) or the Fashion-MNIST images, read before
    any model loads."""
    from iclr25_semiclip._data import read_image_folder, read_pairs

    if cfg.pairs is None:
        return ex._fashion_images(cfg.pool, cfg.test_size, cfg.data_root)
    pair_images, captions = read_pairs(cfg.pairs, size=cfg.resolution, label="--pairs")
    unl_images = read_image_folder(cfg.images, size=cfg.resolution, label="--images")
    ex._mine(captions, cfg)
    return pair_images, captions, unl_images


def _encode(cfg: TrainConfig, files: Any, image_tower: ImageTower, device: Any, ctx: RunContext) -> _Inputs:
    """Frozen-tower features of the labelled and unlabelled images (the user's, or a Fashion-MNIST split whose
    captioned part is mined for concepts)."""
    import torch

    from iclr25_semiclip._data import fashion_split
    from iclr25_semiclip._model import strong_view

    gen = torch.Generator().manual_seed(cfg.seed)
    if cfg.pairs is not None:
        pair_images, captions, unl_images = files
        lab = image_tower.encode(torch.from_numpy(pair_images))
        weak = image_tower.encode(torch.from_numpy(unl_images))
        strong = image_tower.encode(strong_view(torch.from_numpy(unl_images), gen))
        return _Inputs(lab, captions, weak, strong, None)
    data = ex._fashion(files, image_tower, cfg.towers, device, ctx)
    split = fashion_split(
        np.arange(cfg.pool), data.pool_labels, labelled_fraction=cfg.labelled_fraction, seed=cfg.seed
    )
    captions = split.captions
    ex._mine(captions, cfg)
    li, ui = torch.from_numpy(split.labelled_images), torch.from_numpy(split.unlabelled_images)
    return _Inputs(data.weak[li], captions, data.weak[ui], data.strong[ui], data)


def _metrics(head: SemiCLIPHead, info: dict[str, Any], got: _Inputs, text: Any) -> dict[str, Any]:
    """Set sizes, concepts, the final losses, and the test metrics (Fashion-MNIST) or recall@k on the user's pairs."""
    import torch

    from iclr25_semiclip._stages import retrieval_recall

    last = info["history"][-1]
    captions = got.captions
    metrics: dict[str, Any] = {"labelled_pairs": len(captions), "unlabelled_images": int(got.weak.shape[0])}
    metrics["concepts"] = info["concepts"]
    metrics.update({f"final_{k}": v for k, v in last.items()})
    if got.data is not None:
        metrics.update(ex._eval_fashion(head, got.data, text))
        return metrics
    with torch.no_grad():
        sim = head.image(got.labelled) @ head.text(text(captions)).T
    eye = torch.eye(len(captions), dtype=torch.bool, device=sim.device)
    ks = [k for k in (1, 5) if k <= len(captions)]
    metrics.update({f"train_i2t_R@{k}": v for k, v in retrieval_recall(sim, eye, ks).items()})
    metrics.update({f"train_t2i_R@{k}": v for k, v in retrieval_recall(sim.T, eye, ks).items()})
    return metrics


def _notes(cfg: TrainConfig, ctx: RunContext, method: str) -> list[str]:
    """The method and step counts, and the data-parallel set-up under torchrun."""
    notes = [f"{method}: {cfg.stage1_steps} stage-1 + {cfg.stage2_steps} stage-2 steps on {ctx.device_label}"]
    if ctx.world.is_distributed:
        notes.append(
            f"data-parallel over {ctx.world.world_size} ranks (DDP): global batches of {cfg.batch_size} labelled "
            f"and {cfg.unlabelled_batch} unlabelled, split across ranks, embeddings gathered for the loss"
        )
    return notes
