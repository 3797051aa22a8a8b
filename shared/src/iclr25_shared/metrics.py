"""Metrics used by several packages: accuracy with a confidence interval, paired t-intervals, cluster accuracy,
Fréchet distance."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "Estimate",
    "accuracy",
    "bootstrap_ci",
    "cluster_accuracy",
    "frechet_distance",
    "paired_t_interval",
    "wilson_interval",
]


@dataclass(frozen=True)
class Estimate:
    """A point estimate with a two-sided confidence interval."""

    value: float
    low: float
    high: float
    n: int
    level: float = 0.95

    def __str__(self) -> str:
        return f"{self.value:.4f} [{self.low:.4f}, {self.high:.4f}] (n={self.n}, {self.level:.0%} CI)"

    def as_dict(self) -> dict[str, float | int]:
        return {"value": self.value, "low": self.low, "high": self.high, "n": self.n, "level": self.level}


def _z(level: float) -> float:
    from statistics import NormalDist

    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    return NormalDist().inv_cdf(0.5 + level / 2)


def wilson_interval(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (Wilson, 1927).

    Raises:
        ValueError: ``n < 1`` or ``successes`` outside ``[0, n]``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, {n}], got {successes}")
    z = _z(level)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def accuracy(predictions: np.ndarray, labels: np.ndarray, level: float = 0.95) -> Estimate:
    """Fraction of ``predictions == labels`` with a Wilson confidence interval.

    Args:
        predictions: ``(n,)`` predicted class ids.
        labels: ``(n,)`` true class ids.

    Raises:
        ValueError: shapes differ or ``n == 0``.
    """
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    if predictions.shape != labels.shape or predictions.ndim != 1:
        raise ValueError(
            f"predictions {predictions.shape} and labels {labels.shape} must be equal 1-D shapes"
        )
    if predictions.size == 0:
        raise ValueError("accuracy of zero examples is undefined")
    correct = int((predictions == labels).sum())
    low, high = wilson_interval(correct, labels.size, level)
    return Estimate(correct / labels.size, low, high, int(labels.size), level)


def bootstrap_ci(
    values: np.ndarray, *, statistic=np.mean, num_resamples: int = 2000, level: float = 0.95, seed: int = 0
) -> Estimate:
    """Percentile bootstrap interval of ``statistic`` over the first axis of ``values``."""
    values = np.asarray(values)
    if values.shape[0] < 1:
        raise ValueError("bootstrap needs at least one value")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, values.shape[0], size=(num_resamples, values.shape[0]))
    stats = np.array([statistic(values[i]) for i in idx])
    alpha = (1 - level) / 2
    return Estimate(
        float(statistic(values)),
        float(np.quantile(stats, alpha)),
        float(np.quantile(stats, 1 - alpha)),
        int(values.shape[0]),
        level,
    )


def cluster_accuracy(labels: np.ndarray, clusters: np.ndarray) -> float:
    """Clustering accuracy under the best one-to-one map of clusters to labels (Hungarian algorithm).

    Args:
        labels: ``(n,)`` true class ids (any non-negative ints).
        clusters: ``(n,)`` predicted cluster ids (any non-negative ints; the count may differ from the classes').
    """
    from scipy.optimize import linear_sum_assignment

    labels, clusters = np.asarray(labels, np.int64), np.asarray(clusters, np.int64)
    if labels.shape != clusters.shape or labels.ndim != 1 or labels.size == 0:
        raise ValueError(
            f"labels {labels.shape} and clusters {clusters.shape} must be equal non-empty 1-D shapes"
        )
    size = int(max(labels.max(), clusters.max())) + 1
    counts = np.zeros((size, size), dtype=np.int64)
    np.add.at(counts, (clusters, labels), 1)
    rows, cols = linear_sum_assignment(counts, maximize=True)
    return float(counts[rows, cols].sum() / labels.size)


def frechet_distance(mu1: np.ndarray, sigma1: np.ndarray, mu2: np.ndarray, sigma2: np.ndarray) -> float:
    """Fréchet distance between two Gaussians (the FID formula, Heusel et al. 2017):
    ``|mu1 - mu2|^2 + tr(S1 + S2 - 2 (S1 S2)^{1/2})``.

    ``tr (S1 S2)^{1/2}`` is computed as ``tr (S1^{1/2} S2 S1^{1/2})^{1/2}`` (the same eigenvalues), from symmetric
    eigendecompositions with round-off negatives clipped to 0: exact for singular covariances (fewer samples than
    dimensions), with no complex round-off and no warnings, unlike ``scipy.linalg.sqrtm`` of the non-symmetric
    product.

    Args:
        mu1, mu2: ``(d,)`` means. sigma1, sigma2: ``(d, d)`` symmetric positive semi-definite covariances.

    Raises:
        ValueError: mismatched shapes or non-finite values.
    """
    mu1, mu2 = np.atleast_1d(mu1).astype(np.float64), np.atleast_1d(mu2).astype(np.float64)
    sigma1, sigma2 = np.atleast_2d(sigma1).astype(np.float64), np.atleast_2d(sigma2).astype(np.float64)
    if mu1.shape != mu2.shape or sigma1.shape != sigma2.shape or sigma1.shape != (mu1.size, mu1.size):
        raise ValueError("means must be (d,) and covariances (d, d) with the same d")
    for name, value in (("mu1", mu1), ("mu2", mu2), ("sigma1", sigma1), ("sigma2", sigma2)):
        if not np.isfinite(value).all():
            raise ValueError(f"{name} must be finite")
    w, v = np.linalg.eigh((sigma1 + sigma1.T) / 2)
    root1 = (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T
    inner = root1 @ ((sigma2 + sigma2.T) / 2) @ root1
    trace_sqrt = float(np.sqrt(np.clip(np.linalg.eigvalsh((inner + inner.T) / 2), 0.0, None)).sum())
    diff = mu1 - mu2
    # >= 0 in exact arithmetic; the square roots of round-off-sized eigenvalues can leave ~1e-8 * tr below it
    return max(0.0, float(diff @ diff + np.trace(sigma1) + np.trace(sigma2) - 2 * trace_sqrt))


def paired_t_interval(differences: Any, level: float = 0.95) -> Estimate:
    """Mean of paired differences (method − baseline, one per seed) with its two-sided Student-t interval.

    The interval is ``mean ± t_{n−1, (1+level)/2} · sd / √n`` (sd with ``ddof=1``). With one difference the interval
    is ``(-inf, inf)``: one seed says nothing about the spread. Needs scipy (``iclr25-shared[metrics]``).

    Args:
        differences: ``(n,)`` finite floats.
        level: confidence level in ``(0, 1)``.

    Returns:
        :class:`Estimate` with ``value`` = the mean, ``low``/``high`` the interval, ``n`` the number of pairs.

    Raises:
        ValueError: empty, not 1-D, or non-finite ``differences``; ``level`` outside ``(0, 1)``.
    """
    from iclr25_shared.checks import check_finite, check_float

    check_float("level", level, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
    d = np.asarray(differences, dtype=np.float64)
    if d.ndim != 1 or d.size == 0:
        raise ValueError(f"differences must be a non-empty 1-D sequence, got shape {d.shape}")
    check_finite("differences", d)
    mean = float(d.mean())
    if d.size == 1:
        return Estimate(mean, -math.inf, math.inf, 1, level)
    from scipy.stats import t as student_t

    half = float(student_t.ppf(0.5 + level / 2, d.size - 1)) * float(d.std(ddof=1)) / math.sqrt(d.size)
    return Estimate(mean, mean - half, mean + half, int(d.size), level)
