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

__all__ = [
    "INITS",
    "SolverResult",
    "objective",
    "partition_budgets",
    "project_capped_simplex",
    "select",
    "solve",
]

INITS = ("relaxed", "greedy", "score")


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
        starts: per partition, the start whose local optimum was kept: ``"relaxed"``, ``"greedy"`` or ``"score"``.
    """

    indices: np.ndarray
    objective: float
    history: list[float] = field(default_factory=list)
    iterations: int = 0
    converged: bool = True
    budgets: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    starts: list[str] = field(default_factory=list)


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


def project_capped_simplex(y: Any, total: float, *, tol: float = 1e-10, max_iter: int = 200) -> np.ndarray:
    """Euclidean projection of ``y`` onto the capped simplex ``{x ∈ [0, 1]^N : Σ x = total}``.

    The projection is ``clip(y − τ, 0, 1)`` for the unique shift ``τ`` with ``Σ clip(y − τ, 0, 1) = total`` (KKT
    conditions of ``min ‖x − y‖²``). ``s(τ)`` is piecewise linear and non-increasing, so ``τ`` is found by
    safeguarded regula falsi (Illinois) inside a bisection bracket: exact once the bracket holds no breakpoint,
    ``O(N)`` per evaluation.

    Args:
        y: ``(N,)`` finite float point to project.
        total: the sum ``Σ x`` in ``[0, N]``.
        tol: stop when ``|Σ x − total| <= tol · max(1, total)``.
        max_iter: evaluations of ``s(τ)`` at most.

    Returns:
        ``(N,)`` float64 ``x`` with ``0 <= x <= 1`` and ``Σ x = total`` (to ``tol``).

    Raises:
        ValueError: ``total`` outside ``[0, N]`` or non-finite ``y``.
    """
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1 or not np.isfinite(y).all():
        raise ValueError(f"y must be a finite 1-D array, got shape {y.shape}")
    total = check_float("total", total, low=0.0, high=float(y.size))
    lo, hi = float(y.min()) - 1.0, float(y.max())  # s(lo) = N >= total >= 0 = s(hi)
    s_lo, s_hi = float(y.size), 0.0
    side = 0
    x = np.clip(y - hi, 0.0, 1.0)
    for _ in range(max_iter):
        if s_lo - s_hi <= 0:
            break
        tau = lo + (s_lo - total) * (hi - lo) / (s_lo - s_hi)  # linear interpolation of s on [lo, hi]
        if not lo < tau < hi:
            tau = 0.5 * (lo + hi)
        np.subtract(y, tau, out=x)
        np.clip(x, 0.0, 1.0, out=x)
        s = float(x.sum())
        if abs(s - total) <= tol * max(1.0, total):
            return x
        if s > total:
            lo, s_lo = tau, s
            if side == -1:  # Illinois: halve the stale end's excess so the bracket shrinks from both sides
                s_hi = total - 0.5 * (total - s_hi)
            side = -1
        else:
            hi, s_hi = tau, s
            if side == 1:
                s_lo = total + 0.5 * (s_lo - total)
            side = 1
    return np.clip(y - 0.5 * (lo + hi), 0.0, 1.0)


def _relaxed_start(
    scores: np.ndarray, K: sp.csr_matrix, p: int, alpha: float, steps: int, free: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Projected gradient ascent on the continuous relaxation, annealed to a vertex; returns (x_relaxed, mask).

    Maximises ``g_μ(x) = Iᵀx − α xᵀKx − μ‖x‖²`` over ``{x ∈ [0, 1]^N : Σx = p}`` (fixed samples held at 1) by
    ``x ← Π(x + η ∇g_μ(x))``, with ``μ`` moved linearly from ``+μ₀`` to ``−μ₀``, ``μ₀ = α ρ`` and ``ρ`` the largest
    row sum of ``|K|`` (``≥ |λ|`` of ``K``): at ``+μ₀`` the problem is concave (a unique maximiser, reached from any
    start), at ``μ = 0`` it is the plain relaxation of the DQP, and ``−μ₀`` pushes the iterate to a vertex.
    ``‖x‖²`` is constant on binary points with ``Σx = p``, so the schedule never changes the discrete objective.
    Step ``η = 1 / (2(αρ + μ₀))``, the inverse Lipschitz constant of ``∇g_μ``. Rounding: the top-``p`` of ``x``
    (ties: larger ``∇f``, then smaller index).
    """
    n = scores.size
    fixed = ~free
    p_free = p - int(fixed.sum())
    pool = np.flatnonzero(free)
    rho = float(np.abs(K).sum(axis=1).max()) if K.nnz else 0.0
    mu0 = alpha * rho
    x = np.zeros(n)
    x[fixed] = 1.0
    if p_free == 0:
        return x, x.astype(bool)
    x[pool] = p_free / pool.size
    if mu0 > 0:
        eta = 1.0 / (2.0 * (alpha * rho + mu0))
        for t in range(steps):
            mu = mu0 * (1.0 - 2.0 * t / max(1, steps - 1))
            grad = scores - 2.0 * alpha * (K @ x) - 2.0 * mu * x
            x[pool] = project_capped_simplex(x[pool] + eta * grad[pool], p_free)
    grad = scores - 2.0 * alpha * (K @ x)
    mask = fixed.copy()
    mask[_top(x, p_free, grad, pool)] = True
    return x, mask


