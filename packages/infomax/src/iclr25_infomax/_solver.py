"""The InfoMax discrete quadratic program and its gradient-based solver (Tan et al., ICLR 2025, §3).

    max_{X ∈ {0,1}^N}  Σ_z X_z I(z) − α Σ_{z,s} K_{z,s} X_z X_s     subject to  Σ_z X_z = p

``I`` are per-sample importance scores, ``K`` a symmetric non-negative similarity (kNN-sparsified), ``α ≥ 0`` the
redundancy weight.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from iclr25_infomax._validate import as_indices, as_scores, as_similarity, resolve_budget
from iclr25_shared.checks import check_choice, check_float, check_int

__all__ = ["SolverResult", "objective", "partition_budgets", "select", "solve"]


def _check_alpha(alpha: Any) -> float:
    return check_float("alpha", alpha, low=0.0)


def _mask(selection: Any, n: int) -> np.ndarray:
    arr = np.asarray(selection)
    if arr.dtype == bool:
        if arr.shape != (n,):
            raise ValueError(f"selection as a boolean mask must have shape ({n},), got {arr.shape}")
        return arr.astype(np.float64)
    idx = as_indices(arr, n, name="selection")
    x = np.zeros(n, dtype=np.float64)
    x[idx] = 1.0
    return x


def _value(x: np.ndarray, scores: np.ndarray, K: sp.csr_matrix, alpha: float) -> float:
    # Element-wise products, not BLAS dots: multi-threaded level-1 BLAS is very slow on busy machines.
    return float((scores * x).sum() - alpha * (x * (K @ x)).sum())


def objective(selection: Any, scores: Any, similarity: Any, *, alpha: float = 1.0) -> float:
    """The InfoMax objective of a selection: ``Σ_{z∈S} I(z) − α Σ_{z∈S} Σ_{s∈S} K_{z,s}``.

    The double sum runs over ordered pairs, so each unordered pair counts twice, and the diagonal ``K_{z,z}`` counts
    once per selected sample (zero for :func:`knn_similarity`, which stores no self-similarity).

    Args:
        selection: ``(p,)`` unique int indices, or an ``(N,)`` boolean mask.
        scores: ``(N,)`` importance ``I``.
        similarity: ``(N, N)`` non-negative ``K``, dense or scipy sparse.
        alpha: redundancy weight ``α >= 0``.

    Returns:
        The objective as a Python float.

    Raises:
        ValueError / TypeError: as for :func:`select`, or repeated / out-of-range indices.

    References:
        Tan et al., "Data Pruning by Information Maximization", ICLR 2025, arXiv:2506.01701, §3 (the DQP objective).
    """
    scores = as_scores(scores)
    K = as_similarity(similarity, scores.size)
    return _value(_mask(selection, scores.size), scores, K, _check_alpha(alpha))


@dataclass(frozen=True)
class SolverResult:
    """What :func:`solve` returns.

    Attributes:
        indices: ``(p,)`` int64, sorted, unique: the selected samples.
        objective: the InfoMax objective of ``indices`` on the full ``K`` (cross-partition pairs included).
        history: objective of the accepted iterate after each solver step, per partition concatenated
            (non-decreasing within a partition).
        iterations: gradient steps taken (accepted and rejected), summed over partitions.
        converged: every partition stopped at a fixed point (no improving swap left) rather than at ``iterations``.
        budgets: ``(P,)`` the per-partition budgets (they sum to ``p``).
    """

    indices: np.ndarray
    objective: float
    history: list[float] = field(default_factory=list)
    iterations: int = 0
    converged: bool = True
    budgets: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def _ordered(
    candidates: np.ndarray, key: np.ndarray, tiebreak: np.ndarray, *, descending: bool
) -> np.ndarray:
    """``candidates`` sorted by ``key`` (then ``tiebreak``, then index), all in the same direction of preference."""
    sign = -1.0 if descending else 1.0
    return candidates[np.lexsort((candidates, sign * tiebreak[candidates], sign * key[candidates]))]


def _top(values: np.ndarray, m: int, tiebreak: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """The ``m`` entries of ``pool`` with the largest ``values`` (ties: larger ``tiebreak``, then smaller index)."""
    if m <= 0:
        return pool[:0]
    if m >= pool.size:
        return _ordered(pool, values, tiebreak, descending=True)
    vals = values[pool]
    kth = np.partition(vals, pool.size - m)[pool.size - m]
    cand = pool[vals >= kth]
    return _ordered(cand, values, tiebreak, descending=True)[:m]


def _solve_one(
    scores: np.ndarray,
    K: sp.csr_matrix,
    p: int,
    alpha: float,
    iterations: int,
    fixed: np.ndarray,
    refine: bool,
    init: str,
) -> tuple[np.ndarray, list[float], int, bool]:
    """Solve one (sub)problem. Returns (mask, history, steps, converged)."""
    n = scores.size
    free = np.ones(n, dtype=bool)
    free[fixed] = False
    x = np.zeros(n, dtype=np.float64)
    x[fixed] = 1.0
    if init == "greedy":
        from iclr25_infomax._baselines import _greedy_order

        x[_greedy_order(scores, K, p, alpha, fixed)] = 1.0
    else:  # the top-(p - |fixed|) free samples by score (the score-only solution, exact at α = 0)
        x[_top(scores, p - fixed.size, scores, np.flatnonzero(free))] = 1.0
    value = _value(x, scores, K, alpha)
    history = [value]
    if alpha == 0.0 or p == n or p == fixed.size:
        return x.astype(bool), history, 0, True
    trust = p - fixed.size  # how many coordinates one step may swap: start with the full jump to top-p(∇)
    steps = 0
    converged = False
    while steps < iterations:
        steps += 1
        grad = scores - 2.0 * alpha * (K @ x)  # ∇f(X) for symmetric K
        inside = np.flatnonzero((x > 0) & free)
        outside = np.flatnonzero(x == 0)
        # Move toward the top-p indicator of the gradient: the best outsiders replace the worst insiders.
        worst_in = _ordered(inside, grad, scores, descending=False)
        best_out = _top(grad, min(trust, worst_in.size), scores, outside)
        m = int(np.count_nonzero(grad[best_out] > grad[worst_in[: best_out.size]]))
        if m == 0:
            converged = True  # X = top-p(∇f(X)): a fixed point of the linearised problem
            break
        m = min(m, trust)
        proposal = x.copy()
        proposal[worst_in[:m]] = 0.0
        proposal[best_out[:m]] = 1.0
        new_value = _value(proposal, scores, K, alpha)
        if new_value > value:  # monotone acceptance
            x, value = proposal, new_value
            history.append(value)
            trust = min(2 * trust, p - fixed.size)
        else:
            if trust == 1:
                converged = True  # no single gradient-ordered swap improves
                break
            trust = max(1, min(trust, m) // 2)
    if refine:
        x, more, extra, conv2 = _refine(scores, K, x, alpha, iterations, free, value)
        history += more
        steps += extra
        converged = converged and conv2
    return x.astype(bool), history, steps, converged


def _best_swaps(
    x: np.ndarray, grad: np.ndarray, K: sp.csr_matrix, diag: np.ndarray, alpha: float, free: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every outsider ``j``, the insider ``i`` whose exchange gains most, with the exact gain

    ``Δ_ij = ∇_j − ∇_i − α(K_ii + K_jj) + 2α K_ij``  (``f(X − e_i + e_j) − f(X)`` for the quadratic objective).
    Returns (outsiders j, partners i, gains Δ), only where ``Δ > 0``.
    """
    inside = np.flatnonzero((x > 0) & free)
    outside = np.flatnonzero(x == 0)
    if inside.size == 0 or outside.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0)
    h = np.full(x.size, np.inf)
    h[inside] = grad[inside] + alpha * diag[inside]
    i_min = inside[int(np.argmin(h[inside]))]
    best_val = np.full(x.size, h[i_min])
    best_i = np.full(x.size, i_min, dtype=np.int64)
    # Neighbours in X can be cheaper partners: h_i - 2α K_ji over the stored entries of row j (O(nnz), no sort).
    cand = h[K.indices] - 2.0 * alpha * K.data
    counts = np.diff(K.indptr)
    nonempty = counts > 0
    if np.isfinite(cand).any() and nonempty.any():
        row_min = np.full(x.size, np.inf)
        row_min[nonempty] = np.minimum.reduceat(cand, K.indptr[:-1][nonempty])
        rows = np.repeat(np.arange(x.size), counts)
        hit = np.flatnonzero((cand == row_min[rows]) & np.isfinite(cand))
        first = hit[np.r_[True, rows[hit][1:] != rows[hit][:-1]]]  # first (smallest column) minimum per row
        r, c, v = rows[first], K.indices[first], cand[first]
        better = v < best_val[r]
        best_val[r[better]] = v[better]
        best_i[r[better]] = c[better]
    gain = grad[outside] - alpha * diag[outside] - best_val[outside]
    pos = gain > 1e-12 * max(1.0, float(np.abs(grad).max()))
    return outside[pos], best_i[outside[pos]], gain[pos]


