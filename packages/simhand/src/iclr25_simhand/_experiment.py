"""What the CLI runs: pre-training, fine-tuning, evaluation, the reproduction and the benchmark.

Each command takes ``(cfg, ctx)`` and returns an :class:`iclr25_shared.cli.Result`. Hands are rendered
(:func:`iclr25_simhand.render_hands`) over real photos; the test set uses 4 held-out photos
(caveat: ``cat`` is the same photo as the training photo ``chelsea``; see the README).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_shared.cli import Result, RunContext, UsageError

if TYPE_CHECKING:
    import torch

    from iclr25_simhand.cli import (
        BenchConfig,
        EvaluateConfig,
        FinetuneConfig,
        PretrainConfig,
    )

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


def _join_group(ctx: RunContext, seed: int) -> Any:
    """``--device``, after joining the launcher's process group (torchrun / accelerate launch; a no-op in one
    process): this rank's GPU on CUDA, and every rank must have the same ``--seed`` (the global batches are drawn
    alike on every rank)."""
    import torch

    from iclr25_shared.distributed import check_same, init_process_group

    device = ctx.torch_device()
    here = init_process_group(device)
    if here.is_distributed:
        check_same(seed, "--seed")
        if device.type == "cuda":
            device = torch.device("cuda", here.local_rank)
            ctx.device_label = f"{device} (rank {here.rank} of {here.world_size})"
    return device


def pretrain(cfg: PretrainConfig, ctx: RunContext) -> Result:
    """Pre-train one method on a rendered pool; save ``encoder.pt`` (state_dict + meta) to ``--out``."""
    device = _join_group(ctx, cfg.seed)
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


def finetune(cfg: FinetuneConfig, ctx: RunContext) -> Result:
    """Fine-tune (from ``--encoder`` or scratch) on rendered labelled hands; evaluate; save ``model.pt``."""
    device = _join_group(ctx, cfg.seed)
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


def evaluate(cfg: EvaluateConfig, ctx: RunContext) -> Result:
    """MPJPE / PA-MPJPE (mm) of a fine-tuned ``model.pt`` on rendered test hands (held-out photos)."""
    device = ctx.torch_device()
    model = _load_model(cfg.checkpoint, cfg.size, "--checkpoint", device, fine_tuned=True)
    from iclr25_simhand._render import BACKGROUNDS, load_backgrounds, render_hands

    k = len(BACKGROUNDS)
    test = render_hands(cfg.test, size=cfg.size, seed=cfg.seed * 3 + 2, backgrounds=load_backgrounds(),
                        background_ids=np.arange(k - _TEST_BACKGROUNDS, k))  # fmt: skip
    return Result(metrics=evaluate_encoder(model, test, device))


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Time of the weighted loss (with its weights) against plain NT-Xent, of the mining against brute force, and of
    a SiM-W pre-training step against a SimCLR step (with bytes communicated per step under torchrun), all arms
    interleaved round by round in one run (iclr25_shared.bench)."""
    import torch

    from iclr25_shared.bench import interleaved
    from iclr25_shared.distributed import ByteCounter
    from iclr25_simhand import _distributed
    from iclr25_simhand._loss import ntxent, pair_weights, weighted_ntxent
    from iclr25_simhand._model import HandEncoder
    from iclr25_simhand._pose import mine_similar_hands, normalise_keypoints

    device = _join_group(ctx, cfg.seed)
    here = ctx.world
    arms: dict[str, Any] = {}
    pairs = []  # (what, n, baseline arm, our arm)
    for n in cfg.batch_sizes:
        z1 = torch.randn(n, 128, device=device, requires_grad=True)
        z2 = torch.randn(n, 128, device=device, requires_grad=True)
        j1, j2 = torch.rand(n, 21, 2) * 32, torch.rand(n, 21, 2) * 32

        def base(z1: torch.Tensor = z1, z2: torch.Tensor = z2) -> None:
            ntxent(z1, z2).backward()

        def weighted(
            z1: torch.Tensor = z1, z2: torch.Tensor = z2, j1: torch.Tensor = j1, j2: torch.Tensor = j2
        ) -> None:
            wp, wn = pair_weights(j1, j2)
            weighted_ntxent(z1, z2, wp.to(device), wn.to(device)).backward()

        arms[f"ntxent n={n}"], arms[f"weighted n={n}"] = base, weighted
        pairs.append(
            ("pair weights + weighted NT-Xent vs NT-Xent fwd+bwd", n, f"ntxent n={n}", f"weighted n={n}")
        )
    for n in cfg.pool_sizes:
        kp = np.random.default_rng(0).random((n, 21, 2)).astype(np.float32) * 32

        def brute(kp: np.ndarray = kp, n: int = n) -> None:
            x = normalise_keypoints(kp).reshape(n, -1)
            sq = (x**2).sum(1)
            d = sq[:, None] + sq[None] - 2 * x @ x.T
            np.fill_diagonal(d, np.inf)
            d.argmin(1)

        arms[f"brute n={n}"], arms[f"mined n={n}"] = brute, lambda kp=kp: mine_similar_hands(kp)
        pairs.append(
            ("mine_similar_hands (PCA + kNN) vs brute-force all-pairs NN", n, f"brute n={n}", f"mined n={n}")
        )
    # one pre-training step (the training loop's own step: views, encoder forward/backward, loss, Adam), built here
    rng = np.random.default_rng(cfg.seed)
    b, side = cfg.train_batch, 32
    images = torch.from_numpy(rng.random((4 * b, 3, side, side)).astype(np.float32))
    kp = torch.from_numpy((rng.random((4 * b, 21, 2)) * (side - 1)).astype(np.float32))
    partner = torch.roll(torch.arange(4 * b), 1)
    counters, sent = {}, {}
    for method in ("simclr", "simw"):
        torch.manual_seed(cfg.seed)
        model = HandEncoder(_backbone(16)).to(device)
        counters[method], sent[method] = ByteCounter(), {"bytes": 0}
        step = _pretrain_step(method, model, images, kp, partner, batch_size=b, lr=1e-3, temperature=0.5,
                              gen=torch.Generator().manual_seed(cfg.seed), device=device,
                              comm_hook=counters[method].hook)  # fmt: skip

        def call(step: Any = step, box: dict = sent[method]) -> None:
            before = _distributed.SENT["bytes"]
            step()
            box["bytes"] = _distributed.SENT["bytes"] - before

        arms[f"pretrain step {method}"] = call
    pairs.append(
        (
            "SiM-W vs SimCLR pre-training step (width 16, 32 px)",
            b,
            "pretrain step simclr",
            "pretrain step simw",
        )
    )
    run = interleaved(arms, repeats=cfg.repeats, warmup=1, device=device, progress=ctx.progress)
    calls = cfg.repeats + 1
    rows = []
    for what, n, base_arm, ours in pairs:
        est = run.ratio(ours, base_arm)
        rows.append({"what": what, "n": n, "baseline_ms": 1e3 * run.median(base_arm), "ours_ms": 1e3 * run.median(ours),
                     "ratio": est.value, "interval": f"[{est.low:.3g}, {est.high:.3g}]"})  # fmt: skip
    steps = [
        {"method": m, "processes": here.world_size, "global_batch": b, "step_ms": 1e3 * run.median(f"pretrain step {m}"),
         "ddp_grad_bytes_per_step": counters[m].bytes // calls, "gather_bytes_per_step": sent[m]["bytes"]}
        for m in ("simclr", "simw")
    ]  # fmt: skip
    notes = [
        "loss rows: baseline = plain NT-Xent, ours = weights + weighted loss (held equal: N, projections); mining "
        "rows: baseline = brute-force all-pairs nearest neighbour, ours = mine_similar_hands (held equal: the "
        "poses; not equal: PCA to 20 dims, group exclusion); step rows: one pre-training step (held equal: "
        "encoder, batch, views, optimizer; not equal: SiM-W's latent transform and pose weights).",
        f"iclr25_shared.bench.interleaved: 1 warm-up call of each arm, then {cfg.repeats} rounds running every arm "
        "once in rotated order; ratio = median of per-round ratios, 95% bootstrap interval over rounds.",
        "ddp_grad_bytes_per_step: gradient bytes this rank all-reduced per step (ByteCounter); "
        "gather_bytes_per_step: payload of the differentiable all-gathers of the projections and the BatchNorm "
        "all-reduces (forward and backward). Both 0 in one process.",
    ]
    if here.is_distributed:
        notes.append(
            f"{here.world_size} processes on this machine: each rank computes 1/{here.world_size} of the step's "
            "batch (the loss and mining arms run whole on every rank); on 2 shared CPU cores no speed-up is expected."
        )
    return Result(
        metrics={"processes": here.world_size, "bench_run": run.as_dict()},
        tables={"bench": rows, "training step": steps},
        notes=notes,
    )