def _solve_one(
    scores: np.ndarray,
    K: sp.csr_matrix,
    p: int,
    alpha: float,
    iterations: int,
    fixed: np.ndarray,
    refine: bool,
    init: str,
    relax_steps: int = 300,
) -> tuple[np.ndarray, list[float], int, bool, str]:
    """Solve one (sub)problem. Returns (mask, history, steps, converged, start that won)."""
    n = scores.size
    free = np.ones(n, dtype=bool)
    free[fixed] = False
    if init == "relaxed":
        if alpha == 0.0 or p == n or p == fixed.size:
            return (*_solve_one(scores, K, p, alpha, iterations, fixed, refine, "score")[:4], "score")
        _, mask = _relaxed_start(scores, K, p, alpha, relax_steps, free)
        relaxed = _local_search(scores, K, p, alpha, iterations, fixed, refine, mask.astype(np.float64))
        greedy = _solve_one(scores, K, p, alpha, iterations, fixed, refine, "greedy")
        # The better of the two local optima (the relaxed one only when strictly better): never below greedy.
        if relaxed[1][-1] > greedy[1][-1]:
            return (*relaxed, "relaxed")
        return greedy
    x = np.zeros(n, dtype=np.float64)
    x[fixed] = 1.0
    if init == "greedy":
        from iclr25_infomax._baselines import _greedy_order

        x[_greedy_order(scores, K, p, alpha, fixed)] = 1.0
    else:  # the top-(p - |fixed|) free samples by score (the score-only solution, exact at α = 0)
        x[_top(scores, p - fixed.size, scores, np.flatnonzero(free))] = 1.0
    return (*_local_search(scores, K, p, alpha, iterations, fixed, refine, x), init)


def _local_search(
    scores: np.ndarray,
    K: sp.csr_matrix,
    p: int,
    alpha: float,
    iterations: int,
    fixed: np.ndarray,
    refine: bool,
    x: np.ndarray,
) -> tuple[np.ndarray, list[float], int, bool]:
    """Gradient-ordered swap phase, then the exact-gain exchange phase, from the binary start ``x``."""
    n = scores.size
    free = np.ones(n, dtype=bool)
    free[fixed] = False
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


