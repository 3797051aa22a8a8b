"""One-pass universal set with a workspace that does not grow with n (arXiv:2410.05462, streaming setting).

The stream keeps the R factor of everything seen (D×D, D = C(d + p/2 − 1, p/2)) and a buffer of candidate keys.
After each block, every buffered and new key is scored against the current prefix: τ_j(t) = φ_jᵀ(Φ_tᵀΦ_t)⁺φ_j.
Adding rows can only lower such a score (Φ_tᵀΦ_t grows in the PSD order and φ_j stays in its range), so a key whose
prefix score falls below eps can never be heavy again and is dropped. Hence

* the buffer is always a superset of the offline U of the rows seen so far, and after the last block it *is* the
  offline U (scores against the full prefix are the offline scores);
* between blocks the buffer holds at most Σ_j τ_j(t) / eps ≤ D / eps rows, whatever n is.

With R and the buffered keys the stream also answers heavy-entry queries exactly (:meth:`heavy_entries`).
"""

from __future__ import annotations

import numpy as np

from iclr25_levattention._checks import (
    as_matrix,
    check_eps,
    check_even_p,
    check_int,
    check_rank_tol,
)
from iclr25_levattention._heavy import SELECTION_SLACK, HeavyEntries, _entries_from_factor
from iclr25_levattention._leverage import _features, _RFactor, _row_scores, tensor_dim

__all__ = ["StreamingUniversalSet"]


