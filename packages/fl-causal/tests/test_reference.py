"""Multi-interval estimators against an independent implementation written here in wide format with statsmodels.

Three intervals with time-varying confounding, censoring (a second treatment) and death, static and stochastic
(incremental propensity-score shift) regimes, mean outcome and cumulative risk. The reference follows the discrete
formulas of Ying (arXiv:2206.12525, the g-computation / IPW / DR identities on a partition) directly: one loop per
interval, statsmodels GLMs, no code shared with the package beyond the long-format construction of the data.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

from iclr25_fl_causal import LongitudinalData, doubly_robust, g_computation, ipw

K = 3


def _expit(x):
    return 1.0 / (1.0 + np.exp(-x))


def _wide(n: int, seed: int) -> dict[str, np.ndarray]:
    """L_k, A_k (n, K); cens_k, dead_k (n, K) events in interval k; at_k at risk at t_k; Y at τ (NaN if not seen)."""
    rng = np.random.default_rng(seed)
    L = np.full((n, K), np.nan)
    A = np.full((n, K), np.nan)
    at = np.zeros((n, K), bool)
    cens = np.zeros((n, K), bool)
    dead = np.zeros((n, K), bool)
    alive = np.ones(n, bool)
    a_prev = np.zeros(n)
    l_prev = rng.standard_normal(n)
    for k in range(K):
        at[:, k] = alive
        L[:, k] = np.where(alive, 0.6 * l_prev - 0.5 * a_prev + 0.6 * rng.standard_normal(n), np.nan)
        A[:, k] = np.where(alive, rng.random(n) < _expit(-0.2 + 0.9 * L[:, k] + 1.0 * a_prev), np.nan)
        c = alive & (rng.random(n) < _expit(-2.2 + 0.5 * L[:, k] - 0.3 * np.nan_to_num(A[:, k])))
        d = alive & ~c & (rng.random(n) < _expit(-2.0 + 0.7 * L[:, k] - 0.6 * np.nan_to_num(A[:, k])))
        cens[:, k], dead[:, k] = c, d
        alive = alive & ~c & ~d
        a_prev, l_prev = np.nan_to_num(A[:, k]), np.nan_to_num(L[:, k])
    Y = np.where(alive, 1.0 + L[:, K - 1] + 0.5 * A[:, K - 1] + 0.5 * rng.standard_normal(n), np.nan)
    return {"L": L, "A": A, "at": at, "cens": cens, "dead": dead, "Y": Y}


def _long(w: dict[str, np.ndarray], outcome: bool) -> LongitudinalData:
    rows = []
    n = len(w["Y"])
    for i in range(n):
        for k in range(K):
            rows.append({"id": i, "time": float(k), "L": w["L"][i, k], "A": w["A"][i, k], "d": 0, "c": 0})
            if w["cens"][i, k] or w["dead"][i, k]:
                ev = {"d": int(w["dead"][i, k]), "c": int(w["cens"][i, k])}
                rows.append({"id": i, "time": k + 0.5, "L": w["L"][i, k], "A": w["A"][i, k], **ev})
                break
        else:
            rows.append({"id": i, "time": float(K), "L": w["L"][i, -1], "A": w["A"][i, -1], "d": 0, "c": 0})
    frame = pd.DataFrame(rows)
    if outcome:
        frame["Y"] = np.nan
        last = frame.groupby("id").tail(1).index
        frame.loc[last, "Y"] = w["Y"][frame.loc[last, "id"].to_numpy()]
    return LongitudinalData(
        frame,
        treatment="A",
        covariates=["L"],
        death="d",
        censor="c",
        outcome="Y" if outcome else None,
        horizon=K,
    )


def _glm(y, X, binomial: bool):
    fam = sm.families.Binomial() if binomial else sm.families.Gaussian()
    return sm.GLM(y, X, family=fam).fit(tol=1e-13, maxiter=200)


def _nuisances(w):
    """Pooled logistic treatment model A_k ~ 1 + L_k + A_{k-1} and censoring model uncensored_k ~ 1 + L_k + A_k."""
    at = w["at"]
    ii, kk = np.nonzero(at)
    a_lag = np.concatenate([np.zeros((len(at), 1)), np.nan_to_num(w["A"][:, :-1])], axis=1)
    Xt = np.column_stack([np.ones(len(ii)), w["L"][ii, kk], a_lag[ii, kk]])
    p = np.full(at.shape, np.nan)
    p[ii, kk] = _glm(w["A"][ii, kk], Xt, True).predict(Xt)
    Xc = np.column_stack([np.ones(len(ii)), w["L"][ii, kk], w["A"][ii, kk]])
    s = np.full(at.shape, np.nan)
    s[ii, kk] = _glm(1.0 - w["cens"][ii, kk], Xc, True).predict(Xc)
    return p, s


def _weights(w, p, s, g1):
    """Cumulative W_k = ∏_{j<=k} dG(A_j)/P(A_j) · 1{uncensored_j}/s_j (0 once off the regime or censored)."""
    A = np.nan_to_num(w["A"])
    ratio = np.where(A == 1, g1 / p, (1 - g1) / (1 - p)) * (~w["cens"]) / s
    ratio = np.where(w["at"], ratio, 0.0)
    return np.cumprod(ratio, axis=1)


def _ice(w, target_end: int, y_end, on_death: np.ndarray, g1, binomial: bool):
    """Q_0 (n,) and per-interval residual ỹ_k − m_k(H_k, A_k) (n, K) of one ICE recursion (model 1 + L_k + A_k)."""
    n = len(w["Y"])
    Q_next = None
    resid = np.zeros((n, K))
    for k in range(target_end - 1, -1, -1):
        at = w["at"][:, k]
        fit_rows = at & ~w["cens"][:, k]
        if k == target_end - 1:
            y = np.where(w["dead"][:, k], on_death[k], y_end)
        else:
            y = np.where(w["dead"][:, k], on_death[k], Q_next)
        X = np.column_stack([np.ones(n), np.nan_to_num(w["L"][:, k]), np.nan_to_num(w["A"][:, k])])
        fit = _glm(y[fit_rows], X[fit_rows], binomial)
        m1 = fit.predict(np.column_stack([X[:, :2], np.ones(n)]))
        m0 = fit.predict(np.column_stack([X[:, :2], np.zeros(n)]))
        Q = np.where(at, g1[:, k] * m1 + (1 - g1[:, k]) * m0, np.nan)
        resid[:, k] = np.where(fit_rows, y - fit.predict(X), 0.0)
        Q_next = Q
    return Q_next, resid


@pytest.fixture(scope="module")
def wide():
    return _wide(1500, seed=7)


@pytest.mark.parametrize("regime", ["always", "incremental:2"])
def test_mean_outcome_ipw_dr_gcomp_with_censoring_and_death(wide, regime):
    w = wide
    data = _long(w, outcome=True)
    p, s = _nuisances(w)
    g1 = np.ones_like(p) if regime == "always" else 2 * p / (2 * p + 1 - p)
    W = _weights(w, p, s, np.nan_to_num(g1, nan=1.0))
    y_end = np.nan_to_num(w["Y"])
    Q0, resid = _ice(w, K, y_end, np.zeros(K), np.nan_to_num(g1, nan=1.0), binomial=False)
    # IPW (Hájek): weight at the end of follow-up (death interval, or τ), V = cemetery 0 after death.
    dead_any = w["dead"].any(axis=1)
    k_end = np.where(dead_any, np.argmax(w["dead"], axis=1), K - 1)
    W_end = W[np.arange(len(W)), k_end]
    V = np.where(dead_any, 0.0, y_end)
    ipw_ref = (W_end * V).sum() / W_end.sum()
    dr_ref = np.mean(Q0 + (W * resid).sum(axis=1))

    kw = {"grid": 1, "treatment_model": "L + A_lag", "censoring_model": "L + A"}
    got_ipw = ipw(data, regime, se="none", **kw)
    got_dr = doubly_robust(data, regime, outcome_model="L + A", **kw)
    g_kw = {"treatment_model": "L + A_lag"} if regime != "always" else {}
    got_g = g_computation(data, regime, grid=1, outcome_model="L + A", se="none", **g_kw)
    assert got_ipw.estimand == "mean"
    assert got_ipw.estimate == pytest.approx(ipw_ref, abs=1e-8)
    assert got_dr.estimate == pytest.approx(dr_ref, abs=1e-8)
    assert got_g.estimate == pytest.approx(np.mean(Q0), abs=1e-8)
    # the DR influence-function SE is the SD of the estimating function over √n
    phi = Q0 + (W * resid).sum(axis=1)
    assert got_dr.se == pytest.approx(phi.std(ddof=1) / np.sqrt(len(phi)), rel=1e-6)
    assert got_dr.diagnostics["max_weight"] == pytest.approx(W_end.max(), rel=1e-8)


def test_risk_curve_ipw_product_limit_and_dr_increments_with_censoring(wide):
    w = wide
    data = _long(w, outcome=False)
    p, s = _nuisances(w)
    g1 = np.ones_like(p)
    W = _weights(w, p, s, g1)
    # IPW: weighted product-limit, h_j = Σ W_j D_j / Σ_{at risk j} W_j.
    h = (W * w["dead"]).sum(axis=0) / (W * w["at"]).sum(axis=0)
    ipw_curve = 1 - np.cumprod(1 - h)
    # DR, increments: P(death in interval j) by its own recursion, summed.
    dr_inc = []
    g_inc = []
    for j in range(K):
        on_death = np.zeros(K)
        on_death[j] = 1.0
        Q0, resid = _ice(w, j + 1, np.zeros(len(W)), on_death, g1, binomial=True)
        dr_inc.append(np.mean(Q0 + (W * resid).sum(axis=1)))
        g_inc.append(np.mean(Q0))
    kw = {"grid": 1, "treatment_model": "L + A_lag", "censoring_model": "L + A", "estimand": "risk"}
    got_ipw = ipw(data, "always", se="none", **kw)
    got_dr = doubly_robust(data, "always", outcome_model="L + A", **kw)
    got_g = g_computation(data, "always", grid=1, outcome_model="L + A", estimand="risk", se="none")
    np.testing.assert_allclose(got_ipw.curve["estimate"].to_numpy()[1:], ipw_curve, atol=1e-8)
    np.testing.assert_allclose(got_dr.curve["estimate"].to_numpy()[1:], np.cumsum(dr_inc), atol=1e-7)
    np.testing.assert_allclose(got_g.curve["estimate"].to_numpy()[1:], np.cumsum(g_inc), atol=1e-7)


@pytest.mark.parametrize("outcome", [True, False])
def test_ipw_sandwich_se_agrees_with_the_bootstrap_over_three_intervals_with_censoring(wide, outcome):
    """The sandwich (treatment and censoring GLMs' estimation included) against 300 bootstrap replicates, which
    refit both models: the bootstrap SE's own Monte Carlo error is about 4%."""
    data = _long(wide, outcome=outcome)
    kw = {"grid": 1, "treatment_model": "L + A_lag", "censoring_model": "L + A"}
    sand = ipw(data, "always", se="sandwich", **kw)
    boot = ipw(data, "always", se="bootstrap", n_boot=300, seed=1, **kw)
    known = ipw(data, "always", se="influence", **kw)
    assert sand.estimate == boot.estimate == known.estimate
    assert 0.87 < sand.se / boot.se < 1.13, (sand.se, boot.se, known.se)
