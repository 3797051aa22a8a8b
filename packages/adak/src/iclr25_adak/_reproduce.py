"""``reproduce``: Ada-K against static top-k on a frozen Wikipedia MoE, one declared primary comparison (issue 41).

Primary (declared in the README before the run): Ada-K at λ = ``--primary-lam`` (0.03) minus static routing at the
same mean k (the static top-k NLL interpolated linearly between the neighbouring integer k: equal routed-expert
FLOPs), validation NLL in nats/token, paired by PPO seed. Every other difference is secondary (Holm-adjusted).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_adak.cli import ReproduceConfig

PAPER_EFFECT = -0.01
"""The effect the verdict reads the primary interval against (nats/token, Ada-K − static at equal k). The paper
reports benchmark accuracies, not NLL ("over 25 % fewer FLOPs than Top-K while improving performance", abstract and
Tables 1-2): −0.01 is our declared reading of "better at equal compute" at this scale (a quarter of the quick host's
static top-1 → top-2 gap of about 0.04), stated in the README before the run; not a number from the paper."""


def primary_name(lam: float) -> str:
    """The primary comparison's name (the README quotes it)."""
    return f"Ada-K (lam={lam:g}) - static top-k at the same mean k, validation NLL"


def _host(cfg: Any, ctx: RunContext, device: Any) -> tuple[Any, Any, float]:
    """The frozen MoE and its token blocks (the cache, or pre-trained now on rank 0 first); seconds it took."""
    from iclr25_adak._experiment import _check_replicated, _rank0_first, _spec
    from iclr25_adak._zoo import wiki_moe
    from iclr25_shared.distributed import world

    t0 = time.perf_counter()
    model, tokens = _rank0_first(
        world(),
        lambda: wiki_moe(
            _spec(cfg.size),
            wiki_path=cfg.wiki_path,
            label="--wiki-path",
            device=device,
            log=ctx.log,
            progress=lambda it: ctx.progress(it, desc="pre-train MoE"),
        ),
    )
    _check_replicated(model)
    return model, tokens, time.perf_counter() - t0


def static_curve(patch: Any, val: np.ndarray, max_k: int, device: Any) -> list[dict[str, Any]]:
    """Validation NLL and FLOPs reduction of static top-k, k = 1..max_k."""
    from iclr25_adak._eval import evaluate_lm

    rows = []
    for k in range(1, max_k + 1):
        r = evaluate_lm(patch, val, mode="fixed", k=k, device=device)
        rows.append({"k": k, "loss": r["loss"], "flops_reduction": r["flops_reduction"]})
    return rows


def train_runs(
    cfg: Any,
    patch: Any,
    train: np.ndarray,
    val: np.ndarray,
    types: Any,
    static: list[dict],
    ctx: RunContext,
    device: Any,
) -> list[dict[str, Any]]:
    """One PPO run per (λ, seed) from the same allocator initialisation, evaluated with argmax k: the per-seed
    raw values (loss, mean k, the static loss interpolated at that k, top-K's loss)."""
    from iclr25_adak._eval import evaluate_lm, interpolate_static
    from iclr25_adak._experiment import _reset_allocators, _train_once

    s_k, s_loss = [r["k"] for r in static], [r["loss"] for r in static]
    runs = []
    for lam in cfg.lams:
        for seed in range(cfg.seed, cfg.seed + cfg.seeds):
            _reset_allocators(patch)
            _train_once(patch, train, cfg, lam, seed, device, ctx)
            r = evaluate_lm(patch, val, mode="argmax", types=types, device=device)
            mk = min(max(r["mean_k"], s_k[0]), s_k[-1])
            runs.append(
                {
                    "lam": lam,
                    "seed": seed,
                    "loss": r["loss"],
                    "mean_k": r["mean_k"],
                    "interp_loss": interpolate_static(s_k, s_loss, mk),
                    "topK_loss": s_loss[patch.host_top_k - 1],
                    "k_per_layer": r["k_per_layer"],
                    "k_by_type": r["k_by_type"],
                }
            )
            ctx.log.info(f"lam={lam} seed={seed}: loss {r['loss']:.4f} mean k {r['mean_k']:.3f}")
    return runs


def comparisons(cfg: Any, runs: list[dict[str, Any]], top_k: int) -> list[Any]:
    """The primary comparison first, then every other λ against the static curve and every λ against top-K."""
    from iclr25_shared.stats import compare

    def arm(lam: float, key: str) -> list[float]:
        return [r[key] for r in runs if r["lam"] == lam]

    secondary = {}
    for lam in cfg.lams:
        if lam != cfg.primary_lam:
            secondary[f"Ada-K (lam={lam:g}) - static top-k at the same mean k"] = (
                arm(lam, "loss"),
                arm(lam, "interp_loss"),
            )
    for lam in cfg.lams:
        secondary[f"Ada-K (lam={lam:g}) - static top-{top_k}"] = (arm(lam, "loss"), arm(lam, "topK_loss"))
    lam = cfg.primary_lam
    return compare(
        primary=(primary_name(lam), arm(lam, "loss"), arm(lam, "interp_loss")), secondary=secondary
    )


def summary(cfg: Any, runs: list[dict[str, Any]], top_k: int) -> tuple[list[dict], dict[float, list[float]]]:
    """Per λ: mean (sd) k and NLL over seeds, FLOPs against top-K, k by token type; and mean k per layer."""
    rows, layers = [], {}
    for lam in cfg.lams:
        rs = [r for r in runs if r["lam"] == lam]
        mean_k = [r["mean_k"] for r in rs]
        layers[lam] = [float(v) for v in np.mean([r["k_per_layer"] for r in rs], axis=0)]
        rows.append(
            {
                "lam": lam,
                "mean_k": float(np.mean(mean_k)),
                "mean_k_sd": float(np.std(mean_k, ddof=1)),
                "loss": float(np.mean([r["loss"] for r in rs])),
                "loss_sd": float(np.std([r["loss"] for r in rs], ddof=1)),
                "flops_vs_topK": float(np.mean(mean_k)) / top_k - 1,
                **{f"k_{t}": float(np.mean([r["k_by_type"][t] for r in rs])) for t in TYPES},
            }
        )
    return rows, layers


