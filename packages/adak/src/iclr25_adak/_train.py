"""``train``: PPO-trained Ada-K allocators on a frozen MoE; validation loss and k against static top-K."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from iclr25_adak import _experiment as ex
from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_adak.cli import TrainConfig


def train(cfg: TrainConfig, ctx: RunContext) -> Result:
    """Train Ada-K allocators with PPO on a frozen MoE; report validation loss and k against static top-K."""
    import torch

    from iclr25_adak._eval import evaluate_lm

    model, train_blocks, val_blocks, _, device = ex._load(cfg, ctx)
    patch = ex._patch(model, cfg)
    t0 = time.perf_counter()
    hist = ex._train_once(patch, train_blocks, cfg, cfg.lam, cfg.seed, device, ctx)
    t_train = time.perf_counter() - t0
    val = val_blocks[: cfg.eval_blocks]
    ada = evaluate_lm(patch, val, mode="argmax", device=device)
    top = evaluate_lm(patch, val, mode="fixed", k=patch.host_top_k, device=device)
    if ctx.writes:
        torch.save(patch.allocator_state_dict(), ctx.path("allocators.pt"))
    rows = [
        {
            "step": i,
            "reward": h.reward,
            "log_likelihood": h.log_likelihood,
            "mean_k": h.mean_k,
            "ratio_max": max(h.ratio_max),
            "clip_fraction": h.clip_fraction[-1],
        }
        for i, h in enumerate(hist)
    ]
    return Result(
        metrics={
            "lam": cfg.lam,
            "adak_loss": ada["loss"],
            "topk_loss": top["loss"],
            "adak_mean_k": ada["mean_k"],
            "top_k": patch.host_top_k,
            "flops_reduction": ada["flops_reduction"],
            "k_per_layer": ada["k_per_layer"],
        },
        tables={"ppo": rows[:: max(1, len(rows) // 20)]},
        timings={"train": t_train},
        notes=["allocators.pt holds the allocator weights (load with AdaKPatch.load_allocator_state_dict)"]
        if ctx.writes
        else [],
    )
