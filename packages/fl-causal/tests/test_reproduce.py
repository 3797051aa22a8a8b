"""``reproduce``'s declared primary comparison, per-replicate table and verdict (issue 41) on a tiny run."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from iclr25_fl_causal.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("repro") / "run"
    argv = [
        "reproduce",
        "--parts",
        "simulation",
        "--reps",
        "3",
        "--n-boot",
        "2",
        "--quiet",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    return json.loads((out / "results.json").read_text())


def test_the_primary_row_is_first_and_is_the_one_the_readme_declares(tiny_run):
    from iclr25_fl_causal._reproduce import PRIMARY

    rows = tiny_run["tables"]["comparisons"]
    assert rows[0]["role"] == "primary" and rows[0]["name"] == PRIMARY
    assert [r["role"] for r in rows[1:]] == ["secondary"] * 5
    assert all(r["p_adjusted"] is None or r["p_adjusted"] >= r["p_value"] for r in rows[1:])
    declared = re.search(
        r"\*\*Primary comparison \(declared before the run\):\*\*(.*?)\n\n", README.read_text(), re.S
    )
    assert declared and "g-computation" in declared.group(1) and "K = 40" in declared.group(1)


def test_per_replicate_values_recompute_the_primary_difference(tiny_run):
    """The committed difference is the mean over replicates of |est(K=40) − truth| − |est(K=5) − truth| for
    g-computation at n = 2000, computed here from the per_seed table alone."""
    per = [r for r in tiny_run["tables"]["per_seed"] if r["n"] == 2000 and r["estimator"] == "gcomp"]
    assert sorted(r["replicate"] for r in per) == [0, 1, 2]
    d = [abs(r["estimate_K40"] - r["truth"]) - abs(r["estimate_K5"] - r["truth"]) for r in per]
    primary = tiny_run["tables"]["comparisons"][0]
    assert primary["n"] == 3
    assert primary["mean_difference"] == pytest.approx(float(np.mean(d)), abs=1e-12)
    half = primary["high"] - primary["mean_difference"]
    assert half == pytest.approx(4.302652729911275 * np.std(d, ddof=1) / math.sqrt(3), rel=1e-9)


def test_the_verdict_is_read_from_the_primary_row(tiny_run):
    from iclr25_fl_causal._reproduce import PAPER_EFFECT
    from iclr25_shared.metrics import Estimate
    from iclr25_shared.stats import Comparison, verdict

    p = tiny_run["tables"]["comparisons"][0]
    row = Comparison(
        p["name"], "primary", Estimate(p["mean_difference"], p["low"], p["high"], p["n"]), p["p_value"]
    )
    assert tiny_run["metrics"]["verdict"] == verdict(row, PAPER_EFFECT)
    assert tiny_run["metrics"]["paper_effect"] == PAPER_EFFECT < 0


def test_the_summary_table_is_computed_from_the_per_replicate_table(tiny_run):
    cell = next(
        r
        for r in tiny_run["tables"]["simulation"]
        if (r["n"], r["estimator"], r["intervals"]) == (500, "dr", 10)
    )
    per = [r for r in tiny_run["tables"]["per_seed"] if r["n"] == 500 and r["estimator"] == "dr"]
    assert cell["bias"] == pytest.approx(
        np.mean([r["estimate_K10"] for r in per]) - per[0]["truth"], abs=1e-12
    )


def test_non_finite_values_become_null_with_a_reason():
    """Regression (issue 41): real-data rows without a bootstrap SE were written as the string "nan"."""
    from iclr25_fl_causal._reproduce import finite_rows
    from iclr25_shared.results import to_jsonable

    rows = [{"estimator": "gcomp", "risk": 0.12, "se": float("nan"), "max_weight": float("inf")}]
    assert to_jsonable(rows)[0]["se"] == "nan"  # what the runner writes for a raw NaN
    (clean,) = finite_rows(rows)
    assert clean["se"] is None and "bootstrap" in clean["se_reason"]
    assert clean["max_weight"] is None and clean["max_weight_reason"]
    assert clean["risk"] == 0.12 and "risk_reason" not in clean
