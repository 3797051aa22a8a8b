"""Weighted GLM fits for the nuisance regressions (IRLS), and the pluggable :class:`Model` spec.

The estimators fit many small regressions (one per interval for the iterated conditional expectations, times one
per bootstrap replicate), so the solver is a plain iteratively reweighted least-squares loop on numpy arrays:
the same maximum-likelihood fit as ``statsmodels.GLM`` (checked against it in the tests) without its per-fit
overhead. Design matrices come from formulas via ``formulaic``; any scikit-learn estimator can replace the GLM.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from iclr25_shared.checks import check_choice, check_float

__all__ = ["ConvergenceWarning", "Model"]

_LINKS = ("logit", "cloglog", "identity")


class ConvergenceWarning(UserWarning):
    """A nuisance regression did not converge (often separation: some fitted probabilities are 0 or 1)."""


@dataclasses.dataclass(frozen=True)
class Model:
    """A nuisance model: a formula (right-hand side, over the person-interval columns) and how to fit it.

    Args:
        formula: right-hand side such as ``"L + A + A_lag"`` (a leading ``~`` is allowed), or one formula per
            interval (a sequence of length K) for interval-specific models. The columns available are listed in
            :meth:`DiscreteData.frame`.
        estimator: optional scikit-learn style estimator used instead of the GLM on the formula's design matrix
            (``predict_proba`` for treatment/censoring models, ``predict`` for outcome regressions). It is cloned
            per fit with ``sklearn.base.clone`` when scikit-learn is installed.
        link: link of the binomial GLM for treatment/censoring models: ``"logit"`` or ``"cloglog"`` (the
            complementary log-log link is exact for a jump process with intensity ``exp(x'b)`` held over an
            interval: ``P(jump) = 1 - exp(-exp(x'b))``). Ignored for outcome regressions, whose family follows
            the pseudo-outcome (logit for values in [0, 1], identity otherwise).
        absorbing: for a treatment model: the treatment is absorbing (once 1, always 1, e.g. ART initiation or
            a diagnosis), so the model is fitted on the not-yet-treated rows (``A_lag == 0``) and
            ``P(A_k = 1) = 1`` afterwards. The data are checked to be absorbing.
        penalty: ridge penalty λ on the standardised non-constant columns of the GLM (0: the exact MLE). A
            small λ keeps sparse per-interval fits finite (few deaths per interval on fine grids separate).

    Raises:
        TypeError: ``formula`` is not a string or a sequence of strings.
        ValueError: ``link`` is not one of logit, cloglog, identity; a formula is empty.
    """

    formula: str | tuple[str, ...]
    estimator: Any = None
    link: str = "logit"
    absorbing: bool = False
    penalty: float = 0.0

    def __post_init__(self) -> None:
        formula = self.formula
        if isinstance(formula, str):
            formulas: tuple[str, ...] = (formula,)
        elif isinstance(formula, Sequence) and all(isinstance(f, str) for f in formula) and len(formula) > 0:
            formulas = tuple(formula)
            object.__setattr__(self, "formula", formulas)
        else:
            raise TypeError(f"formula must be a string or a non-empty sequence of strings, got {formula!r}")
        for f in formulas:
            if not f.strip().lstrip("~").strip():
                raise ValueError(
                    f"formula must name at least one term (use '1' for intercept only), got {f!r}"
                )
        check_float("penalty", self.penalty, low=0.0)
        check_choice("link", self.link, _LINKS)

    @classmethod
    def coerce(cls, spec: Model | str | Sequence[str], name: str) -> Model:
        """A :class:`Model` from a ``Model``, a formula string or a list of formulas (``name`` is for errors)."""
        if isinstance(spec, Model):
            return spec
        if isinstance(spec, str) or (isinstance(spec, Sequence) and not isinstance(spec, (bytes, bytearray))):
            try:
                return cls(spec)  # type: ignore[arg-type]
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"{name}: {exc}") from None
        raise TypeError(
            f"{name} must be a formula string, a list of formulas or a Model; got {type(spec).__name__}"
        )

    def formula_for(self, k: int, num_intervals: int) -> str:
        """The right-hand side used at interval ``k``."""
        formulas = self.formula if isinstance(self.formula, tuple) else (self.formula,)
        if len(formulas) == 1:
            return formulas[0]
        if len(formulas) != num_intervals:
            raise ValueError(
                f"model has {len(formulas)} interval-specific formulas but the grid has {num_intervals} intervals"
            )
        return formulas[k]

    @property
    def per_interval(self) -> bool:
        return isinstance(self.formula, tuple) and len(self.formula) > 1


def design(formula: str, frames: Sequence[pd.DataFrame]) -> list[np.ndarray]:
    """Design matrices (with intercept) of ``formula`` on each frame, with the spec learned on the first.

    Raises:
        ValueError: the formula names a column that is not in the frame (the message lists the columns).
    """
    from formulaic import model_matrix

    rhs = formula.strip()
    rhs = rhs[1:].strip() if rhs.startswith("~") else rhs
    try:
        first = model_matrix(rhs, frames[0], na_action="raise")
    except Exception as exc:  # formulaic raises several error types for unknown names / bad syntax
        raise ValueError(
            f"formula {formula!r} cannot be evaluated ({type(exc).__name__}: {exc}); "
            f"available columns: {', '.join(map(str, frames[0].columns))}"
        ) from None
    spec = first.model_spec
    out = [np.asarray(first, dtype=float)]
    out += [np.asarray(spec.get_model_matrix(f, na_action="raise"), dtype=float) for f in frames[1:]]
    return out


def _inverse_link(eta: np.ndarray, link: str) -> tuple[np.ndarray, np.ndarray]:
    """mu and dmu/deta."""
    if link == "logit":
        mu = 0.5 * (1.0 + np.tanh(0.5 * eta))
        return mu, mu * (1.0 - mu)
    if link == "cloglog":
        e = np.exp(np.clip(eta, -700, 30))
        mu = -np.expm1(-e)
        return mu, e * np.exp(-e)
    return eta, np.ones_like(eta)


def _link(mu: np.ndarray, link: str) -> np.ndarray:
    if link == "logit":
        return np.log(mu / (1.0 - mu))
    if link == "cloglog":
        return np.log(-np.log1p(-mu))
    return mu


def fit_glm(
    X: np.ndarray,
    y: np.ndarray,
    weights: np.ndarray | None = None,
    *,
    link: str = "identity",
    max_iter: int = 50,
    penalty: float = 0.0,
) -> np.ndarray:
    """Maximum-likelihood GLM coefficients by IRLS, for one response or several sharing the design.

    ``link="identity"`` is weighted least squares (Gaussian); ``"logit"``/``"cloglog"`` are the binomial
    quasi-likelihood, valid for fractional ``y`` in [0, 1] (the pseudo-outcomes of the ICE recursion).
    Each IRLS step solves the weighted normal equations of all responses at once by a batched Cholesky
    factorisation; rank-deficient designs get the pseudo-inverse solution (the fitted values are still the unique
    MLE fit).

    Args:
        X: (rows, features) float design. y: (rows,) or (rows, responses). weights: (rows,) non-negative
            frequency weights.

    Returns:
        (features,) or (features, responses) coefficients.

    Warns:
        ConvergenceWarning: IRLS did not converge within ``max_iter`` iterations.
    """
    w = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=float)
    single = y.ndim == 1
    Y = y[:, None] if single else y
    scale = np.ones(X.shape[1])
    pen = np.zeros(X.shape[1])
    if penalty > 0:  # ridge on standardised, non-constant columns (the intercept is not penalised)
        sd = np.sqrt(np.average((X - np.average(X, axis=0, weights=w)) ** 2, axis=0, weights=w))
        varying = sd > 1e-12
        scale[varying] = sd[varying]
        pen[varying] = penalty
        X = X / scale
    if link == "identity":
        sw = np.sqrt(w)
        Xw = X * sw[:, None]
        Yw = Y * sw[:, None]
        if penalty > 0:  # ridge as least squares on the design augmented with sqrt(penalty) rows
            Xw = np.vstack([Xw, np.diag(np.sqrt(pen))])
            Yw = np.vstack([Yw, np.zeros((X.shape[1], Y.shape[1]))])
        beta = np.linalg.lstsq(Xw, Yw, rcond=None)[0]
        beta = beta / scale[:, None]
        return beta[:, 0] if single else beta
    W = w[:, None]
    mu = np.clip((W * Y + 0.5) / (W + 1.0), 1e-4, 1 - 1e-4)
    eta = _link(mu, link)
    beta = np.zeros((X.shape[1], Y.shape[1]))
    dev_old = np.full(Y.shape[1], np.inf)
    todo = np.ones(Y.shape[1], bool)  # responses still iterating
    eps = 1e-12
    P = np.diag(pen)
    for _ in range(max_iter):
        cols = np.flatnonzero(todo)
        e = eta[:, cols]
        mu, dmu = _inverse_link(e, link)
        mu = np.clip(mu, eps, 1 - eps)
        dmu = np.maximum(dmu, eps)
        z = e + (Y[:, cols] - mu) / dmu
        wt = W * dmu**2 / (mu * (1.0 - mu))  # (rows, responses)
        beta[:, cols] = _weighted_solve(X, wt, z, P)
        eta[:, cols] = X @ beta[:, cols]
        mu, _ = _inverse_link(eta[:, cols], link)
        mu = np.clip(mu, eps, 1 - eps)
        dev = -2.0 * np.sum(W * (Y[:, cols] * np.log(mu) + (1 - Y[:, cols]) * np.log1p(-mu)), axis=0)
        dev += np.einsum("p,pt->t", pen, beta[:, cols] ** 2)
        done = np.abs(dev - dev_old[cols]) < 1e-10 * (np.abs(dev) + 0.1)
        dev_old[cols] = dev
        todo[cols[done]] = False
        if not todo.any():
            beta = beta / scale[:, None]
            return beta[:, 0] if single else beta
    beta = beta / scale[:, None]
    warnings.warn(
        f"IRLS did not converge in {max_iter} iterations (separation? some fitted probabilities are 0 or 1)",
        ConvergenceWarning,
        stacklevel=3,
    )
    return beta[:, 0] if single else beta


def _weighted_solve(X: np.ndarray, wt: np.ndarray, z: np.ndarray, P: np.ndarray) -> np.ndarray:
    """Solve (X' diag(wt_t) X + P) b_t = X' diag(wt_t) z_t for every response t at once: (features, responses).

    One batched Cholesky factorisation of the (responses, features, features) normal matrices; a rank-deficient
    design (e.g. a column that is 0 on the first interval) falls back to the minimum-norm pseudo-inverse solution,
    whose fitted values are the same unique fit.
    """
    G = np.einsum("rp,rt,rq->tpq", X, wt, X, optimize=True) + P[None, :, :]
    b = np.einsum("rp,rt->tp", X, wt * z, optimize=True)
    try:
        C = np.linalg.cholesky(G)
        scale = np.sqrt(np.einsum("tpp->tp", G))
        # a numerically singular matrix can factor with a tiny pivot: refuse pivots below 1e-6 of the diagonal (condition ~1e12)
        if np.any(np.einsum("tpp->tp", C) <= 1e-6 * np.maximum(scale, 1e-300)):
            raise np.linalg.LinAlgError("near-singular normal matrix")
        y = np.linalg.solve(C, b[:, :, None])
        sol = np.linalg.solve(np.swapaxes(C, 1, 2), y)[:, :, 0]
    except np.linalg.LinAlgError:
        sol = np.stack([np.linalg.pinv(G[t], rcond=1e-13, hermitian=True) @ b[t] for t in range(len(G))])
    return sol.T


def predict_glm(X: np.ndarray, beta: np.ndarray, link: str) -> np.ndarray:
    """Fitted means ``g^{-1}(X beta)``."""
    return _inverse_link(X @ beta, link)[0]


class FittedModel:
    """A fitted nuisance regression that predicts on design matrices."""

    def __init__(self, model: Model, X: np.ndarray, y: np.ndarray, weights: np.ndarray, *, kind: str) -> None:
        self.kind = kind  # "binary" (treatment/censoring), "fractional" or "continuous" (outcome)
        self.model = model
        keep = weights > 0
        X, y, weights = X[keep], y[keep], weights[keep]
        if model.estimator is None:
            self.link = model.link if kind == "binary" else ("logit" if kind == "fractional" else "identity")
            self.beta = fit_glm(X, y, weights, link=self.link, penalty=float(model.penalty))
            self.estimator = None
            return
        if y.ndim == 2:
            raise ValueError("an estimator fits one response at a time")
        try:
            from sklearn.base import clone

            est = clone(model.estimator)
        except ImportError:  # pragma: no cover - estimator given without scikit-learn
            est = model.estimator
        if kind == "binary":
            if len(np.unique(y)) < 2:
                self.constant = float(y[0])
                self.estimator = None
                self.beta = None
                return
            est.fit(X, y.astype(int), sample_weight=weights)
        else:
            est.fit(X, y, sample_weight=weights)
        self.estimator = est
        self.beta = None

    def predict(self, X: np.ndarray) -> np.ndarray:
        if self.estimator is None and self.beta is None:
            return np.full(len(X), self.constant)
        if self.estimator is None:
            return predict_glm(X, self.beta, self.link)
        if self.kind == "binary":
            classes = list(self.estimator.classes_)
            return self.estimator.predict_proba(X)[:, classes.index(1)]
        out = np.asarray(self.estimator.predict(X), dtype=float)
        return np.clip(out, 0.0, 1.0) if self.kind == "fractional" else out
