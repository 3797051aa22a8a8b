"""Attribution estimators over a cooperative game ``v(S)`` of data contributors (numpy only).

A *game* is any callable ``v(mask) -> float`` where ``mask`` is an ``(n,)`` bool array: ``mask[i]`` is True when
contributor ``i`` is in the coalition ``S``. Everything here works on any such callable, so the same estimators
value contributors of a diffusion model (``v(S)`` = a global property of the model trained on ``S``,
arXiv:2407.03153 Section 3) or of a closed-form game in a test.

Subset tables are indexed by bitmask: row ``k`` of :func:`all_subsets` is the coalition whose members are the set
bits of ``k`` (bit ``i`` = contributor ``i``), so ``table[0] = v(∅)`` and ``table[2**n - 1] = v(N)``.

References:
    Lu, Lin, Kim, Lee, "An Efficient Framework for Crediting Data Contributors of Diffusion Models", ICLR 2025,
    arXiv:2407.03153, Section 3 (Shapley values, Eq. (1); KernelSHAP estimation; LDS evaluation).
    Covert & Lee, "Improving KernelSHAP: Practical Shapley Value Estimation via Linear Regression", AISTATS 2021,
    arXiv:2012.01536, Eq. (7) (the constrained closed form used by the paper).
    Wang & Jia, "Data Banzhaf", AISTATS 2023, arXiv:2205.15466 (Banzhaf value).
    Ilyas et al., "Datamodels", ICML 2022, arXiv:2202.00622 (linear datamodels; LDS).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from iclr25_shared.checks import check_finite, check_float, check_int, check_shape

__all__ = [
    "AttributionResult",
    "CachedGame",
    "all_subsets",
    "banzhaf",
    "banzhaf_from_samples",
    "banzhaf_from_table",
    "datamodel",
    "datamodel_from_samples",
    "exact_shapley",
    "kernel_shap",
    "kernel_shap_from_samples",
    "lds",
    "lds_interval",
    "leave_one_out",
    "sample_datamodel_subsets",
    "sample_shapley_kernel",
    "shapley_from_table",
    "shapley_kernel_size_probabilities",
    "subset_table",
]

Game = Callable[[np.ndarray], float]

MAX_EXACT_CONTRIBUTORS = 20


def _check_n(n: int) -> int:
    """Number of contributors: an integer >= 2 (a game of one player has nothing to divide)."""
    return check_int("num_contributors", n, low=2)


def _rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def _value(game: Game, mask: np.ndarray) -> float:
    """``game(mask)`` as a finite float; a non-finite property value is refused with the coalition named."""
    value = game(mask.copy())
    try:
        value = float(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"the game must return a real number; for coalition {np.flatnonzero(mask).tolist()} it returned "
            f"{value!r}"
        ) from exc
    if not math.isfinite(value):
        raise ValueError(
            f"property value must be finite; for coalition {np.flatnonzero(mask).tolist()} it is {value!r}"
        )
    return value


class CachedGame:
    """Wrap a game so that each coalition is evaluated once (retraining a model per call is expensive).

    ``calls`` counts the distinct coalitions evaluated; ``values`` maps the coalition's bitmask to ``v(S)``.
    Non-finite values are refused (``ValueError`` naming the coalition) and not cached.
    """

    def __init__(self, game: Game, num_contributors: int) -> None:
        self.game = game
        self.n = _check_n(num_contributors)
        self.values: dict[int, float] = {}

    @property
    def calls(self) -> int:
        return len(self.values)

    def __call__(self, mask: np.ndarray) -> float:
        if np.ndim(mask) != 1:
            raise ValueError(f"mask must be a 1-D bool array of length {self.n}, got shape {np.shape(mask)}")
        mask = _as_masks("mask", mask, self.n)[0]
        key = int(np.dot(mask.astype(np.int64), 1 << np.arange(self.n, dtype=np.int64)))
        if key not in self.values:
            self.values[key] = _value(self.game, mask)
        return self.values[key]


def _as_masks(name: str, masks: np.ndarray, n: int | None = None) -> np.ndarray:
    """``masks`` as a 2-D bool array ``(m, n)`` (a single ``(n,)`` mask becomes one row)."""
    arr = np.asarray(masks)
    if arr.ndim == 1:
        arr = arr[None, :]
    sizes = check_shape(name, arr, ("m", "n") if n is None else ("m", n))
    if arr.dtype != np.bool_:
        if arr.dtype.kind not in "biu" or not np.isin(arr, (0, 1)).all():
            raise ValueError(f"{name} must hold only 0/1 or True/False entries")
        arr = arr.astype(bool)
    if sizes["m"] == 0:
        raise ValueError(f"{name} must hold at least one coalition, got shape {arr.shape}")
    return arr


def all_subsets(num_contributors: int) -> np.ndarray:
    """Every coalition, in bitmask order.

    Args:
        num_contributors: ``n``, an integer in ``[2, 20]`` (``2**n`` rows are materialised).

    Returns:
        ``(2**n, n)`` bool; row ``k`` has ``mask[i] = bit i of k``.

    Raises:
        ValueError: ``n`` outside ``[2, 20]``.
    """
    n = _check_n(num_contributors)
    check_int("num_contributors", n, low=2, high=MAX_EXACT_CONTRIBUTORS)
    k = np.arange(2**n, dtype=np.int64)[:, None]
    return ((k >> np.arange(n, dtype=np.int64)) & 1).astype(bool)


def subset_table(game: Game, num_contributors: int) -> np.ndarray:
    """``v(S)`` for every coalition (``2**n`` calls of ``game``), in bitmask order.

    Returns:
        ``(2**n,)`` float64, ``table[k] = v(coalition of the set bits of k)``.

    Raises:
        ValueError: ``n`` outside ``[2, 20]``; ``game`` returned NaN/inf (the coalition is named).
    """
    masks = all_subsets(num_contributors)
    return np.array([_value(game, m) for m in masks], dtype=np.float64)


def _check_table(table: np.ndarray) -> tuple[np.ndarray, int]:
    table = np.asarray(table, dtype=np.float64)
    if table.ndim != 1 or table.size < 4 or table.size & (table.size - 1):
        raise ValueError(f"table must be a 1-D array of length 2**n with n >= 2, got shape {table.shape}")
    check_finite("table", table)
    return table, table.size.bit_length() - 1


def shapley_from_table(table: np.ndarray) -> np.ndarray:
    """Exact Shapley values from a full subset table (arXiv:2407.03153 Eq. (1)).

    ``phi_i = sum_{S ⊆ N\\{i}} |S|! (n-|S|-1)! / n! · (v(S ∪ {i}) − v(S))``.

    Args:
        table: ``(2**n,)`` finite floats in bitmask order (see :func:`subset_table`).

    Returns:
        ``(n,)`` float64 Shapley values; they sum to ``table[-1] - table[0]`` (efficiency).

    Raises:
        ValueError: the length is not a power of two ``>= 4``, or the table holds NaN/inf.
    """
    table, n = _check_table(table)
    masks = all_subsets(n)
    sizes = masks.sum(axis=1)
    weight = np.array([math.factorial(s) * math.factorial(n - s - 1) / math.factorial(n) for s in range(n)])
    phi = np.zeros(n)
    for i in range(n):
        without = ~masks[:, i]
        idx = np.flatnonzero(without)
        phi[i] = np.sum(weight[sizes[idx]] * (table[idx | (1 << i)] - table[idx]))
    return phi


def exact_shapley(game: Game, num_contributors: int) -> np.ndarray:
    """Exact Shapley values by enumerating all ``2**n`` coalitions (Eq. (1) of arXiv:2407.03153).

    Returns:
        ``(n,)`` float64.

    Raises:
        ValueError: ``n`` outside ``[2, 20]``; a non-finite ``v(S)`` (the coalition is named).
    """
    return shapley_from_table(subset_table(game, num_contributors))


def banzhaf_from_table(table: np.ndarray) -> np.ndarray:
    """Exact Banzhaf values ``beta_i = 2^{-(n-1)} sum_{S ⊆ N\\{i}} (v(S ∪ {i}) − v(S))`` from a subset table.

    Returns:
        ``(n,)`` float64.
    """
    table, n = _check_table(table)
    masks = all_subsets(n)
    out = np.zeros(n)
    for i in range(n):
        idx = np.flatnonzero(~masks[:, i])
        out[i] = np.mean(table[idx | (1 << i)] - table[idx])
    return out


def shapley_kernel_size_probabilities(num_contributors: int) -> np.ndarray:
    """Distribution of the coalition size under the Shapley kernel.

    ``P(|S| = s) ∝ (n − 1) / (s (n − s))`` for ``s = 1..n−1`` (the kernel ``p(z) ∝ (n−1) / (C(n,|z|) |z| (n−|z|))``
    summed over the ``C(n, s)`` coalitions of each size; Covert & Lee 2021, Section 3).

    Returns:
        ``(n − 1,)`` float64 summing to 1; entry ``s − 1`` is ``P(|S| = s)``.
    """
    n = _check_n(num_contributors)
    s = np.arange(1, n, dtype=np.float64)
    w = (n - 1) / (s * (n - s))
    return w / w.sum()


def sample_shapley_kernel(
    num_contributors: int,
    num_samples: int,
    *,
    seed: int | np.random.Generator | None = 0,
    paired: bool = False,
) -> np.ndarray:
    """Draw coalitions from the Shapley kernel: a size from :func:`shapley_kernel_size_probabilities`, then a
    uniformly random coalition of that size. Never returns ``∅`` or ``N``.

    Args:
        num_contributors: ``n >= 2``.
        num_samples: ``m >= 1`` rows (with ``paired``, rows come in (S, N∖S) pairs; ``m`` must then be even).
        seed: integer seed or a ``numpy.random.Generator``; the same seed gives the same rows.
        paired: antithetic sampling (each coalition followed by its complement; Covert & Lee 2021, Section 4).

    Returns:
        ``(m, n)`` bool.

    Raises:
        ValueError: ``n < 2``, ``m < 1``, or ``paired`` with an odd ``m``.
    """
    n = _check_n(num_contributors)
    m = check_int("num_samples", num_samples, low=1)
    if paired and m % 2:
        raise ValueError(f"num_samples must be even with paired=True, got {m}")
    rng = _rng(seed)
    draws = m // 2 if paired else m
    sizes = rng.choice(np.arange(1, n), size=draws, p=shapley_kernel_size_probabilities(n))
    ranks = (
        rng.random((draws, n)).argsort(axis=1).argsort(axis=1)
    )  # a uniform random order of the contributors
    masks = ranks < sizes[:, None]  # the first |S| of them: a uniform coalition of that size
    if paired:
        masks = np.stack([masks, ~masks], axis=1).reshape(m, n)
    return masks


def sample_datamodel_subsets(
    num_contributors: int,
    num_samples: int,
    *,
    alpha: float = 0.5,
    seed: int | np.random.Generator | None = 0,
    nontrivial: bool = True,
) -> np.ndarray:
    """Coalitions for datamodels / LDS: each contributor kept independently with probability ``alpha``.

    Args:
        alpha: keep probability in ``(0, 1)``.
        nontrivial: redraw ``∅`` and ``N`` (their values are known exactly and carry no ranking information).

    Returns:
        ``(m, n)`` bool.

    Raises:
        ValueError: ``n < 2``, ``m < 1``, ``alpha`` outside ``(0, 1)``.
    """
    n = _check_n(num_contributors)
    m = check_int("num_samples", num_samples, low=1)
    alpha = check_float("alpha", alpha, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
    rng = _rng(seed)
    rows: list[np.ndarray] = []
    while len(rows) < m:
        z = rng.random(n) < alpha
        if nontrivial and (not z.any() or z.all()):
            continue
        rows.append(z)
    return np.array(rows, dtype=bool)


@dataclass(frozen=True)
class AttributionResult:
    """Attributions with the evaluations they came from.

    Attributes:
        values: ``(n,)`` float64 per-contributor attribution.
        masks: ``(m, n)`` bool, the coalitions that were evaluated (besides ∅ and N).
        subset_values: ``(m,)`` float64, ``v`` at those coalitions (same row order).
        empty_value: ``v(∅)``.
        full_value: ``v(N)``.
        method: estimator name.
    """

    values: np.ndarray
    masks: np.ndarray = field(repr=False)
    subset_values: np.ndarray = field(repr=False)
    empty_value: float
    full_value: float
    method: str


def _check_samples(masks: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    masks = _as_masks("masks", masks)
    values = np.asarray(values, dtype=np.float64)
    check_shape("values", values, (masks.shape[0],))
    check_finite("values", values)
    return masks, values


def kernel_shap_from_samples(
    masks: np.ndarray,
    values: np.ndarray,
    empty_value: float,
    full_value: float,
    *,
    weights: np.ndarray | None = None,
) -> np.ndarray:
    """KernelSHAP in closed form with the efficiency constraint imposed exactly (Covert & Lee 2021, Eq. (7);
    the estimator of arXiv:2407.03153, Section 3).

    With ``A = E[z zᵀ]`` and ``b = E[z (v(z) − v(∅))]`` estimated over coalitions ``z`` drawn from the Shapley
    kernel (or weighted by ``weights``), the attributions are
    ``beta = A⁺ (b − 1 · (1ᵀ A⁺ b − v(N) + v(∅)) / (1ᵀ A⁺ 1))``, so that ``sum(beta) = v(N) − v(∅)`` for any
    sample. With the exact kernel probabilities over all ``2**n − 2`` coalitions as ``weights`` the result is
    exactly the Shapley value.

    Args:
        masks: ``(m, n)`` bool coalitions, none of them ``∅`` or ``N`` (they have zero kernel weight).
        values: ``(m,)`` finite ``v`` at those coalitions.
        empty_value: ``v(∅)``, finite. full_value: ``v(N)``, finite.
        weights: optional ``(m,)`` non-negative weights (default: equal weights, i.e. samples from the kernel).

    Returns:
        ``(n,)`` float64.

    Raises:
        ValueError: shapes disagree; NaN/inf anywhere; a row is ``∅`` or ``N``; weights negative or all zero.
    """
    masks, values = _check_samples(masks, values)
    v0 = check_float("empty_value", empty_value)
    v1 = check_float("full_value", full_value)
    sizes = masks.sum(axis=1)
    n = masks.shape[1]
    bad = np.flatnonzero((sizes == 0) | (sizes == n))
    if bad.size:
        raise ValueError(
            f"masks must not contain the empty or the full coalition (zero Shapley-kernel weight); row {bad[0]} "
            "is one"
        )
    if weights is None:
        w = np.full(masks.shape[0], 1.0 / masks.shape[0])
    else:
        w = np.asarray(weights, dtype=np.float64)
        check_shape("weights", w, (masks.shape[0],))
        check_finite("weights", w)
        if (w < 0).any() or w.sum() <= 0:
            raise ValueError("weights must be non-negative with a positive sum")
        w = w / w.sum()
    z = masks.astype(np.float64)
    a = (z * w[:, None]).T @ z
    b = (z * w[:, None]).T @ (values - v0)
    a_inv = np.linalg.pinv(a)
    ones = np.ones(n)
    a_inv_b, a_inv_1 = a_inv @ b, a_inv @ ones
    return a_inv_b - a_inv_1 * (ones @ a_inv_b - (v1 - v0)) / (ones @ a_inv_1)


def kernel_shap(
    game: Game,
    num_contributors: int,
    num_samples: int,
    *,
    seed: int | np.random.Generator | None = 0,
    paired: bool = False,
) -> AttributionResult:
    """Estimate Shapley values with KernelSHAP from ``num_samples`` Shapley-kernel coalitions plus ``∅`` and ``N``.

    Each distinct coalition is evaluated once (``m`` draws may repeat a coalition; the repeat counts in the
    estimate but costs no extra evaluation).

    Returns:
        :class:`AttributionResult` with ``values`` of shape ``(n,)`` and ``sum(values) == v(N) − v(∅)``.

    Raises:
        ValueError: ``n < 2``; ``num_samples < 1``; a non-finite ``v(S)`` (the coalition is named).
    """
    n = _check_n(num_contributors)
    cached = game if isinstance(game, CachedGame) and game.n == n else CachedGame(game, n)
    masks = sample_shapley_kernel(n, num_samples, seed=seed, paired=paired)
    v0 = cached(np.zeros(n, dtype=bool))
    v1 = cached(np.ones(n, dtype=bool))
    vals = np.array([cached(m) for m in masks])
    phi = kernel_shap_from_samples(masks, vals, v0, v1)
    return AttributionResult(phi, masks, vals, v0, v1, "kernel-shap")


def banzhaf_from_samples(masks: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Banzhaf values by least squares on centred indicators: ``v ≈ c + sum_i beta_i (z_i − 1/2)``.

    Over uniformly random coalitions (each contributor present with probability 1/2), the least-squares
    coefficient of ``z_i`` is ``E[v | i ∈ S] − E[v | i ∉ S]``, the Banzhaf value; with all ``2**n`` coalitions it
    is exact.

    Args:
        masks: ``(m, n)`` bool coalitions (``∅`` and ``N`` allowed), ``m >= n + 1``.
        values: ``(m,)`` finite ``v`` at those coalitions.

    Returns:
        ``(n,)`` float64.

    Raises:
        ValueError: shapes disagree, NaN/inf, or the design is rank deficient (too few distinct coalitions).
    """
    masks, values = _check_samples(masks, values)
    m, n = masks.shape
    design = np.column_stack([np.ones(m), masks.astype(np.float64) - 0.5])
    if np.linalg.matrix_rank(design) < n + 1:
        raise ValueError(
            f"the {m} coalitions do not determine {n} Banzhaf values (rank-deficient design); sample more"
        )
    coef, *_ = np.linalg.lstsq(design, values, rcond=None)
    return coef[1:]


