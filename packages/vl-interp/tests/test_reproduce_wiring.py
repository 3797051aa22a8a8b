"""``reproduce``'s declared primary comparison, per-seed table and verdict (issue 41), on synthetic per-seed rows
(the heavy model run is replaced; test_reproduce_slow.py runs the real one)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from iclr25_vl_interp.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


def _row(seed: int, chair_i: float, chair_i_after: float) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "seed": seed,
        "chair_i": chair_i,
        "chair_i_after": chair_i_after,
        "recall": 0.4,
        "recall_after": 0.3 - 0.01 * seed,
        "auroc_present_absent": 0.5 + 0.01 * seed,
        "auroc_halluc_c_o": float(rng.uniform(0.4, 0.6)),
        "auroc_halluc_output_prob": 0.6,
        "localisation_acc": 0.1 + 0.01 * seed,
        "chance_occupied_cell": 0.34,
        "removal_projectaway": 0.8 + 0.02 * seed,
        "removal_random": 0.1,
        "retention_projectaway": 0.2,
        "retention_random": 0.9 - 0.01 * seed,
        "auroc_per_layer": [0.5, 0.51],
        "co_hallucination_rate": float("nan"),
    }


ROWS = [_row(0, 0.6, 0.75), _row(1, 0.5, 0.55), _row(2, 0.55, 0.66), _row(3, 0.4, 0.42), _row(4, 0.58, 0.6)]


def test_the_primary_is_first_named_as_the_readme_declares_and_is_the_relative_chair_change():
    from iclr25_vl_interp._repro import PRIMARY, comparisons

    rows = comparisons(ROWS)
    assert rows[0].role == "primary" and rows[0].name == PRIMARY
    expected = np.mean([r["chair_i_after"] / r["chair_i"] - 1 for r in ROWS])
    assert rows[0].estimate.value == pytest.approx(expected, abs=1e-12)
    assert {r.role for r in rows[1:]} == {"secondary", "exploratory"}
    assert [r.name for r in rows if r.role == "exploratory"] == [
        "CHAIR_i: mass edit - unedited",
        "object recall: mass edit - unedited",
    ]
    declared = re.search(
        r"\*\*Primary comparison \(declared before the run\):\*\*(.*?)\n\n", README.read_text(), re.S
    )
    assert declared and "CHAIR_i" in declared.group(1) and "−23.8" in declared.group(1)


def test_reproduce_writes_comparisons_per_seed_and_the_verdict(tmp_path, monkeypatch):
    from iclr25_shared.metrics import Estimate
    from iclr25_shared.stats import Comparison, verdict
    from iclr25_vl_interp import _repro, _reproduce
    from iclr25_vl_interp._repro import PAPER_EFFECT, SIZES

    fake = {
        "setting": SIZES["tiny"],
        "per_seed": ROWS,
        "tune_grid": [{"image_layer": 1, "text_layer": 0, "alpha": 1.0, "removal": 0.5, "retention": 0.5}],
        "best": {"image_layer": 1, "text_layer": 0, "alpha": 1.0},
        "tau": 1e-5,
        "tune_diagnostics": {},
        "losses": [1.0],
        "timings": {},
        "examples": None,
        "total_s": 0.0,
    }
    monkeypatch.setattr(_repro, "run_reproduction", lambda *a, **k: fake)
    monkeypatch.setattr(_reproduce, "_reproduce_figures", lambda ctx, res: None)
    out = tmp_path / "run"
    assert main(["reproduce", "--cache", str(tmp_path / "c"), "--quiet", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    cmp = res["tables"]["comparisons"]
    assert cmp[0]["role"] == "primary" and cmp[0]["n"] == 5
    per = res["tables"]["per_seed"]
    d = [r["chair_i_after"] / r["chair_i"] - 1 for r in per]  # recomputed from the committed raw values
    assert cmp[0]["mean_difference"] == pytest.approx(np.mean(d), abs=1e-12)
    row = Comparison(
        cmp[0]["name"], "primary", Estimate(cmp[0]["mean_difference"], cmp[0]["low"], cmp[0]["high"], 5), 0
    )
    assert res["metrics"]["verdict"] == verdict(row, PAPER_EFFECT)
    # regression: a non-finite per-seed value was written as the string "nan"; now null with a reason
    assert per[0]["co_hallucination_rate"] is None and per[0]["co_hallucination_rate_reason"]
    assert "summary" not in res["tables"]
