"""Leverage scores, f-sensitivities of f(x) = |x|^p for even p, and ℓ_p Lewis weights.

Everything here is float64 numpy. Leverage scores are computed from a rank-revealing factorisation: the rows are
streamed through a TSQR (R of ``[R; block]``), then the SVD of the small ``R`` gives the numerical rank with a
threshold, so rank-deficient inputs (e.g. the symmetric tensor powers used for p = 4) do not over-count the way a
plain QR does (a plain QR of the rank-21 φ(K) for d = 6, p = 4 gives Σ τ = 36 instead of 21; see the tests).

References:
    Kannan, Bhattacharyya, Kacham, Woodruff. "LevAttention: Time, Space and Streaming Efficient Algorithm for
    Heavy Attentions", ICLR 2025, arXiv:2410.05462 (f-sensitivities, universal set, §2-3).
    Cohen, Peng. "Lp Row Sampling by Lewis Weights", STOC 2015, arXiv:1412.0588 (the Lewis-weight iteration).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from iclr25_levattention._checks import as_matrix, check_even_p, check_int, check_rank_tol
from iclr25_shared.checks import check_float

__all__ = ["leverage_scores", "lewis_weights", "sensitivities", "symmetric_tensor_features", "tensor_dim"]

_EPS64 = float(np.finfo(np.float64).eps)


def tensor_dim(d: int, degree: int) -> int:
    """Dimension ``C(d + degree - 1, degree)`` of the symmetric tensor power of R^d (the feature map below)."""
    return math.comb(d + degree - 1, degree)


@lru_cache(maxsize=32)
def _monomials(d: int, degree: int) -> tuple[np.ndarray, np.ndarray]:
    combos = np.asarray(list(itertools.combinations_with_replacement(range(d), degree)), dtype=np.int64)
    weights = np.empty(len(combos))
    fact = math.factorial(degree)
    for i, combo in enumerate(combos):
        counts = np.bincount(combo, minlength=1)
        weights[i] = math.sqrt(fact / math.prod(math.factorial(int(c)) for c in counts))
    return combos, weights


def symmetric_tensor_features(X: np.ndarray, degree: int) -> np.ndarray:
    """Feature map φ with ⟨φ(x), φ(y)⟩ = ⟨x, y⟩^degree exactly (the symmetric part of x^{⊗degree}).

    φ_α(x) = sqrt(degree! / α!) · x^α over the multi-indices α with |α| = degree, so the rows of φ(K) span the same
    space as the rows of K^{⊗degree} with C(d + degree − 1, degree) columns instead of d^degree.

    Args:
        X: ``(n, d)`` real array.
        degree: m ≥ 1 (``degree = 1`` returns ``X`` as float64).

    Returns:
        ``(n, C(d + m − 1, m))`` float64 array.

    Raises:
        TypeError, ValueError: ``X`` is not a finite real 2-D array; ``degree`` is not an int ≥ 1.
    """
    X = as_matrix("X", X)
    degree = check_int("degree", degree, low=1)
    return _features(X, degree)


def _features(X: np.ndarray, degree: int) -> np.ndarray:
    if degree == 1:
        return X
    combos, weights = _monomials(X.shape[1], degree)
    out = X[:, combos[:, 0]] * weights
    for t in range(1, degree):
        out *= X[:, combos[:, t]]
    return out


@dataclass
class _RFactor:
    """R of a streamed TSQR: RᵀR = ΦᵀΦ for every row block added so far. Workspace O(D²), not O(n)."""

    dim: int
    rank_tol: float | None = None
    num_rows: int = 0

    def __post_init__(self) -> None:
        self.R = np.zeros((0, self.dim))
        self._cache: tuple[np.ndarray, int, float, float] | None = None

    def add(self, block: np.ndarray) -> None:
        if block.shape[0]:
            self.R = np.linalg.qr(np.vstack([self.R, block]), mode="r")
            self.num_rows += block.shape[0]
            self._cache = None

    def whitener(self) -> tuple[np.ndarray, int, float, float]:
        """``(W, rank, rel, s_max)``: W is ``(D, rank)`` with ‖φ W‖² = φᵀ(ΦᵀΦ)⁺φ on the numerical row space of Φ.

        Singular values ≤ ``rel · s_max`` count as zero, with ``rel = max(n, D) · eps`` by default (numpy's
        ``matrix_rank`` rule) or ``rank_tol``. Cached until the next :meth:`add`.
        """
        if self._cache is None:
            rel = max(self.num_rows, self.dim) * _EPS64 if self.rank_tol is None else self.rank_tol
            if self.R.shape[0] == 0:
                self._cache = (np.zeros((self.dim, 0)), 0, rel, 0.0)
            else:
                _, s, vt = np.linalg.svd(self.R, full_matrices=False)
                rank = int(np.count_nonzero(s > s[0] * rel)) if s[0] > 0 else 0
                self._cache = (vt[:rank].T / s[:rank], rank, rel, float(s[0]))
        return self._cache

    def gram_norms(self, feats: np.ndarray) -> np.ndarray:
        """φᵀ(ΦᵀΦ)φ = ‖R φ‖² for each row φ of ``feats`` (the exact normaliser Σ_l ⟨φ, φ_l⟩²)."""
        proj = feats @ self.R.T
        return np.einsum("ij,ij->i", proj, proj)


def _row_scores(feats: np.ndarray, whitener: np.ndarray) -> np.ndarray:
    z = feats @ whitener
    return np.einsum("ij,ij->i", z, z)


def _chunks(n: int, size: int):
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def _factor(K: np.ndarray, degree: int, rank_tol: float | None, chunk_size: int) -> _RFactor:
    factor = _RFactor(tensor_dim(K.shape[1], degree), rank_tol)
    for sl in _chunks(K.shape[0], chunk_size):
        factor.add(_features(K[sl], degree))
    factor.whitener()  # the SVD of R, cached for the scoring pass
    return factor


def _scores(K: np.ndarray, degree: int, factor: _RFactor, chunk_size: int) -> tuple[np.ndarray, int]:
    whitener, rank, _, _ = factor.whitener()
    tau = np.empty(K.shape[0])
    for sl in _chunks(K.shape[0], chunk_size):
        tau[sl] = _row_scores(_features(K[sl], degree), whitener)
    return tau, rank


def leverage_scores(K: np.ndarray, *, rank_tol: float | None = None, chunk_size: int = 4096) -> np.ndarray:
    """Leverage scores τ_j = k_jᵀ (KᵀK)⁺ k_j of the rows of ``K``, rank-revealing.

    τ_j is the p = 2 f-sensitivity: τ_j = sup_y ⟨k_j, y⟩² / Σ_l ⟨k_l, y⟩², so every attention weight with
    f(x) = x² satisfies A_ij ≤ τ_j (paper §2). Scores lie in [0, 1], sum to rank(K), and are invariant to
    K → K M for invertible M.

    Two passes over the rows in chunks of ``chunk_size`` (TSQR, then scoring), O(n d²) time and O(d² + chunk·d)
    working memory besides the input.

    Args:
        K: ``(n, d)`` keys, any real dtype (computed in float64).
        rank_tol: singular values ≤ ``rank_tol · s_max`` count as zero; default ``max(n, d) · eps`` (numpy's
            ``matrix_rank``). Must be in [0, 1).
        chunk_size: rows per chunk.

    Returns:
        ``(n,)`` float64 scores.

    Raises:
        TypeError: ``K`` is not a real array.
        ValueError: ``K`` is not 2-D, is empty, or has NaN/Inf; ``rank_tol`` outside [0, 1).

    References:
        arXiv:2410.05462 §2 (leverage scores as f-sensitivities for f(x) = x²).
    """
    return sensitivities(K, 2, rank_tol=rank_tol, chunk_size=chunk_size)


def sensitivities(
    K: np.ndarray, p: int = 2, *, rank_tol: float | None = None, chunk_size: int = 4096
) -> np.ndarray:
    """Upper bounds σ̄_j ≥ σ_j on the f-sensitivities of f(x) = |x|^p for even p, exact for p = 2.

    σ_j = sup_y f(⟨k_j, y⟩) / Σ_l f(⟨k_l, y⟩). For p = 2m, ⟨q, k⟩^{2m} = ⟨φ(q), φ(k)⟩² with φ the symmetric
    m-th tensor power, so σ_j ≤ σ̄_j = leverage score of row j of φ(K) (the sup over all y ∈ R^D includes the
    rank-one tensors). Hence every attention weight satisfies A_ij ≤ σ̄_j, and
    Σ_j σ̄_j = rank φ(K) ≤ C(d + m − 1, m) ≤ d^{p/2}.

    Args:
        K: ``(n, d)`` keys.
        p: positive even integer. For odd or non-integer p use :func:`lewis_weights` (approximate).
        rank_tol: relative singular-value threshold on φ(K) (see :func:`leverage_scores`).
        chunk_size: rows per chunk; working memory O(D² + chunk·D), D = C(d + m − 1, m).

    Returns:
        ``(n,)`` float64 in [0, 1].

    Raises:
        TypeError, ValueError: bad ``K`` (see :func:`leverage_scores`); ``p`` odd, non-integer or ≤ 0.

    References:
        arXiv:2410.05462 §2-3 (f-sensitivity and the universal set for |x|^p).
    """
    K = as_matrix("K", K)
    p = check_even_p(p, "sensitivities")
    rank_tol = check_rank_tol(rank_tol)
    chunk_size = check_int("chunk_size", chunk_size, low=1)
    factor = _factor(K, p // 2, rank_tol, chunk_size)
    tau, _ = _scores(K, p // 2, factor, chunk_size)
    return np.clip(tau, 0.0, 1.0)


def lewis_weights(
    K: np.ndarray, p: float, *, max_iter: int = 200, tol: float = 1e-10, rank_tol: float | None = None
) -> np.ndarray:
    """ℓ_p Lewis weights of the rows of ``K`` for 0 < p < 4 (Cohen-Peng fixed-point iteration). APPROXIMATE use.

    The weights are the fixed point w_i = τ_i(W^{1/2 − 1/p} K) (leverage scores of the reweighted rows), reached by
    iterating w_i ← (k_iᵀ (Kᵀ W^{1−2/p} K)⁺ k_i)^{p/2}, a contraction for p < 4. They sum to rank(K) and equal the
    leverage scores at p = 2. For odd or non-integer p they are the package's *approximate* proxy for the
    f-sensitivities of |x|^p: selecting keys by them carries **no** completeness guarantee here (the exact,
    brute-force-checked routines need even p).

    Args:
        K: ``(n, d)`` keys.
        p: exponent in (0, 4).
        max_iter: iteration cap. tol: stop when max |Δw| < tol.
        rank_tol: relative singular-value threshold (see :func:`leverage_scores`).

    Returns:
        ``(n,)`` float64 weights.

    Raises:
        TypeError, ValueError: bad ``K``; ``p`` outside (0, 4); ``max_iter`` < 1; ``tol`` ≤ 0.
        RuntimeError: no convergence within ``max_iter``.

    References:
        Cohen, Peng, arXiv:1412.0588, §3; arXiv:2410.05462 §3 (Lewis weights for general f).
    """
    K = as_matrix("K", K)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not (0.0 < float(p) < 4.0):
        raise ValueError(
            f"p must be in (0, 4) for lewis_weights, got {p!r}; for even p >= 4 use sensitivities(K, p)"
        )
    max_iter = check_int("max_iter", max_iter, low=1)
    check_float("tol", tol, low=0.0, low_inclusive=False)
    rank_tol = check_rank_tol(rank_tol)
    p = float(p)
    w = np.ones(K.shape[0])
    return _lewis_iterations(K, p, w, max_iter, tol, rank_tol)


def _lewis_iterations(K, p, w, max_iter, tol, rank_tol) -> np.ndarray:
    for _ in range(max_iter):
        scale = np.sqrt(np.power(w, 1.0 - 2.0 / p, where=w > 0, out=np.zeros_like(w)))
        factor = _RFactor(K.shape[1], rank_tol)
        factor.add(K * scale[:, None])
        whitener = factor.whitener()[0]
        new = np.power(np.maximum(_row_scores(K, whitener), 0.0), p / 2.0)
        if np.max(np.abs(new - w)) < tol:
            return new
        w = new
    raise RuntimeError(f"lewis_weights did not converge in {max_iter} iterations (p = {p}); raise max_iter")