def banzhaf(
    game: Game, num_contributors: int, num_samples: int, *, seed: int | np.random.Generator | None = 0
) -> AttributionResult:
    """Estimate Banzhaf values from ``num_samples`` uniformly random coalitions (see
    :func:`banzhaf_from_samples`).

    Raises:
        ValueError: ``n < 2``; ``num_samples < n + 1``; a rank-deficient sample; a non-finite ``v(S)``.
    """
    n = _check_n(num_contributors)
    m = check_int("num_samples", num_samples, low=n + 1)
    cached = game if isinstance(game, CachedGame) and game.n == n else CachedGame(game, n)
    masks = _rng(seed).random((m, n)) < 0.5
    vals = np.array([cached(z) for z in masks])
    v0 = cached(np.zeros(n, dtype=bool))
    v1 = cached(np.ones(n, dtype=bool))
    return AttributionResult(banzhaf_from_samples(masks, vals), masks, vals, v0, v1, "banzhaf")


def leave_one_out(game: Game, num_contributors: int) -> AttributionResult:
    """Leave-one-out attributions ``phi_i = v(N) − v(N ∖ {i})`` (``n + 1`` evaluations).

    Returns:
        :class:`AttributionResult` (``masks`` are the ``n`` leave-one-out coalitions).
    """
    n = _check_n(num_contributors)
    cached = game if isinstance(game, CachedGame) and game.n == n else CachedGame(game, n)
    masks = ~np.eye(n, dtype=bool)
    vals = np.array([cached(z) for z in masks])
    v1 = cached(np.ones(n, dtype=bool))
    v0 = cached(np.zeros(n, dtype=bool))
    return AttributionResult(v1 - vals, masks, vals, v0, v1, "leave-one-out")