TYPES = ("content", "function", "other")


def measure(cfg: Any, ctx: RunContext, model: Any, tokens: Any, device: Any) -> dict[str, Any]:
    """Everything the reproduction reports for a frozen ``model`` and its ``tokens`` (testable on a tiny MoE)."""
    from iclr25_adak._eval import token_types
    from iclr25_adak._routing import apply_adak
    from iclr25_shared.stats import verdict

    patch = apply_adak(model, seed=cfg.seed)
    val = tokens.val[: cfg.eval_blocks]
    static = static_curve(patch, val, cfg.max_static_k, device)
    ctx.log.info("static: " + ", ".join(f"top-{r['k']} {r['loss']:.4f}" for r in static))
    t0 = time.perf_counter()
    runs = train_runs(cfg, patch, tokens.train, val, token_types(tokens.pieces), static, ctx, device)
    comp = comparisons(cfg, runs, patch.host_top_k)
    rows, layers = summary(cfg, runs, patch.host_top_k)
    return {
        "static": static,
        "runs": runs,
        "comparisons": comp,
        "verdict": verdict(comp[0], PAPER_EFFECT),
        "summary": rows,
        "layers": layers,
        "top_k": patch.host_top_k,
        "val_tokens": int(val.size),
        "ppo_s": time.perf_counter() - t0,
    }


def _result(cfg: Any, m: dict[str, Any], t_pre: float) -> Result:
    s_loss = [r["loss"] for r in m["static"]]
    big_k = m["top_k"]
    layer_rows = [
        {"lam": lam, **{f"layer {i}": v for i, v in enumerate(ks)}} for lam, ks in m["layers"].items()
    ]
    per_seed = [{k: v for k, v in r.items() if k not in ("k_per_layer", "k_by_type")} for r in m["runs"]]
    return Result(
        metrics={
            "verdict": m["verdict"],
            "paper_effect": PAPER_EFFECT,
            "primary_lam": cfg.primary_lam,
            "static": m["static"],
            "top_k": big_k,
            "seeds": cfg.seeds,
            "static_top1_minus_top2": s_loss[0] - s_loss[1],
            "validation_tokens": m["val_tokens"],
            "settings": {
                "size": cfg.size,
                "steps": cfg.steps,
                "batch": cfg.batch,
                "eval_blocks": cfg.eval_blocks,
            },
        },
        tables={
            "comparisons": [c.as_dict() for c in m["comparisons"]],
            "per_seed": per_seed,
            "static": m["static"],
            "adak_vs_static": m["summary"],
            "k_per_layer": layer_rows,
        },
        timings={"pretrain_or_load": t_pre, "ppo_and_eval": m["ppo_s"]},
        notes=[
            "primary: Ada-K at lam=primary_lam minus static routing at the same mean k (the static top-k NLL "
            "interpolated between the neighbouring integer k: equal routed-expert FLOPs), paired by PPO seed; "
            "every other comparison secondary (Holm); mean_difference < 0: Ada-K is better",
            f"paper_effect {PAPER_EFFECT} nats/token is our declared reading of the paper's 'better at equal or "
            "less compute' (the paper reports benchmark accuracies, not NLL)",
            f"static top-{big_k} (the host's K) loss {s_loss[big_k - 1]:.4f}; validation {m['val_tokens']} tokens",
        ],
    )


def _plot(
    static: list[dict[str, Any]], ada: list[dict[str, Any]], layers: dict[float, list[float]], ctx: RunContext
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4))
    ax.plot([r["k"] for r in static], [r["loss"] for r in static], "o-", color="gray", label="static top-k")
    for r in ada:
        ax.errorbar(
            r["mean_k"],
            r["loss"],
            xerr=r["mean_k_sd"],
            yerr=r["loss_sd"],
            fmt="s",
            capsize=3,
            label=f"Ada-K lam={r['lam']:g}",
        )
    ax.set_xlabel("mean activated experts per token and layer")
    ax.set_ylabel("validation NLL (nats/token)")
    ax.legend(fontsize=8)
    ax.set_title("loss vs experts")
    width = 0.8 / max(len(layers), 1)
    for i, (lam, ks) in enumerate(layers.items()):
        bx.bar(np.arange(len(ks)) + i * width, ks, width=width, label=f"lam={lam:g}")
    n_layers = len(next(iter(layers.values()))) if layers else 0
    bx.set_xticks(np.arange(n_layers) + width * (len(layers) - 1) / 2, [str(i) for i in range(n_layers)])
    bx.set_xlabel("MoE layer")
    bx.set_ylabel("mean k (seed average)")
    bx.legend(fontsize=8)
    bx.set_title("k per layer")
    fig.tight_layout()
    ctx.save_figure("tradeoff.png", fig)


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """Ada-K vs static top-k on a frozen Wikipedia MoE: loss at equal mean k, λ grid against top-K, k by layer/type."""
    from iclr25_adak._experiment import _apply_preset, _join

    cfg = _apply_preset(cfg)
    device = _join(cfg, ctx)
    model, tokens, t_pre = _host(cfg, ctx, device)
    m = measure(cfg, ctx, model, tokens, device)
    if ctx.writes:
        _plot(m["static"], m["summary"], m["layers"], ctx)
    return _result(cfg, m, t_pre)
