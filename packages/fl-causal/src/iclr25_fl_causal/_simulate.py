"""A simulation with a closed-form truth: an OU-type confounder with treatment switching feedback.

Our own design (the paper's Monte Carlo study, arXiv:2206.12525, does not give a data-generating process we could
reproduce): continuous-time treatment-confounder feedback whose effect under a static regime has a closed form.

On [0, τ] with n_fine Euler steps of size δ = τ/n_fine:

* L(0) ~ N(0, 1);  L_{m+1} = L_m + (−θ L_m + β A_m) δ + σ √δ Z_m.
* A(0) ~ Bernoulli(expit(a0 + a1 L_0)); then per step A switches 0→1 with probability expit(c0 + c1 L_m + log δ)
  and 1→0 with probability expit(d0 + d1 L_m + log δ) (≈ λδ with intensities λ = exp(c0 + c1 L), exp(d0 + d1 L):
  the Euler step of a jump process; the logistic form makes the pooled logistic treatment model exact on the
  finest grid).
* Optional death (hazard exp(eta0 + eta1 L)) and censoring (hazard exp(kappa0 + kappa1 L)) per step.
* Y = δ Σ_m (L_m + γ A_m) + ε, ε ~ N(0, sigma_y²), observed at τ for survivors.

Under A ≡ a and no death: E[Y^a] = (βa/θ)(τ − (1 − (1 − θδ)^M)/θ) + γ a τ, which tends to
(βa/θ)(τ − (1 − e^{−θτ})/θ) + γaτ as M → ∞ (τ=1, θ=β=1, γ=0.5: 0.8679 for a=1 and 0 for a=0).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from iclr25_fl_causal._data import LongitudinalData

__all__ = ["SimulationParams", "simulate", "true_value"]


def _expit(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimulationParams:
    """Parameters of the simulation (defaults: θ = β = 1, γ = 0.5, no death or censoring).

    ``eta0``/``kappa0`` = ``None`` switch death/censoring off. ``a1 = c1 = d1 = 0`` makes treatment randomised.
    """

    theta: float = 1.0
    beta: float = 1.0
    sigma: float = 1.0
    gamma: float = 0.5
    sigma_y: float = 1.0
    a0: float = 0.0
    a1: float = 1.0
    c0: float = 0.0
    c1: float = 1.0
    d0: float = 0.0
    d1: float = -1.0
    eta0: float | None = None
    eta1: float = 0.5
    kappa0: float | None = None
    kappa1: float = 0.5

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v)):
                raise ValueError(f"{f.name} must be a finite number, got {v!r}")
        if self.theta <= 0:
            raise ValueError(f"theta must be > 0 (mean reversion), got {self.theta!r}")
        if self.sigma < 0 or self.sigma_y < 0:
            raise ValueError("sigma and sigma_y must be >= 0")


def _check(n: int, horizon: float, n_fine: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if not isinstance(n_fine, int) or isinstance(n_fine, bool) or n_fine < 1:
        raise ValueError(f"n_fine must be a positive integer, got {n_fine!r}")
    if not (isinstance(horizon, (int, float)) and horizon > 0 and math.isfinite(horizon)):
        raise ValueError(f"horizon must be a positive finite number, got {horizon!r}")


def _paths(n, p, horizon, n_fine, rng, force=None):
    """Simulate n subjects; ``force`` = 0/1 sets A ≡ force (the intervention)."""
    dt = horizon / n_fine
    L = np.empty((n, n_fine + 1))
    A = np.empty((n, n_fine))
    L[:, 0] = rng.standard_normal(n)
    alive = np.ones(n, bool)
    uncens = np.ones(n, bool)
    death_step = np.full(n, -1)
    cens_step = np.full(n, -1)
    a = np.zeros(n)
    for m in range(n_fine):
        u = rng.random(n)
        if force is not None:
            a = np.full(n, float(force))
        elif m == 0:
            a = (u < _expit(p.a0 + p.a1 * L[:, 0])).astype(float)
        else:
            p_on = _expit(p.c0 + p.c1 * L[:, m] + math.log(dt))
            p_off = _expit(p.d0 + p.d1 * L[:, m] + math.log(dt))
            a = np.where(a == 0, (u < p_on).astype(float), (u >= p_off).astype(float))
        A[:, m] = a
        if p.kappa0 is not None and force is None:
            pc = -np.expm1(-np.exp(p.kappa0 + p.kappa1 * L[:, m]) * dt)
            c = (rng.random(n) < pc) & alive & uncens
            cens_step[c] = m
            uncens &= ~c
        if p.eta0 is not None:
            pd_ = -np.expm1(-np.exp(p.eta0 + p.eta1 * L[:, m]) * dt)
            d = (rng.random(n) < pd_) & alive & uncens
            death_step[d] = m
            alive &= ~d
        L[:, m + 1] = (
            L[:, m]
            + (-p.theta * L[:, m] + p.beta * a) * dt
            + p.sigma * math.sqrt(dt) * rng.standard_normal(n)
        )
    Y = dt * (L[:, :n_fine].sum(axis=1) + p.gamma * A.sum(axis=1)) + p.sigma_y * rng.standard_normal(n)
    return L, A, Y, death_step, cens_step


def simulate(
    n: int,
    params: SimulationParams | None = None,
    *,
    horizon: float = 1.0,
    n_fine: int = 200,
    seed: int | np.random.Generator = 0,
) -> LongitudinalData:
    """Simulate the process of the module docstring and return it in long format.

    Rows: one per fine step while at risk (``time = m δ``; columns ``L``, ``A``), and a last row at τ with the
    outcome ``Y`` for survivors, at the death time (``death = 1``), or the censoring step (``censor = 1``).

    Args:
        n: subjects. params: :class:`SimulationParams`. horizon: τ. n_fine: Euler steps M.
        seed: an int or a ``numpy.random.Generator``.

    Returns:
        :class:`LongitudinalData` with treatment ``A``, covariate ``L``, outcome ``Y``, ``death``, ``censor``.

    Raises:
        ValueError: non-positive n, n_fine or horizon.
    """
    _check(n, horizon, n_fine)
    p = params or SimulationParams()
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    L, A, Y, death_step, cens_step = _paths(n, p, horizon, n_fine, rng)
    dt = horizon / n_fine
    # Number of fine rows per subject: up to the censoring step (inclusive) or the death step (inclusive).
    last = np.full(n, n_fine - 1)
    last = np.where(death_step >= 0, death_step, last)
    last = np.where(cens_step >= 0, cens_step, last)
    counts = last + 1
    ids = np.repeat(np.arange(n), counts)
    steps = np.concatenate([np.arange(c) for c in counts])
    body = pd.DataFrame(
        {
            "id": ids,
            "time": steps * dt,
            "L": L[ids, steps],
            "A": A[ids, steps],
            "Y": np.nan,
            "death": 0,
            "censor": 0,
        }
    )
    censored = cens_step >= 0
    body.loc[censored[ids] & (steps == cens_step[ids]), "censor"] = 1
    ends = np.flatnonzero(~censored)
    dead = death_step[ends] >= 0
    tail = pd.DataFrame(
        {
            "id": ends,
            "time": np.where(dead, (death_step[ends] + 1) * dt, horizon),
            "L": L[ends, np.where(dead, death_step[ends] + 1, n_fine)],
            "A": A[ends, np.where(dead, death_step[ends], n_fine - 1)],
            "Y": np.where(dead, np.nan, Y[ends]),
            "death": dead.astype(int),
            "censor": 0,
        }
    )
    frame = pd.concat([body, tail], ignore_index=True).sort_values(["id", "time"], kind="stable")
    frame = frame.reset_index(drop=True)
    return LongitudinalData(
        frame,
        treatment="A",
        covariates=["L"],
        outcome="Y",
        death="death" if p.eta0 is not None else None,
        censor="censor" if p.kappa0 is not None else None,
        horizon=horizon,
    )


def true_value(
    a: int,
    params: SimulationParams | None = None,
    *,
    horizon: float = 1.0,
    n_fine: int = 200,
    estimand: str = "mean",
    n_mc: int = 1_000_000,
    seed: int = 12345,
) -> float:
    """The truth under A ≡ a: closed form (Euler-exact) for the mean without death, else Monte Carlo.

    ``estimand="mean"`` is E[Y^a 1{T_D^a > τ}] (cemetery 0); ``"risk"`` is P(T_D^a <= τ) (needs death on).
    The Monte Carlo truth simulates ``n_mc`` subjects under the intervention (in chunks).
    """
    _check(1, horizon, n_fine)
    if a not in (0, 1):
        raise ValueError(f"a must be 0 or 1, got {a!r}")
    p = params or SimulationParams()
    if estimand not in ("mean", "risk"):
        raise ValueError(f"estimand must be mean or risk, got {estimand!r}")
    if estimand == "risk" and p.eta0 is None:
        raise ValueError("estimand='risk' needs death (params.eta0 set)")
    if estimand == "mean" and p.eta0 is None:
        dt = horizon / n_fine
        decay = (1.0 - p.theta * dt) ** n_fine
        return (p.beta * a / p.theta) * (horizon - (1.0 - decay) / p.theta) + p.gamma * a * horizon
    rng = np.random.default_rng(seed)
    total, done = 0.0, 0
    chunk = 200_000
    while done < n_mc:
        m = min(chunk, n_mc - done)
        _, _, Y, death_step, _ = _paths(m, p, horizon, n_fine, rng, force=a)
        dead = death_step >= 0
        total += float(dead.sum()) if estimand == "risk" else float(np.where(dead, 0.0, Y).sum())
        done += m
    return total / n_mc
