"""``reproduce``: residual vs hyper-connections pre-training from scratch on real text at small scale, one declared
primary comparison (issue 41).

Primary (declared in the README before the run): DHCx4 minus residual final validation loss (nats/token), paired by
seed, equal steps and tokens, each variant with the learning rate it chose on the tuning seed(s). The differences at
the earlier token counts and of the other variants are secondary (Holm-adjusted); the representation-collapse probe
(consecutive sub-layer cosine) is exploratory.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from iclr25_hyper_connections import _experiment as ex
from iclr25_hyper_connections._experiment import PAPER_V2_LOSS, ModelSpec, TrainResult, summarise
from iclr25_hyper_connections._variants import Variant
from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_hyper_connections.cli import ReproduceConfig

__all__ = ["PRIMARY_VARIANT", "comparisons", "ngram_cross_entropy", "per_seed", "primary_name", "reproduce"]

PRIMARY_VARIANT = "DHCx4"
"""The paper's headline variant (OLMo-1B: DHCx4 2.781 vs residual 2.811 V2 loss); the primary compares it with the
reference (the first of ``--variants``) when it is run, else the second variant does."""


def paper_effect(name: str, ref: str) -> float | None:
    """The paper's OLMo-1B V2-loss difference ``name − ref`` (nats/token), or None if it has no such row."""
    if name in PAPER_V2_LOSS and ref in PAPER_V2_LOSS and name != ref:
        return PAPER_V2_LOSS[name] - PAPER_V2_LOSS[ref]
    return None


def primary_name(name: str, ref: str) -> str:
    """The primary comparison's name (the README quotes it)."""
    return f"{name} - {ref}, final validation loss (nats/token)"


