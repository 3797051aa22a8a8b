"""``evaluate``: validation loss, mean k, FLOPs reduction and tokens/s of static top-k and trained allocators."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from iclr25_adak import _experiment as ex
from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_adak.cli import EvaluateConfig


def evaluate(cfg: EvaluateConfig, ctx: RunContext) -> Result:
    """Validation loss, mean k per layer, FLOPs reduction and tokens/s of Ada-K (trained allocators) and top-k."""

    from iclr25_adak._eval import evaluate_lm
    from iclr25_adak._inputs import load_allocators, read_allocators

    state = read_allocators(cfg.allocators, label="--allocators") if cfg.allocators is not None else None
    model, _, val_blocks, _, device = ex._load(cfg, ctx)
    patch = ex._patch(model, cfg)
    val = val_blocks[: cfg.eval_blocks]
    rows = []
    for k in range(1, min(patch.reachable_k, cfg.max_static_k) + 1):
        r = evaluate_lm(patch, val, mode="fixed", k=k, device=device)
        rows.append(
            {
                "routing": f"static top-{k}",
                "loss": r["loss"],
                "mean_k": r["mean_k"],
                "flops_reduction": r["flops_reduction"],
                "tokens_per_s": r["tokens_per_s"],
            }
        )
    metrics: dict[str, Any] = {"top_k": patch.host_top_k}
    if state is not None:
        load_allocators(patch, state, cfg.allocators, label="--allocators")
        r = evaluate_lm(patch, val, mode="argmax", device=device)
        rows.append(
            {
                "routing": "Ada-K (argmax)",
                "loss": r["loss"],
                "mean_k": r["mean_k"],
                "flops_reduction": r["flops_reduction"],
                "tokens_per_s": r["tokens_per_s"],
            }
        )
        metrics.update(
            adak_loss=r["loss"],
            adak_mean_k=r["mean_k"],
            k_per_layer=r["k_per_layer"],
            flops_reduction=r["flops_reduction"],
        )
    return Result(metrics=metrics, tables={"routing": rows})
