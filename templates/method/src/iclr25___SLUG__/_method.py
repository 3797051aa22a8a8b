"""The method itself, written from the paper: __TITLE__ (arXiv:__ARXIV__), Section __N__, Eq. (__K__).

Every public function states the shapes of its arguments (named axes), dtypes, units, what it raises and the
paper's equation it implements.
"""

from __future__ import annotations

import numpy as np

from iclr25_shared.checks import check_finite, check_int, check_shape

__all__ = ["__ALGORITHM__"]


def __ALGORITHM__(x: np.ndarray, *, k: int) -> np.ndarray:
    """One line: what it computes (Eq. (K) of the paper).

    Args:
        x: ``(n, d)`` float array, the inputs.
        k: number of ..., an integer in ``[1, n]``.

    Returns:
        ``(k,)`` int64 indices into the rows of ``x``.

    Raises:
        ValueError: ``x`` is not 2-D or holds NaN/inf; ``k`` outside ``[1, n]``.
        TypeError: ``k`` is not an integer.

    References:
        Authors, "Title", ICLR 2025, arXiv:__ARXIV__, Section N, Eq. (K).
    """
    sizes = check_shape("x", x, ("n", "d"))
    check_finite("x", x)
    k = check_int("k", k, low=1, high=sizes["n"])
    raise NotImplementedError("write the method from the paper")
