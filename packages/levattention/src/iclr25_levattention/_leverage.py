"""Leverage scores, f-sensitivities of f(x) = |x|^p for even p, and ℓ_p Lewis weights.

Everything here is float64 numpy. The keys are first orthonormalised: a streamed thin QR (TSQR, R of
``[R; block]``, only the d×d R is kept) and the SVD of the column-equilibrated R give whitened keys u_j with
orthonormal columns and the dual whitened queries (:class:`_Whitening`). Leverage scores and the p = 2m tensor
features φ(u) are computed from the whitened keys, so nothing depends on the basis or the units of K
(K → K M, Q → Q M⁻ᵀ leaves A unchanged, and now the answers too). The leverage scores of φ(u) come from a second
TSQR and a rank-revealing SVD, so rank-deficient tensors do not over-count the way a plain QR does (a plain QR of
the rank-21 φ(K) for d = 6, p = 4 gives Σ τ = 36 instead of 21; see the tests).

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


def _norms(X: np.ndarray, axis: int) -> np.ndarray:
    """Euclidean norms along ``axis`` without overflow or underflow (entries scaled by their largest magnitude)."""
    big = np.max(np.abs(X), axis=axis, keepdims=True)
    safe = np.where(big > 0, big, 1.0)
    return np.squeeze(big, axis=axis) * np.sqrt(np.sum(np.square(X / safe), axis=axis))


def _equilibrated_svd(R: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(col_scale, s, Vt)`` with ``R · diag(col_scale) = U · diag(s) · Vt``.

    ``col_scale`` is 1 / (column norm of R) = 1 / (column norm of the data R factors, since Q is orthonormal); a zero
    column gets scale 0 (its coordinate carries nothing). Scaling the columns is a change of basis, so everything computed from the equilibrated
    factor is unchanged in exact arithmetic, and the rank decision below no longer depends on the units of each
    coordinate (``K = diag(1e16, 1)`` is rank 2, not 1).
    """
    norms = _norms(R, 0)
    with np.errstate(divide="ignore", over="ignore"):
        inv = 1.0 / norms
    col_scale = np.where((norms > 0) & np.isfinite(inv), inv, 0.0)
    _, s, vt = np.linalg.svd(R * col_scale, full_matrices=False)
    return col_scale, s, vt


@dataclass
class _RFactor:
    """R of a streamed TSQR: RᵀR = XᵀX for every row block added so far. Workspace O(D²), not O(n).

    Householder QR is column-wise backward stable, so R is accurate for every column scaling of the data.
    """

    dim: int
    rank_tol: float | None = None
    num_rows: int = 0

    def __post_init__(self) -> None:
        self.R = np.zeros((0, self.dim))
        self._cache: tuple[np.ndarray, int, float] | None = None

    def add(self, block: np.ndarray) -> None:
        if block.shape[0]:
            self.R = np.linalg.qr(np.vstack([self.R, block]), mode="r")
            self.num_rows += block.shape[0]
            self._cache = None

    @property
    def rel(self) -> float:
        """Relative singular-value threshold: ``rank_tol``, default ``max(n, D) · eps64`` (numpy's rule)."""
        return max(self.num_rows, self.dim) * _EPS64 if self.rank_tol is None else self.rank_tol

    def whitener(self) -> tuple[np.ndarray, int, float]:
        """``(W, rank, rel)``: W is ``(D, rank)`` with ‖x W‖² = xᵀ(XᵀX)⁺x on the numerical row space of X.

        The rank is decided on the column-equilibrated factor (:func:`_equilibrated_svd`): singular values ≤
        ``rel · s_max`` count as zero. Cached until the next :meth:`add`.
        """
        if self._cache is None:
            rel = self.rel
            if self.R.shape[0] == 0:
                self._cache = (np.zeros((self.dim, 0)), 0, rel)
            else:
                scale, s, vt = _equilibrated_svd(self.R)
                rank = int(np.count_nonzero(s > s[0] * rel)) if s[0] > 0 else 0
                self._cache = (scale[:, None] * (vt[:rank].T / s[:rank]), rank, rel)
        return self._cache

    def gram_norms(self, feats: np.ndarray) -> np.ndarray:
        """xᵀ(XᵀX)x = ‖R x‖² for each row x of ``feats`` (the exact normaliser Σ_l ⟨x, x_l⟩²)."""
        proj = feats @ self.R.T
        return np.einsum("ij,ij->i", proj, proj)


