"""Paired t-intervals, the seeds an effect needs, and "steps to reach a target" (the reproduction's statistics)."""

import math

import numpy as np
import pytest

from iclr25_diffusion_curriculum._stats import paired_interval, required_seeds, steps_to_reach


def test_paired_interval_matches_the_textbook_value():
    # d = 1, 2, 3, 6: mean 3, sd sqrt(14/3), t_{0.975, 3} = 3.182446 (table value)
    mean, lo, hi = paired_interval([1.0, 2.0, 3.0, 6.0])
    half = 3.182446 * math.sqrt(14 / 3) / 2
    assert mean == 3.0
    assert lo == pytest.approx(3 - half, abs=1e-5) and hi == pytest.approx(3 + half, abs=1e-5)


def test_paired_interval_coverage_by_simulation():
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(2000):
        _, lo, hi = paired_interval(rng.normal(0.3, 2.0, size=5))
        hits += lo <= 0.3 <= hi
    assert 0.93 < hits / 2000 < 0.97


def test_paired_interval_edge_cases():
    assert paired_interval([2.5]) == (2.5, -math.inf, math.inf)
    assert paired_interval([1.0, 1.0, 1.0]) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="non-empty"):
        paired_interval([])
    with pytest.raises(ValueError, match="finite"):
        paired_interval([1.0, math.nan])
    with pytest.raises(ValueError, match="level"):
        paired_interval([1.0, 2.0], level=1.0)


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
