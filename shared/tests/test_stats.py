"""iclr25_shared.stats against scipy and brute-force definitions."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from iclr25_shared.stats import compare, holm, paired_difference, verdict


def test_the_paired_difference_matches_scipys_paired_t_test():
    rng = np.random.default_rng(0)
    a, b = rng.normal(1.0, 1.0, 7), rng.normal(0.3, 1.0, 7)
    est, p = paired_difference(a, b)
    ref = sps.ttest_rel(a, b)
    ci = ref.confidence_interval(0.95)
    assert est.value == pytest.approx(np.mean(a - b)) and p == pytest.approx(ref.pvalue)
    assert (est.low, est.high) == pytest.approx((ci.low, ci.high)) and est.n == 7


def test_degenerate_pairs_say_what_they_can():
    est, p = paired_difference([1.0], [0.0])
    assert math.isinf(est.low) and math.isnan(p)
    assert paired_difference([2.0, 3.0], [1.0, 2.0])[1] == 0.0  # identical non-zero differences
    assert paired_difference([2.0, 3.0], [2.0, 3.0])[1] == 1.0
    with pytest.raises(ValueError, match="one value per seed"):
        paired_difference([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="finite"):
        paired_difference([1.0, math.nan], [1.0, 2.0])


def _holm_brute_force(p: list[float]) -> list[float]:
    """Holm by its closed-testing definition over every order statistic, written independently of holm()."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    adjusted = [0.0] * m
    for k, i in enumerate(order):
        adjusted[i] = min(1.0, max((m - j) * p[order[j]] for j in range(k + 1)))
    return adjusted


def test_holm_equals_its_definition_keeps_nan_and_is_monotone():
    rng = np.random.default_rng(1)
    for m in (1, 2, 5, 9):
        p = rng.uniform(0, 0.2, m).tolist()
        assert holm(p) == pytest.approx(_holm_brute_force(p))
    got = holm([0.01, math.nan, 0.04, 0.03])
    assert math.isnan(got[1]) and got[0] == pytest.approx(0.03) and got[3] == pytest.approx(0.06)
    assert got[2] == pytest.approx(0.06)  # step-down: never below an earlier adjusted value
    for a, b in itertools.combinations([0.001, 0.02, 0.5, 0.04], 2):
        pa, pb = holm([a, b])
        assert (pa <= pb) == (a <= b)


def test_compare_labels_roles_and_adjusts_only_the_secondaries():
    rows = compare(
        ("primary", [3.0, 4.0, 5.0, 6.0], [1.0, 1.5, 3.0, 2.0]),
        secondary={"s1": ([1.0, 2.0, 3.0], [0.0, 1.1, 2.0]), "s2": ([1.0, 2.0, 3.5], [1.0, 2.2, 3.0])},
        exploratory={"e": ([1.0, 2.0], [0.0, 0.0])},
    )
    assert [(r.name, r.role) for r in rows] == [
        ("primary", "primary"), ("s1", "secondary"), ("s2", "secondary"), ("e", "exploratory")
    ]  # fmt: skip
    assert rows[0].p_adjusted is None and rows[3].p_adjusted is None
    assert [rows[1].p_adjusted, rows[2].p_adjusted] == pytest.approx(holm([rows[1].p_value, rows[2].p_value]))
    assert rows[0].as_dict()["role"] == "primary"
    single = compare(("one seed", [1.0], [0.0]))[0].as_dict()
    assert single["low"] is None and single["p_value"] is None  # JSON null, not the string "nan"


@pytest.mark.parametrize(
    ("low", "high", "effect", "expected"),
    [
        (0.5, 2.0, 1.0, "reproduced"),
        (-0.5, 2.0, 1.0, "inconclusive at this scale"),
        (0.1, 0.5, 1.0, "same direction, smaller"),
        (-0.2, 0.5, 1.0, "smaller; no effect is not excluded"),
        (-2.0, -1.5, 1.0, "the opposite direction"),
        (1.5, 3.0, 1.0, "same direction, larger"),
        (-2.0, -0.5, -1.0, "reproduced"),
        (-0.5, -0.1, -1.0, "same direction, smaller"),
    ],
)
def test_the_verdict_follows_the_primary_interval(low, high, effect, expected):
    from iclr25_shared.metrics import Estimate
    from iclr25_shared.stats import Comparison

    row = Comparison("p", "primary", Estimate((low + high) / 2, low, high, 5), 0.01)
    assert expected in verdict(row, effect)
    with pytest.raises(ValueError, match="primary comparison only"):
        verdict(Comparison("s", "secondary", row.estimate, 0.01), effect)
