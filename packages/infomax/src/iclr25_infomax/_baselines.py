"""Baseline selectors with the same call shape as :func:`select`: exactly ``budget`` unique indices.

random, top-k by score (hard-first / easy-first), CCS stratified sampling, k-center greedy, facility location,
greedy on the InfoMax objective, and the exact optimum as a MILP (McCormick linearisation, HiGHS via scipy).
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from iclr25_infomax._solver import _check_alpha
from iclr25_infomax._validate import as_features, as_indices, as_scores, as_similarity, resolve_budget
from iclr25_shared.checks import check_choice, check_float, check_int

__all__ = [
    "ccs_select",
    "facility_location_select",
    "greedy_select",
    "kcenter_select",
    "milp_select",
    "random_select",
    "topk_select",
]

_DIRECTIONS = ("hard_first", "easy_first")


def _seed(seed: Any) -> int:
    return check_int("seed", seed, low=0)


def random_select(n: int, budget: int | float, *, seed: int = 0) -> np.ndarray:
    """``budget`` indices drawn uniformly without replacement from ``range(n)``.

    Returns:
        ``(p,)`` int64 sorted unique indices.

    Raises:
        ValueError: ``n < 1``, bad budget or seed.
    """
    n = check_int("n", n, low=1)
    p = resolve_budget(budget, int(n))
    rng = np.random.default_rng(_seed(seed))
    return np.sort(rng.choice(int(n), size=p, replace=False)).astype(np.int64)


def topk_select(scores: Any, budget: int | float, *, direction: str = "hard_first") -> np.ndarray:
    """The ``budget`` samples with the largest (``hard_first``) or smallest (``easy_first``) scores.

    Ties are broken by the smaller index. Scores follow the package convention: larger = harder / more informative.

    Returns:
        ``(p,)`` int64 sorted unique indices.

    Raises:
        ValueError: bad scores or budget; ``direction`` not ``hard_first`` / ``easy_first``.
    """
    scores = as_scores(scores)
    check_choice("direction", direction, _DIRECTIONS)
    p = resolve_budget(budget, scores.size)
    key = scores if direction == "hard_first" else -scores
    order = np.lexsort((np.arange(scores.size), -key))
    return np.sort(order[:p]).astype(np.int64)


def ccs_select(
    scores: Any,
    budget: int | float,
    *,
    hard_prune: float = 0.1,
    num_strata: int = 50,
    seed: int = 0,
) -> np.ndarray:
    """Coverage-centric coreset selection (CCS): prune the hardest ``hard_prune`` fraction, then sample uniformly
    from ``num_strata`` equal-width score bins, giving every bin an equal share of the budget (bins smaller than their
    share are taken whole and the rest is redistributed).

    If the budget exceeds what is left after hard pruning, the pruned samples are added back easiest-first.

    Returns:
        ``(p,)`` int64 sorted unique indices.

    Raises:
        ValueError: bad scores, budget, seed; ``hard_prune`` outside ``[0, 1)``; ``num_strata < 1``.

    References:
        Zheng et al., "Coverage-centric Coreset Selection for High Pruning Rates", ICLR 2023, arXiv:2210.15809, Alg. 1.
    """
    scores = as_scores(scores)
    n = scores.size
    p = resolve_budget(budget, n)
    hard_prune = check_float("hard_prune", hard_prune, low=0.0, high=1.0, high_inclusive=False)
    num_strata = check_int("num_strata", num_strata, low=1)
    rng = np.random.default_rng(_seed(seed))
    hardest_first = np.lexsort((np.arange(n), -scores))
    n_prune = min(int(np.floor(hard_prune * n)), n - p)
    kept = np.sort(hardest_first[n_prune:])
    s = scores[kept]
    lo, hi = float(s.min()), float(s.max())
    edges = np.linspace(lo, hi, num_strata + 1)
    bins = np.clip(np.searchsorted(edges, s, side="right") - 1, 0, num_strata - 1)
    members = [kept[bins == b] for b in range(num_strata)]
    members = [m for m in members if m.size]
    chosen: list[np.ndarray] = []
    left = p
    for i, m in enumerate(sorted(members, key=len)):  # smallest strata first, as in CCS
        share = left // (len(members) - i)
        take = min(m.size, share)
        chosen.append(rng.choice(m, size=take, replace=False))
        left -= take
    out = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)
    if left > 0:  # rounding left a few: fill uniformly from the remaining kept samples
        rest = np.setdiff1d(kept, out)
        out = np.concatenate([out, rng.choice(rest, size=left, replace=False)])
    return np.sort(out).astype(np.int64)


def kcenter_select(
    features: Any,
    budget: int | float,
    *,
    seed: int = 0,
    initial: Any = None,
    metric: str = "euclidean",
    return_radius: bool = False,
) -> Any:
    """k-center greedy (farthest-first traversal): repeatedly add the sample farthest from the selected centres.

    Starts from ``initial`` if given, else from one sample drawn with ``seed``. The initial set counts toward
    ``budget``: exactly ``budget`` indices come back. Ties are broken by the smaller index, so the traversal is
    deterministic given the start.

    Args:
        features: ``(N, d)`` finite features.
        budget: count or fraction.
        seed: picks the first centre when ``initial`` is not given.
        initial: unique indices already selected (at most ``budget``).
        metric: ``"euclidean"``, or ``"cosine"`` (euclidean on L2-normalised rows).
        return_radius: also return the covering radius ``max_i min_{c∈S} ‖f_i − f_c‖``.

    Returns:
        ``(p,)`` int64 indices in selection order (``initial`` first), or ``(indices, radius)``.

    Raises:
        ValueError: bad features, budget, seed, metric, or an initial set larger than the budget.

    References:
        Sener & Savarese, "Active Learning for Convolutional Neural Networks: A Core-Set Approach", ICLR 2018.
    """
    x = as_features(features).astype(np.float64)
    n = x.shape[0]
    p = resolve_budget(budget, n)
    check_choice("metric", metric, ("euclidean", "cosine"))
    if metric == "cosine":
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        x = x / np.where(norms == 0, 1.0, norms)
    start = as_indices([] if initial is None else initial, n, name="initial")
    if start.size > p:
        raise ValueError(f"initial has {start.size} indices, more than the budget {p}")
    if start.size == 0:
        start = np.array([np.random.default_rng(_seed(seed)).integers(n)], dtype=np.int64)
    sq = (x * x).sum(axis=1)
    min_d = np.full(n, np.inf)
    dist = np.empty(n)
    order = list(start.tolist())
    # One mat-vec per centre, updated in place; single-threaded BLAS (thread wake-ups dominate a gemv on a busy
    # machine).
    with threadpool_limits(limits=1, user_api="blas"):

        def add(c: int) -> None:
            np.matmul(x, x[c], out=dist)
            np.multiply(dist, -2.0, out=dist)
            np.add(dist, sq, out=dist)
            np.add(dist, sq[c], out=dist)
            np.minimum(min_d, dist, out=min_d)

        for c in start:
            add(int(c))
        min_d[start] = -1.0
        while len(order) < p:
            c = int(np.argmax(min_d))  # first maximum: deterministic
            order.append(c)
            add(c)
            min_d[c] = -1.0
    idx = np.asarray(order, dtype=np.int64)
    if return_radius:
        radius = float(np.sqrt(max(0.0, float(np.max(np.where(min_d < 0, 0.0, min_d))))))
        return idx, radius
    return idx


def facility_location_select(
    similarity: Any,
    budget: int | float,
    *,
    self_similarity: float = 1.0,
    initial: Any = None,
    return_gains: bool = False,
) -> Any:
    """Facility location by lazy greedy: maximise ``Σ_i max_{s∈S} K_is`` over ``|S| = budget``.

    Each sample covers itself with ``self_similarity`` (1 for cosine) and its graph neighbours with ``K``.
    Exactly ``budget`` unique indices come back (``initial`` counts toward it), with marginal gains that never
    increase (submodularity; cf. apricot issue #19).

    Args:
        similarity: ``(N, N)`` non-negative symmetric ``K`` (dense or sparse).
        budget: count or fraction.
        self_similarity: coverage of a sample by itself, >= 0.
        initial: unique indices already selected.
        return_gains: also return the ``(p,)`` marginal gains in selection order.

    Returns:
        ``(p,)`` int64 indices in selection order, or ``(indices, gains)``.

    References:
        Mirzasoleiman et al., "Coresets for Data-efficient Training of Machine Learning Models" (CRAIG), ICML 2020;
        Minoux, "Accelerated greedy algorithms for maximizing submodular set functions", 1978 (lazy greedy).
    """
    self_similarity = check_float("self_similarity", self_similarity, low=0.0)
    if sp.issparse(similarity) or np.ndim(similarity) == 2:
        n = similarity.shape[0]
    else:
        raise ValueError("similarity must be a (N, N) matrix")
    K = as_similarity(similarity, n)
    K = K.tolil()
    K.setdiag(float(self_similarity))
    K = K.tocsr()
    p = resolve_budget(budget, n)
    start = as_indices([] if initial is None else initial, n, name="initial")
    if start.size > p:
        raise ValueError(f"initial has {start.size} indices, more than the budget {p}")
    indptr, indices, data = K.indptr, K.indices, K.data
    cover = np.zeros(n)
    selected = np.zeros(n, dtype=bool)
    order: list[int] = []
    gains: list[float] = []

    def gain(c: int) -> float:
        nb = indices[indptr[c] : indptr[c + 1]]
        return float(np.maximum(data[indptr[c] : indptr[c + 1]] - cover[nb], 0.0).sum())

    def take(c: int, g: float) -> None:
        nb = indices[indptr[c] : indptr[c + 1]]
        np.maximum.at(cover, nb, data[indptr[c] : indptr[c + 1]])
        selected[c] = True
        order.append(c)
        gains.append(g)

    for c in start:
        take(int(c), gain(int(c)))
    # Initial upper bounds: the gain with the current coverage (exact), then lazy re-evaluation.
    rowsum = np.asarray([gain(i) for i in range(n)]) if start.size else np.asarray(K.sum(axis=1)).ravel()
    heap = [(-float(rowsum[i]), i) for i in range(n) if not selected[i]]
    heapq.heapify(heap)
    while len(order) < p:
        _neg, c = heapq.heappop(heap)
        g = gain(c)
        if not heap or g >= -heap[0][0] - 1e-12 * max(1.0, abs(g)):
            take(c, g)
        else:
            heapq.heappush(heap, (-g, c))
    idx = np.asarray(order, dtype=np.int64)
    return (idx, np.asarray(gains)) if return_gains else idx


def _greedy_order(
    scores: np.ndarray,
    K: sp.csr_matrix,
    p: int,
    alpha: float,
    start: np.ndarray,
    *,
    return_gains: bool = False,
) -> Any:
    """Exact lazy greedy on validated inputs; returns the selection order (and the gains)."""
    n = scores.size
    gain = scores - alpha * K.diagonal()
    selected = np.zeros(n, dtype=bool)
    order: list[int] = []
    gains: list[float] = []
    indptr, indices, data = K.indptr, K.indices, K.data

    def take(c: int) -> None:
        gains.append(float(gain[c]))
        selected[c] = True
        order.append(c)
        sl = slice(indptr[c], indptr[c + 1])
        gain[indices[sl]] -= 2.0 * alpha * data[sl]

    for c in start:
        take(int(c))
    heap = list(zip((-gain[~selected]).tolist(), np.flatnonzero(~selected).tolist()))
    heapq.heapify(heap)
    while len(order) < p:
        neg, c = heapq.heappop(heap)
        if selected[c]:
            continue
        if -neg != gain[c]:  # stale (gains only decrease): re-insert with the current value
            heapq.heappush(heap, (-float(gain[c]), c))
            continue
        take(c)
    idx = np.asarray(order, dtype=np.int64)
    return (idx, np.asarray(gains)) if return_gains else idx


def greedy_select(
    scores: Any,
    similarity: Any,
    budget: int | float,
    *,
    alpha: float = 1.0,
    initial: Any = None,
    return_gains: bool = False,
) -> Any:
    """Greedy on the InfoMax objective: add ``argmax_z I(z) − α(K_zz + 2 Σ_{s∈S} K_zs)`` until ``|S| = budget``.

    The marginal gain is exact (the objective counts ordered pairs). Gains only fall as ``S`` grows (``K >= 0``), so
    a heap with lazy re-insertion gives the exact greedy sequence in ``O((N + p·k) log N)``. Ties go to the smaller
    index. Greedy keeps adding while the gain is negative: the budget is exact.

    Returns:
        ``(p,)`` int64 indices in selection order (``initial`` first), or ``(indices, gains)``.

    Raises:
        ValueError / TypeError: as for :func:`select`.

    References:
        Nemhauser, Wolsey & Fisher, "An analysis of approximations for maximizing submodular set functions", 1978;
        objective from Tan et al., ICLR 2025, arXiv:2506.01701, §3.
    """
    scores = as_scores(scores)
    n = scores.size
    K = as_similarity(similarity, n)
    p = resolve_budget(budget, n)
    alpha = _check_alpha(alpha)
    start = as_indices([] if initial is None else initial, n, name="initial")
    if start.size > p:
        raise ValueError(f"initial has {start.size} indices, more than the budget {p}")
    idx, gains = _greedy_order(scores, K, p, alpha, start, return_gains=True)
    return (idx, gains) if return_gains else idx


def milp_select(
    scores: Any,
    similarity: Any,
    budget: int | float,
    *,
    alpha: float = 1.0,
    time_limit: float | None = 60.0,
    max_n: int = 400,
) -> np.ndarray:
    """The exact InfoMax optimum as a mixed-integer linear program (for small instances).

    McCormick linearisation of ``x_i x_j`` for each stored pair ``i < j``: ``y_ij >= x_i + x_j − 1``, ``y_ij >= 0``;
    the upper McCormick bounds are not needed because ``K >= 0`` and the objective pushes ``y`` down. Solved by HiGHS
    through ``scipy.optimize.milp``.

    Args:
        scores, similarity, budget, alpha: as for :func:`select`.
        time_limit: seconds for HiGHS (``None`` = no limit).
        max_n: refuse larger instances (the MILP is exponential in the worst case).

    Returns:
        ``(p,)`` int64 sorted unique indices of an optimal selection.

    Raises:
        ValueError: ``N > max_n``, or HiGHS stopped without proving optimality.

    References:
        McCormick, "Computability of global solutions to factorable nonconvex programs", 1976.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp

    scores = as_scores(scores)
    n = scores.size
    if n > max_n:
        raise ValueError(f"milp_select is for small instances: N = {n} > max_n = {max_n}")
    K = as_similarity(similarity, n)
    p = resolve_budget(budget, n)
    alpha = _check_alpha(alpha)
    upper = sp.triu(K, k=1).tocoo()
    m = upper.nnz
    ii, jj, kk = upper.row, upper.col, upper.data
    # minimise  -(I - α diag)·x + 2α Σ_{i<j} K_ij y_ij
    c = np.concatenate([-(scores - alpha * K.diagonal()), 2.0 * alpha * kk])
    rows = [sp.hstack([sp.csr_matrix(np.ones((1, n))), sp.csr_matrix((1, m))])]
    lb = [p]
    ub = [p]
    if m:
        e = np.arange(m)
        A = sp.csr_matrix(
            (
                np.concatenate([np.ones(m), np.ones(m), -np.ones(m)]),
                (np.tile(e, 3), np.concatenate([ii, jj, n + e])),
            ),
            shape=(m, n + m),
        )
        rows.append(A)  # x_i + x_j - y_ij <= 1
        lb += [-np.inf] * m
        ub += [1.0] * m
    A_all = sp.vstack(rows).tocsr()
    integrality = np.concatenate([np.ones(n), np.zeros(m)])
    options = {"time_limit": time_limit} if time_limit else {}
    res = milp(
        c,
        constraints=LinearConstraint(A_all, np.asarray(lb, float), np.asarray(ub, float)),
        integrality=integrality,
        bounds=Bounds(np.zeros(n + m), np.ones(n + m)),
        options=options,
    )
    if res.status != 0 or res.x is None:
        raise ValueError(f"MILP did not reach proven optimality (status {res.status}: {res.message})")
    x = np.round(res.x[:n]).astype(bool)
    idx = np.flatnonzero(x).astype(np.int64)
    if idx.size != p:  # pragma: no cover - HiGHS honours the equality
        raise RuntimeError(f"MILP returned {idx.size} samples, expected {p}")
    return idx
