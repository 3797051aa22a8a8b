"""``bench``: the weighted loss against plain NT-Xent, the mining against brute force and a SiM-W pre-training step
against a SimCLR step, all arms interleaved round by round in one run (``iclr25_shared.bench``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_shared.cli import Result, RunContext
from iclr25_simhand._training import _backbone, _pretrain_step

if TYPE_CHECKING:
    import torch

    from iclr25_shared.distributed import ByteCounter
    from iclr25_simhand.cli import BenchConfig

Pair = tuple[str, int, str, str]
"""(what, n, baseline arm, our arm): one row of the ``bench`` table."""


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Time of the weighted loss (with its weights) against plain NT-Xent, of the mining against brute force, and of
    a SiM-W pre-training step against a SimCLR step (with bytes communicated per step under torchrun), all arms
    interleaved round by round in one run (iclr25_shared.bench)."""
    from iclr25_shared.bench import interleaved

    device = ctx.join_group(seed=cfg.seed)
    here = ctx.world
    arms: dict[str, Any] = {}
    pairs: list[Pair] = []
    _loss_arms(cfg.batch_sizes, device, arms, pairs)
    _mining_arms(cfg.pool_sizes, arms, pairs)
    counters, sent = _step_arms(cfg, device, arms, pairs)
    run = interleaved(arms, repeats=cfg.repeats, warmup=1, device=device, progress=ctx.progress)
    calls = cfg.repeats + 1
    rows = _ratio_rows(run, pairs)
    b = cfg.train_batch
    steps = [
        {"method": m, "processes": here.world_size, "global_batch": b, "step_ms": 1e3 * run.median(f"pretrain step {m}"),
         "ddp_grad_bytes_per_step": counters[m].bytes // calls, "gather_bytes_per_step": sent[m]["bytes"]}
        for m in ("simclr", "simw")
    ]  # fmt: skip
    return Result(
        metrics={"processes": here.world_size, "bench_run": run.as_dict()},
        tables={"bench": rows, "training step": steps},
        notes=_notes(cfg, here),
    )


def _loss_arms(batch_sizes: tuple[int, ...], device: Any, arms: dict[str, Any], pairs: list[Pair]) -> None:
    """Add the plain NT-Xent and the weighted NT-Xent (with its pair weights) arms, forward + backward, per N."""
    import torch

    from iclr25_simhand._loss import ntxent, pair_weights, weighted_ntxent

    for n in batch_sizes:
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


def _mining_arms(pool_sizes: tuple[int, ...], arms: dict[str, Any], pairs: list[Pair]) -> None:
    """Add the brute-force all-pairs nearest neighbour and the PCA + kNN mining arms, per pool size."""
    from iclr25_simhand._pose import mine_similar_hands, normalise_keypoints

    for n in pool_sizes:
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


def _step_arms(
    cfg: BenchConfig, device: Any, arms: dict[str, Any], pairs: list[Pair]
) -> tuple[dict[str, ByteCounter], dict[str, dict[str, int]]]:
    """Add one SimCLR and one SiM-W pre-training step (the training loop's own step: views, encoder forward/backward,
    loss, Adam); return the DDP byte counters and the all-gather byte boxes of each method."""
    import torch

    from iclr25_shared.distributed import ByteCounter
    from iclr25_simhand import _distributed
    from iclr25_simhand._model import HandEncoder

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
    return counters, sent


def _ratio_rows(run: Any, pairs: list[Pair]) -> list[dict[str, Any]]:
    """One row per pair: both medians and the median per-round time ratio with its bootstrap interval."""
    rows = []
    for what, n, base_arm, ours in pairs:
        est = run.ratio(ours, base_arm)
        rows.append({"what": what, "n": n, "baseline_ms": 1e3 * run.median(base_arm), "ours_ms": 1e3 * run.median(ours),
                     "ratio": est.value, "interval": f"[{est.low:.3g}, {est.high:.3g}]"})  # fmt: skip
    return rows


def _notes(cfg: BenchConfig, here: Any) -> list[str]:
    """What each row holds equal, the protocol and the byte columns (and the process count under torchrun)."""
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
    return notes
