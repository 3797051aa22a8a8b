"""The universal set and the exact heavy-entry finder for f(x) = |x|^p attention, p even (arXiv:2410.05462).

A_ij = f(⟨q_i, k_j⟩) / Σ_l f(⟨q_i, k_l⟩). Since A_ij ≤ σ_j (the f-sensitivity of key j), every entry ≥ ε lies in a
column of U = {j : σ_j ≥ ε}, and |U| ≤ Σ_j σ_j / ε ≤ d^{p/2} / ε whatever Q is. The finder orthonormalises the
keys (thin QR; whitened keys u_j and dual whitened queries w_i with ⟨w_i, u_j⟩ = ⟨q_i, k_j⟩), computes U from the
leverage scores of φ(u) (the symmetric p/2-th tensor power), the exact row normalisers
Z_i = Σ_l f(⟨q_i, k_l⟩) = ‖R_φ φ(w_i)‖² from the D×D R factor of φ(u), and the weights of the columns in U only,
from the raw q_i and k_j as the brute force does: O(n D² + n_q |U| d) time, O(n d + D² + |U| d + chunk·|U|)
memory, never n². Every step is basis-invariant (K → K M, Q → Q M⁻ᵀ).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from iclr25_levattention._checks import as_matrix, check_eps, check_even_p, check_int, check_rank_tol
from iclr25_levattention._leverage import (
    _chunks,
    _factor_keys,
    _features,
    _FixedBasis,
    _KeyFactor,
    _RFactor,
    _Whitening,
    tensor_dim,
)

__all__ = ["HeavyEntries", "brute_force_heavy_entries", "heavy_entries", "universal_set"]

#: Columns with σ̄_j ≥ eps · (1 − SELECTION_SLACK) enter U. The slack only guards against rounding in σ̄ (it can add
#: columns whose weights are then computed exactly and dropped if below eps); it never removes one.
SELECTION_SLACK = 1e-6


@dataclass(frozen=True)
class HeavyEntries:
    """Every attention weight A_ij ≥ eps, in row-major order.

    Attributes:
        rows: ``(m,)`` int64 query indices i.
        cols: ``(m,)`` int64 key indices j.
        values: ``(m,)`` float64 weights A_ij (≥ eps).
        universal_set: ``(|U|,)`` int64 sorted key indices searched (``None`` for the brute force).
        normalizers: ``(n_queries,)`` float64 row sums Z_i = Σ_l |⟨q_i, k_l⟩|^p.
        degenerate_rows: ``(r,)`` int64 queries orthogonal to every key (Z_i = 0): their row of A is 0/0,
            undefined, reports no entries, and has normaliser 0. Decided scale-free: q_i has no component in the
            span of the keys beyond the rounding level at which the rank of K is decided (in the
            column-equilibrated basis; coordinates where every key is exactly 0 are ignored).
        eps, p: the threshold and exponent.
        rank: rank of φ(K) (Σ_j σ̄_j); ``bound = rank / eps`` ≥ |U| (≤ d^{p/2} / eps).
    """

    rows: np.ndarray
    cols: np.ndarray
    values: np.ndarray
    universal_set: np.ndarray | None
    normalizers: np.ndarray
    degenerate_rows: np.ndarray
    eps: float
    p: int
    rank: int | None = None

    def __len__(self) -> int:
        return int(self.rows.size)

    @property
    def bound(self) -> float | None:
        """The size bound rank(φ(K)) / eps on |U| (Σ σ̄_j / eps)."""
        return None if self.rank is None else self.rank / self.eps

    def pairs(self) -> set[tuple[int, int]]:
        """The entries as a set of ``(i, j)``."""
        return set(zip(self.rows.tolist(), self.cols.tolist()))


def _validate(Q, K, eps, p, routine):
    K = as_matrix("K", K)
    Q = as_matrix("Q", Q, d=K.shape[1]) if Q is not None else None
    return Q, K, check_eps(eps), check_even_p(p, routine)


def universal_set(
    K: np.ndarray, eps: float, p: int = 2, *, rank_tol: float | None = None, chunk_size: int = 4096
) -> np.ndarray:
    """The universal set U = {j : σ̄_j ≥ eps} of key indices for f(x) = |x|^p, p even.

    For **every** query matrix Q and every row i, each A_ij ≥ eps has j ∈ U (A_ij ≤ σ̄_j), and
    |U| ≤ rank(φ(K)) / eps ≤ d^{p/2} / eps independently of n (checked; a violation raises RuntimeError).

    Args:
        K: ``(n, d)`` keys. eps: threshold in (0, 1]. p: positive even integer.
        rank_tol, chunk_size: see :func:`leverage_scores`.

    Returns:
        ``(|U|,)`` int64 sorted indices into the rows of ``K``.

    Raises:
        TypeError, ValueError: bad ``K``, ``eps`` outside (0, 1], odd/non-integer/non-positive ``p`` (use
            :func:`lewis_weights` for those, approximately).

    References:
        arXiv:2410.05462 §2-3 (universal set via f-sensitivities / leverage scores).
    """
    _, K, eps, p = _validate(None, K, eps, p, "universal_set")
    idx, _ = _universal(K, eps, p, check_rank_tol(rank_tol), check_int("chunk_size", chunk_size, low=1))
    return idx


def _universal(K, eps, p, rank_tol, chunk_size) -> tuple[np.ndarray, _KeyFactor]:
    factor = _factor_keys(K, p // 2, rank_tol, chunk_size)
    idx = np.flatnonzero(factor.scores >= eps * (1.0 - SELECTION_SLACK)).astype(np.int64)
    _check_bound(idx.size, factor.rank, eps, K.shape[1], p)
    return idx, factor


def _check_bound(size: int, rank: int, eps: float, d: int, p: int) -> None:
    limit = rank / (eps * (1.0 - SELECTION_SLACK))
    if size > limit + 1e-9 or rank > tensor_dim(d, p // 2):
        raise RuntimeError(
            f"internal error: |U| = {size} exceeds rank/eps = {limit:.1f} (rank {rank}); please report"
        )


def heavy_entries(
    Q: np.ndarray,
    K: np.ndarray,
    eps: float,
    p: int = 2,
    *,
    chunk_size: int = 1024,
    rank_tol: float | None = None,
) -> HeavyEntries:
    """Every attention weight A_ij ≥ eps of A = rownormalise(|QKᵀ|^p), exactly, without forming the n×n matrix.

    Computes U (:func:`universal_set`), the exact normalisers Z_i = Σ_l ⟨q_i, k_l⟩^p = ‖R φ(q_i)‖² (for p = 2 this
    is q_iᵀ(KᵀK)q_i) and A_ij for j ∈ U only, in query chunks. Complete (no entry ≥ eps is missed) and exact (no
    false positives: reported weights are computed, not estimated), up to float64 rounding.

    Args:
        Q: ``(n_q, d)`` queries. K: ``(n, d)`` keys (same d). Any real dtype; computed in float64.
        eps: threshold in (0, 1].
        p: positive even integer (2, 4, ...). Softmax and other p have no such guarantee (see the README).
        chunk_size: queries per chunk (peak extra memory ~ chunk_size · |U| floats).
        rank_tol: relative rank threshold for the leverage scores (see :func:`leverage_scores`).

    Returns:
        :class:`HeavyEntries`.

    Raises:
        TypeError: Q or K not real arrays.
        ValueError: Q/K not 2-D, empty, NaN/Inf, different d; eps outside (0, 1]; p odd, non-integer or ≤ 0.

    References:
        arXiv:2410.05462 §2-3 (Theorem: all entries ≥ eps lie in U; n·poly(d/eps) algorithm).
    """
    Q, K, eps, p = _validate(Q, K, eps, p, "heavy_entries")
    rank_tol = check_rank_tol(rank_tol)
    chunk_size = check_int("chunk_size", chunk_size, low=1)
    idx, factor = _universal(K, eps, p, rank_tol, 4096)
    white = factor.whitening
    return _entries_from_factor(Q, K[idx], idx, white, white, factor.tensor, p, eps, chunk_size)


def _entries_from_factor(
    Q: np.ndarray,
    keys_u: np.ndarray,
    idx: np.ndarray,
    whitening: _Whitening,
    lift: _Whitening | _FixedBasis,
    tensor: _RFactor,
    p: int,
    eps: float,
    chunk_size: int,
) -> HeavyEntries:
    """Entries ≥ eps in the columns ``idx`` (keys ``keys_u``), with normalisers from the whitened tensor factor.

    ``tensor`` is the R factor of φ(lifted keys) for the change of basis ``lift`` (any invertible whitening of the
    keys gives the same normalisers in exact arithmetic); ``whitening`` (the rank-revealing one of all keys) decides
    which queries are orthogonal to every key. The weights' numerators |⟨q_i, k_j⟩|^p are computed from
    the raw vectors, exactly as the brute force does; only Z_i uses the factor.
    """
    n_q = Q.shape[0]
    rank = tensor.whitener()[1]
    rows, cols, vals, degenerate = [], [], [], []
    normalizers = np.zeros(n_q)
    for sl in _chunks(n_q, chunk_size):
        bad = whitening.orthogonal_to_keys(Q[sl])
        z = np.zeros(bad.size)
        if whitening.rank:
            z = tensor.gram_norms(_features(lift.queries(Q[sl]), p // 2))
        bad |= ~(z > 0.0)  # Z underflowed to 0: report the row as 0/0 rather than divide
        z[bad] = 0.0
        normalizers[sl] = z
        degenerate.append(np.flatnonzero(bad) + sl.start)
        if idx.size == 0:
            continue
        weights = np.abs(Q[sl] @ keys_u.T) ** p
        weights /= np.where(bad, np.inf, z)[:, None]  # degenerate rows become 0: nothing reported
        r, c = np.nonzero(weights >= eps)
        rows.append(r + sl.start)
        cols.append(idx[c])
        vals.append(weights[r, c])

    def cat(parts, dt):
        return np.concatenate(parts).astype(dt) if parts else np.zeros(0, dt)

    return HeavyEntries(
        rows=cat(rows, np.int64),
        cols=cat(cols, np.int64),
        values=cat(vals, np.float64),
        universal_set=idx,
        normalizers=normalizers,
        degenerate_rows=cat(degenerate, np.int64),
        eps=eps,
        p=p,
        rank=rank,
    )


def brute_force_heavy_entries(
    Q: np.ndarray, K: np.ndarray, eps: float, p: float = 2, *, chunk_size: int = 512
) -> HeavyEntries:
    """The baseline: every A_ij ≥ eps from the full rows of |QKᵀ|^p, one chunk of queries at a time.

    O(n_q · n · d) time and O(chunk_size · n) extra memory. Accepts any real p > 0 (no structure is used). Rows
    whose normaliser is exactly 0 are reported as degenerate.

    Raises:
        TypeError, ValueError: as :func:`heavy_entries`, and ``p`` ≤ 0.
    """
    K = as_matrix("K", K)
    Q = as_matrix("Q", Q, d=K.shape[1])
    eps = check_eps(eps)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not (float(p) > 0 and np.isfinite(p)):
        raise ValueError(f"p must be a finite real number > 0 for brute_force_heavy_entries, got {p!r}")
    chunk_size = check_int("chunk_size", chunk_size, low=1)
    rows, cols, vals, degenerate = [], [], [], []
    normalizers = np.empty(Q.shape[0])
    for sl in _chunks(Q.shape[0], chunk_size):
        f = Q[sl] @ K.T
        if p == 2:
            np.multiply(f, f, out=f)
        else:
            np.abs(f, out=f)
            np.power(f, p, out=f)
        z = f.sum(axis=1)
        normalizers[sl] = z
        degenerate.append(np.flatnonzero(z <= 0.0) + sl.start)
        r, c = np.nonzero(f >= eps * z[:, None])
        keep = z[r] > 0.0
        r, c = r[keep], c[keep]
        rows.append(r + sl.start)
        cols.append(c)
        vals.append(f[r, c] / z[r])
    return HeavyEntries(
        rows=np.concatenate(rows).astype(np.int64),
        cols=np.concatenate(cols).astype(np.int64),
        values=np.concatenate(vals),
        universal_set=None,
        normalizers=normalizers,
        degenerate_rows=np.concatenate(degenerate).astype(np.int64),
        eps=eps,
        p=int(p) if float(p).is_integer() else p,
    )
