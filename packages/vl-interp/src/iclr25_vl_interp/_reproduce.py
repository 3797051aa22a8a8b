"""``reproduce``: the paper's claims on a VLM composed offline and trained here (README, Reproduction), with the
primary comparison declared in the README (:data:`iclr25_vl_interp._repro.PRIMARY`) and every other interval
secondary (Holm) or exploratory (issue 41). The work is in :mod:`iclr25_vl_interp._repro`."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_vl_interp.cli import ReproduceConfig

__all__ = ["reproduce"]


def _finite(row: dict[str, Any]) -> dict[str, Any]:
    """A per-seed row for results.json: a non-finite float becomes ``None`` with a ``<key>_reason``."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        if isinstance(v, float) and not math.isfinite(v):
            out[k], out[f"{k}_reason"] = None, f"not finite ({v}): no mentions of that kind in this set"
        else:
            out[k] = v
    return out


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """The paper's claims on a VLM composed offline and trained here (README, Reproduction)."""
    from iclr25_shared._paths import cache_dir
    from iclr25_shared.inputs import check_fashion_mnist_folder
    from iclr25_shared.stats import verdict
    from iclr25_vl_interp._repro import PAPER_EFFECT, PRIMARY, comparisons, run_reproduction

    if cfg.data_root is not None:  # also checked by the CLI before this module loads
        check_fashion_mnist_folder(cfg.data_root, label="--data-root")
    cache = cfg.cache if cfg.cache is not None else cache_dir("vl-interp")
    cache.mkdir(parents=True, exist_ok=True)
    res = run_reproduction(
        cfg.size,
        cfg.seeds,
        cache,
        train_seed=cfg.train_seed,
        data_root=cfg.data_root,
        log=ctx.log,
        device=ctx.torch_device(),
        lm_layers=cfg.lm_layers,
        steps=cfg.steps,
        full_vocab=cfg.full_vocab,
    )
    _reproduce_figures(ctx, res)
    rows = [_finite({k: v for k, v in r.items() if k != "auroc_per_layer"}) for r in res["per_seed"]]
    layer_rows = [
        {
            "hidden_state": j,
            **{f"seed{r['seed']}": r["auroc_per_layer"][j] for r in res["per_seed"]},
        }
        for j in range(len(res["per_seed"][0]["auroc_per_layer"]))
    ]
    rows_cmp = comparisons(res["per_seed"])
    st = res["setting"]
    return Result(
        metrics={
            "size": cfg.size,
            "primary": PRIMARY,
            "paper_effect": PAPER_EFFECT,
            "verdict": verdict(rows_cmp[0], PAPER_EFFECT),
            "best_edit": res["best"],
            "c_o_threshold": res["tau"],
            "tune_diagnostics": res["tune_diagnostics"],
            "final_train_loss": float(np.mean(res["losses"][-20:])) if res["losses"] else None,
            "lm_layers_kept": st.lm_layers,
            "caption_vocab_softmax": st.caption_vocab,
        },
        tables={
            "per_seed": rows,
            "auroc_per_layer": layer_rows,
            "comparisons": [c.as_dict() for c in rows_cmp],
            "tune_grid": res["tune_grid"],
            "best_edit": [res["best"]],
        },
        timings={**res["timings"], "total_s": res["total_s"]},
        notes=[
            f"composed VLM: EfficientNet-Lite0 grid features ({st.grid[0]}x{st.grid[1]} image tokens) -> MLP "
            f"projector ({st.steps} steps x {st.batch}, {st.n_train} training composites, co-occurrence bias "
            f"{st.bias}) -> SmolLM2-135M first {st.lm_layers} layers (frozen)",
            "seeds = held-out composite sets (one trained projector); intervals: paired Student-t, 95 % "
            "(iclr25_shared.stats.compare: the primary first, secondary Holm-adjusted, exploratory unadjusted)",
            "edit (l_I, l_T, alpha) and c_o threshold chosen on a separate tuning split",
        ],
    )


def _reproduce_figures(ctx: RunContext, res: dict[str, Any]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    from iclr25_vl_interp._composite import CLASS_WORDS

    ex = res["examples"]
    comp, ev = ex["comp"], ex["ev"]
    rows_, cols_ = res["setting"].grid
    n_show = min(4, len(comp))
    fig, axes = plt.subplots(n_show, 5, figsize=(12, 2.6 * n_show), squeeze=False)
    for r in range(n_show):
        present = sorted(comp.present(r))
        halluc = sorted(CLASS_WORDS.index(w) for w in ev["said"][r] if CLASS_WORDS.index(w) not in present)
        axes[r, 0].imshow(comp.images[r], cmap="gray")
        axes[r, 0].set_title(f"caption:{ev['texts'][r]}"[:40], fontsize=8)
        shown = (present + halluc)[:4]
        for j in range(4):
            ax = axes[r, j + 1]
            ax.set_xticks([])
            ax.set_yticks([])
            if j >= len(shown):
                ax.axis("off")
                continue
            o = shown[j]
            im = ax.imshow(ev["grids"][r, o].reshape(rows_, cols_), cmap="viridis", vmin=0)
            tag = "present" if o in present else "hallucinated"
            ax.set_title(f"{CLASS_WORDS[o]} ({tag}) c={ev['conf_layer'][r, o].max():.1e}", fontsize=8)
            fig.colorbar(im, ax=ax, fraction=0.046)
        axes[r, 0].set_xticks([])
        axes[r, 0].set_yticks([])
    fig.tight_layout()
    ctx.save_figure("maps.png", fig)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(4.5, 3))
    for r in res["per_seed"]:
        ax.plot(
            range(len(r["auroc_per_layer"])),
            r["auroc_per_layer"],
            marker="o",
            label=f"composite seed {r['seed']}",
        )
    ax.axhline(0.5, color="gray", lw=0.8, ls="--")
    ax.set_xlabel("hidden-state index l (0 = embeddings)")
    ax.set_ylabel("AUROC of c_o, present vs absent")
    ax.legend(fontsize=7)
    fig.tight_layout()
    ctx.save_figure("auroc_per_layer.png", fig)
    plt.close(fig)
