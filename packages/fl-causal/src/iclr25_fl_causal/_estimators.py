"""The three identification formulas on a partition, with their estimators (Ying, arXiv:2206.12525).

On a partition Δ = {0 = t_0 < ... < t_K = τ} with history H_k, binary treatment A_k, censoring C_{k+1} and death
D_{k+1} (see ``_data``), and a target V (the outcome at τ, with a cemetery value after death, or an indicator of
death in one interval), the discrete formulas whose limits (as the mesh → 0) identify the continuous-time
effect are:

* g-computation (iterated conditional expectations): Q_J = V; m_k(H_k, a) = E[Q̃_{k+1} | H_k, A_k = a, C_{k+1} = 0]
  with Q̃_{k+1} = V(death in k) if D_{k+1} = 1 else Q_{k+1}(H_{k+1}); Q_k = ∫ m_k(H_k, a) dG(a | H_k);
  ψ = E[Q_0].
* IPW: ψ = E[W V] with W = ∏_k dG(A_k | H_k)/dP(A_k | H_k) · 1{C_{k+1} = 0}/P(C_{k+1} = 0 | H_k, A_k),
  the product running to the end of follow-up (death stops it).
* doubly robust (sequential, Bang & Robins 2005): ψ = E[Q_0 + Σ_k W_k (Q̃_{k+1} − m_k(H_k, A_k))], with W_k the
  product up to and including interval k; consistent when, at each k, either the outcome regressions or the
  treatment and censoring models are right.

The cumulative risk P(T_D^G <= t_J) is estimated as a sum of per-interval probabilities P(death in interval j),
each with its own recursion, so the g-computation risk curve is non-decreasing by construction (zEpid #30/#32).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from iclr25_fl_causal._data import DiscreteData, LongitudinalData
from iclr25_fl_causal._glm import ConvergenceWarning, FittedModel, Model, design
from iclr25_fl_causal._regimes import Regime
from iclr25_shared.checks import check_choice, check_float, check_int, check_probability

__all__ = ["PositivityWarning", "Result", "doubly_robust", "g_computation", "ipw", "refine"]

_ESTIMATORS = ("gcomp", "ipw", "dr")
_ESTIMANDS = ("auto", "risk", "mean")

_INPUT_LABEL: contextvars.ContextVar[str | None] = contextvars.ContextVar("_INPUT_LABEL", default=None)


@contextlib.contextmanager
def inputs_named(label: str) -> Iterator[None]:
    """Within the block, an estimator's checks of its arguments and data (everything before the first fit: grid,
    estimand, formulas, positivity) raise :class:`~iclr25_shared.errors.InputError` prefixed by ``label``; errors
    of the fits themselves are unchanged. The CLI's boundary (bad user input exits 2, a failing fit 1); library
    calls outside the block raise ``ValueError`` as documented."""
    token = _INPUT_LABEL.set(label)
    try:
        yield
    finally:
        _INPUT_LABEL.reset(token)


def _checking() -> contextlib.AbstractContextManager[Any]:
    label = _INPUT_LABEL.get()
    if label is None:
        return contextlib.nullcontext()
    from iclr25_shared.inputs import validating

    return validating(label)


class PositivityWarning(UserWarning):
    """Some regime followers have a very small probability of the regime's treatment (large weights)."""


