"""kNN-sparsified similarity: the redundancy matrix ``K`` of InfoMax (Tan et al., ICLR 2025, §3, sparsification)."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from iclr25_infomax._validate import as_features
from iclr25_shared.checks import check_choice, check_int

__all__ = ["knn_similarity"]

_METRICS = ("cosine", "euclidean")
_BACKENDS = ("auto", "exact", "hnsw")
EXACT_MAX_N = 50_000


def _faiss_search(
    faiss: Any, x: np.ndarray, k: int, backend: str, use_ip: bool
) -> tuple[np.ndarray, np.ndarray]:
    d = x.shape[1]
    metric = faiss.METRIC_INNER_PRODUCT if use_ip else faiss.METRIC_L2
    if backend == "exact":
        index = faiss.IndexFlatIP(d) if use_ip else faiss.IndexFlatL2(d)
    else:
        index = faiss.IndexHNSWFlat(d, 32, metric)
        index.hnsw.efConstruction = 64
        index.hnsw.efSearch = max(64, 2 * (k + 1))
    index.add(x)
    dist, ids = index.search(x, k + 1)
    return dist, ids


def knn_similarity(
    features: Any,
    k: int = 10,
    metric: str = "cosine",
    *,
    backend: str = "auto",
    threads: int | None = None,
) -> sp.csr_matrix:
    """The kNN similarity graph of ``features`` as a symmetric, non-negative sparse matrix.

    Each sample keeps its ``k`` nearest neighbours (itself excluded); the graph is symmetrised with
    ``K = max(A, Aᵀ)``, so a pair is kept if either is among the other's ``k`` nearest. The diagonal is zero.

    - ``metric="cosine"``: ``K_ij = max(0, cos(f_i, f_j))`` (negative cosine is clipped to 0: a penalty, not a bonus).
    - ``metric="euclidean"``: ``K_ij = exp(-‖f_i − f_j‖² / σ²)`` with ``σ²`` the median squared distance to the
      k-th neighbour.

    Neighbours come from faiss: exact (``IndexFlat``) up to ``EXACT_MAX_N = 50 000`` samples, HNSW above (or as
    ``backend`` says). Memory is ``O(N·k)``.

    Args:
        features: ``(N, d)`` float features, finite. Rows must be non-zero for ``cosine``.
        k: neighbours per sample, ``1 <= k <= N - 1``.
        metric: ``"cosine"`` or ``"euclidean"``.
        backend: ``"auto"``, ``"exact"`` or ``"hnsw"`` (approximate, for 10⁵–10⁷ samples).
        threads: faiss OpenMP threads (``None`` leaves faiss's default).

    Returns:
        ``(N, N)`` ``scipy.sparse.csr_matrix`` of float64, symmetric, entries in ``[0, 1]``, zero diagonal,
        at most ``2·N·k`` stored entries.

    Raises:
        TypeError: non-numeric features.
        ValueError: features not 2-D / not finite / fewer than 2 rows; a zero row under cosine; ``k`` outside
            ``[1, N-1]``; unknown ``metric`` or ``backend``.

    References:
        Tan et al., "Data Pruning by Information Maximization", ICLR 2025, arXiv:2506.01701, §3 (similarity
        sparsification); Johnson, Douze & Jégou, "Billion-scale similarity search with GPUs" (faiss), 2019.
    """
    x = as_features(features)
    n = x.shape[0]
    check_choice("metric", metric, _METRICS)
    check_choice("backend", backend, _BACKENDS)
    if n < 2:
        raise ValueError(f"features must have at least 2 rows to build a kNN graph, got {n}")
    k = check_int("k", k, low=1, high=n - 1)
    if backend == "auto":
        backend = "exact" if n <= EXACT_MAX_N else "hnsw"
    import faiss

    if threads:
        faiss.omp_set_num_threads(int(threads))
    if metric == "cosine":
        norms = np.linalg.norm(x, axis=1)
        zero = norms == 0
        if zero.any():
            raise ValueError(
                f"features has {int(zero.sum())} all-zero row(s) (first {int(np.flatnonzero(zero)[0])}); "
                "cosine similarity is undefined for them"
            )
        x = np.ascontiguousarray(x / norms[:, None], dtype=np.float32)
    dist, ids = _faiss_search(faiss, x, k, backend, use_ip=metric == "cosine")
    # Drop each row's own entry (not always first when there are exact duplicates), keep k neighbours.
    rows = np.arange(n)[:, None]
    is_self = ids == rows
    missing = ~is_self.any(axis=1)
    is_self[missing, -1] = True  # self not returned (ties / approximate search): drop the farthest instead
    keep = ~is_self & (ids >= 0)
    keep_count = keep.sum(axis=1)
    cols = ids[keep]
    vals = dist[keep].astype(np.float64)
    row_idx = np.repeat(np.arange(n), keep_count)
    if metric == "cosine":
        sims = np.clip(vals, 0.0, 1.0)
    else:
        sq = np.maximum(vals, 0.0)  # faiss L2 returns squared distances
        kth = dist[:, -1].astype(np.float64)
        sigma2 = float(np.median(np.maximum(kth, 0.0)))
        sims = np.exp(-sq / sigma2) if sigma2 > 0 else (sq == 0).astype(np.float64)
    A = sp.csr_matrix((sims, (row_idx, cols)), shape=(n, n))
    K = without_diagonal(A.maximum(A.T))
    K.sort_indices()
    return K


def without_diagonal(K: Any) -> Any:
    """``K`` as CSR with its diagonal removed (stored zeros dropped), without changing the sparsity structure in place.

    ``setdiag(0)`` on CSR inserts the missing diagonal entries (scipy's SparseEfficiencyWarning); subtracting the
    diagonal is exact (``x - x == 0``) and never inserts.
    """
    K = sp.csr_matrix(K)
    K = (K - sp.diags(K.diagonal(), format="csr")).tocsr()
    K.eliminate_zeros()
    return K
