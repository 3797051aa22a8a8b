"""``attribute``: Shapley values (or Banzhaf, leave-one-out) of the Fashion-MNIST contributors for one global
property of a DDPM, each coalition's model from the chosen retraining strategy."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_diffusion_shapley._experiment import (
    Setup,
    _Evaluator,
    _join,
    _planned,
    _properties,
    _same_model,
    _setup,
    _strategy,
)
from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_diffusion_shapley.cli import AttributeConfig

__all__ = ["attribute"]


def _coalition_strategy(cfg: AttributeConfig, ctx: RunContext, setup: Setup, n: int) -> Any:
    """The ``--method`` strategy, with the model on all contributors (and, for sparse-FT, the pruned and
    fine-tuned model) it starts from trained first."""
    full_model = None
    if cfg.method != "retrain":
        full = _strategy("retrain", cfg, setup, cfg.seed)
        ctx.log.info(f"training the model on all contributors ({cfg.retrain_steps} steps)")
        full_model = full.fit(np.ones(n, dtype=bool))
        _same_model(full_model, "model trained on all contributors")
    strategy = _strategy(cfg.method, cfg, setup, cfg.seed, full_model)
    if cfg.method == "sparse-ft":
        ctx.log.info(f"pruning ({cfg.pruning_ratio:.0%} of channels) and fine-tuning on all data")
        strategy.prepare()
        _same_model(strategy.base, "pruned and fine-tuned model")
    return strategy


def attribute(cfg: AttributeConfig, ctx: RunContext) -> Result:
    """Attribute one global property of a DDPM trained on Fashion-MNIST contributors to those contributors."""
    from iclr25_diffusion_shapley import _shapley as sh

    t_start = time.perf_counter()
    _join(ctx)
    setup = _setup(cfg, ctx, cfg.seed)
    n = setup.data.num_contributors
    props = _properties(cfg.property, setup)
    prop = next(iter(props))
    ctx.log.info(
        f"{n} contributors {setup.data.names}, {setup.data.counts().tolist()} images; property {prop}"
    )
    strategy = _coalition_strategy(cfg, ctx, setup, n)
    ev = _Evaluator(strategy, props, cfg, n)

    def estimate(g: Any) -> np.ndarray:
        if cfg.estimator == "exact":
            return sh.exact_shapley(g, n)
        if cfg.estimator == "kernel-shap":
            return sh.kernel_shap(g, n, cfg.kernel_samples, seed=cfg.seed).values
        if cfg.estimator == "banzhaf":
            return sh.banzhaf(g, n, max(cfg.kernel_samples, n + 1), seed=cfg.seed).values
        return sh.leave_one_out(g, n).values

    # every coalition the estimator needs, evaluated first as a job farm over the ranks (a loop in one process)
    ev.evaluate_all(
        _planned(estimate, n), progress=lambda it: ctx.progress(it, desc=f"{cfg.method} coalitions")
    )
    game = sh.CachedGame(ev.game_for(prop), n)
    phi = estimate(game)
    v0, v1 = game(np.zeros(n, dtype=bool)), game(np.ones(n, dtype=bool))
    rows = [
        {"contributor": name, "images": int(c), "attribution": float(p)}
        for name, c, p in zip(setup.data.names, setup.data.counts(), phi)
    ]
    ctx.save_array("attributions", phi)
    return Result(
        metrics={
            "property": prop,
            "method": cfg.method,
            "estimator": cfg.estimator,
            "v_empty": v0,
            "v_full": v1,
            "sum_attributions": float(np.sum(phi)),
            "coalitions_evaluated": game.calls,
            "train_seconds_per_coalition": ev.per_subset_train_seconds(),
        },
        tables={"attributions": rows},
        timings={"total": time.perf_counter() - t_start, "setup": getattr(strategy, "setup_seconds", 0.0)},
        notes=[
            f"v(empty) is the property of the untrained model; sum of attributions = v(N) - v(empty) = {v1 - v0:.4f}"
        ],
    )