@dataclass(frozen=True)
class _Whitening:
    """An orthonormalising change of basis of the keys, and its dual for the queries.

    From the thin QR ``K = Q R`` (streamed, only R is kept) and the SVD of the column-equilibrated
    ``R · diag(c) = U S Vᵀ`` with rank r: whitened keys ``u = (k ⊙ c) V_r S_r⁻¹`` (the rows of ``Q U_r``: orthonormal
    columns) and whitened queries ``w = (q ⊘ c) V_r S_r``, so ⟨w, u⟩ = ⟨q, P k⟩ = ⟨q, k⟩ up to the directions of K
    below rounding level. Every attention weight, normaliser and leverage score is then computed from ``u`` and
    ``w``, which do not change when K → K M, Q → Q M⁻ᵀ (M invertible): the finder is basis-invariant at the root.
    """

    col_scale: np.ndarray  # (d,)
    basis: np.ndarray  # (d, r)
    s: np.ndarray  # (r,)
    rel: float

    @classmethod
    def from_factor(cls, factor: _RFactor) -> _Whitening:
        if factor.R.shape[0] == 0:
            raise ValueError("no keys")
        scale, s, vt = _equilibrated_svd(factor.R)
        rel = factor.rel
        rank = int(np.count_nonzero(s > s[0] * rel)) if s[0] > 0 else 0
        return cls(scale, np.ascontiguousarray(vt[:rank].T), s[:rank].copy(), rel)

    @property
    def rank(self) -> int:
        return int(self.s.size)

    def keys(self, K: np.ndarray) -> np.ndarray:
        """``(n, r)`` whitened keys."""
        return (K * self.col_scale) @ (self.basis / self.s)

    def _dual(self, Q: np.ndarray) -> np.ndarray:
        """``q ⊘ c``, with the coordinates where every key is exactly zero set to 0 (they multiply nothing)."""
        active = self.col_scale > 0
        return np.where(active, Q / np.where(active, self.col_scale, 1.0), 0.0)

    def queries(self, Q: np.ndarray) -> np.ndarray:
        """``(n_q, r)`` whitened queries."""
        return self._dual(Q) @ (self.basis * self.s)

    def orthogonal_to_keys(self, Q: np.ndarray) -> np.ndarray:
        """``(n_q,)`` bool: q has no component in the span of the keys beyond rounding (its row of A is 0/0).

        Tested in the equilibrated basis, so the rule is scale-free: the part of ``q ⊘ c`` in the keys' numerical
        row space is at most ``rel`` times ``‖q ⊘ c‖`` (``rel`` = the rank threshold: the same precision at which
        the rank of K was decided). Coordinates in which every key is exactly zero are left out first (their scale
        is arbitrary). A zero query is always degenerate.
        """
        scaled = self._dual(Q)
        total = _norms(scaled, 1)
        inside = _norms(scaled @ self.basis, 1)
        return (total == 0.0) | (inside <= self.rel * total)


@dataclass(frozen=True)
class _FixedBasis:
    """An invertible change of basis ``u = (k ⊙ c) V S⁻¹``, ``w = (q ⊘ c) V S`` (⟨w, u⟩ = ⟨q, k⟩ exactly in exact
    arithmetic), fixed once from a first block of keys: the streaming finder's whitening.

    Unlike :class:`_Whitening` it keeps all d directions (those the first block lacks, singular values below
    ``rel · s_max``, get unit scale instead of being dropped), so later keys with new directions are represented
    exactly.
    """

    col_scale: np.ndarray  # (d,)
    basis: np.ndarray  # (d, d) orthogonal
    s: np.ndarray  # (d,) > 0

    @classmethod
    def from_block(cls, block: np.ndarray, rel: float) -> _FixedBasis:
        d = block.shape[1]
        R = np.linalg.qr(block, mode="r")
        if not np.any(R):
            return cls(np.ones(d), np.eye(d), np.ones(d))
        scale, s, vt = _equilibrated_svd(R)
        scale = np.where(scale > 0, scale, 1.0)  # later keys may use a coordinate the first block does not
        # directions the first block lacks (singular value at rounding level) get unit scale, not a huge one
        full = np.full(d, s[0])
        full[: s.size] = np.where(s > s[0] * rel, s, s[0])
        basis = vt.T if vt.shape[0] == d else np.linalg.qr(np.vstack([vt, np.eye(d)]).T)[0][:, :d]
        return cls(scale, np.ascontiguousarray(basis), full)

    @property
    def rank(self) -> int:
        return int(self.s.size)

    def keys(self, K: np.ndarray) -> np.ndarray:
        return (K * self.col_scale) @ (self.basis / self.s)

    def queries(self, Q: np.ndarray) -> np.ndarray:
        return (Q / self.col_scale) @ (self.basis * self.s)