def _refine(
    scores: np.ndarray,
    K: sp.csr_matrix,
    x: np.ndarray,
    alpha: float,
    iterations: int,
    free: np.ndarray,
    value: float,
) -> tuple[np.ndarray, list[float], int, bool]:
    """Exact-gain swap polish: apply batches of improving exchanges whose samples share no edge of ``K``
    (their gains then add up exactly), until no exchange improves or ``iterations`` rounds are spent."""
    diag = K.diagonal()
    history: list[float] = []
    steps = 0
    while steps < iterations:
        steps += 1
        grad = scores - 2.0 * alpha * (K @ x)
        js, is_, gains = _best_swaps(x, grad, K, diag, alpha, free)
        if js.size == 0:
            return x, history, steps, True
        order = np.lexsort((js, -gains))
        blocked = np.zeros(x.size, dtype=bool)
        proposal = x.copy()
        for t in order:
            j, i = int(js[t]), int(is_[t])
            if blocked[j] or blocked[i]:
                continue
            proposal[i], proposal[j] = 0.0, 1.0
            for v in (i, j):
                blocked[v] = True
                blocked[K.indices[K.indptr[v] : K.indptr[v + 1]]] = True
        new_value = _value(proposal, scores, K, alpha)
        if not new_value > value:  # cannot happen for independent swaps, except through rounding
            return x, history, steps, True
        x, value = proposal, new_value
        history.append(value)
    return x, history, steps, False


