"""Validators every package uses for configs and public arguments (no CLI or heavy dependency).

Each raises ``ValueError`` (``TypeError`` for a wrong type) whose message names the field, the value and what is
allowed, e.g. ``steps must be an integer in [1, inf), got 0``. The CLI prints that message as one line and exits 2.

    from iclr25_shared.checks import check_int, check_float, check_choice, check_finite, check_shape

    check_int("steps", steps, low=1)
    check_float("lr", lr, low=0.0, low_inclusive=False)
    check_choice("solver", solver, ("greedy", "lazy"))
    x = check_finite("x", x)              # numpy / torch / jax arrays, lists
    check_shape("keys", keys, ("n", "d"))  # named axes; an int pins that axis
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "check_choice",
    "check_finite",
    "check_float",
    "check_int",
    "check_probability",
    "check_range",
    "check_shape",
    "interval",
]


def interval(
    low: float | None, high: float | None, *, low_inclusive: bool = True, high_inclusive: bool = True
) -> str:
    """The interval ``[low, high)`` etc. as text; a missing bound is ``-inf`` / ``inf`` (open)."""
    left = "[" if low is not None and low_inclusive else "("
    right = "]" if high is not None and high_inclusive else ")"
    lo = "-inf" if low is None else f"{low}"
    hi = "inf" if high is None else f"{high}"
    return f"{left}{lo}, {hi}{right}"


def _in_range(
    value: float, low: float | None, high: float | None, low_inclusive: bool, high_inclusive: bool
) -> bool:
    if value != value:  # NaN
        return False
    if low is not None and not (value >= low if low_inclusive else value > low):
        return False
    return high is None or (value <= high if high_inclusive else value < high)


def check_range(
    name: str,
    value: float,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> None:
    """Raise ``ValueError`` naming ``name``, its value and the interval when ``value`` (a number) lies outside it.

    NaN is always outside. Prefer :func:`check_int` / :func:`check_float`, which also check the type.
    """
    if not _in_range(value, low, high, low_inclusive, high_inclusive):
        span = interval(low, high, low_inclusive=low_inclusive, high_inclusive=high_inclusive)
        raise ValueError(f"{name} must be in {span}, got {value!r}")


def check_int(name: str, value: Any, *, low: int | None = None, high: int | None = None) -> int:
    """Check that ``value`` is an integer (``bool`` is rejected) in ``[low, high]``; return it as ``int``.

    numpy integer scalars are accepted. Raises ``TypeError`` for a non-integer, ``ValueError`` out of range.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer in {interval(low, high)}, got {value!r}")
    value = int(value)
    if not _in_range(value, low, high, True, True):
        raise ValueError(f"{name} must be an integer in {interval(low, high)}, got {value!r}")
    return value


def check_float(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
    finite: bool = True,
) -> float:
    """Check that ``value`` is a real number (``bool`` rejected) in the interval; return it as ``float``.

    With ``finite=True`` (default) NaN and ±inf are rejected whatever the bounds. Raises ``TypeError`` for a
    non-number, ``ValueError`` for a value outside the interval or not finite.
    """
    span = interval(low, high, low_inclusive=low_inclusive, high_inclusive=high_inclusive)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number in {span}, got {value!r}")
    value = float(value)
    if finite and not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number in {span}, got {value!r}")
    if not _in_range(value, low, high, low_inclusive, high_inclusive):
        raise ValueError(f"{name} must be in {span}, got {value!r}")
    return value


def check_probability(name: str, value: Any, *, open_low: bool = False, open_high: bool = False) -> float:
    """A number in [0, 1] (ends excluded on request); returns it as ``float``."""
    return check_float(
        name, value, low=0.0, high=1.0, low_inclusive=not open_low, high_inclusive=not open_high
    )


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """Raise ``ValueError`` naming ``name``, its value and the allowed choices unless ``value`` is one; return it."""
    allowed = list(choices.keys() if isinstance(choices, Mapping) else choices)
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))}; got {value!r}")
    return value


def _as_numpy(value: Any) -> Any:
    import numpy as np

    if hasattr(value, "detach"):  # torch
        value = value.detach()
        if str(getattr(value, "dtype", "")).startswith("torch.bfloat16"):
            value = value.float()
        return value.cpu().numpy()
    return np.asarray(value)


def check_finite(name: str, value: Any) -> Any:
    """Raise ``ValueError`` if an array (numpy, torch, jax or nested lists) holds NaN or ±inf; return ``value``.

    The message counts the bad entries and gives the first bad index. Non-numeric arrays raise ``TypeError``.
    """
    import numpy as np

    arr = _as_numpy(value)
    if arr.dtype.kind not in "biufc":
        raise TypeError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    if arr.dtype.kind in "fc":
        bad = ~np.isfinite(arr)
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"{name} must be finite; {int(bad.sum())} of {arr.size} entries are NaN or inf "
                f"(first at index {first})"
            )
    return value


def check_shape(
    name: str, value: Any, axes: Sequence[str | int], *, bind: dict[str, int] | None = None
) -> dict:
    """Check an array's shape against named axes; return the axis sizes.

    ``axes`` has one entry per dimension: an ``int`` pins the size, a name binds it (the same name must have the
    same size everywhere, across calls too when the same ``bind`` dict is passed), ``"..."`` as the first entry
    allows any leading dimensions. Raises ``ValueError`` naming the array, the expected axes and the actual shape.

    Example: ``sizes = check_shape("keys", K, ("n", "d")); check_shape("queries", Q, ("m", "d"), bind=sizes)``.
    """
    shape = tuple(int(s) for s in getattr(value, "shape", _as_numpy(value).shape))
    sizes: dict[str, int] = bind if bind is not None else {}
    expected = list(axes)
    lead = expected[:1] == ["..."]
    if lead:
        expected = expected[1:]
    want = "(" + ", ".join(str(a) for a in axes) + ")"
    if (len(shape) < len(expected)) if lead else (len(shape) != len(expected)):
        raise ValueError(f"{name} must have shape {want}, got {shape}")
    for axis, size in zip(expected, shape[len(shape) - len(expected) :]):
        if isinstance(axis, int):
            if size != axis:
                raise ValueError(f"{name} must have shape {want}, got {shape}")
        elif axis in sizes and sizes[axis] != size:
            raise ValueError(f"{name} must have shape {want} with {axis}={sizes[axis]}, got {shape}")
        else:
            sizes[axis] = size
    return sizes