@dataclasses.dataclass(frozen=True)
class Result:
    """One estimate under one regime on one partition.

    Attributes:
        estimator: ``"gcomp"``, ``"ipw"`` or ``"dr"``. regime: the regime's name.
        estimand: ``"risk"`` (P(T_D^G <= τ)) or ``"mean"`` (E[Y^G(τ) 1{T_D^G > τ}] + cemetery·P(T_D^G <= τ)).
        estimate, se: point estimate and standard error at τ. ci: (low, high) Wald interval at ``level``.
        se_method: ``"bootstrap"`` (by subject) or ``"influence"`` (influence function, nuisances treated as
            known). grid: the partition points. n: subjects.
        curve: for the risk, a frame (time, estimate, se, low, high) at every grid point, else ``None``.
        diagnostics: weights (max, mean, effective sample size); regime followers per interval
            (``followers_per_interval``) and along the path (``followers_through_interval``: at risk at t_k and
            on the regime in every interval 0..k; ``min_followers_through``); smallest propensity of the regime's
            treatment among followers, truncated weights, bootstrap failures.
    """

    estimator: str
    regime: str
    estimand: str
    estimate: float
    se: float
    ci: tuple[float, float]
    se_method: str
    level: float
    grid: np.ndarray
    n: int
    curve: pd.DataFrame | None
    diagnostics: dict[str, Any]

    @property
    def width(self) -> float:
        """Largest interval width of the partition."""
        return float(np.max(np.diff(self.grid)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "estimator": self.estimator,
            "regime": self.regime,
            "estimand": self.estimand,
            "estimate": self.estimate,
            "se": self.se,
            "ci_low": self.ci[0],
            "ci_high": self.ci[1],
            "se_method": self.se_method,
            "level": self.level,
            "intervals": len(self.grid) - 1,
            "width": self.width,
            "n": self.n,
            "diagnostics": self.diagnostics,
        }

    def __str__(self) -> str:
        return (
            f"{self.estimator} {self.regime} {self.estimand}: {self.estimate:.4f} (SE {self.se:.4f}, "
            f"{self.level:.0%} CI {self.ci[0]:.4f} to {self.ci[1]:.4f}; {len(self.grid) - 1} intervals)"
        )


@dataclasses.dataclass
class _Targets:
    """T targets V_t: horizon index J_t, value on death in interval k, value when alive at t_{J_t}."""

    end: np.ndarray  # (T,) J_t
    on_death: np.ndarray  # (T, K)
    alive: np.ndarray  # (n, T)
    kind: str  # "fractional" or "continuous"
    increments: bool = False  # risk targets are P(death in interval j): the curve is their cumulative sum


class _Problem:
    """Everything that does not change across bootstrap replicates: designs, regime, targets."""

    def __init__(
        self,
        dd: DiscreteData,
        regime: Regime,
        *,
        estimand: str,
        cemetery: float,
        outcome_model: Model | None,
        treatment_model: Model | None,
        censoring_model: Model | None,
        outcome_family: str,
        risk_method: str = "increments",
        min_followers: int = 1,
        positivity: str = "raise",
    ) -> None:
        self.dd = dd
        self.regime = regime
        self.estimand = estimand
        K, n = dd.num_intervals, dd.n
        self.rows_i, self.rows_k = dd.rows
        obs = dd.frame()
        self.p1 = np.zeros((n, K))
        if regime.incremental is None:  # an incremental shift's probabilities come with the treatment model
            self.p1[self.rows_i, self.rows_k] = regime.probability(obs)
        a = dd.treatment
        self.g_obs = np.where(a == 1, self.p1, 1.0 - self.p1)  # dG(A_k | H_k) of the observed treatment
        if (
            regime.natural or regime.incremental is not None
        ):  # dG/dP = 1, or set per fit in _run (support > 0)
            self.g_obs = np.ones((n, K))
        self.g_obs[~dd.at_risk] = 0.0
        follows = (self.g_obs > 0) & dd.at_risk
        self.followers = follows.sum(axis=0)
        # Positivity along the whole path: subjects at risk at t_k whose treatment followed the regime in every
        # interval 0..k (the support of the cumulative weight W_k; Ying, arXiv:2206.12525, positivity of G).
        self.through = np.logical_and.accumulate(follows | ~dd.at_risk, axis=1) & follows
        self.followers_through = self.through.sum(axis=0)
        at_risk = dd.at_risk.sum(axis=0)
        short = np.flatnonzero((self.followers_through < min_followers) & (at_risk > 0))
        if len(short):
            k = int(short[0])
            per = int(self.followers[k])
            span = f"interval {k} [{dd.grid[k]:g}, {dd.grid[k + 1]:g})"
            if per == 0:
                raise ValueError(
                    f"positivity: regime {regime.name!r} has no observed support in {span}: none of the "
                    f"{int(at_risk[k])} subjects at risk has the regime's treatment, so the effect is not "
                    "identified from these data"
                )
            msg = (
                f"positivity: regime {regime.name!r} is followed through every interval up to {span} by "
                f"{int(self.followers_through[k])} of the {int(at_risk[k])} subjects at risk there (fewer than "
                f"min_followers={min_followers}), although {per} have the regime's treatment in that interval "
                "alone"
            )
            if positivity == "raise":
                raise ValueError(msg + "; pass positivity='warn' to estimate anyway")
            warnings.warn(msg, PositivityWarning, stacklevel=4)
        # Targets.
        if estimand == "risk" and risk_method == "endpoint":  # one recursion for 1{T_D <= τ}: K regressions
            self.targets = _Targets(
                end=np.array([K]), on_death=np.ones((1, K)), alive=np.zeros((n, 1)), kind="fractional"
            )
        elif estimand == "risk":
            increments = risk_method == "increments"
            self.targets = _Targets(
                end=np.arange(1, K + 1),
                on_death=np.eye(K) if increments else np.tril(np.ones((K, K))),
                alive=np.zeros((n, K)),
                kind="fractional",
                increments=increments,
            )
        else:
            y = dd.outcome
            vals = np.concatenate([y[np.isfinite(y)], [cemetery]])
            binary = bool(np.isin(vals, [0.0, 1.0]).all())
            kind = {"auto": "fractional" if binary else "continuous", "binomial": "fractional"}.get(
                outcome_family, "continuous"
            )
            if kind == "fractional" and ((vals < 0) | (vals > 1)).any():
                raise ValueError("outcome_family='binomial' needs outcome and cemetery values in [0, 1]")
            self.targets = _Targets(
                end=np.array([K]),
                on_death=np.full((1, K), float(cemetery)),
                alive=np.nan_to_num(y, nan=0.0)[:, None],
                kind=kind,
            )
        # Designs, evaluated once on the observed frame and on the counterfactual frames.
        self.outcome_model, self.treatment_model, self.censoring_model = (
            outcome_model,
            treatment_model,
            censoring_model,
        )
        self.X_out: dict[str, dict[int, np.ndarray]] = {}
        if outcome_model is not None:
            frames = {"obs": obs}
            if regime.natural:
                pass
            elif regime.deterministic:
                d = np.where(dd.at_risk, self.p1, np.nan)
                frames["regime"] = dd.frame(past=d, current=d)
            else:
                frames["a1"] = dd.frame(current=np.ones((n, K)))
                frames["a0"] = dd.frame(current=np.zeros((n, K)))
            self.X_out = self._designs(outcome_model, frames)
        self.X_trt = (
            self._designs(treatment_model, {"obs": obs})["obs"] if treatment_model is not None else None
        )
        self.X_cen = None
        if censoring_model is not None and dd.has_censoring:
            self.X_cen = self._designs(censoring_model, {"obs": obs})["obs"]

    def _designs(self, model: Model, frames: dict[str, pd.DataFrame]) -> dict[str, dict[int, np.ndarray]]:
        """name → interval → design rows (at-risk subjects of that interval, in subject order)."""
        K = self.dd.num_intervals
        names = list(frames)
        out: dict[str, dict[int, np.ndarray]] = {nm: {} for nm in names}
        if not model.per_interval:
            mats = design(model.formula_for(0, K), [frames[nm] for nm in names])
            bounds = np.searchsorted(self.rows_k, np.arange(K + 1))  # rows are ordered by interval
            for nm, X in zip(names, mats):
                for k in range(K):
                    out[nm][k] = X[bounds[k] : bounds[k + 1]]
            return out
        for k in range(K):
            sel = self.rows_k == k
            if not sel.any():
                continue
            mats = design(model.formula_for(k, K), [frames[nm][sel].reset_index(drop=True) for nm in names])
            for nm, X in zip(names, mats):
                out[nm][k] = X
        return out


def _pooled(per_k: dict[int, np.ndarray], ks: Sequence[int]) -> np.ndarray:
    return np.concatenate([per_k[k] for k in ks], axis=0)


def _nuisance_probs(
    pb: _Problem, w: np.ndarray, blocks: list[dict[str, Any]] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n, K) fitted P(observed A_k | H_k), P(uncensored in k | H_k, A_k) and P(A_k = 1 | H_k), with weights w.

    With ``blocks`` (a list), every fit is appended as {kind, fit, X, y, pos} (``pos``: its person-interval rows)."""
    dd = pb.dd
    n, K = dd.n, dd.num_intervals
    ri, rk = pb.rows_i, pb.rows_k
    ks = [k for k in range(K) if (rk == k).any()]
    pi = np.ones((n, K))
    p_one = np.ones((n, K))
    a = dd.treatment[ri, rk]
    tm = pb.treatment_model
    if tm is not None and not pb.regime.natural:
        lag = np.concatenate([np.zeros((n, 1)), np.nan_to_num(dd.treatment[:, :-1])], axis=1)[ri, rk]
        free = lag == 0 if tm.absorbing else np.ones(len(ri), bool)  # rows whose treatment is modelled
        p_hat = np.ones(len(ri))
        if tm.per_interval:
            for k in ks:
                sel = rk == k
                f = free[sel]
                if f.any():
                    fit = FittedModel(tm, pb.X_trt[k][f], a[sel][f], w[ri[sel]][f], kind="binary")
                    p_hat[np.flatnonzero(sel)[f]] = fit.predict(pb.X_trt[k][f])
                    if blocks is not None:
                        pos = np.flatnonzero(sel)[f]
                        blocks.append(
                            {"kind": "treatment", "fit": fit, "X": pb.X_trt[k][f], "y": a[pos], "pos": pos}
                        )
        else:
            X = _pooled(pb.X_trt, ks)
            fit = FittedModel(tm, X[free], a[free], w[ri[free]], kind="binary")
            p_hat[free] = fit.predict(X[free])
            if blocks is not None:
                pos = np.flatnonzero(free)
                blocks.append({"kind": "treatment", "fit": fit, "X": X[free], "y": a[free], "pos": pos})
        pi[ri, rk] = np.where(a == 1, p_hat, 1.0 - p_hat)
        p_one[ri, rk] = p_hat
    s = np.ones((n, K))
    if pb.X_cen is not None:
        u = 1.0 - dd.censored[ri, rk].astype(float)
        if pb.censoring_model.per_interval:
            s_hat = np.empty(len(ri))
            for k in ks:
                sel = rk == k
                fit = FittedModel(pb.censoring_model, pb.X_cen[k], u[sel], w[ri[sel]], kind="binary")
                s_hat[sel] = fit.predict(pb.X_cen[k])
                if blocks is not None:
                    pos = np.flatnonzero(sel)
                    blocks.append(
                        {"kind": "censoring", "fit": fit, "X": pb.X_cen[k], "y": u[sel], "pos": pos}
                    )
        else:
            X = _pooled(pb.X_cen, ks)
            fit = FittedModel(pb.censoring_model, X, u, w[ri], kind="binary")
            s_hat = fit.predict(X)
            if blocks is not None:
                blocks.append({"kind": "censoring", "fit": fit, "X": X, "y": u, "pos": np.arange(len(ri))})
        s[ri, rk] = s_hat
    return pi, s, p_one


def _weights(
    pb: _Problem, pi: np.ndarray, s: np.ndarray, truncate: float | None, g_obs: np.ndarray | None = None
) -> tuple[np.ndarray, int]:
    """(n, K) cumulative weights W_k through treatment and censoring of interval k (0 once off-regime/censored)."""
    dd = pb.dd
    with np.errstate(divide="ignore", invalid="ignore"):
        g = pb.g_obs if g_obs is None else g_obs
        step = np.where(dd.at_risk, g / pi * (~dd.censored) / s, 0.0)
    step = np.nan_to_num(step, nan=0.0, posinf=0.0)
    W = np.cumprod(step, axis=1)
    clipped = 0
    if truncate is not None:
        pos = W[(W > 0) & dd.at_risk]
        if len(pos):
            cap = float(np.quantile(pos, truncate))
            clipped = int((cap < W).sum())
            W = np.minimum(W, cap)
    return W, clipped


def _ice(
    pb: _Problem, w: np.ndarray, need_dr: bool, p1: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray | None, dict]:
    """Iterated conditional expectations for every target.

    Returns ψ_gcomp (T,), and when ``need_dr`` the pieces of the DR estimating function: Q_0 (n, T) and, per
    interval, the residual Q̃_{k+1} − m_k(H_k, A_k) (n, K, T) (0 where not at risk or censored).
    """
    dd, tg = pb.dd, pb.targets
    n, K = dd.n, dd.num_intervals
    T = len(tg.end)
    Q_next = np.zeros((n, T))  # Q_{k+1}(H_{k+1}) for subjects at risk at k+1
    resid = np.zeros((n, K, T)) if need_dr else None
    Q = np.zeros((n, T))
    for k in range(K - 1, -1, -1):
        active = np.flatnonzero(tg.end > k)
        ids = np.flatnonzero(dd.at_risk[:, k])
        if len(ids) == 0:
            Q_next = np.zeros((n, T))
            continue
        unc = ~dd.censored[ids, k]
        dead = dd.death[ids, k]
        y = np.where(
            dead[:, None],
            tg.on_death[active, k][None, :],
            np.where((tg.end[active] == k + 1)[None, :], tg.alive[ids][:, active], Q_next[ids][:, active]),
        )
        X_obs = pb.X_out["obs"][k]
        fit = _fit_outcome(pb, X_obs[unc], y[unc], w[ids][unc])
        if pb.regime.natural:
            q = fit(X_obs)
        elif pb.regime.deterministic:
            q = fit(pb.X_out["regime"][k])
        else:
            pk = (pb.p1 if p1 is None else p1)[ids, k][:, None]
            q = pk * fit(pb.X_out["a1"][k]) + (1.0 - pk) * fit(pb.X_out["a0"][k])
        Q = np.zeros((n, T))
        Q[np.ix_(ids, active)] = q
        if need_dr:
            m_obs = fit(X_obs)
            r = np.where(unc[:, None], y - m_obs, 0.0)
            resid[np.ix_(ids, [k], active)] = r[:, None, :]
        Q_next = Q
    psi = (w[:, None] * Q).sum(axis=0) / w.sum()
    return psi, Q, {"resid": resid}


def _fit_outcome(pb: _Problem, X: np.ndarray, y: np.ndarray, w: np.ndarray):
    kind = pb.targets.kind
    if pb.outcome_model.estimator is None:
        fit = FittedModel(pb.outcome_model, X, y, w, kind=kind)
        return fit.predict
    fits = [FittedModel(pb.outcome_model, X, y[:, t], w, kind=kind) for t in range(y.shape[1])]
    return lambda Z: np.stack([f.predict(Z) for f in fits], axis=1)


def _ipw_parts(pb: _Problem, W: np.ndarray, w: np.ndarray, stabilized: bool) -> tuple[np.ndarray, np.ndarray]:
    """IPW estimate per target (T,) and influence values (n, T)."""
    dd, tg = pb.dd, pb.targets
    n, K = dd.n, dd.num_intervals
    sw = w.sum()
    if pb.estimand == "risk":
        Wd = W * dd.death  # weight at the death interval
        if not stabilized:
            F = (w[:, None] * Wd).sum(axis=0) / sw
            return F, Wd - F[None, :]
        # Weighted product-limit (Hájek): h_j = Σ W D / Σ W over subjects in interval j.
        denom_i = np.where(dd.at_risk, W, 0.0)
        num = (w[:, None] * Wd).sum(axis=0)
        den = (w[:, None] * denom_i).sum(axis=0)
        risk_set = (w[:, None] * dd.at_risk).sum(axis=0)
        empty = np.flatnonzero((den <= 0) & (risk_set > 0))
        if len(empty):
            k = int(empty[0])
            raise ValueError(
                f"IPW: no subject at risk in interval {k} [{dd.grid[k]:g}, {dd.grid[k + 1]:g}) follows the "
                "regime through every earlier interval (all weights are 0), so its hazard is undefined"
            )
        h = np.divide(num, den, out=np.zeros(K), where=den > 0)
        S = np.cumprod(1.0 - h)
        S_prev = np.r_[1.0, S[:-1]]
        F = S_prev - S
        # Influence of each increment F_j = S_{j-1} h_j through the hazards (weights treated as known).
        mean_den = den / sw
        phi_h = np.divide(
            Wd - h[None, :] * denom_i, mean_den[None, :], out=np.zeros((n, K)), where=mean_den > 0
        )
        with np.errstate(divide="ignore", invalid="ignore"):
            dlogS = np.where(h < 1, -phi_h / (1.0 - h)[None, :], 0.0)
        cum = np.cumsum(dlogS, axis=1)  # d log S_j
        phi_S = S[None, :] * cum
        phi_Sprev = np.concatenate([np.zeros((n, 1)), phi_S[:, :-1]], axis=1)
        return F, phi_Sprev - phi_S
    # Mean of V at τ: weight at the end of follow-up (death interval or last interval).
    dead_any = dd.death.any(axis=1)
    k_death = np.argmax(dd.death, axis=1)
    W_end = np.where(dead_any, W[np.arange(n), k_death], W[:, K - 1] * (~dd.censored[:, K - 1]))
    W_end = np.where(dead_any | dd.at_risk[:, K - 1], W_end, 0.0)
    V = np.where(dead_any, tg.on_death[0, k_death], tg.alive[:, 0])
    if not stabilized:
        psi = float((w * W_end * V).sum() / sw)
        return np.array([psi]), (W_end * V - psi)[:, None]
    mean_w = float((w * W_end).sum() / sw)
    if mean_w <= 0:
        raise ValueError("no subject follows the regime to the end of follow-up; IPW is undefined")
    psi = float((w * W_end * V).sum() / (w * W_end).sum())
    return np.array([psi]), (W_end * (V - psi) / mean_w)[:, None]


def _ipw_sandwich(pb: _Problem, stabilized: bool) -> np.ndarray:
    """Influence values (n, T) of IPW with the treatment and censoring models' estimation taken into account.

    ψ̂ = Ψ(P_n, θ̂) with θ̂ the GLM coefficients (stacked estimating equations, M-estimation sandwich):
    IF_i = IF_i(θ known) + (∂Ψ/∂θ) · n I(θ̂)^{-1} S_i(θ̂), with S_i the subject's score summed over its
    person-intervals and I the observed information of each fit; ∂Ψ/∂θ by central differences of the weighting
    functional (weights recomputed, nothing refitted).
    """
    from iclr25_fl_causal._glm import _inverse_link

    dd = pb.dd
    n = dd.n
    ones = np.ones(n)
    blocks: list[dict[str, Any]] = []
    pi, s, _ = _nuisance_probs(pb, ones, blocks)
    W, _ = _weights(pb, pi, s, None)
    psi, phi = _ipw_parts(pb, W, ones, stabilized)
    ri, rk = pb.rows_i, pb.rows_k
    a_rows = dd.treatment[ri, rk]
    out = phi.copy()
    for b in blocks:
        fit, X, y, pos = b["fit"], b["X"], b["y"], b["pos"]
        if fit.estimator is not None or fit.beta is None or fit.model.penalty > 0:
            raise ValueError(
                "se='sandwich' needs unpenalised GLM treatment and censoring models (no scikit-learn estimator, "
                "penalty=0); use se='bootstrap'"
            )
        beta, link = fit.beta, fit.link
        mu, dmu = _inverse_link(X @ beta, link)
        mu = np.clip(mu, 1e-12, 1 - 1e-12)
        score_rows = X * ((y - mu) * dmu / (mu * (1.0 - mu)))[:, None]
        info = X.T @ (X * (dmu**2 / (mu * (1.0 - mu)))[:, None])
        S = np.zeros((n, X.shape[1]))
        np.add.at(S, ri[pos], score_rows)
        infl_theta = n * S @ np.linalg.pinv(info, hermitian=True)  # (n, p): n I^{-1} S_i
        grad = np.zeros((len(psi), X.shape[1]))
        for j in range(X.shape[1]):
            h = 1e-5 * max(1.0, abs(beta[j]))
            vals = []
            for sign in (1.0, -1.0):
                bj = beta.copy()
                bj[j] += sign * h
                m = _inverse_link(X @ bj, link)[0]
                pi2, s2 = pi.copy(), s.copy()
                if b["kind"] == "treatment":
                    pi2[ri[pos], rk[pos]] = np.where(a_rows[pos] == 1, m, 1.0 - m)
                else:
                    s2[ri[pos], rk[pos]] = m
                vals.append(_ipw_parts(pb, _weights(pb, pi2, s2, None)[0], ones, stabilized)[0])
            grad[:, j] = (vals[0] - vals[1]) / (2 * h)
        out += infl_theta @ grad.T
    return out


def _final_weights(pb: _Problem, W: np.ndarray) -> np.ndarray:
    """Each subject's weight at the end of follow-up (death or τ; 0 if censored or off-regime)."""
    dd = pb.dd
    n, K = dd.n, dd.num_intervals
    dead_any = dd.death.any(axis=1)
    k_death = np.argmax(dd.death, axis=1)
    alive_end = dd.at_risk[:, K - 1] & ~dd.censored[:, K - 1] & ~dd.death[:, K - 1]
    return np.where(dead_any, W[np.arange(n), k_death], np.where(alive_end, W[:, K - 1], 0.0))


def _run(pb: _Problem, w: np.ndarray, estimator: str, stabilized: bool, truncate: float | None):
    """Per-target estimates (T,) and influence values (n, T) or None, plus diagnostics."""
    diag: dict[str, Any] = {}
    p1 = g_obs = None
    if pb.regime.incremental is not None:  # G depends on the fitted propensity: P_G(1) = δp / (δp + 1 − p)
        pi, s, p_one = _nuisance_probs(pb, w)
        delta = pb.regime.incremental
        p1 = delta * p_one / (delta * p_one + 1.0 - p_one)
        g_obs = np.where(pb.dd.treatment == 1, p1, 1.0 - p1)
        g_obs[~pb.dd.at_risk] = 0.0
    if estimator == "gcomp":
        psi, _, _ = _ice(pb, w, need_dr=False, p1=p1)
        return psi, None, diag
    if g_obs is None:
        pi, s, _ = _nuisance_probs(pb, w)
    W, clipped = _weights(pb, pi, s, truncate, g_obs)
    diag["truncated_weights"] = clipped
    diag["_W"], diag["_pi"] = W, pi
    if estimator == "ipw":
        psi, phi = _ipw_parts(pb, W, w, stabilized)
        if pb.estimand == "risk" and not pb.targets.increments:
            psi, phi = np.cumsum(psi), np.cumsum(phi, axis=1)
        return psi, phi, diag
    _psi_g, Q0, extra = _ice(pb, w, need_dr=True, p1=p1)
    aug = np.einsum("nk,nkt->nt", W, extra["resid"])
    phi_full = Q0 + aug
    psi = (w[:, None] * phi_full).sum(axis=0) / w.sum()
    return psi, phi_full - psi[None, :], diag


def _as_discrete(data: LongitudinalData | DiscreteData, grid: Any) -> DiscreteData:
    if isinstance(data, DiscreteData):
        if grid is not None:
            raise ValueError("grid must be None when the data are already discretised")
        return data
    if not isinstance(data, LongitudinalData):
        raise TypeError(f"data must be LongitudinalData or DiscreteData, got {type(data).__name__}")
    if grid is None:
        raise ValueError("grid is required: a width dividing the horizon, or grid points from 0 to τ")
    return data.discretise(grid)


def _check_common(regime: Any, se: str, n_boot: int, level: float, truncate: float | None) -> Regime:
    if isinstance(regime, str):
        regime = Regime.parse(regime)
    if not isinstance(regime, Regime):
        raise TypeError(f"regime must be a Regime or a string such as 'always'; got {type(regime).__name__}")
    check_choice("se", se, ("bootstrap", "influence", "sandwich", "none"))
    check_int("n_boot", n_boot, low=2)
    check_probability("level", level, open_low=True, open_high=True)
    if truncate is not None:
        check_float("truncate", truncate, low=0.5, high=1.0, low_inclusive=False, high_inclusive=False)
    return regime


def _estimate(
    estimator: str,
    data: LongitudinalData | DiscreteData,
    regime: Regime | str,
    *,
    grid: Any,
    outcome_model: Any = None,
    treatment_model: Any = None,
    censoring_model: Any = None,
    estimand: str = "auto",
    cemetery: float = 0.0,
    outcome_family: str = "auto",
    stabilized: bool = True,
    truncate: float | None = None,
    se: str,
    n_boot: int = 200,
    level: float = 0.95,
    seed: int = 0,
    positivity_bound: float = 0.01,
    risk_method: str = "increments",
    min_followers: int = 1,
    positivity: str = "raise",
    quiet: bool = True,
) -> Result:
    with _checking():  # the arguments and data, before any fit (the CLI's bad-input boundary)
        regime = _check_common(regime, se, n_boot, level, truncate)
        min_followers = check_int("min_followers", min_followers, low=1)
        check_choice("positivity", positivity, ("raise", "warn"))
        check_choice("risk_method", risk_method, ("increments", "direct", "endpoint"))
        check_choice("estimand", estimand, _ESTIMANDS)
        check_choice("outcome_family", outcome_family, ("auto", "gaussian", "binomial"))
        cemetery = check_float("cemetery", cemetery)
        positivity_bound = check_probability("positivity_bound", positivity_bound)
        dd = _as_discrete(data, grid)
        has_outcome = bool(np.isfinite(dd.outcome).any())
        if estimand == "auto":
            estimand = "mean" if has_outcome else "risk"
        if estimand == "mean" and not has_outcome:
            raise ValueError("estimand 'mean' needs an outcome column; use estimand='risk' for survival")
        if estimand == "risk" and not dd.death.any():
            raise ValueError("estimand 'risk' needs deaths in the data (a death column with at least one 1)")
        if se == "sandwich" and (
            estimator != "ipw" or regime.incremental is not None or truncate is not None
        ):
            raise ValueError(
                "se='sandwich' is implemented for IPW with a static, dynamic or fixed stochastic regime and no weight "
                "truncation; use se='bootstrap'"
            )
        if se == "influence" and estimator == "gcomp":
            raise ValueError(
                "se='influence' is not valid for g-computation (its variance depends on the outcome regressions' "
                "estimation); use se='bootstrap'"
            )
        om = Model.coerce(outcome_model, "outcome_model") if estimator in ("gcomp", "dr") else None
        tm = None
        if (estimator in ("ipw", "dr") or regime.incremental is not None) and not regime.natural:
            if treatment_model is None:
                raise ValueError(f"treatment_model is required for {estimator} (e.g. 'L + A_lag')")
            tm = Model.coerce(treatment_model, "treatment_model")
            if tm.absorbing:
                lag = np.concatenate([np.zeros((dd.n, 1)), dd.treatment[:, :-1]], axis=1)
                back = dd.at_risk & (lag == 1) & (dd.treatment == 0)
                if back.any():
                    bad = dd.ids[np.flatnonzero(back.any(axis=1))[:5]].tolist()
                    raise ValueError(
                        f"treatment_model is absorbing but the treatment goes from 1 back to 0 in {int(back.sum())} "
                        f"person-intervals (subjects {bad}); use Model(..., absorbing=False) (CLI: --no-absorbing)"
                    )
        cm = None
        if estimator in ("ipw", "dr") and dd.has_censoring:
            if censoring_model is None:
                raise ValueError(
                    "the data are censored: censoring_model is required for IPW and DR (e.g. 'L + A')"
                )
            cm = Model.coerce(censoring_model, "censoring_model")
        pb = _Problem(
            dd,
            regime,
            estimand=estimand,
            cemetery=cemetery,
            outcome_model=om,
            treatment_model=tm,
            censoring_model=cm,
            outcome_family=outcome_family,
            risk_method=risk_method,
            min_followers=min_followers,
            positivity=positivity,
        )
    n = dd.n
    ones = np.ones(n)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        psi, phi, diag = _run(pb, ones, estimator, stabilized, truncate)
    nonconverged = 0
    for wmsg in caught:
        if issubclass(wmsg.category, ConvergenceWarning):
            nonconverged += 1
        else:
            warnings.warn_explicit(wmsg.message, wmsg.category, wmsg.filename, wmsg.lineno)
    if nonconverged:
        warnings.warn(
            f"{nonconverged} nuisance regression(s) did not converge (sparse events or separation: fitted "
            "probabilities at 0 or 1); the estimate uses their last iterate. A coarser grid or smaller models help",
            ConvergenceWarning,
            stacklevel=3,
        )
    diagnostics: dict[str, Any] = {
        "followers_per_interval": pb.followers.tolist(),
        "followers_through_interval": pb.followers_through.tolist(),
        "min_followers_through": int(pb.followers_through[dd.at_risk.sum(axis=0) > 0].min()),
        "nonconverged_fits": nonconverged,
    }
    if "_W" in diag:
        W, pi = diag.pop("_W"), diag.pop("_pi")
        Wf = _final_weights(pb, W)
        foll = (pb.g_obs > 0) & dd.at_risk
        g_treat = np.where(foll, pi, np.inf)
        min_p = float(g_treat.min()) if foll.any() else float("nan")
        diagnostics.update(
            max_weight=float(Wf.max()),
            mean_weight=float(Wf.mean()),
            mean_weight_se=float(Wf.std(ddof=1) / math.sqrt(n)),
            effective_sample_size=float(Wf.sum() ** 2 / max((Wf**2).sum(), 1e-300)),
            min_propensity=min_p,
            truncated_weights=diag["truncated_weights"],
        )
        if pb.regime.deterministic and tm is not None and min_p < positivity_bound:
            count = int((foll & (pi < positivity_bound)).sum())
            warnings.warn(
                f"positivity: {count} regime-following person-intervals have a fitted probability of the "
                f"regime's treatment below {positivity_bound} (smallest {min_p:.2g}); max weight "
                f"{diagnostics['max_weight']:.3g}. Consider truncate=0.99 or a coarser model",
                PositivityWarning,
                stacklevel=3,
            )
    # Standard errors.
    if se in ("influence", "sandwich"):
        if phi is None:  # pragma: no cover - guarded above
            raise ValueError("no influence function for this estimator")
        infl = phi if se == "influence" else _ipw_sandwich(pb, stabilized)
        if estimand == "risk":
            cum = np.cumsum(infl, axis=1) if pb.targets.increments else infl
            se_curve = np.sqrt(cum.var(axis=0, ddof=1) / n)
            se_end = float(se_curve[-1])
        else:
            se_curve, se_end = None, float(np.sqrt(infl[:, 0].var(ddof=1) / n))
    elif se == "bootstrap":
        rng = np.random.default_rng(seed)
        reps = []
        failures = 0
        it = range(n_boot)
        if not quiet:
            from iclr25_shared.cli import progress

            it = progress(it, total=n_boot, desc=f"bootstrap {estimator}")
        for _ in it:
            wb = rng.multinomial(n, np.full(n, 1.0 / n)).astype(float)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    reps.append(_run(pb, wb, estimator, stabilized, truncate)[0])
            except (ValueError, np.linalg.LinAlgError):
                failures += 1
        if len(reps) < 2:
            raise RuntimeError(f"bootstrap failed in {failures} of {n_boot} replicates")
        R = np.array(reps)
        diagnostics["bootstrap_replicates"] = len(reps)
        diagnostics["bootstrap_failures"] = failures
        if estimand == "risk":
            cumR = np.cumsum(R, axis=1) if pb.targets.increments else R
            se_curve = cumR.std(axis=0, ddof=1)
            se_end = float(se_curve[-1])
        else:
            se_curve = None
            se_end = float(R[:, 0].std(ddof=1))
    else:
        se_curve, se_end = (np.full(len(psi), np.nan) if estimand == "risk" else None), float("nan")
    z = float(stats.norm.ppf(0.5 + level / 2))
    curve = None
    if estimand == "risk" and len(pb.targets.end) == 1 and dd.num_intervals > 1:  # risk_method="endpoint"
        est = float(psi[0])
    elif estimand == "risk":
        risk = np.cumsum(psi) if pb.targets.increments else psi
        est = float(risk[-1])
        curve = pd.DataFrame(
            {
                "time": dd.grid,
                "estimate": np.r_[0.0, risk],
                "se": np.r_[0.0, se_curve],
                "low": np.r_[0.0, risk - z * se_curve],
                "high": np.r_[0.0, risk + z * se_curve],
            }
        )
    else:
        est = float(psi[0])
    return Result(
        estimator=estimator,
        regime=regime.name,
        estimand=estimand,
        estimate=est,
        se=se_end,
        ci=(est - z * se_end, est + z * se_end),
        se_method=se,
        level=level,
        grid=dd.grid,
        n=n,
        curve=curve,
        diagnostics=diagnostics,
    )


_COMMON_DOC = """
    Args:
        data: :class:`LongitudinalData` (discretised on ``grid``) or already discretised :class:`DiscreteData`.
        regime: a :class:`Regime` or ``"always"``, ``"never"``, ``"natural"``, ``"threshold:VAR<CUT"``,
            ``"random:P"``, ``"incremental:DELTA"``.
        grid: a width dividing the horizon, or grid points from 0 to τ (``None`` for ``DiscreteData``).
        estimand: ``"risk"`` (cumulative death risk, with a curve over the grid), ``"mean"`` (outcome at τ,
            ``cemetery`` after death) or ``"auto"`` (mean when there is an outcome column, else risk).
        outcome_model, treatment_model, censoring_model: right-hand-side formula strings over the columns of
            :meth:`DiscreteData.frame`, a list of K formulas (one per interval), or :class:`Model` (GLM link,
            ``absorbing``, ``penalty``, or a scikit-learn estimator). The censoring model is required when some
            subject is censored; with no censoring the censoring factors are exactly 1.
        cemetery: outcome value assigned after death for the mean estimand (0 gives E[Y^G(τ) 1{T_D^G > τ}]).
        outcome_family: ``"auto"`` (binomial for 0/1 outcomes, Gaussian otherwise), ``"gaussian"``, ``"binomial"``.
        stabilized, truncate: (IPW) Hájek normalisation; cap the weights at this quantile.
        positivity_bound: warn when a regime follower's fitted probability of the regime's treatment is below it.
        min_followers, positivity: positivity along the whole regime path. At each interval k, the subjects at
            risk whose observed treatment followed the regime in every interval 0..k are counted
            (``diagnostics["followers_through_interval"]``); fewer than ``min_followers`` raises ``ValueError``
            naming the interval (``positivity="raise"``) or warns (``"warn"``: g-computation extrapolates, IPW
            raises where no follower is left). An interval where nobody has the regime's treatment always raises.
        quiet: no bootstrap progress bar.
        se: ``"bootstrap"`` (resampling subjects, nuisance models refitted), ``"influence"`` (nuisance models
            treated as known), ``"sandwich"`` (IPW only: the influence function with the treatment and censoring
            GLMs' estimation included, M-estimation sandwich) or ``"none"``.
        risk_method: (g-computation, DR) ``"increments"``: the risk is the sum of per-interval death
            probabilities, each by its own recursion (the g-computation curve is then non-decreasing by
            construction); ``"direct"``: one recursion per time for 1{T_D <= t_J} (the classic ICE, as zEpid).
            Both give the whole curve with K(K+1)/2 regressions; ``"endpoint"``: only the risk at τ, by the one
            recursion for 1{T_D <= τ} (K regressions, equal to the last point of ``"direct"``; ``curve`` is None).
        n_boot, seed: bootstrap replicates and their seed. level: confidence level of the Wald interval.

    Returns:
        :class:`Result` (estimate, SE, CI, risk curve, diagnostics).

    Raises:
        ValueError: a regime with no observed support in some interval, or followed through intervals 0..k by
            fewer than ``min_followers`` subjects (positivity along the path), formulas naming unknown
            columns, a censored data set without a censoring model, invalid options (named in the message).
        TypeError: wrong argument types.

    Warns:
        PositivityWarning: some followers have a fitted propensity of the regime's treatment below
            ``positivity_bound`` (weighting estimators); too few followers along the path with
            ``positivity="warn"``.

    References:
        Ying, A. "Causal Identification for Complex Functional Longitudinal Studies" (ICLR 2025),
        arXiv:2206.12525, identification by the limits of the discrete g-computation / IPW / DR formulas.
        Bang, H. & Robins, J. M. (2005) Biometrics 61:962 (sequential regression and DR).
"""


def g_computation(
    data: LongitudinalData | DiscreteData,
    regime: Regime | str,
    *,
    grid: Any = None,
    outcome_model: Model | str | Sequence[str],
    treatment_model: Model | str | Sequence[str] | None = None,
    estimand: str = "auto",
    cemetery: float = 0.0,
    outcome_family: str = "auto",
    risk_method: str = "increments",
    se: str = "bootstrap",
    n_boot: int = 200,
    level: float = 0.95,
    seed: int = 0,
    min_followers: int = 1,
    positivity: str = "raise",
    quiet: bool = True,
) -> Result:
    """g-computation by iterated conditional expectations (sequential regression) on a partition.

    ``outcome_model`` is the right-hand side of the regressions m_k (one formula pooled in form over intervals,
    each interval fitted separately, or one formula per interval). Pseudo-outcomes in [0, 1] use a
    fractional logistic regression, others least squares (``outcome_family`` overrides). ``treatment_model`` is
    needed only for an incremental propensity-score shift, whose regime depends on the fitted propensity.
    """
    return _estimate(
        "gcomp",
        data,
        regime,
        grid=grid,
        outcome_model=outcome_model,
        treatment_model=treatment_model,
        estimand=estimand,
        cemetery=cemetery,
        outcome_family=outcome_family,
        risk_method=risk_method,
        se=se,
        n_boot=n_boot,
        level=level,
        seed=seed,
        min_followers=min_followers,
        positivity=positivity,
        quiet=quiet,
    )


def ipw(
    data: LongitudinalData | DiscreteData,
    regime: Regime | str,
    *,
    grid: Any = None,
    treatment_model: Model | str | Sequence[str] | None = None,
    censoring_model: Model | str | Sequence[str] | None = None,
    estimand: str = "auto",
    cemetery: float = 0.0,
    stabilized: bool = True,
    truncate: float | None = None,
    se: str = "bootstrap",
    n_boot: int = 200,
    level: float = 0.95,
    seed: int = 0,
    positivity_bound: float = 0.01,
    min_followers: int = 1,
    positivity: str = "raise",
    quiet: bool = True,
) -> Result:
    """Inverse probability weighting with product weights for treatment and censoring.

    ``treatment_model`` is required except for the natural course. The weights W = ∏ dG(A_k|H_k)/P̂(A_k|H_k) · 1{uncensored}/P̂(uncensored|H_k, A_k) come from pooled (or
    per-interval) binomial models fitted on the person-interval rows. ``stabilized=True`` normalises by the
    weights' sum (Hájek; for the risk this is the weighted product-limit / IPTW Kaplan–Meier), ``False`` is
    Horvitz–Thompson. ``truncate=q`` caps the cumulative weights at their q-quantile. ``se="influence"``
    treats the weights as known (conservative when the treatment model is a correctly specified MLE);
    ``se="sandwich"`` adds the estimation of the treatment and censoring GLMs (stacked estimating equations);
    ``se="bootstrap"`` refits them per replicate and needs no model to be right.
    """
    return _estimate(
        "ipw",
        data,
        regime,
        grid=grid,
        treatment_model=treatment_model,
        censoring_model=censoring_model,
        estimand=estimand,
        cemetery=cemetery,
        stabilized=stabilized,
        truncate=truncate,
        se=se,
        n_boot=n_boot,
        level=level,
        seed=seed,
        positivity_bound=positivity_bound,
        min_followers=min_followers,
        positivity=positivity,
        quiet=quiet,
    )


def doubly_robust(
    data: LongitudinalData | DiscreteData,
    regime: Regime | str,
    *,
    grid: Any = None,
    outcome_model: Model | str | Sequence[str],
    treatment_model: Model | str | Sequence[str] | None = None,
    censoring_model: Model | str | Sequence[str] | None = None,
    estimand: str = "auto",
    cemetery: float = 0.0,
    outcome_family: str = "auto",
    risk_method: str = "increments",
    truncate: float | None = None,
    se: str = "influence",
    n_boot: int = 200,
    level: float = 0.95,
    seed: int = 0,
    positivity_bound: float = 0.01,
    min_followers: int = 1,
    positivity: str = "raise",
    quiet: bool = True,
) -> Result:
    """Sequential doubly robust estimator ψ = E[Q_0 + Σ_k W_k (Q̃_{k+1} − m_k(H_k, A_k))].

    Consistent if the outcome regressions are correct, or the treatment and censoring models are. The
    influence-function SE is the efficient one when all models are correct; when one may be wrong use
    ``se="bootstrap"`` (every model refitted per replicate).
    """
    return _estimate(
        "dr",
        data,
        regime,
        grid=grid,
        outcome_model=outcome_model,
        treatment_model=treatment_model,
        censoring_model=censoring_model,
        estimand=estimand,
        cemetery=cemetery,
        outcome_family=outcome_family,
        risk_method=risk_method,
        truncate=truncate,
        se=se,
        n_boot=n_boot,
        level=level,
        seed=seed,
        positivity_bound=positivity_bound,
        min_followers=min_followers,
        positivity=positivity,
        quiet=quiet,
    )


for _fn in (g_computation, ipw, doubly_robust):
    _fn.__doc__ = (_fn.__doc__ or "") + _COMMON_DOC

_BY_NAME = {"gcomp": g_computation, "ipw": ipw, "dr": doubly_robust}


def refine(
    estimator: Any,
    data: LongitudinalData,
    regime: Regime | str = "always",
    *,
    grids: Sequence[Any] = (8, 4, 2, 1),
    **kwargs: Any,
) -> pd.DataFrame:
    """The estimate on each partition in ``grids`` (coarse to fine), to see it settle as the mesh shrinks.

    Args:
        estimator: ``g_computation``, ``ipw``, ``doubly_robust`` or their names ``"gcomp"``, ``"ipw"``, ``"dr"``.
        data: long-format data. regime: as for the estimators. grids: widths (or point arrays).
        **kwargs: passed to the estimator (models, se, ...).

    Returns:
        One row per grid: width, intervals, estimate, se, ci_low, ci_high, max_weight (weighting estimators).

    References:
        Ying, arXiv:2206.12525: the effect is the limit (a net over partitions) of the discrete formulas.
    """
    fn = _BY_NAME.get(estimator, estimator) if isinstance(estimator, str) else estimator
    if fn not in _BY_NAME.values():
        raise ValueError(f"estimator must be one of {', '.join(_BY_NAME)} or one of the estimator functions")
    if not isinstance(grids, Sequence) or len(grids) == 0:
        raise ValueError(f"grids must be a non-empty sequence of widths, got {grids!r}")
    rows = []
    for g in grids:
        r = fn(data, regime, grid=g, **kwargs)
        rows.append(
            {
                "width": r.width,
                "intervals": len(r.grid) - 1,
                "estimate": r.estimate,
                "se": r.se,
                "ci_low": r.ci[0],
                "ci_high": r.ci[1],
                "max_weight": r.diagnostics.get("max_weight", float("nan")),
            }
        )
    return pd.DataFrame(rows)
