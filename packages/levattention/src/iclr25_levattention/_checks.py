"""Array validation for the exact routines (scalars use :mod:`iclr25_shared.checks`): every bad input becomes a
``ValueError``/``TypeError`` naming the field, the value and what is allowed."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from iclr25_shared.checks import check_finite, check_float, check_int

__all__ = ["as_matrix", "check_eps", "check_even_p", "check_int", "check_rank_tol"]

_LEWIS_HINT = "for other p use lewis_weights(K, p) (approximate: no completeness guarantee)"


def as_matrix(name: str, value: Any, *, d: int | None = None) -> np.ndarray:
    """``value`` as a C-contiguous float64 ``(rows, d)`` array; raise naming ``name`` when it cannot be one.

    Raises:
        TypeError: not numeric (bool, complex, object or string dtype).
        ValueError: not 2-D, no rows or no columns, the wrong number of columns, or NaN/Inf entries.
    """
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()
        value = value.numpy()
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged lists and the like
        raise TypeError(f"{name} must be a numeric 2-D array, got {type(value).__name__} ({exc})") from None
    if arr.dtype == np.bool_ or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise TypeError(f"{name} must hold real numbers (integer or float dtype), got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array of shape (n, d), got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} must have at least one row and one column, got shape {arr.shape}")
    if d is not None and arr.shape[1] != d:
        raise ValueError(f"{name} has {arr.shape[1]} columns but d = {d} (queries and keys must share d)")
    check_finite(name, arr)
    return np.ascontiguousarray(arr, dtype=np.float64)


def check_eps(eps: Any) -> float:
    """``eps`` as a float in (0, 1] (an attention weight threshold)."""
    return check_float("eps", eps, low=0.0, high=1.0, low_inclusive=False)


def check_even_p(p: Any, routine: str) -> int:
    """``p`` as a positive even int, for the exact routine ``routine``; the message names the approximate route."""
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise TypeError(f"p must be a positive even integer for {routine}, got {type(p).__name__} {p!r}")
    if not np.isfinite(float(p)) or float(p) != int(p) or int(p) < 2 or int(p) % 2:
        raise ValueError(
            f"p must be a positive even integer (2, 4, 6, ...) for {routine} (exact routine), got {p!r}; "
            f"{_LEWIS_HINT}. Softmax (f = exp) has no small universal set: use the LevAttention layer, a heuristic"
        )
    return int(p)


def check_rank_tol(rank_tol: Any) -> float | None:
    """``None`` or a float in [0, 1) (relative to the largest singular value)."""
    if rank_tol is None:
        return None
    return check_float("rank_tol", rank_tol, low=0.0, high=1.0, high_inclusive=False)
