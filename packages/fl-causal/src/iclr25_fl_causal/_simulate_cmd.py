"""``simulate``: simulated long-format data (``simulated.csv`` in ``--out``) and its closed-form truths."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from iclr25_fl_causal._simulate import simulate, true_value
from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_fl_causal.cli import SimulateConfig

__all__ = ["simulate_cmd"]


def simulate_cmd(cfg: SimulateConfig, ctx: RunContext) -> Result:
    """Simulated long-format data (``simulated.csv`` in ``--out``) and its closed-form truths."""
    from iclr25_fl_causal._simulate import SimulationParams

    params = SimulationParams(eta0=-1.0) if cfg.death else SimulationParams()
    data = simulate(cfg.n, params, horizon=cfg.horizon, n_fine=cfg.n_fine, seed=cfg.seed)
    notes = []
    if ctx.writes:
        ctx.save_text("simulated.csv", data.frame.to_csv(index=False))
    else:
        notes.append("no --out given: simulated.csv was not written")
    metrics: dict[str, Any] = {"data": repr(data)}
    if not cfg.death:
        for a in (1, 0):
            metrics[f"E[Y^{a}] (closed form)"] = true_value(a, params, horizon=cfg.horizon, n_fine=cfg.n_fine)
    return Result(metrics=metrics, notes=notes)