def _independent_swaps(js: np.ndarray, is_: np.ndarray, gains: np.ndarray, K: sp.csr_matrix) -> np.ndarray:
    """Which exchanges ``(i_t → j_t)`` to apply together: a set in which no two share a sample or an edge of ``K``.

    Each exchange gets a unique priority (larger gain first, then smaller ``j``); every sample ``v`` records the
    best priority ``m_v`` of the exchanges touching it, and ``M_v`` is the maximum of ``m`` over ``v`` and its
    ``K``-neighbours. Exchange ``t`` is taken when its priority is ``>= M`` at both of its samples. Two taken
    exchanges that touched or neighboured each other would each have to out-rank the other, so they cannot both be
    taken; the best exchange overall is always taken. Their gains then add up exactly (the objective's pair terms
    between them are zero). ``O(nnz(K) + #exchanges)``, no Python loop.

    Returns:
        ``(T,)`` boolean mask over the exchanges.
    """
    n = K.shape[0]
    order = np.lexsort((js, -gains))
    prio = np.empty(js.size)
    prio[order] = np.arange(js.size, 0, -1, dtype=np.float64)  # unique, larger = better, all > 0
    m = np.zeros(n)
    np.maximum.at(m, js, prio)
    np.maximum.at(m, is_, prio)
    best = m.copy()
    counts = np.diff(K.indptr)
    rows = counts > 0
    if rows.any():
        best[rows] = np.maximum(best[rows], np.maximum.reduceat(m[K.indices], K.indptr[:-1][rows]))
    return (prio >= best[js]) & (prio >= best[is_])


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
        take = _independent_swaps(js, is_, gains, K)
        proposal = x.copy()
        proposal[is_[take]] = 0.0
        proposal[js[take]] = 1.0
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
    init: str = "relaxed",
    relax_steps: int = 300,
) -> SolverResult:
    """InfoMax selection with diagnostics; :func:`select` returns only the indices.

    **Default (``init="relaxed"``): the continuous relaxation.** ``X ∈ {0,1}^N`` is relaxed to the capped simplex
    ``{x ∈ [0, 1]^N : Σx = p}`` and ``x`` follows projected gradient ascent ``x ← Π(x + η∇)`` (``relax_steps``
    steps, one sparse mat-vec and one ``O(N)`` projection each, :func:`project_capped_simplex`) on
    ``Iᵀx − α xᵀKx − μ‖x‖²``, with ``μ`` annealed from a value that makes the problem concave to its negative,
    which drives ``x`` to a vertex (``‖x‖² = p`` on every feasible binary point, so the annealing term never
    changes the DQP's ranking of subsets). The top-``p`` of the final ``x`` is the binary start of the two
    discrete phases below. The same phases are also run from the greedy solution, and the better of the two
    local optima is returned (the relaxed one only when strictly better), so the objective is never below
    :func:`greedy_select`'s.

    **Discrete phases.** The solver then works on the binary iterate ``X`` directly. Each step computes the gradient of the objective,
    ``∇ = I − 2αKX`` (one sparse mat-vec, ``O(N·k)``), and moves toward the top-``p`` indicator of ``∇``: the
    outsiders with the largest gradient replace the insiders with the smallest, as long as the outsider's gradient
    is larger. A step is accepted only if the exact objective increases; otherwise the number of coordinates it may
    swap (the trust region, initially the full jump to ``top-p(∇)``) is halved. This phase stops at a fixed point
    ``X = top-p(∇f(X))``, when a single swap no longer improves, or after ``iterations`` steps. ``init="greedy"``
    starts only from :func:`greedy_select`, ``init="score"`` only from the top-``p`` by score. Every ``init``
    returns exactly the top-``p`` by score (ties to the smaller index) at ``α = 0``, and the objective never falls
    below the start.

    With ``refine=True`` (default) a second phase applies the exact exchange gain, which adds the pair term the
    linearisation misses, ``Δ_ij = ∇_j − ∇_i − α(K_ii + K_jj) + 2αK_ij``: every round takes, for each outsider, its
    best insider partner, and applies the improving exchanges that share no edge of ``K`` (their gains then add up
    exactly; see :func:`_independent_swaps`). It ends at a 1-swap local optimum or after ``iterations`` rounds. Both
    phases are monotone.

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
        init: ``"relaxed"`` (default: relaxation, best of it and greedy), ``"greedy"`` or ``"score"``.
        relax_steps: projected-gradient steps on the relaxation per partition (``init="relaxed"`` only, >= 1).

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
    check_choice("init", init, INITS)
    relax_steps = check_int("relax_steps", relax_steps, low=1)
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
    starts: list[str] = []
    for g, b in zip(groups, budgets):
        if b == 0:
            continue
        sub_K = K if num_parts == 1 else K[g][:, g].tocsr()
        mask, hist, steps, conv, start = _solve_one(
            scores[g],
            sub_K,
            int(b),
            alpha,
            int(iterations),
            np.flatnonzero(is_fixed[g]),
            bool(refine),
            init,
            relax_steps,
        )
        starts.append(start)
        chosen[g[mask]] = True
        history += hist
        steps_total += steps
        all_converged &= conv
    indices = np.flatnonzero(chosen).astype(np.int64)
    if indices.size != p:  # pragma: no cover - guarded by construction
        raise RuntimeError(f"internal error: selected {indices.size} samples, expected {p}")
    value = _value(chosen.astype(np.float64), scores, K, alpha)
    return SolverResult(indices, value, history, steps_total, all_converged, budgets, starts)


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
    init: str = "relaxed",
    relax_steps: int = 300,
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
        relax_steps=relax_steps,
    ).indices