def datamodel_from_samples(
    masks: np.ndarray, values: np.ndarray, *, alphas: tuple[float, ...] = (0.1, 1.0, 10.0), cv: int = 5
) -> np.ndarray:
    """Linear datamodel: ridge regression ``v(S) ≈ c + sum_{i ∈ S} theta_i`` with the penalty chosen by
    ``cv``-fold cross-validation over ``alphas`` (scikit-learn ``RidgeCV``; Ilyas et al. 2022).

    Args:
        masks: ``(m, n)`` bool coalitions, ``m >= cv``.
        values: ``(m,)`` finite ``v``.
        alphas: positive ridge penalties to choose from.
        cv: folds, an integer in ``[2, m]``.

    Returns:
        ``(n,)`` float64 coefficients ``theta``.

    Raises:
        ValueError: shapes disagree, NaN/inf, a non-positive alpha, ``cv`` outside ``[2, m]``.
    """
    from sklearn.linear_model import RidgeCV

    masks, values = _check_samples(masks, values)
    cv = check_int("cv", cv, low=2, high=masks.shape[0])
    if not alphas:
        raise ValueError("alphas must name at least one positive penalty")
    for a in alphas:
        check_float("alphas", a, low=0.0, low_inclusive=False)
    model = RidgeCV(alphas=tuple(float(a) for a in alphas), cv=cv).fit(masks.astype(np.float64), values)
    return np.asarray(model.coef_, dtype=np.float64)


