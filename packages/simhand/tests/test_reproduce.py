"""The reproduction's comparison wiring: the declared primary first, per-seed values recompute it, roles."""

import json

import numpy as np
import pytest

from iclr25_simhand._reproduce import METHODS, comparisons, primary_name, relative_change


def _rows(seeds=(0, 1, 2, 3, 4), fractions=(0.1, 1.0)):
    rng = np.random.default_rng(0)
    return [
        {
            "seed": s,
            "method": m,
            "fraction": f,
            "pa_mpjpe_mm": float(30 + rng.random() * 5),
            "mpjpe_mm": 100.0,
        }
        for s in seeds
        for m in METHODS
        for f in fractions
    ]


def test_primary_is_first_and_is_simw_vs_peclr_relative_change_with_all_labels():
    rows = _rows()
    comps = comparisons(rows, (0.1, 1.0))
    assert comps[0].role == "primary" and comps[0].name == primary_name(1.0)
    assert [c.role for c in comps].count("primary") == 1
    pick = {(r["seed"], r["method"]): r["pa_mpjpe_mm"] for r in rows if r["fraction"] == 1.0}
    by_hand = [100 * (pick[(s, "simw")] / pick[(s, "peclr")] - 1) for s in range(5)]
    assert comps[0].estimate.value == pytest.approx(np.mean(by_hand), rel=1e-12)
    assert comps[0].estimate.n == 5


def test_secondary_are_holm_adjusted_and_the_rest_exploratory():
    comps = comparisons(_rows(), (0.1, 1.0))
    sec = [c for c in comps if c.role == "secondary"]
    assert len(sec) == 4 and all(c.p_adjusted >= c.p_value for c in sec)
    names = [c.name for c in comps]
    assert len(names) == len(set(names))  # no comparison twice
    # 2 fractions x (4 vs scratch + 4 vs PeCLR) = 16 pairs hold the primary and 3 secondaries (SiM-W vs SiM is
    # not among them): 1 primary + 4 secondary + 12 exploratory
    assert [c.role for c in comps].count("exploratory") == 12 and len(comps) == 17


def test_relative_change_is_paired_by_seed():
    rows = [
        {"seed": 1, "method": "simw", "fraction": 1.0, "pa_mpjpe_mm": 9.0},
        {"seed": 0, "method": "peclr", "fraction": 1.0, "pa_mpjpe_mm": 10.0},
        {"seed": 0, "method": "simw", "fraction": 1.0, "pa_mpjpe_mm": 12.0},
        {"seed": 1, "method": "peclr", "fraction": 1.0, "pa_mpjpe_mm": 10.0},
    ]
    assert relative_change(rows, "simw", "peclr", 1.0) == pytest.approx([20.0, -10.0])


def test_committed_run_per_seed_values_recompute_its_primary():
    from pathlib import Path

    path = Path(__file__).parents[1] / "results" / "reproduce-quick" / "results.json"
    if not path.is_file():
        pytest.skip("no committed run yet")
    res = json.loads(path.read_text())
    first = res["tables"]["comparisons"][0]
    assert first["role"] == "primary" and first["name"] == primary_name(1.0)
    diffs = relative_change(res["tables"]["per_seed"], "simw", "peclr", 1.0)
    assert len(diffs) >= 5 and first["mean_difference"] == pytest.approx(np.mean(diffs), rel=1e-12)
    from iclr25_shared.stats import verdict

    assert res["metrics"]["verdict"] == verdict(comparisons(res["tables"]["per_seed"], (0.1, 1.0))[0], -15.0)
