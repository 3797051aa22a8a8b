"""Small statistics for the reproduction: paired-difference intervals and "steps to reach a target"."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["paired_interval", "required_seeds", "steps_to_reach"]


def paired_interval(diffs: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean of paired differences and its two-sided Student-t confidence interval.

    Args:
        diffs: ``(n,)`` per-seed differences (method − baseline on the same seed); NaN entries are rejected.
        level: confidence level in ``(0, 1)``.

    Returns:
        ``(mean, low, high)``; with ``n = 1`` the interval is ``(-inf, inf)``.

    Raises:
        ValueError: empty or non-finite ``diffs``, or ``level`` outside ``(0, 1)``.
    """
    from iclr25_shared.metrics import paired_t_interval

    est = paired_t_interval(diffs, level)
    return est.value, est.low, est.high


def required_seeds(sd: float, effect: float, level: float = 0.95) -> int | None:
    """Seeds ``n`` for which the t-interval half-width ``t_{n−1}·sd/√n`` drops below ``|effect|``.

    The number of paired seeds that would let an interval of the observed spread exclude zero when the true mean
    difference is ``effect``. ``None`` when ``effect`` is 0 or not finite (no finite number suffices); 2 at least.
    """
    if not (math.isfinite(effect) and effect != 0.0 and math.isfinite(sd)):
        return None
    if sd == 0.0:
        return 2
    from scipy.stats import t as student_t

    for n in range(2, 100_000):
        if student_t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n) < abs(effect):
            return n
    return None


def steps_to_reach(steps: Sequence[float], values: Sequence[float], target: float) -> float | None:
    """First training step at which a curve reaches ``values <= target``, linearly interpolated between checkpoints.

    Args:
        steps: ``(m,)`` increasing checkpoint steps.
        values: ``(m,)`` the metric at those steps (lower is better).
        target: the level to reach.

    Returns:
        The step (a float): ``steps[0]`` when the first checkpoint already reaches it; otherwise the crossing on the
        segment between the last checkpoint above ``target`` and the first at or below it. ``None`` when no
        checkpoint reaches ``target``.

    Raises:
        ValueError: lengths differ, ``steps`` is not strictly increasing, or a value is not finite.
    """
    s = np.asarray(steps, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if s.shape != v.shape or s.ndim != 1 or s.size == 0:
        raise ValueError(f"steps {s.shape} and values {v.shape} must be equal non-empty 1-D shapes")
    if np.any(np.diff(s) <= 0):
        raise ValueError(f"steps must be strictly increasing, got {s.tolist()}")
    if not (np.isfinite(v).all() and math.isfinite(target)):
        raise ValueError("values and target must be finite")
    hits = np.flatnonzero(v <= target)
    if hits.size == 0:
        return None
    i = int(hits[0])
    if i == 0:
        return float(s[0])
    frac = (v[i - 1] - target) / (v[i - 1] - v[i])
    return float(s[i - 1] + frac * (s[i] - s[i - 1]))