class StreamingUniversalSet:
    """Universal set of a key stream for f(x) = |x|^p (p even), in bounded workspace.

    Feed key blocks with :meth:`update`; :attr:`indices` is then a superset of the offline
    ``universal_set(K_seen, eps, p)`` (equal to it up to rounding once all keys are seen), whatever the order or
    block sizes. Workspace: the D×D factor plus at most ``capacity + block_size`` buffered rows of D + d floats,
    where ``capacity = floor(D / (eps (1 − slack)))``; it does not depend on the number of keys.

    Args:
        d: key dimension.
        eps: threshold in (0, 1].
        p: positive even integer.
        block_size: incoming blocks are processed in pieces of at most this many rows.
        rank_tol: relative rank threshold (default ``max(n_seen, D) · eps64``, as offline).

    Raises:
        TypeError, ValueError: ``d`` or ``block_size`` < 1, ``eps`` outside (0, 1], ``p`` not positive even.

    Example:
        >>> stream = StreamingUniversalSet(d=64, eps=0.05)
        >>> for block in key_blocks:
        ...     stream.update(block)
        >>> stream.indices, stream.heavy_entries(Q)

    References:
        arXiv:2410.05462 §3 (streaming and workspace independent of n).
    """

    def __init__(
        self, d: int, eps: float, p: int = 2, *, block_size: int = 1024, rank_tol: float | None = None
    ) -> None:
        self.d = check_int("d", d, low=1)
        self.eps = check_eps(eps)
        self.p = check_even_p(p, "StreamingUniversalSet")
        self.block_size = check_int("block_size", block_size, low=1)
        self.dim = tensor_dim(self.d, self.p // 2)
        self._factor = _RFactor(self.dim, check_rank_tol(rank_tol))
        self._feats = np.zeros((0, self.dim))
        self._keys = np.zeros((0, self.d))
        self._index = np.zeros(0, dtype=np.int64)
        self._scores = np.zeros(0)
        self._rank = 0
        self.peak_buffer_rows = 0

    @property
    def capacity(self) -> int:
        """Most rows the buffer can hold between blocks: floor(D / (eps (1 − slack)))."""
        return int(np.floor(self.dim / (self.eps * (1.0 - SELECTION_SLACK)) + 1e-9))

    @property
    def num_seen(self) -> int:
        """Keys fed so far."""
        return self._factor.num_rows

    @property
    def rank(self) -> int:
        """Numerical rank of φ(K_seen) (= Σ of the current scores over all keys seen)."""
        return self._rank

    @property
    def indices(self) -> np.ndarray:
        """``(|U|,)`` int64 sorted indices of the current candidate keys."""
        order = np.argsort(self._index, kind="stable")
        return self._index[order]

    @property
    def scores(self) -> np.ndarray:
        """Current prefix scores of :attr:`indices` (the offline σ̄_j once every key is seen)."""
        return self._scores[np.argsort(self._index, kind="stable")]

    @property
    def keys(self) -> np.ndarray:
        """``(|U|, d)`` the buffered key vectors, in the order of :attr:`indices`."""
        return self._keys[np.argsort(self._index, kind="stable")]

    @property
    def workspace_floats(self) -> int:
        """Floats held now: the factor plus the buffer (features and keys)."""
        return int(self._factor.R.size + self._feats.size + self._keys.size)

    def update(self, block: np.ndarray, indices: np.ndarray | None = None) -> StreamingUniversalSet:
        """Feed keys.

        Args:
            block: ``(b, d)`` keys.
            indices: ``(b,)`` their global indices (default: consecutive, continuing from the last block). Any
                order is allowed; indices must be distinct non-negative integers, each fed once (a repeat of a
                buffered index is rejected; one whose key was already dropped cannot be detected without O(n)
                memory, so it is the caller's contract).

        Returns:
            ``self``.

        Raises:
            TypeError, ValueError: ``block`` not a finite real ``(b, d)`` array; ``indices`` of the wrong length,
                negative, repeated, or already in the buffer.
        """
        block = as_matrix("block", block, d=self.d)
        if indices is None:
            indices = np.arange(self.num_seen, self.num_seen + block.shape[0], dtype=np.int64)
        else:
            indices = np.asarray(indices)
            if indices.shape != (block.shape[0],) or not np.issubdtype(indices.dtype, np.integer):
                raise ValueError(
                    f"indices must be {block.shape[0]} integers (one per row of block), got {indices!r}"
                )
            indices = indices.astype(np.int64)
            if indices.min() < 0 or np.unique(indices).size != indices.size:
                raise ValueError("indices must be distinct non-negative integers")
            if np.isin(indices, self._index).any():
                raise ValueError("indices already in the stream's buffer; each key index may be fed once")
        for start in range(0, block.shape[0], self.block_size):
            sl = slice(start, start + self.block_size)
            self._update_piece(block[sl], indices[sl])
        return self

    def _update_piece(self, keys: np.ndarray, index: np.ndarray) -> None:
        feats = _features(keys, self.p // 2)
        self._factor.add(feats)
        whitener, self._rank, _, _ = self._factor.whitener()
        all_feats = np.vstack([self._feats, feats])
        all_keys = np.vstack([self._keys, keys])
        all_index = np.concatenate([self._index, index])
        self.peak_buffer_rows = max(self.peak_buffer_rows, all_feats.shape[0])
        scores = _row_scores(all_feats, whitener)
        keep = scores >= self.eps * (1.0 - SELECTION_SLACK)
        self._feats, self._keys, self._index, self._scores = (
            all_feats[keep],
            all_keys[keep],
            all_index[keep],
            scores[keep],
        )

    def heavy_entries(self, Q: np.ndarray, *, chunk_size: int = 1024) -> HeavyEntries:
        """Every A_ij ≥ eps between ``Q`` and all keys seen so far, exactly, from the stream's state alone.

        Raises:
            TypeError, ValueError: ``Q`` not a finite real ``(n_q, d)`` array; no keys fed yet.
        """
        if self.num_seen == 0:
            raise ValueError("no keys have been fed to the stream yet; call update() first")
        Q = as_matrix("Q", Q, d=self.d)
        order = np.argsort(self._index, kind="stable")
        return _entries_from_factor(
            Q,
            self._keys[order],
            self._index[order],
            self._factor,
            self.p,
            self.eps,
            check_int("chunk_size", chunk_size, low=1),
            self._rank,
        )
