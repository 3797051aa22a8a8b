"""Rendering, pre-training, fine-tuning and evaluation of a SiMHand encoder, shared by the commands.

``pretrain`` (``_pretrain.py``), ``finetune`` (``_finetune.py``), ``evaluate`` (``_evaluate.py``), ``reproduce``
(``_reproduce.py``) and ``bench`` (``_bench.py``) build on these loops and checkpoint helpers. Hands are rendered
(:func:`iclr25_simhand.render_hands`) over real photos; the test set uses 4 held-out photos (caveat: ``cat`` is the
same photo as the training photo ``chelsea``; see the README).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_shared.cli import RunContext, UsageError

if TYPE_CHECKING:
    import torch

METHODS = ("scratch", "simclr", "peclr", "sim", "simw")
"""Pre-training variants: none; SimCLR (two views of one image); PeCLR (SimCLR + equivariant latent); SiM (mined
similar hand from another image as positive, equivariant latent); SiM-W (SiM + adaptive weights)."""

# the last photos of BACKGROUNDS are held out for the test set (caveat: cat == chelsea, see the README)
_TEST_BACKGROUNDS = 4
_TARGET_SCALE = 100.0  # mm per training unit of the 3-D targets


@dataclass
class Data:
    pool: Any  # HandBatch, unlabelled pre-training pool
    train: Any  # HandBatch, labelled fine-tuning set
    test: Any  # HandBatch, test set (held-out photos)


def make_data(*, pool: int, train: int, test: int, size: int, seed: int) -> Data:
    """Render the pool / labelled / test hands; test photos are disjoint from the others."""
    from iclr25_simhand._render import BACKGROUNDS, load_backgrounds, render_hands

    bgs = load_backgrounds()
    k = len(BACKGROUNDS)
    train_ids = np.arange(k - _TEST_BACKGROUNDS)
    test_ids = np.arange(k - _TEST_BACKGROUNDS, k)
    kw = {"size": size, "backgrounds": bgs, "supersample": 2}
    return Data(
        pool=render_hands(pool, seed=seed * 3 + 0, background_ids=train_ids, **kw),
        train=render_hands(train, seed=seed * 3 + 1, background_ids=train_ids, **kw),
        test=render_hands(test, seed=seed * 3 + 2, background_ids=test_ids, **kw),
    )


def _targets(batch: Any) -> np.ndarray:
    """Root-relative 3-D joints in training units (mm / 100)."""
    k3 = batch.keypoints3d.astype(np.float32)
    return (k3 - k3[:, :1]) / _TARGET_SCALE


def _norm2d(kp: torch.Tensor) -> torch.Tensor:
    """Root-centred, scale-normalised 2-D keypoints (as in the mining) for the weight distances."""
    k = kp - kp[:, :1]
    s = k[:, 9].norm(dim=-1).clamp_min(1e-6)
    return k / s[:, None, None]


def _pretrain_step(
    method: str,
    model: Any,
    images: torch.Tensor,
    kp: torch.Tensor,
    partner: torch.Tensor,
    *,
    batch_size: int,
    lr: float,
    temperature: float,
    gen: torch.Generator,
    device: torch.device,
    weight_kind: str = "linear",
    comm_hook: Any = None,
) -> Any:
    """The optimizer, DDP wrapper (several ranks) and a zero-argument call doing one pre-training step of
    ``model`` (returns the step's loss, a detached 0-d tensor: no host synchronisation). Built once, outside any
    timed region; :func:`pretrain_encoder` and ``bench`` call it."""
    import torch

    from iclr25_simhand._distributed import (
        DataParallel,
        gather_rows,
        global_batchnorm,
        local_rows,
        rank_world,
    )
    from iclr25_simhand._loss import ntxent, pair_weights, weighted_ntxent
    from iclr25_simhand._pose import similarity_views, undo_latent_transform

    if rank_world()[1] > 1:  # the global batch's BatchNorm statistics, as in one process
        model = global_batchnorm(model)
    net = DataParallel([model], find_unused=True, comm_hook=comm_hook)  # the 3-D head is not trained here
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=1e-6)
    n = images.shape[0]

    def step() -> torch.Tensor:
        idx = torch.randperm(n, generator=gen)[:batch_size]
        # both views of the global batch, drawn as in one process; this rank encodes its block of rows
        v1, k1, a1, t1 = similarity_views(images[idx], kp[idx], generator=gen)
        v2, k2, a2, t2 = similarity_views(images[partner[idx]], kp[partner[idx]], generator=gen)
        part, sizes = local_rows(len(idx))
        a, b = v1[part].to(device), v2[part].to(device)
        z1, z2 = net(lambda: (model(a), model(b)))
        z1, z2 = gather_rows(z1, sizes), gather_rows(z2, sizes)
        if method != "simclr":
            z1 = undo_latent_transform(z1, a1.to(device), t1.to(device))
            z2 = undo_latent_transform(z2, a2.to(device), t2.to(device))
        if method == "simw":
            wp, wn = pair_weights(_norm2d(k1), _norm2d(k2), kind=weight_kind)
            loss = weighted_ntxent(z1, z2, wp.to(device), wn.to(device), temperature=temperature)
        else:
            loss = ntxent(z1, z2, temperature=temperature)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def pretrain_encoder(
    method: str,
    pool: Any,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    temperature: float,
    width: int,
    seed: int,
    device: torch.device,
    weight_kind: str = "linear",
    progress: Any = None,
    comm_hook: Any = None,
) -> tuple[Any, list[float]]:
    """Pre-train a :class:`HandEncoder` on ``pool`` with one of :data:`METHODS`; return it and the loss curve.

    Data-parallel under a process group of several ranks (torchrun / accelerate launch): ``batch_size`` is the
    global batch, split across the ranks, and the loss runs on the gathered projections
    (:mod:`iclr25_simhand._distributed`); ``comm_hook`` is registered on the DDP model (e.g.
    ``iclr25_shared.distributed.ByteCounter().hook``).
    """
    import torch

    from iclr25_simhand._model import HandEncoder
    from iclr25_simhand._pose import mine_similar_hands

    torch.manual_seed(seed)
    model = HandEncoder(_backbone(width)).to(device)
    if method == "scratch":
        return model, []
    gen = torch.Generator().manual_seed(seed)
    images = torch.from_numpy(pool.images)
    kp = torch.from_numpy(pool.keypoints2d)
    n = images.shape[0]
    if batch_size > n:
        raise UsageError(f"batch_size must be <= the pool size {n}, got {batch_size}")
    partner = torch.arange(n)
    if method in ("sim", "simw"):
        partner = torch.from_numpy(mine_similar_hands(pool.keypoints2d, seed=seed)[0])
    step = _pretrain_step(method, model, images, kp, partner, batch_size=batch_size, lr=lr,
                          temperature=temperature, gen=gen, device=device, weight_kind=weight_kind,
                          comm_hook=comm_hook)  # fmt: skip
    it = range(steps) if progress is None else progress(range(steps), desc=f"pretrain {method}")
    losses = torch.stack([step() for _ in it]).tolist() if steps else []
    return model, losses


def _backbone(width: int) -> Any:
    from iclr25_simhand._model import SmallConvNet

    return SmallConvNet(width)


def finetune_encoder(
    model: Any,
    train: Any,
    *,
    fraction: float,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    device: torch.device,
) -> Any:
    """Fine-tune backbone + 3-D head on the first ``fraction`` of the labelled set (MSE on root-relative joints).

    Data-parallel as :func:`pretrain_encoder` (``batch_size`` is the global batch; the MSE runs on the gathered
    predictions)."""
    import torch

    from iclr25_simhand._distributed import (
        DataParallel,
        gather_rows,
        global_batchnorm,
        local_rows,
        rank_world,
    )

    n = max(2, round(fraction * train.images.shape[0]))
    images = torch.from_numpy(train.images[:n])
    target = torch.from_numpy(_targets(train)[:n])
    gen = torch.Generator().manual_seed(seed + 1)
    if rank_world()[1] > 1:
        model = global_batchnorm(model)
    net = DataParallel([model], find_unused=True)  # the projection head is not trained here
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, n, (min(batch_size, n),), generator=gen)
        part, sizes = local_rows(len(idx))
        xb = images[idx[part]].to(device)
        pred = gather_rows(net(lambda xb=xb: model.pose(xb)), sizes)
        loss = torch.nn.functional.mse_loss(pred, target[idx].to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def evaluate_encoder(model: Any, test: Any, device: torch.device) -> dict[str, float]:
    """MPJPE and PA-MPJPE (mm) of root-relative 3-D joints on ``test``."""
    import torch

    from iclr25_simhand._pose import mpjpe, pa_mpjpe

    model.eval()
    preds = []
    with torch.no_grad():
        for i in range(0, test.images.shape[0], 256):
            preds.append(model.pose(torch.from_numpy(test.images[i : i + 256]).to(device)).cpu().numpy())
    pred = np.concatenate(preds).astype(np.float64) * _TARGET_SCALE
    gt = _targets(test).astype(np.float64) * _TARGET_SCALE
    return {"mpjpe_mm": mpjpe(pred, gt), "pa_mpjpe_mm": pa_mpjpe(pred, gt)}


def _save_model(ctx: RunContext, model: Any, name: str, meta: dict[str, Any]) -> str | None:
    if not ctx.writes:
        return None
    import torch

    torch.save({"state_dict": model.state_dict(), "meta": meta}, ctx.path(name))
    return name


def _load_model(path: Path, size: int, label: str, device: torch.device, *, fine_tuned: bool = False) -> Any:
    """The encoder in ``path`` (see :func:`iclr25_simhand._checkpoint.load_checkpoint`), refused with
    :class:`InputError` when unreadable, when it was trained at another image size than ``size``, or (with
    ``fine_tuned``) when it is a pre-training encoder.pt, whose 3-D head was never trained."""
    from iclr25_shared.errors import InputError
    from iclr25_simhand._checkpoint import check_size, load_checkpoint

    model, meta = load_checkpoint(path, label=label, device=device)
    check_size(meta, size, path, label)
    if fine_tuned and "method" in meta:  # pretrain records its method; finetune's model.pt does not
        raise InputError(
            f"{label}: {str(path)!r} is a pre-training encoder ({meta['method']}) whose 3-D head is untrained; "
            "fine-tune it first (iclr25-simhand finetune --encoder ...) and evaluate its model.pt"
        )
    return model
