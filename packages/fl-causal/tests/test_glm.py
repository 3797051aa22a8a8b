"""The IRLS fits against statsmodels' GLM (an independent implementation), and Model validation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

from iclr25_fl_causal import Model
from iclr25_fl_causal._glm import design, fit_glm


@pytest.fixture
def xy():
    rng = np.random.default_rng(3)
    X = np.column_stack([np.ones(300), rng.standard_normal((300, 2))])
    p = 1 / (1 + np.exp(-(X @ [0.2, 1.0, -0.5])))
    y = (rng.random(300) < p).astype(float)
    w = rng.integers(0, 4, 300).astype(float)
    return X, y, w


@pytest.mark.parametrize(
    ("link", "sm_link"), [("logit", sm.families.links.Logit()), ("cloglog", sm.families.links.CLogLog())]
)
def test_binomial_fit_matches_statsmodels(xy, link, sm_link):
    X, y, w = xy
    ours = fit_glm(X, y, w, link=link)
    ref = sm.GLM(y, X, family=sm.families.Binomial(link=sm_link), freq_weights=w).fit(tol=1e-12).params
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-8)


def test_fractional_and_gaussian_match_statsmodels(xy):
    X, _, w = xy
    frac = np.random.default_rng(4).random(len(X))
    ref = sm.GLM(frac, X, family=sm.families.Binomial(), freq_weights=w).fit(tol=1e-12).params
    np.testing.assert_allclose(fit_glm(X, frac, w, link="logit"), ref, rtol=1e-6, atol=1e-8)
    ref = sm.WLS(frac, X, weights=w).fit().params
    np.testing.assert_allclose(fit_glm(X, frac, w, link="identity"), ref, rtol=1e-8, atol=1e-10)


def test_multi_response_equals_separate_fits(xy):
    X, y, w = xy
    Y = np.column_stack([y, 1 - y, np.random.default_rng(5).random(len(y))])
    both = fit_glm(X, Y, w, link="logit")
    for t in range(3):
        np.testing.assert_allclose(both[:, t], fit_glm(X, Y[:, t], w, link="logit"), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("extra", ["zero", "duplicate", "nearly_duplicate"])
def test_rank_deficient_designs_give_the_full_rank_fit(xy, extra):
    """A column that is 0 (the integrals on the first interval) or collinear: the Cholesky solve falls back to the
    pseudo-inverse, and the fitted values equal those of the full-rank design."""
    X, y, w = xy
    col = {"zero": np.zeros(len(X)), "duplicate": X[:, 1], "nearly_duplicate": X[:, 1] * (1 + 1e-15)}[extra]
    Y = np.column_stack([y, np.random.default_rng(6).random(len(y))])
    full = fit_glm(X, Y, w, link="logit")
    deficient = fit_glm(np.column_stack([X, col]), Y, w, link="logit")
    np.testing.assert_allclose(np.column_stack([X, col]) @ deficient, X @ full, rtol=1e-7, atol=1e-9)


def test_ridge_penalty_shrinks_and_zero_is_mle(xy):
    X, y, w = xy
    mle = fit_glm(X, y, w, link="logit")
    np.testing.assert_allclose(fit_glm(X, y, w, link="logit", penalty=0.0), mle)
    pen = fit_glm(X, y, w, link="logit", penalty=50.0)
    assert np.abs(pen[1:]).sum() < np.abs(mle[1:]).sum()


def test_ridge_gaussian_matches_closed_form_and_tolerates_constant_columns(xy):
    X, _, w = xy
    y = X @ [1.0, 2.0, -1.0] + np.random.default_rng(6).standard_normal(len(X))
    lam = 3.0
    sd = np.sqrt(np.average((X - np.average(X, axis=0, weights=w)) ** 2, axis=0, weights=w))
    Z = X.copy()
    Z[:, 1:] /= sd[1:]
    P = np.diag([0.0, lam, lam])
    ref = np.linalg.solve(Z.T @ (w[:, None] * Z) + P, Z.T @ (w * y))
    ref[1:] /= sd[1:]
    np.testing.assert_allclose(fit_glm(X, y, w, link="identity", penalty=lam), ref, rtol=1e-8)
    Xz = np.column_stack([X, np.zeros(len(X))])  # an all-zero column (e.g. cum_L at the first interval)
    fitted = Xz @ fit_glm(Xz, y, w, link="identity", penalty=lam)
    np.testing.assert_allclose(fitted, X @ ref, rtol=1e-8)


def test_design_names_unknown_columns():
    df = pd.DataFrame({"L": [0.0, 1.0], "A": [0.0, 1.0]})
    assert design("L + A", [df])[0].shape == (2, 3)
    with pytest.raises(ValueError, match=r"available columns: L, A"):
        design("L + nope", [df])


@pytest.mark.parametrize(
    ("kwargs", "err", "match"),
    [
        ({"formula": 3}, TypeError, "formula must be a string"),
        ({"formula": "  ~ "}, ValueError, "at least one term"),
        ({"formula": "L", "link": "probit"}, ValueError, "link must be one of logit, cloglog, identity"),
        ({"formula": "L", "penalty": -1.0}, ValueError, r"penalty must be in \[0.0, inf\), got -1.0"),
    ],
)
def test_model_validation(kwargs, err, match):
    with pytest.raises(err, match=match):
        Model(**kwargs)
