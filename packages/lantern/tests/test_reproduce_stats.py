"""The reproduction's comparison wiring: the declared primary row first, paired by seed, secondary rows
Holm-adjusted, and the committed results.json consistent with its own per-seed values."""

import json
from pathlib import Path

import numpy as np
import pytest

from iclr25_lantern._reproduce import PRIMARY_ARM, SD, comparisons, primary_name

COMMITTED = Path(__file__).resolve().parents[1] / "results" / "reproduce-quick" / "results.json"
ARMS = [
    ("target-only AR", "ar", None),
    (SD, "sd", None),
    (PRIMARY_ARM, "sd", None),
    ("LANTERN k=8 delta=0.4", "sd", None),
]


def _rows(taus: dict[str, list[float]]) -> list[dict]:
    out = []
    for name, values in taus.items():
        for seed, tau in enumerate(values):
            out.append({"seed": seed, "method": name, "tau": tau, "tokens_per_cpu_s": 100.0 * tau,
                        "confidence": 0.5 + 0.01 * seed, "nll": 1.0 + 0.1 * tau})  # fmt: skip
    return out


def test_primary_is_first_and_is_the_tau_ratio_of_the_declared_arm_paired_by_seed():
    taus = {"target-only AR": [1.0] * 4, SD: [2.0, 2.5, 3.0, 2.0], PRIMARY_ARM: [3.0, 3.0, 3.3, 2.6],
            "LANTERN k=8 delta=0.4": [4.0, 4.0, 4.0, 4.0]}  # fmt: skip
    rows = comparisons(_rows(taus), ARMS)
    assert rows[0].role == "primary" and rows[0].name == primary_name()
    assert "LANTERN k=64 delta=0.1" in rows[0].name and "standard SD" in rows[0].name
    ratios = np.array(taus[PRIMARY_ARM]) / np.array(taus[SD]) - 1.0  # by hand: 0.5, 0.2, 0.1, 0.3
    assert rows[0].estimate.value == pytest.approx(0.275)
    assert rows[0].estimate.value == pytest.approx(ratios.mean())
    assert [r.role for r in rows[1:]].count("primary") == 0
    secondary = [r for r in rows if r.role == "secondary"]
    assert secondary and all(r.p_adjusted is not None and r.p_adjusted >= r.p_value for r in secondary)
    assert {r.role for r in rows} == {"primary", "secondary", "exploratory"}
    assert all("CPU-s" in r.name for r in rows if r.role == "exploratory" and "ratio" in r.name)


def test_primary_pairs_by_seed_not_by_position_of_the_pooled_means():
    # the same mean tau ratio of the pools (3/2) but per-seed ratios 2 and 1: a pooled ratio would say +0.5
    taus = {"target-only AR": [1.0, 1.0], SD: [1.0, 3.0], PRIMARY_ARM: [2.0, 3.0],
            "LANTERN k=8 delta=0.4": [2.0, 3.0]}  # fmt: skip
    rows = comparisons(_rows(taus), ARMS)
    assert rows[0].estimate.value == pytest.approx(0.5)  # mean of (2/1 - 1, 3/3 - 1)
    assert rows[0].estimate.n == 2


@pytest.mark.skipif(not COMMITTED.is_file(), reason="no committed reproduce-quick results")
def test_committed_per_seed_values_recompute_the_committed_primary_difference():
    data = json.loads(COMMITTED.read_text())
    primary = data["tables"]["comparisons"][0]
    assert primary["role"] == "primary" and primary["name"] == primary_name()
    per_seed = data["tables"]["per_seed"]
    tau = {(r["method"], r["seed"]): r["tau"] for r in per_seed}
    seeds = sorted({r["seed"] for r in per_seed})
    ratios = [tau[(PRIMARY_ARM, s)] / tau[(SD, s)] - 1.0 for s in seeds]
    assert len(seeds) == primary["n"] >= 5
    assert np.mean(ratios) == pytest.approx(primary["mean_difference"], rel=1e-12)
    assert data["metrics"]["verdict"]
