"""Training loop for SimGCD and DebGCD on images (device-agnostic; CPU by default).

As the official code: two augmented views per image, a sampler that balances labelled and unlabelled images in
each batch, SGD (momentum 0.9) with ``lr · batch/128`` and cosine annealing to 1e-3 of it, no weight decay on
biases and 1-D parameters, and transductive evaluation on the unlabelled images with the GCD classifier's argmax.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from iclr25_debgcd._data import GCDSplit, augment
from iclr25_debgcd._losses import GCDLossConfig, GCDOutputs, debgcd_loss, simgcd_loss, unknown_score
from iclr25_debgcd._metrics import gcd_accuracy, known_vs_new_auroc
from iclr25_shared.checks import check_choice, check_float, check_int

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

__all__ = [
    "BACKBONES",
    "METHODS",
    "TrainConfig",
    "TrainResult",
    "build_backbone",
    "build_model",
    "evaluate",
    "train_gcd",
]

METHODS = ("simgcd", "debgcd")
BACKBONES = ("mlp", "convnet", "efficientnet-lite0")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """How a GCD model is trained (both methods get the same backbone, heads' widths, epochs, batch and lr)."""

    method: Literal["simgcd", "debgcd"] = "debgcd"
    backbone: Literal["mlp", "convnet", "efficientnet-lite0"] = "mlp"
    epochs: int = 30
    batch_size: int = 128
    lr: float = 0.1
    """Base learning rate, scaled by batch/128 (the official code)."""
    momentum: float = 0.9
    weight_decay: float = 5e-5
    feat_dim: int = 128
    hidden: int = 512
    """Width of the backbone MLP and of the heads' MLPs (2048 in the paper's heads)."""
    bottleneck: int = 128
    ood_layers: int = 5
    shift: int = 2
    """Augmentation: random translation in pixels."""
    flip: bool = False
    noise: float = 0.05
    loss: GCDLossConfig = field(default_factory=GCDLossConfig)

    def __post_init__(self) -> None:
        check_choice("method", self.method, METHODS)
        check_choice("backbone", self.backbone, BACKBONES)
        check_int("epochs", self.epochs, low=1)
        check_int("batch_size", self.batch_size, low=2)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)
        check_float("momentum", self.momentum, low=0.0, high=1.0, high_inclusive=False)
        check_float("weight_decay", self.weight_decay, low=0.0)
        for name in ("feat_dim", "hidden", "bottleneck", "ood_layers"):
            check_int(name, getattr(self, name), low=1)
        check_int("shift", self.shift, low=0)
        check_float("noise", self.noise, low=0.0)


@dataclass
class TrainResult:
    model: torch.nn.Module
    history: list[dict[str, float]]
    """One row per epoch: epoch, loss, the loss parts, All/Old/New, AUROC (DebGCD), seconds."""
    final: dict[str, float]
    predictions: np.ndarray
    """``(n_unlabelled,)`` predicted class ids of the unlabelled images (GCD classifier argmax)."""
    seconds: float


