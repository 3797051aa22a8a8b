"""``discover``: train DebGCD (or SimGCD) on one GCD split and label every unlabelled image."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from iclr25_debgcd._experiment import _load, _train_config
from iclr25_shared.cli import Result, RunContext
from iclr25_shared.errors import InputError
from iclr25_shared.inputs import validating

if TYPE_CHECKING:
    from iclr25_debgcd.cli import DiscoverConfig

__all__ = ["discover"]


def discover(cfg: DiscoverConfig, ctx: RunContext) -> Result:
    """Train DebGCD (or SimGCD) on one GCD split and report All/Old/New on the unlabelled images."""
    from iclr25_debgcd._data import gcd_split
    from iclr25_debgcd._train import train_gcd

    device = ctx.join_group(seed=cfg.seed)
    if cfg.backbone == "efficientnet-lite0":  # timm and the weights, before any data is read
        from iclr25_debgcd._model import efficientnet_lite0_weights

        efficientnet_lite0_weights()
    x, y = _load(cfg.data, cfg.root, cfg.per_class, cfg.seed)
    with validating("--known-classes/--num-classes"):  # they must fit the classes present in --data
        split = gcd_split(
            y, cfg.known_classes, cfg.labelled_fraction, num_classes=cfg.num_classes, seed=cfg.seed
        )
    if split.labelled.all():
        raise InputError(
            f"--known-classes {' '.join(map(str, cfg.known_classes))} with --labelled-fraction "
            f"{cfg.labelled_fraction} label every image of --data {cfg.data}: nothing is left to discover; "
            "leave a class out of --known-classes or lower --labelled-fraction"
        )
    tcfg = _train_config(
        cfg.method,
        backbone=cfg.backbone,
        epochs=cfg.epochs,
        batch_size=cfg.batch_size,
        lr=cfg.lr,
        hidden=512,
        data=cfg.data,
        threshold=cfg.threshold,
        adl_weight=cfg.adl_weight,
        sdl_weight=cfg.sdl_weight,
    )
    ctx.log.info(
        f"{x.shape[0]} images, {int(split.labelled.sum())} labelled, {split.num_old} known + "
        f"{split.num_classes - split.num_old} new classes; training {cfg.method} for {cfg.epochs} epochs on {device}"
    )
    bar = iter(ctx.progress(range(cfg.epochs), desc=cfg.method))
    res = train_gcd(x, split, tcfg, seed=cfg.seed, device=device, on_epoch=lambda _row: next(bar, None))
    ctx.save_array("predictions", res.predictions)
    ctx.save_array("unlabelled_index", np.flatnonzero(split.unlabelled))
    metrics = {k: round(float(v), 4) for k, v in res.final.items()}
    metrics |= {"images": int(x.shape[0]), "labelled": int(split.labelled.sum()), "method": cfg.method}
    return Result(
        metrics=metrics,
        tables={"epochs": [{k: round(v, 4) for k, v in row.items()} for row in res.history]},
        timings={"train": res.seconds},
        notes=[
            "accuracy on the unlabelled images, one Hungarian assignment over all classes (GCD protocol)",
            f"predictions.npy: the model's class index of each unlabelled image (unlabelled_index.npy); indices "
            f"0..{split.num_old - 1} are the known classes {list(split.original[: split.num_old])}, the others are "
            "discovered clusters",
            *(
                [
                    f"data-parallel over {ctx.world.world_size} ranks (DDP): global batch {cfg.batch_size} split "
                    "across ranks, outputs gathered for the loss, BatchNorm over the global batch"
                ]
                if ctx.world.is_distributed
                else []
            ),
        ],
    )
