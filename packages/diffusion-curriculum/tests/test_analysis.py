"""Difficulty analysis: per-cluster loss curves and convergence steps on hand-checkable inputs."""

import math

import numpy as np
import pytest

from iclr25_diffusion_curriculum import TimestepClusters, cluster_loss_curves, convergence_steps
from iclr25_diffusion_curriculum._analysis import required_seeds, steps_to_reach


def test_curves_are_per_window_per_cluster_means():
    c = TimestepClusters(10, 2)  # C1 = 0..4, C2 = 5..9
    steps = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    ts = np.array([1, 7, 2, 8, 3, 9, 4, 5])
    loss = np.array([4.0, 2.0, 6.0, 4.0, 1.0, 1.0, 3.0, 0.5])
    ends, curves = cluster_loss_curves(steps, ts, loss, c, num_bins=2)
    assert ends.tolist() == [1, 3]
    np.testing.assert_allclose(curves, [[5.0, 3.0], [2.0, 0.75]])


def test_missing_cluster_in_a_window_is_nan():
    c = TimestepClusters(10, 2)
    _ends, curves = cluster_loss_curves(
        np.array([0, 5]), np.array([1, 1]), np.array([1.0, 2.0]), c, num_bins=2
    )
    assert np.isnan(curves[:, 1]).all()
    assert curves[:, 0].tolist() == [1.0, 2.0]


def test_convergence_steps_hand_example():
    ends = np.array([10, 20, 30, 40])
    curves = np.array([[10.0, 4.0, 1.0], [5.0, 2.0, 1.0], [2.0, 1.1, 1.0], [1.0, 1.0, 1.0]])
    # cluster 0: target 10 - 0.9*9 = 1.9 → first reached at 40; cluster 1: 4 - 2.7 = 1.3 → 30; cluster 2: flat → NaN
    out = convergence_steps(ends, curves, fraction=0.9)
    assert out[:2].tolist() == [40.0, 30.0]
    assert np.isnan(out[2])


def test_slower_clusters_are_found_slower():
    # synthetic run: loss of cluster i decays with time constant τ_i, low t (i = 0) slowest, as the paper finds
    c = TimestepClusters(100, 5)
    rng = np.random.default_rng(0)
    steps = np.repeat(np.arange(2000), 16)
    ts = rng.integers(0, 100, steps.size)
    tau = np.array([800, 400, 200, 100, 50])[ts // 20]
    loss = 0.1 + np.exp(-steps / tau) + rng.normal(0, 0.01, steps.size)
    ends, curves = cluster_loss_curves(steps, ts, loss, c, num_bins=40)
    conv = convergence_steps(ends, curves)
    assert np.all(np.diff(conv) < 0)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((np.arange(3), np.arange(2), np.ones(3)), "equal 1-D"),
        ((np.array([]), np.array([]), np.array([])), "no samples"),
    ],
)
def test_bad_analysis_input(args, match):
    with pytest.raises(ValueError, match=match):
        cluster_loss_curves(*args, TimestepClusters(10, 2))


def test_bad_bins_and_fraction():
    c = TimestepClusters(10, 2)
    with pytest.raises(ValueError, match="num_bins"):
        cluster_loss_curves(np.zeros(2), np.zeros(2), np.zeros(2), c, num_bins=0)
    with pytest.raises(ValueError, match="fraction"):
        convergence_steps(np.arange(2), np.ones((2, 2)), fraction=0.0)
    with pytest.raises(ValueError, match="timesteps must lie"):
        cluster_loss_curves(np.zeros(1), np.array([10]), np.zeros(1), c)


def test_required_seeds_is_the_first_n_whose_half_width_is_below_the_effect():
    n = required_seeds(2.0, 1.0)
    from scipy.stats import t

    half = lambda k: t.ppf(0.975, k - 1) * 2.0 / math.sqrt(k)  # noqa: E731
    assert half(n) < 1.0 <= half(n - 1)
    assert required_seeds(1.0, 0.0) is None
    assert required_seeds(0.0, 0.1) == 2


def test_steps_to_reach_interpolates_the_first_crossing():
    steps, values = [100, 200, 300, 400], [10.0, 6.0, 2.0, 1.0]
    assert steps_to_reach(steps, values, 4.0) == pytest.approx(250.0)
    assert steps_to_reach(steps, values, 10.0) == 100.0  # the first checkpoint already reaches it
    assert steps_to_reach(steps, values, 1.0) == 400.0
    assert steps_to_reach(steps, values, 0.5) is None
    # a noisy curve: the first crossing counts, even if it rises again later
    assert steps_to_reach([1, 2, 3], [5.0, 1.0, 7.0], 3.0) == pytest.approx(1.5)


def test_steps_to_reach_rejects_bad_curves():
    with pytest.raises(ValueError, match="increasing"):
        steps_to_reach([2, 1], [1.0, 0.0], 0.5)
    with pytest.raises(ValueError, match="equal"):
        steps_to_reach([1, 2], [1.0], 0.5)
    with pytest.raises(ValueError, match="finite"):
        steps_to_reach([1, 2], [1.0, math.inf], 0.5)