def build_backbone(
    name: str, image_shape: tuple[int, int, int], cfg: TrainConfig
) -> tuple[torch.nn.Module, int]:
    """The backbone ``name`` for images of shape ``(C, H, W)``; returns ``(module, feature width)``.

    ``mlp``: flatten, Linear–BatchNorm–ReLU–Linear to ``feat_dim`` (hidden ``cfg.hidden``; PyTorch's default init). ``convnet``: :func:`small_convnet`.
    ``efficientnet-lite0``: the packaged ImageNet EfficientNet-Lite0 with its last stage and head trained; grey
    images are repeated to 3 channels, resized to at least 32×32 and ImageNet-normalised first.
    """
    import torch
    from torch import nn

    from iclr25_debgcd._model import efficientnet_lite0, small_convnet

    check_choice("backbone", name, BACKBONES)
    c, h, w = image_shape
    if name == "mlp":
        layers = [nn.Flatten(), nn.Linear(c * h * w, cfg.hidden), nn.BatchNorm1d(cfg.hidden), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(cfg.hidden, cfg.feat_dim)), cfg.feat_dim
    if name == "convnet":
        return small_convnet(c, 32, cfg.feat_dim), cfg.feat_dim
    net, dim = efficientnet_lite0(trainable_blocks=1)
    size = max(32, h, w)

    class _Input(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
            self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x
            if x.shape[-1] != size or x.shape[-2] != size:
                x = nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
            return (x - self.mean) / self.std

    return nn.Sequential(_Input(), net), dim


def build_model(split: GCDSplit, image_shape: tuple[int, int, int], cfg: TrainConfig):
    from iclr25_debgcd._model import GCDModel

    backbone, dim = build_backbone(cfg.backbone, image_shape, cfg)
    return GCDModel(
        backbone,
        dim,
        split.num_classes,
        split.num_old,
        debiased=cfg.method == "debgcd",
        hidden=cfg.hidden,
        bottleneck=cfg.bottleneck,
        ood_layers=cfg.ood_layers,
    )


def evaluate(
    model, images: torch.Tensor, split: GCDSplit, *, threshold: float = 0.9, batch_size: int = 1024
) -> dict[str, float]:
    """Transductive GCD evaluation on the unlabelled images: All/Old/New of the GCD classifier (one Hungarian
    assignment); for DebGCD models also the debiased classifier's (``deb_*``), the detector's known-vs-new AUROC,
    the mean certainty ``|2 s_unk − 1|`` and the share of images whose GCD pseudo-label passes ``threshold``
    (``pl_rate``), i.e. how much of the unlabelled set the debiased pseudo-label loss sees."""
    import torch

    from iclr25_debgcd._losses import certainty

    unl = np.flatnonzero(split.unlabelled)
    model.eval()
    preds, preds_deb, scores, conf = [], [], [], []
    with torch.no_grad():
        for s in range(0, unl.size, batch_size):
            out = model(images[torch.as_tensor(unl[s : s + batch_size])])
            preds.append(out.logits.argmax(1).cpu())
            conf.append((out.logits / 0.1).softmax(1).amax(1).cpu())
            if out.logits_deb is not None:
                preds_deb.append(out.logits_deb.argmax(1).cpu())
                scores.append(unknown_score(out.logits_ood).cpu())
    y = split.labels[unl]
    old = range(split.num_old)
    pred = torch.cat(preds).numpy()
    acc = gcd_accuracy(y, pred, old)
    res = {"all": acc.all, "old": acc.old, "new": acc.new}
    res["pl_rate"] = float((torch.cat(conf) >= threshold).double().mean())
    if preds_deb:
        deb = gcd_accuracy(y, torch.cat(preds_deb).numpy(), old)
        res |= {"deb_all": deb.all, "deb_old": deb.old, "deb_new": deb.new}
        s_unk = torch.cat(scores)
        res["auroc"] = known_vs_new_auroc(s_unk.numpy(), y >= split.num_old)
        res["certainty"] = float(certainty(s_unk).mean())
    res["_pred"] = pred  # type: ignore[assignment]
    return res


def _gather_outputs(out: GCDOutputs, sizes: list[int]) -> GCDOutputs:
    """Every rank's rows of two-view outputs ``[view 1; view 2]``, gathered view by view (global view-major)."""
    import torch

    from iclr25_debgcd._distributed import gather_rows

    def gather(t):
        if t is None:
            return None
        return torch.cat([gather_rows(v, sizes) for v in t.chunk(2)])

    return GCDOutputs(*(gather(getattr(out, f.name)) for f in dataclasses.fields(out)))


def _step(net, model, x, y, lab, idx, gen, epoch: int, cfg: TrainConfig, loss_fn, opt):
    """One SGD step on the global batch ``idx``: both augmented views are drawn for the whole batch from ``gen``
    (as in one process), this rank forwards its block of rows of each, and the loss runs on the gathered outputs.
    Returns ``(loss, parts)``."""
    import torch

    from iclr25_debgcd._distributed import local_rows

    xb = x[idx]
    views = [augment(xb, shift=cfg.shift, flip=cfg.flip, noise=cfg.noise, generator=gen) for _ in range(2)]
    part, sizes = local_rows(len(idx))
    out = net(lambda: model(torch.cat([v[part] for v in views])))
    loss, parts = loss_fn(_gather_outputs(out, sizes), y[idx], lab[idx], epoch=epoch, cfg=cfg.loss)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss, parts


def train_gcd(
    images: np.ndarray,
    split: GCDSplit,
    cfg: TrainConfig,
    *,
    seed: int = 0,
    device: str | torch.device = "cpu",
    eval_every: int = 0,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
    comm_hook: Callable | None = None,
) -> TrainResult:
    """Train SimGCD or DebGCD (``cfg.method``) on ``images`` with the GCD ``split``.

    Args:
        images: ``(n, C, H, W)`` float32 in [0, 1].
        split: from :func:`gcd_split` on the same n images.
        seed: seeds the model's initialisation, the sampler and the augmentations (the same seed gives SimGCD and
            DebGCD the same initial SimGCD parameters and the same batches).
        eval_every: also evaluate every this many epochs (0: only at the end).
        on_epoch: called with each epoch's history row.
        comm_hook: a DDP communication hook (e.g. ``iclr25_shared.distributed.ByteCounter().hook``).

    Data-parallel under a process group of several ranks (torchrun / accelerate launch): ``cfg.batch_size`` is the
    global batch, split across the ranks; the sampler and the augmentations draw the global batch from ``seed`` on
    every rank, so the run equals the one-process run up to summation order (:mod:`iclr25_debgcd._distributed`).

    Returns:
        :class:`TrainResult` (evaluation after the last epoch; no model selection on labels).

    Raises:
        ValueError: shapes do not match the split; non-finite images; a non-finite loss during training.
    """
    import torch

    from iclr25_debgcd._distributed import DataParallel, global_batchnorm, rank_world
    from iclr25_shared.checks import check_finite, check_shape

    check_shape("images", images, ("n", "c", "h", "w"), bind={"n": split.labels.shape[0]})
    check_finite("images", images)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    device = torch.device(device)
    model = build_model(split, tuple(images.shape[1:]), cfg).to(device)
    _, world = rank_world()
    if world > 1:  # the same global batch statistics as one process
        model = global_batchnorm(model)
    # the debiased heads sit unused when a loss weight is 0; DDP must then not wait for their gradients
    unused = cfg.method == "debgcd" and not (cfg.loss.sdl_weight > 0 and cfg.loss.adl_weight > 0)
    net = DataParallel([model], find_unused=unused, comm_hook=comm_hook)
    x = torch.as_tensor(images, dtype=torch.float32, device=device)
    y = torch.as_tensor(split.labels, device=device)
    lab = torch.as_tensor(split.labelled, device=device)

    decay, no_decay = [], []
    for _name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if p.ndim <= 1 else decay).append(p)
    lr = cfg.lr * cfg.batch_size / 128
    opt = torch.optim.SGD(
        [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        momentum=cfg.momentum,
        weight_decay=cfg.weight_decay,
    )
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.epochs, eta_min=lr * 1e-3)
    n_lab, n = int(split.labelled.sum()), split.labels.shape[0]
    if n_lab == 0 or n_lab == n:
        raise ValueError(f"the split needs labelled and unlabelled images, got {n_lab} labelled of {n}")
    weights = torch.where(torch.as_tensor(split.labelled), 1.0, n_lab / (n - n_lab)).double()
    steps = max(1, n // cfg.batch_size)
    loss_fn = debgcd_loss if cfg.method == "debgcd" else simgcd_loss
    loss_cfg = cfg.loss
    history: list[dict[str, float]] = []
    t0 = time.perf_counter()
    for epoch in range(cfg.epochs):
        model.train()
        te = time.perf_counter()
        order = torch.multinomial(weights, steps * cfg.batch_size, replacement=True, generator=gen).to(device)
        sums: dict[str, float] = {}
        for s in range(steps):
            idx = order[s * cfg.batch_size : (s + 1) * cfg.batch_size]
            loss, parts = _step(net, model, x, y, lab, idx, gen, epoch, cfg, loss_fn, opt)
            if not math.isfinite(float(loss.detach())):
                raise ValueError(f"non-finite loss at epoch {epoch}, step {s}: {parts}")
            for k, v in ({"loss": float(loss.detach())} | parts).items():
                sums[k] = sums.get(k, 0.0) + v / steps
        sched.step()
        if world > 1:  # the same on every rank (each computes the global loss); reduced to make sure
            from iclr25_shared.distributed import all_reduce_mean

            reduced = all_reduce_mean(sums)
            sums = {k: reduced[k] for k in sums}
        row = {"epoch": float(epoch + 1), **sums, "seconds": time.perf_counter() - te}
        if eval_every and ((epoch + 1) % eval_every == 0) and epoch + 1 < cfg.epochs:
            ev = evaluate(model, x, split, threshold=loss_cfg.threshold)
            row |= {k: v for k, v in ev.items() if not k.startswith("_")}
        history.append(row)
        if on_epoch is not None:
            on_epoch(row)
    seconds = time.perf_counter() - t0
    final = evaluate(model, x, split, threshold=loss_cfg.threshold)
    pred = final.pop("_pred")
    history[-1] |= final
    return TrainResult(model=model, history=history, final=final, predictions=pred, seconds=seconds)