def datamodel(
    game: Game,
    num_contributors: int,
    num_samples: int,
    *,
    alpha: float = 0.5,
    seed: int | np.random.Generator | None = 0,
    cv: int = 5,
) -> AttributionResult:
    """Fit a linear datamodel on ``num_samples`` coalitions from :func:`sample_datamodel_subsets`.

    Raises:
        ValueError: as :func:`sample_datamodel_subsets` and :func:`datamodel_from_samples`.
    """
    n = _check_n(num_contributors)
    cached = game if isinstance(game, CachedGame) and game.n == n else CachedGame(game, n)
    masks = sample_datamodel_subsets(n, num_samples, alpha=alpha, seed=seed)
    vals = np.array([cached(z) for z in masks])
    v0 = cached(np.zeros(n, dtype=bool))
    v1 = cached(np.ones(n, dtype=bool))
    return AttributionResult(datamodel_from_samples(masks, vals, cv=cv), masks, vals, v0, v1, "datamodel")


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties); NaN when either side is constant."""
    from scipy.stats import rankdata

    rx, ry = rankdata(x), rankdata(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denom = math.sqrt(float(rx @ rx) * float(ry @ ry))
    return float(rx @ ry / denom) if denom > 0 else math.nan


def lds(attributions: np.ndarray, masks: np.ndarray, values: np.ndarray) -> float:
    """Linear datamodel score: Spearman correlation between ``sum_{i ∈ S} phi_i`` and the measured ``v(S)`` over
    held-out coalitions (arXiv:2407.03153 Section 4, following Park et al. 2023). The paper reports it ×100.

    Args:
        attributions: ``(n,)`` finite per-contributor scores.
        masks: ``(k, n)`` bool held-out coalitions, ``k >= 3``.
        values: ``(k,)`` finite ``v`` measured on them (row ``j`` belongs to ``masks[j]``).

    Returns:
        Spearman's rho in ``[-1, 1]``.

    Raises:
        ValueError: shapes disagree; NaN/inf; ``k < 3``; the predicted sums or the values are constant (the rank
            correlation is undefined; e.g. a size-only score on coalitions of one size).
    """
    phi = np.asarray(attributions, dtype=np.float64)
    sizes = check_shape("attributions", phi, ("n",))
    check_finite("attributions", phi)
    masks, values = _check_samples(masks, values)
    check_shape("masks", masks, ("k", sizes["n"]))
    if masks.shape[0] < 3:
        raise ValueError(f"LDS needs at least 3 held-out coalitions, got {masks.shape[0]}")
    pred = masks.astype(np.float64) @ phi
    rho = _spearman(pred, values)
    if math.isnan(rho):
        which = "predicted sums" if np.ptp(pred) == 0 else "measured values"
        raise ValueError(f"LDS is undefined: the {which} are constant over the {masks.shape[0]} coalitions")
    return rho


def lds_interval(
    attributions: np.ndarray,
    masks: np.ndarray,
    values: np.ndarray,
    *,
    num_resamples: int = 2000,
    level: float = 0.95,
    seed: int = 0,
):
    """:func:`lds` with a percentile bootstrap interval over the held-out coalitions
    (``iclr25_shared.metrics.bootstrap_ci``). A resample whose sums or values are all equal has no rank
    correlation; if any occurs the interval is NaN (this needs very few coalitions or ties in most of them).

    Returns:
        ``iclr25_shared.metrics.Estimate`` (value = :func:`lds`, low, high, n = number of coalitions).

    Raises:
        ValueError: as :func:`lds`; ``num_resamples < 10``.
    """
    from iclr25_shared.metrics import bootstrap_ci

    lds(attributions, masks, values)  # validates and refuses an undefined score
    num_resamples = check_int("num_resamples", num_resamples, low=10)
    pred = np.asarray(masks, dtype=np.float64) @ np.asarray(attributions, dtype=np.float64)
    pairs = np.column_stack([pred, np.asarray(values, dtype=np.float64)])
    return bootstrap_ci(
        pairs,
        statistic=lambda rows: _spearman(rows[:, 0], rows[:, 1]),
        num_resamples=num_resamples,
        level=level,
        seed=seed,
    )
