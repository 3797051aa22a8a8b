"""Input checks shared by every selector: one clear ``ValueError``/``TypeError`` naming the field and what is allowed."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = [
    "as_features",
    "as_indices",
    "as_scores",
    "as_similarity",
    "resolve_budget",
]


def resolve_budget(budget: Any, n: int, *, name: str = "budget") -> int:
    """Turn ``budget`` into a sample count ``p`` with ``1 <= p <= n``.

    An ``int`` is a count; a ``float`` in ``(0, 1]`` is a fraction of ``n`` (rounded to the nearest count, at least 1).

    Raises:
        TypeError: ``budget`` is not a number (``bool`` is refused too).
        ValueError: the count is outside ``[1, n]``, or the fraction is outside ``(0, 1]`` or not finite.
    """
    if isinstance(budget, bool) or not isinstance(budget, numbers.Real):
        raise TypeError(f"{name} must be an int count or a float fraction in (0, 1], got {budget!r}")
    if isinstance(budget, numbers.Integral):
        count = int(budget)
        if not 1 <= count <= n:
            raise ValueError(f"{name} must be a count in [1, {n}] (the number of samples), got {count}")
        return count
    frac = float(budget)
    if not np.isfinite(frac) or not 0.0 < frac <= 1.0:
        raise ValueError(f"{name} as a fraction must be in (0, 1], got {budget!r}; pass an int for a count")
    return int(min(n, max(1, round(frac * n))))


def as_scores(scores: Any, *, name: str = "scores") -> np.ndarray:
    """``(N,)`` finite float64 scores.

    Raises:
        TypeError: not numeric, or boolean (a mask passed where scores belong).
        ValueError: not 1-D, empty, or holding NaN/Inf.
    """
    if np.asarray(scores).dtype == bool:
        raise TypeError(f"{name} must be real-valued importance scores, got a boolean array (a mask?)")
    try:
        arr = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a 1-D array of numbers ({exc})") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array (N,), got shape {arr.shape}")
    bad = ~np.isfinite(arr)
    if bad.any():
        raise ValueError(
            f"{name} must be finite; {int(bad.sum())} NaN/Inf value(s), first at index {int(np.flatnonzero(bad)[0])}"
        )
    return arr


def as_features(features: Any, *, name: str = "features") -> np.ndarray:
    """``(N, d)`` finite float32 features.

    Raises:
        TypeError: not numeric.
        ValueError: not 2-D, empty, or holding NaN/Inf.
    """
    try:
        arr = np.asarray(features, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a 2-D array of numbers ({exc})") from None
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array (N, d), got shape {arr.shape}")
    bad = ~np.isfinite(arr)
    if bad.any():
        row = int(np.flatnonzero(bad.any(axis=1))[0])
        raise ValueError(f"{name} must be finite; {int(bad.sum())} NaN/Inf value(s), first in row {row}")
    return np.ascontiguousarray(arr)


def as_similarity(similarity: Any, n: int, *, name: str = "similarity") -> sp.csr_matrix:
    """A symmetric, non-negative ``(N, N)`` CSR float64 matrix.

    A dense array or any scipy sparse matrix is accepted. An asymmetric ``K`` is replaced by ``(K + Kᵀ)/2``, which
    leaves the quadratic form ``xᵀKx`` (hence the objective) unchanged. Explicit zeros are dropped.

    Raises:
        TypeError: not an array or scipy sparse matrix of numbers.
        ValueError: not ``(n, n)``, holds NaN/Inf, or holds a negative entry. Negative similarities are refused, not
            clipped: the redundancy term must be a penalty (the objective is then submodular and the solver and the
            greedy baselines rely on it). Clip with ``np.maximum(K, 0)`` yourself, or build ``K`` with
            :func:`knn_similarity`, which clips cosine similarity at 0.
    """
    if sp.issparse(similarity):
        mat = sp.csr_matrix(similarity, dtype=np.float64)
    else:
        try:
            dense = np.asarray(similarity, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be a (N, N) array or scipy sparse matrix ({exc})") from None
        if dense.ndim != 2:
            raise ValueError(f"{name} must be a (N, N) matrix, got shape {dense.shape}")
        mat = sp.csr_matrix(dense)
    if mat.shape != (n, n):
        raise ValueError(f"{name} must have shape ({n}, {n}) to match {n} scores, got {mat.shape}")
    data = mat.data
    if not np.isfinite(data).all():
        raise ValueError(
            f"{name} must be finite; it holds {int((~np.isfinite(data)).sum())} NaN/Inf value(s)"
        )
    if (data < 0).any():
        raise ValueError(
            f"{name} must be non-negative; it holds {int((data < 0).sum())} negative value(s) (min {data.min():.4g}). "
            "InfoMax penalises similarity; clip with np.maximum(K, 0) or use knn_similarity, which clips at 0"
        )
    asym = mat - mat.T
    if asym.nnz and np.abs(asym.data).max() > 1e-12 * max(1.0, float(np.abs(data).max(initial=0.0))):
        mat = ((mat + mat.T) * 0.5).tocsr()
    mat.eliminate_zeros()
    mat.sort_indices()
    return mat


def as_indices(indices: Any, n: int, *, name: str = "initial") -> np.ndarray:
    """Unique in-range int64 indices, sorted.

    Raises:
        TypeError: not integers.
        ValueError: not 1-D, out of ``[0, n)``, or repeated.
    """
    arr = np.asarray(indices)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must be integer indices, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.min() < 0 or arr.max() >= n:
        raise ValueError(f"{name} indices must be in [0, {n}), got min {arr.min()} max {arr.max()}")
    uniq = np.unique(arr).astype(np.int64)
    if uniq.size != arr.size:
        raise ValueError(f"{name} holds {arr.size - uniq.size} repeated index(es); indices must be unique")
    return uniq