def partition_budgets(sizes: Any, budget: int, fixed_counts: Any = None) -> np.ndarray:
    """Split ``budget`` over partitions in proportion to their sizes so the parts sum to ``budget`` exactly.

    Largest-remainder rounding of ``budget * size / N``; each part gets at least its fixed count and at most its size.

    Args:
        sizes: ``(P,)`` partition sizes (positive ints).
        budget: total count ``p``.
        fixed_counts: ``(P,)`` samples already fixed in each part (default zeros).

    Returns:
        ``(P,)`` int64 budgets with ``sum == budget``.

    Raises:
        ValueError: ``budget`` exceeds the total size, or the fixed counts alone exceed ``budget``.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    fixed = np.zeros_like(sizes) if fixed_counts is None else np.asarray(fixed_counts, dtype=np.int64)
    total = int(sizes.sum())
    if not 0 <= budget <= total:
        raise ValueError(f"budget must be in [0, {total}], got {budget}")
    if int(fixed.sum()) > budget:
        raise ValueError(f"initial set has {int(fixed.sum())} samples, more than the budget {budget}")
    quota = budget * sizes / total
    base = np.maximum(np.floor(quota).astype(np.int64), fixed)
    base = np.minimum(base, sizes)
    while base.sum() > budget:  # fixed counts pushed some parts up: take back from the largest surpluses
        surplus = np.where(base > fixed, base - quota, -np.inf)
        base[int(np.argmax(surplus))] -= 1
    remainder = quota - base
    order = np.lexsort((np.arange(sizes.size), -remainder))
    left = budget - int(base.sum())
    while left > 0:
        for g in order:
            if left == 0:
                break
            if base[g] < sizes[g]:
                base[g] += 1
                left -= 1
    return base


def _partition_labels(partitions: Any, n: int, p: int, seed: int) -> np.ndarray:
    if isinstance(partitions, bool):
        raise TypeError(f"partitions must be an int count or an (N,) array of group ids, got {partitions!r}")
    if isinstance(partitions, (int, np.integer)):
        count = check_int("partitions", partitions, low=1)
        if count > p:
            raise ValueError(
                f"partitions must be <= budget ({p}) so every partition selects a sample, got {count}"
            )
        if count == 1:
            return np.zeros(n, dtype=np.int64)
        labels = np.empty(n, dtype=np.int64)
        labels[np.random.default_rng(seed).permutation(n)] = np.arange(n) % count
        return labels
    arr = np.asarray(partitions)
    if arr.shape != (n,) or not np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool:
        raise ValueError(
            f"partitions as group ids must be an int array of shape ({n},), got {arr.dtype} {arr.shape}"
        )
    _, labels = np.unique(arr, return_inverse=True)
    if labels.max() + 1 > p:
        raise ValueError(f"partitions has {labels.max() + 1} groups, more than the budget {p}")
    return labels.astype(np.int64)


def solve(
    scores: Any,
    similarity: Any,
    budget: int | float,
    *,
    alpha: float = 1.0,
    iterations: int = 100,
    partitions: int | np.ndarray = 1,
    seed: int = 0,
    initial: Any = None,
    refine: bool = True,
    init: str = "greedy",
) -> SolverResult:
    """InfoMax selection with diagnostics; :func:`select` returns only the indices.

    The solver works on the binary iterate ``X`` directly. Each step computes the gradient of the objective,
    ``∇ = I − 2αKX`` (one sparse mat-vec, ``O(N·k)``), and moves toward the top-``p`` indicator of ``∇``: the
    outsiders with the largest gradient replace the insiders with the smallest, as long as the outsider's gradient
    is larger. A step is accepted only if the exact objective increases; otherwise the number of coordinates it may
    swap (the trust region, initially the full jump to ``top-p(∇)``) is halved. This phase stops at a fixed point
    ``X = top-p(∇f(X))``, when a single swap no longer improves, or after ``iterations`` steps. By default
    (``init="greedy"``) ``X`` starts from :func:`greedy_select`, so the result is never worse than greedy;
    ``init="score"`` starts from the top-``p`` by score, as the paper describes. Either way ``α = 0`` returns exactly
    the top-``p`` by score (ties to the smaller index) and the objective never falls below the start.

    With ``refine=True`` (default) a second phase applies the exact exchange gain, which adds the pair term the
    linearisation misses, ``Δ_ij = ∇_j − ∇_i − α(K_ii + K_jj) + 2αK_ij``: every round takes, for each outsider, its
    best insider partner, and applies the improving exchanges that share no edge of ``K`` (their gains then add up
    exactly). It ends at a 1-swap local optimum or after ``iterations`` rounds. Both phases are monotone.

    Partitioning (``partitions > 1``) assigns samples to random, equal-size parts (seeded), gives each part a budget
    proportional to its size (the budgets sum to ``p`` exactly) and solves each part on its own block of ``K``
    (cross-part similarities are ignored while solving, but counted in the reported objective).

    Args:
        scores: ``(N,)`` float importance ``I(z)``; larger = more informative. NaN/Inf are refused.
        similarity: ``(N, N)`` non-negative similarity ``K`` (dense or scipy sparse, e.g. from
            :func:`knn_similarity`). Asymmetric input is replaced by ``(K + Kᵀ)/2`` (same objective).
        budget: ``p`` as an int count in ``[1, N]`` or a float fraction in ``(0, 1]``.
        alpha: redundancy weight ``α >= 0`` (0 = top-p by score).
        iterations: maximum gradient steps per partition (>= 1).
        partitions: number of random parts ``P`` (1 = no partitioning, at most ``p``), or an ``(N,)`` int array
            of group ids (e.g. class labels for class-balanced selection).
        seed: seeds the random partition; the solver itself is deterministic.
        initial: optional unique indices that must be selected (a warm start / fixed seed set); they count toward
            ``budget``.
        refine: run the exact-gain exchange phase after the gradient phase (our addition; see README).
        init: ``"greedy"`` (default; our choice) or ``"score"`` (top-p by score, the paper's start).

    Returns:
        A :class:`SolverResult`.

    Raises:
        TypeError: non-numeric inputs, or ``budget``/``alpha``/``partitions`` of the wrong type.
        ValueError: NaN/Inf scores or similarities, negative similarities, shape mismatch, budget outside
            ``[1, N]`` or ``(0, 1]``, ``alpha < 0``, ``iterations < 1``, ``partitions > budget``, or an initial set
            larger than the budget, or an unknown ``init``.

    References:
        Tan et al., "Data Pruning by Information Maximization", ICLR 2025, arXiv:2506.01701, §3 (DQP objective,
        gradient-based solver, kNN sparsification, dataset partitioning). The official code was not available;
        the step rule above is our reading of the paper (see the package README, "Deviations").
    """
    scores = as_scores(scores)
    n = scores.size
    K = as_similarity(similarity, n)
    p = resolve_budget(budget, n)
    alpha = _check_alpha(alpha)
    iterations = check_int("iterations", iterations, low=1)
    seed = check_int("seed", seed, low=0)
    check_choice("init", init, ("score", "greedy"))
    fixed = as_indices([] if initial is None else initial, n, name="initial")
    if fixed.size > p:
        raise ValueError(f"initial has {fixed.size} indices, more than the budget {p}")
    labels = _partition_labels(partitions, n, p, int(seed))
    num_parts = int(labels.max()) + 1
    is_fixed = np.zeros(n, dtype=bool)
    is_fixed[fixed] = True
    if num_parts == 1:
        groups = [np.arange(n)]
    else:
        order = np.argsort(labels, kind="stable")
        groups = np.split(order, np.cumsum(np.bincount(labels, minlength=num_parts))[:-1])
    sizes = np.array([g.size for g in groups])
    budgets = partition_budgets(sizes, p, [int(is_fixed[g].sum()) for g in groups])
    chosen = np.zeros(n, dtype=bool)
    history: list[float] = []
    steps_total = 0
    all_converged = True
    for g, b in zip(groups, budgets):
        if b == 0:
            continue
        sub_K = K if num_parts == 1 else K[g][:, g].tocsr()
        mask, hist, steps, conv = _solve_one(
            scores[g], sub_K, int(b), alpha, int(iterations), np.flatnonzero(is_fixed[g]), bool(refine), init
        )
        chosen[g[mask]] = True
        history += hist
        steps_total += steps
        all_converged &= conv
    indices = np.flatnonzero(chosen).astype(np.int64)
    if indices.size != p:  # pragma: no cover - guarded by construction
        raise RuntimeError(f"internal error: selected {indices.size} samples, expected {p}")
    value = _value(chosen.astype(np.float64), scores, K, alpha)
    return SolverResult(indices, value, history, steps_total, all_converged, budgets)


def select(
    scores: Any,
    similarity: Any,
    budget: int | float,
    *,
    alpha: float = 1.0,
    iterations: int = 100,
    partitions: int | np.ndarray = 1,
    seed: int = 0,
    initial: Any = None,
    refine: bool = True,
    init: str = "greedy",
) -> np.ndarray:
    """Select a coreset by InfoMax: exactly ``budget`` unique indices maximising importance minus redundancy.

    See :func:`solve` for the algorithm, arguments and errors; this returns ``solve(...).indices``.

    Returns:
        ``(p,)`` int64 sorted unique indices into ``scores``.

    References:
        Tan et al., "Data Pruning by Information Maximization", ICLR 2025, arXiv:2506.01701, §3.
    """
    return solve(
        scores,
        similarity,
        budget,
        alpha=alpha,
        iterations=iterations,
        partitions=partitions,
        seed=seed,
        initial=initial,
        refine=refine,
        init=init,
    ).indices
