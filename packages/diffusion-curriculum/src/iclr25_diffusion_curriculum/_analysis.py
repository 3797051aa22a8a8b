"""The paper's difficulty analysis as a tool (per-cluster loss curves and convergence speed of a uniform run), and
two reading aids of the reproduction: the seeds an effect needs and "steps to reach a target" (the paired intervals
themselves come from ``iclr25_shared.stats``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from iclr25_diffusion_curriculum._clusters import TimestepClusters
from iclr25_shared.checks import check_float, check_int

__all__ = ["cluster_loss_curves", "convergence_steps", "required_seeds", "steps_to_reach"]


def cluster_loss_curves(
    steps: np.ndarray,
    values: np.ndarray,
    losses: np.ndarray,
    clusters: TimestepClusters,
    num_bins: int = 20,
) -> tuple[np.ndarray, np.ndarray]:
    """Mean training loss per cluster in ``num_bins`` equal windows of training steps.

    Feed the per-sample losses of a run that sampled timesteps uniformly (so every cluster is seen throughout).

    Args:
        steps: ``(M,)`` training step of each per-sample loss (0-based ints).
        values: ``(M,)`` the sample's timestep (or σ for ``"snr_quantile"`` clusters).
        losses: ``(M,)`` the sample's (unweighted) denoising loss.
        clusters: the partition to group by.
        num_bins: number of step windows (≥ 1).

    Returns:
        ``(bin_ends, curves)``: ``(num_bins,)`` the last step of each window, and ``(num_bins, N)`` mean loss of
        cluster ``i`` (0-based, lowest t first) in each window; NaN where a window saw no sample of a cluster.

    Raises:
        ValueError: mismatched lengths, no samples, ``num_bins < 1``, or timesteps outside the clusters.
    """
    steps, values, losses = np.asarray(steps), np.asarray(values), np.asarray(losses, dtype=np.float64)
    if not (steps.shape == values.shape == losses.shape) or steps.ndim != 1:
        raise ValueError(
            f"steps {steps.shape}, values {values.shape}, losses {losses.shape} must be equal 1-D shapes"
        )
    if steps.size == 0:
        raise ValueError("no samples given")
    check_int("num_bins", num_bins, low=1)
    import torch

    cluster = clusters.cluster_of(torch.as_tensor(values)).numpy()
    last = int(steps.max()) + 1
    edges = np.linspace(0, last, num_bins + 1)
    window = np.clip(np.searchsorted(edges, steps, side="right") - 1, 0, num_bins - 1)
    n = clusters.num_clusters
    total = np.zeros((num_bins, n))
    count = np.zeros((num_bins, n))
    np.add.at(total, (window, cluster), losses)
    np.add.at(count, (window, cluster), 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        curves = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    bin_ends = np.ceil(edges[1:]).astype(np.int64) - 1
    return bin_ends, curves


def convergence_steps(bin_ends: np.ndarray, curves: np.ndarray, fraction: float = 0.9) -> np.ndarray:
    """Steps each cluster needs to achieve ``fraction`` of its total loss drop (first window → last window).

    A cluster converges at the first window whose loss is at most ``first − fraction·(first − last)``; a slower
    cluster is a harder denoising task in the paper's sense (§3, convergence speed).

    Args:
        bin_ends: ``(B,)`` from :func:`cluster_loss_curves`.
        curves: ``(B, N)`` from :func:`cluster_loss_curves`.
        fraction: in ``(0, 1]``.

    Returns:
        ``(N,)`` float steps (NaN for a cluster whose curve has NaN ends or does not decrease).

    Raises:
        ValueError: shapes disagree or ``fraction`` outside ``(0, 1]``.
    """
    bin_ends, curves = np.asarray(bin_ends), np.asarray(curves, dtype=np.float64)
    if curves.ndim != 2 or curves.shape[0] != bin_ends.shape[0]:
        raise ValueError(f"curves {curves.shape} must be (len(bin_ends)={bin_ends.shape[0]}, N)")
    check_float("fraction", fraction, low=0.0, high=1.0, low_inclusive=False)
    out = np.full(curves.shape[1], np.nan)
    for i in range(curves.shape[1]):
        c = curves[:, i]
        first, last = c[0], c[-1]
        if not (np.isfinite(first) and np.isfinite(last)) or last >= first:
            continue
        target = first - fraction * (first - last)
        hit = np.nonzero(np.nan_to_num(c, nan=np.inf) <= target)[0]
        out[i] = float(bin_ends[hit[0]])
    return out


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