def _plot_reproduce(ctx: RunContext, results: list[TrainResult], variants: list[str]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name in variants:
        runs = [r for r in results if r.variant == name]
        steps = [row["step"] for row in runs[0].curve if "val_loss" in row]
        vals = [statistics.fmean(row["val_loss"] for row in (r.curve[s - 1] for r in runs)) for s in steps]
        ax.plot(steps, vals, marker="o", label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (nats/token)")
    ax.set_title("Wikipedia summaries: validation loss (mean over seeds)")
    ax.legend()
    fig.tight_layout()
    ctx.save_figure("loss_curves.png", fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    for name in variants:
        runs = [r for r in results if r.variant == name]
        sims = [
            statistics.fmean(vals)
            for vals in zip(*((r.sublayer_similarity or r.layer_similarity) for r in runs))
        ]
        ax.plot(range(1, len(sims) + 1), sims, marker="o", label=name)
    ax.set_xlabel("sub-layer j (pair j-1, j; attention and FFN counted separately)")
    ax.set_ylabel("median cos(h0^(j-1), h0^j)")
    ax.set_title("Consecutive sub-layer input similarity (paper Fig. 3 probe)")
    ax.legend()
    fig.tight_layout()
    ctx.save_figure("layer_similarity.png", fig)
    return ["loss_curves.png", "layer_similarity.png"]


@dataclass(frozen=True, kw_only=True)
class _Setting:
    variants: tuple[str, ...]
    lrs: tuple[float, ...]
    dim: int
    num_layers: int
    num_heads: int
    context: int
    steps: int
    batch_size: int
    warmup: int
    eval_every: int
    tuning_seeds: int


_SIZES = {
    "quick": {
        "variants": ("residual", "dhc4"),
        "lrs": (3e-3, 1e-2),
        "dim": 32,
        "steps": 80,
        "tuning_seeds": 1,
    },
    "full": {
        "variants": ("residual", "shc4", "dhc4"),
        "lrs": (3e-3, 1e-2, 3e-2),
        "dim": 32,
        "steps": 160,
        "tuning_seeds": 2,
    },
    # about a minute on one H200 (never run on a GPU; README "GPU"): 15x quick's tokens per run (300 steps of
    # 32 x 128 tokens), d = 128; 14 runs of 300 steps, launch-bound at ~10-15 ms per step for 24 sub-layers
    "gpu": {
        "variants": ("residual", "dhc4"),
        "lrs": (3e-3, 1e-2),
        "dim": 128,
        "steps": 300,
        "tuning_seeds": 1,
        "batch_size": 32,
        "context": 128,
    },
}


def _setting(cfg: ReproduceConfig) -> _Setting:
    preset = _SIZES[cfg.size]
    steps = cfg.steps or preset["steps"]

    def pick(name: str, default: Any) -> Any:
        value = getattr(cfg, name)
        return default if value is None else value

    return _Setting(
        variants=pick("variants", preset["variants"]),
        lrs=pick("lrs", preset["lrs"]),
        dim=pick("dim", preset["dim"]),
        num_layers=pick("num_layers", 12),
        num_heads=pick("num_heads", 4),
        context=pick("context", preset.get("context", 64)),
        steps=steps,
        batch_size=pick("batch_size", preset.get("batch_size", 16)),
        warmup=pick("warmup", max(1, steps // 10)),
        eval_every=pick("eval_every", max(1, steps // 10)),
        tuning_seeds=pick("tuning_seeds", preset["tuning_seeds"]),
    )


def _cached(cache: Path | None, key: dict[str, Any], run: Callable[[], TrainResult]) -> TrainResult:
    """Run ``run()`` unless ``cache`` holds a finished run with the same ``key`` (then load it); store new runs."""
    if cache is None:
        return run()
    import hashlib
    import json

    from iclr25_shared.distributed import broadcast_object, world
    from iclr25_shared.results import atomic_write_text

    text = json.dumps(key, sort_keys=True, default=str)
    path = cache / f"run-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    hit: TrainResult | None = None
    if world().is_main and path.is_file():
        try:  # an entry that does not parse or fit is a miss: it is trained again and overwritten
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("key") == json.loads(text):
                fields = dict(data["result"])
                fields["checkpoint_losses"] = {int(k): v for k, v in fields["checkpoint_losses"].items()}
                hit = TrainResult(**fields)
        except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError):
            pass
    # rank 0 reads the cache and tells the others, so every rank trains (or skips) the same runs
    hit = broadcast_object(hit)
    if hit is not None:
        return hit
    result = run()
    if world().is_main:  # only rank 0 writes
        cache.mkdir(parents=True, exist_ok=True)
        atomic_write_text(
            path, json.dumps({"key": json.loads(text), "result": dataclasses.asdict(result)}, indent=1)
        )
    return result


@dataclass(frozen=True, kw_only=True)
class _Plan:
    """What every training run of one reproduction shares: the setting, the data, the seeds and the cache key."""

    cfg: ReproduceConfig
    ctx: RunContext
    st: _Setting
    variants: list[Variant]
    corpus: Any
    spec: ModelSpec
    seeds: list[int]
    tune_seeds: list[int]
    checkpoints: list[int]
    common: dict[str, Any]
    key: dict[str, Any]

    @property
    def tokens_per_step(self) -> int:
        """Training tokens per optimizer step."""
        return self.st.batch_size * self.st.context


def _cache_key(cfg: ReproduceConfig, st: _Setting, checkpoints: list[int]) -> dict[str, Any]:
    """The settings a finished run's cache entry is keyed by (besides its role, variant, seed and rate)."""
    return {
        # a run depends on its own variant and learning rate, not on which others are compared or the grid
        "setting": {k: v for k, v in dataclasses.asdict(st).items() if k != "tuning_seeds"}
        | {"variants": None, "lrs": None},
        "tokenizer": cfg.tokenizer,
        "weight_decay": cfg.weight_decay,
        "eval_batches": cfg.eval_batches,
        "max_docs": cfg.max_docs,
        "checkpoints": checkpoints,
        "torch": torch.__version__,
    }


def _plan(cfg: ReproduceConfig, ctx: RunContext) -> _Plan:
    """Device, setting, corpus, seeds and the arguments every run shares; logs the plan."""
    device = ex._setup(cfg, ctx)
    st = _setting(cfg)
    variants = [Variant.parse(v) for v in st.variants]
    corpus = ex.load_corpus(cfg.tokenizer, max_docs=cfg.max_docs)
    ex._check_fits(corpus, st.context, cfg.max_docs)
    spec = ModelSpec(dim=st.dim, num_layers=st.num_layers, num_heads=st.num_heads, context=st.context)
    seeds = [cfg.seed + i for i in range(cfg.num_seeds)]
    tune_seeds = [cfg.seed + 1000 + i for i in range(st.tuning_seeds)]
    tokens_per_step = st.batch_size * st.context
    checkpoints = sorted(
        {max(1, round(st.steps * (i + 1) / cfg.checkpoints)) for i in range(cfg.checkpoints)}
    )
    common = {
        "steps": st.steps,
        "batch_size": st.batch_size,
        "weight_decay": cfg.weight_decay,
        "warmup": st.warmup,
        "eval_every": st.eval_every,
        "eval_batches": cfg.eval_batches,
        "device": device,
        "recompute": False,
    }
    ctx.log.info(
        f"{len(variants)} variants x ({len(st.lrs) if len(st.lrs) > 1 else 0} tuning + {len(seeds)} seeds), "
        f"{st.num_layers} blocks d={st.dim}, {st.steps} steps x {tokens_per_step} {corpus.tokenizer} tokens, {device}"
    )
    return _Plan(
        cfg=cfg,
        ctx=ctx,
        st=st,
        variants=variants,
        corpus=corpus,
        spec=spec,
        seeds=seeds,
        tune_seeds=tune_seeds,
        checkpoints=checkpoints,
        common=common,
        key=_cache_key(cfg, st, checkpoints),
    )


def _tune_variant(plan: _Plan, variant: Variant) -> dict[float, float]:
    """Mean final validation loss over the tuning seeds of every learning rate of the grid, for one variant."""
    st, ctx = plan.st, plan.ctx
    losses = {}
    for lr in st.lrs:
        tune_losses = []
        for tune_seed in plan.tune_seeds:
            res = _cached(
                plan.cfg.cache,
                {**plan.key, "role": "tune", "variant": variant.name, "seed": tune_seed, "lr": lr},
                lambda lr=lr, tune_seed=tune_seed: ex.train_lm(
                    plan.corpus,
                    plan.spec,
                    variant,
                    lr=lr,
                    seed=tune_seed,
                    val_seed=2_000_003,  # tuning windows differ from the reported evaluation windows
                    progress=lambda it: ctx.progress(it, total=st.steps, desc=f"{variant.name} lr {lr:g}"),
                    **plan.common,
                ),
            )
            tune_losses.append(res.final_val_loss)
        losses[lr] = float(np.mean(tune_losses))
        ctx.log.info(
            f"  tune {variant.name:>10} lr {lr:g}: val loss {losses[lr]:.4f} (mean of {len(tune_losses)})"
        )
    return losses


def _tune(plan: _Plan) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Each variant's learning rate (the grid's best on the tuning seeds) and the grid's table rows."""
    chosen: dict[str, float] = {}
    grid_rows = []
    for variant in plan.variants:
        if len(plan.st.lrs) == 1:
            chosen[variant.name] = plan.st.lrs[0]
            continue
        losses = _tune_variant(plan, variant)
        chosen[variant.name] = min(losses, key=losses.__getitem__)
        grid_rows.append(
            {
                "variant": variant.name,
                **{f"lr {lr:g}": loss for lr, loss in losses.items()},
                "chosen": chosen[variant.name],
            }
        )
    return chosen, grid_rows


def _train_reported(plan: _Plan, chosen: dict[str, float]) -> list[TrainResult]:
    """Every variant trained at its chosen rate on every reported seed (seed-major order)."""
    ctx, st = plan.ctx, plan.st
    results: list[TrainResult] = []
    for seed in plan.seeds:
        for variant in plan.variants:
            res = _cached(
                plan.cfg.cache,
                {
                    **plan.key,
                    "role": "eval",
                    "variant": variant.name,
                    "seed": seed,
                    "lr": chosen[variant.name],
                },
                lambda variant=variant, seed=seed: ex.train_lm(
                    plan.corpus,
                    plan.spec,
                    variant,
                    lr=chosen[variant.name],
                    seed=seed,
                    checkpoints=plan.checkpoints,
                    progress=lambda it: ctx.progress(it, total=st.steps, desc=f"{variant.name} seed {seed}"),
                    **plan.common,
                ),
            )
            ctx.log.info(
                f"  {variant.name:>10} seed {seed}: val loss {res.final_val_loss:.4f} ({res.seconds:.0f} s)"
            )
            results.append(res)
    return results


def _diagnostics(plan: _Plan, results: list[TrainResult], ref: str) -> dict[str, Any]:
    """The n-gram baselines, the reference's mean validation loss and the uniform loss; logged."""
    diag = {
        **ngram_cross_entropy(plan.corpus),
        "residual_val_loss": statistics.fmean(r.final_val_loss for r in results if r.variant == ref),
        "initial_loss_uniform": math.log(plan.corpus.vocab_size),
    }
    plan.ctx.log.info(
        "diagnostic: %s validation loss %.3f nats/token vs unigram %.3f, bigram %s (uniform %.3f)",
        ref,
        diag["residual_val_loss"],
        diag["unigram_cross_entropy"],
        "n/a" if diag["bigram_cross_entropy"] is None else f"{diag['bigram_cross_entropy']:.3f}",
        diag["initial_loss_uniform"],
    )
    return diag


def _loss_rows(
    variants: list[Variant],
    summary: dict[str, dict[str, float]],
    chosen: dict[str, float],
    table: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """The "validation loss" table: one row per variant (mean over seeds, seed SD, sub-layer cos, paper's loss)."""
    rows = []
    for v in variants:
        s = summary[v.name]
        rows.append(
            {
                "variant": v.name,
                "params": int(s["num_params"]),
                "lr": chosen[v.name],
                "val loss (mean)": s["val_loss_mean"],
                "seed SD": s["val_loss_std"],
                "consecutive sub-layer cos": statistics.fmean(
                    r["sublayer_cos"]
                    for r in table
                    if r["variant"] == v.name and r["sublayer_cos"] is not None
                ),
                "paper OLMo-1B V2 loss": PAPER_V2_LOSS.get(v.name),
            }
        )
    return rows


def _verdict(comp: list[Any], effect: float | None, main_variant: str, ref: str) -> dict[str, Any]:
    """The ``verdict`` metric (and its reason when there is none)."""
    from iclr25_shared.stats import verdict

    if not comp:
        return {"verdict": None, "verdict_reason": "one variant or one seed: no paired comparison"}
    if effect is None:
        return {"verdict": None, "verdict_reason": f"the paper reports no {main_variant} vs {ref} difference"}
    return {"verdict": verdict(comp[0], effect)}


def _notes(plan: _Plan, main_variant: str, ref: str, effect: float | None) -> list[str]:
    """The results' notes: the declared primary, the secondary and exploratory rows, the protocol."""
    return [
        f"primary (declared before the run): {primary_name(main_variant, ref)}, paired by seed "
        f"({len(plan.seeds)} seeds); paper_effect = {effect if effect is None else f'{effect:+.3f}'} (OLMo-1B, 500B "
        "tokens, V2 eval loss, arXiv 2409.19606); the verdict reads the primary only",
        "secondary (Holm-adjusted among themselves): the primary variant at the earlier token counts, every other "
        "variant - reference at every token count; exploratory: mean consecutive sub-layer cos, variant - "
        "reference (the paper's Fig. 3 probe; lower = less collapse)",
        "Same seed = same initial attention/FFN/embedding weights and the same batches for every variant; "
        "differences are paired per seed; equal budget = equal steps and tokens (not equal: each variant's "
        "learning rate, tuned on its own).",
        "Learning rate per variant: best final validation loss, averaged over tuning seed(s) "
        + ", ".join(str(t) for t in plan.tune_seeds)
        + " (other validation windows), over the grid "
        + ", ".join(f"{lr:g}" for lr in plan.st.lrs)
        + ".",
        "consecutive sub-layer cos: median over held-out tokens of cos(h0^j, h0^(j+1)) between the inputs of "
        "consecutive sub-layers (attention and FFN), averaged over pairs.",
        "diagnostics: unigram / bigram cross-entropy of the validation tokens under add-one-smoothed counts of the "
        "training tokens; a model below the unigram level has learned context.",
        "paper (OLMo-1B, 500B tokens, V2 loss): residual 2.811, DHCx1 2.819, DHCx2 2.802, SHCx4 2.791, DHCx4 2.781.",
    ]


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """Tune each variant's learning rate, train it over the seeds; paired differences with 95 % intervals."""
    plan = _plan(cfg, ctx)
    chosen, grid_rows = _tune(plan)
    results = _train_reported(plan, chosen)
    table = per_seed(results, plan.checkpoints, plan.tokens_per_step)
    names = [v.name for v in plan.variants]
    comp, main_variant = comparisons(table, names, plan.checkpoints, plan.tokens_per_step)
    ref = names[0]
    effect = paper_effect(main_variant, ref)
    diag = _diagnostics(plan, results, ref)
    summary = summarise(results)
    rows = _loss_rows(plan.variants, summary, chosen, table)
    metrics: dict[str, Any] = {
        "primary": comp[0].name if comp else None,
        "paper_effect": effect,
        "diagnostics": diag,
        "summary": summary,
        "setting": {**dataclasses.asdict(plan.st), "tokens_per_run": plan.st.steps * plan.tokens_per_step},
        "chosen_lr": chosen,
        **_verdict(comp, effect, main_variant, ref),
    }
    notes = _notes(plan, main_variant, ref, effect)
    if ctx.writes:
        notes.append("plots: " + ", ".join(_plot_reproduce(ctx, results, names)))
    return Result(
        metrics=metrics,
        tables={
            "comparisons": [c.as_dict() for c in comp],
            "per_seed": table,
            "validation loss": rows,
            "lr grid": grid_rows,
        },
        timings={f"{r.variant} seed {r.seed}": r.seconds for r in results},
        notes=notes,
    )


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def per_seed(
    results: list[TrainResult], checkpoints: list[int], tokens_per_step: int
) -> list[dict[str, Any]]:
    """One row per (variant, seed): the chosen rate, the validation loss at every token count (the last is the
    final loss) and the mean consecutive sub-layer cosine. A diverged run's loss is null (``missing`` says so)."""
    out = []
    for r in results:
        row: dict[str, Any] = {"variant": r.variant, "seed": r.seed, "lr": r.lr}
        for step in checkpoints:
            row[f"val_loss@{step * tokens_per_step}"] = _finite(r.checkpoint_losses.get(step))
        row["final_val_loss"] = _finite(r.final_val_loss)
        row["sublayer_cos"] = (
            _finite(statistics.fmean(r.sublayer_similarity)) if r.sublayer_similarity else None
        )
        absent = [k for k, v in row.items() if v is None]
        row["missing"] = f"{', '.join(absent)}: not finite (the run diverged)" if absent else ""
        out.append(row)
    return out


def _pair(table: list[dict[str, Any]], a: str, b: str, key: str) -> tuple[list[float], list[float]]:
    """Per-seed values of ``key`` for variants ``a`` and ``b``, aligned by seed; seeds where either is null are
    left out (the row's ``n`` then says how many remain)."""
    va = {r["seed"]: r[key] for r in table if r["variant"] == a}
    vb = {r["seed"]: r[key] for r in table if r["variant"] == b}
    seeds = sorted(s for s in va if s in vb and va[s] is not None and vb[s] is not None)
    return [va[s] for s in seeds], [vb[s] for s in seeds]


def comparisons(
    table: list[dict[str, Any]], names: list[str], checkpoints: list[int], tokens_per_step: int
) -> tuple[list[Any], str]:
    """The primary (``PRIMARY_VARIANT`` − reference final loss, or the second variant's), secondary (Holm): the
    primary variant at earlier token counts and every other variant at every token count; exploratory: the
    sub-layer cosine of each variant − reference. Returns ``([], variant)`` with one variant or one seed."""
    from iclr25_shared.stats import compare

    ref = names[0]
    others = names[1:]
    if not others:
        return [], ref
    main = PRIMARY_VARIANT if PRIMARY_VARIANT in others else others[0]
    a, b = _pair(table, main, ref, "final_val_loss")
    if len(a) < 2:
        return [], main
    final = checkpoints[-1] if checkpoints else None
    secondary, exploratory = {}, {}
    for name in [main, *(o for o in others if o != main)]:
        for step in checkpoints:
            if name == main and step == final:
                continue
            tokens = step * tokens_per_step
            pair = _pair(table, name, ref, f"val_loss@{tokens}")
            if len(pair[0]) >= 2:
                secondary[f"{name} - {ref}, validation loss at {tokens} tokens"] = pair
        if name != main:
            pair = _pair(table, name, ref, "final_val_loss")
            if len(pair[0]) >= 2:
                secondary[primary_name(name, ref)] = pair
    for name in others:
        pair = _pair(table, name, ref, "sublayer_cos")
        if len(pair[0]) >= 2:
            exploratory[f"{name} - {ref}, mean consecutive sub-layer cos"] = pair
    # the last checkpoint is the end of training: its loss is the final one, already the primary / its own row
    secondary = {k: v for k, v in secondary.items() if not k.endswith(f"at {final * tokens_per_step} tokens")}
    return compare(
        primary=(primary_name(main, ref), a, b), secondary=secondary, exploratory=exploratory
    ), main


def ngram_cross_entropy(corpus: Any) -> dict[str, float | None]:
    """Cross-entropy (nats/token) of the validation tokens under add-one-smoothed unigram and bigram counts of the
    training tokens — what a model without / with one token of context reaches (bigram only for vocabularies of at
    most 4 096 tokens)."""
    v = corpus.vocab_size
    train, val = corpus.train, corpus.val
    uni = torch.bincount(train, minlength=v).double() + 1
    out: dict[str, float | None] = {
        "unigram_cross_entropy": float(-(uni / uni.sum()).log()[val].mean()),
        "bigram_cross_entropy": None,
    }
    if v <= 4096:
        big = torch.bincount(train[:-1] * v + train[1:], minlength=v * v).double().view(v, v) + 1
        logp = (big / big.sum(1, keepdim=True)).log()
        out["bigram_cross_entropy"] = float(-logp[val[:-1], val[1:]].mean())
    return out