def _row_scores(feats: np.ndarray, whitener: np.ndarray) -> np.ndarray:
    z = feats @ whitener
    return np.einsum("ij,ij->i", z, z)


def _chunks(n: int, size: int):
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


#: Whitened tensor features φ(u) of all keys are kept between the factorisation pass and the scoring pass when they
#: take at most this many bytes (else they are recomputed chunk by chunk: O(n D m) extra flops, no extra memory).
FEATURE_CACHE_BYTES = 256 * 2**20


@dataclass
class _KeyFactor:
    """Everything the finder needs from the keys: the whitening, the R factor of φ(whitened keys), and the scores."""

    whitening: _Whitening
    tensor: _RFactor
    scores: np.ndarray  # (n,) σ̄_j
    degree: int

    @property
    def rank(self) -> int:
        return self.tensor.whitener()[1]


def _factor_keys(K: np.ndarray, degree: int, rank_tol: float | None, chunk_size: int) -> _KeyFactor:
    """Three streamed passes: TSQR of K; TSQR of φ(whitened K); leverage scores of φ(whitened K)."""
    n, d = K.shape
    kfac = _RFactor(d, rank_tol)
    for sl in _chunks(n, chunk_size):
        kfac.add(K[sl])
    white = _Whitening.from_factor(kfac)
    dim = tensor_dim(white.rank, degree) if white.rank else 0
    tensor = _RFactor(dim, rank_tol)
    if white.rank == 0:  # all keys are zero: no query gives any key a weight
        return _KeyFactor(white, tensor, np.zeros(n), degree)
    keep = n * dim * 8 <= FEATURE_CACHE_BYTES
    cached: list[np.ndarray] = []
    for sl in _chunks(n, chunk_size):
        feats = _features(white.keys(K[sl]), degree)
        tensor.add(feats)
        if keep:
            cached.append(feats)
    whitener = tensor.whitener()[0]
    scores = np.empty(n)
    for t, sl in enumerate(_chunks(n, chunk_size)):
        feats = cached[t] if keep else _features(white.keys(K[sl]), degree)
        scores[sl] = _row_scores(feats, whitener)
    return _KeyFactor(white, tensor, np.clip(scores, 0.0, 1.0), degree)


def leverage_scores(K: np.ndarray, *, rank_tol: float | None = None, chunk_size: int = 4096) -> np.ndarray:
    """Leverage scores τ_j = k_jᵀ (KᵀK)⁺ k_j of the rows of ``K``, rank-revealing.

    τ_j is the p = 2 f-sensitivity: τ_j = sup_y ⟨k_j, y⟩² / Σ_l ⟨k_l, y⟩², so every attention weight with
    f(x) = x² satisfies A_ij ≤ τ_j (paper §2). Scores lie in [0, 1], sum to rank(K), and are invariant to
    K → K M for invertible M.

    Three streamed passes over the rows in chunks of ``chunk_size`` (TSQR of K, TSQR of the whitened keys,
    scoring), O(n d²) time and O(d² + n d) working memory besides the input (the whitened keys are kept between
    the last two passes when they fit in ``FEATURE_CACHE_BYTES``). Basis-invariant: computed from the
    orthonormalised keys.

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
        chunk_size: rows per chunk. Working memory O(D² + n·D) floats, D = C(r + m − 1, m) with r = rank K, while
            n·D·8 bytes ≤ ``FEATURE_CACHE_BYTES`` (256 MiB; φ is computed once and kept for the scoring pass),
            else O(D² + chunk·D) (φ recomputed per chunk in the scoring pass).

    The features are those of the whitened keys (see the module docstring), so the bounds do not change under
    K → K M for any invertible M, and the rank decisions (singular values ≤ ``rank_tol · s_max`` of the
    column-equilibrated factors) do not depend on the units of each coordinate.

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
    return _factor_keys(K, p // 2, rank_tol, chunk_size).scores


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
