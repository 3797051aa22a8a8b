"""The reproduction's comparisons (iclr25_shared.stats) and its wiring end to end with the scripted oracle."""

from __future__ import annotations

import json

import pytest

from iclr25_icai._reproduce import comparisons, paper_effect
from iclr25_icai.cli import main


def _row(backend, setting, seed, default, constitutional):
    return {
        "backend": backend,
        "setting": setting,
        "seed": seed,
        "agreement_default": default,
        "agreement_constitutional": constitutional,
    }


def test_paper_effect_is_table_1_constitutional_minus_default():
    assert paper_effect("orthogonal") == pytest.approx(86.7 - 37.8)
    assert paper_effect("unaligned") == pytest.approx(84.4)
    assert paper_effect("aligned") == pytest.approx(92.2 - 100.0)


def test_primary_is_smollm2_orthogonal_paired_by_seed():
    per_seed = [
        _row("oracle", "orthogonal", 0, 0.4, 1.0),
        _row("oracle", "orthogonal", 1, 0.5, 1.0),
        _row("local", "unaligned", 0, 0.5, 0.25),
        _row("local", "unaligned", 1, 0.75, 0.25),
        _row("local", "orthogonal", 1, 0.5, 0.5),  # seeds out of order: paired by seed, not by row
        _row("local", "orthogonal", 0, 0.5, 0.75),
    ]
    rows = comparisons(per_seed, ("oracle", "local"))
    assert [r.role for r in rows] == ["primary", "secondary", "exploratory"]
    assert rows[0].name == "constitutional − default agreement (pp), SmolLM2-135M, orthogonal"
    assert rows[0].estimate.value == pytest.approx((25.0 + 0.0) / 2)
    assert rows[1].name.endswith("SmolLM2-135M, unaligned")
    assert rows[1].estimate.value == pytest.approx((-25.0 - 50.0) / 2)
    assert rows[2].name.endswith("oracle, orthogonal") and rows[2].estimate.value == pytest.approx(55.0)
    # without SmolLM2 the oracle carries the primary
    only = comparisons([r for r in per_seed if r["backend"] == "oracle"], ("oracle",))
    assert [r.role for r in only] == ["primary"] and only[0].name.endswith("oracle, orthogonal")
    assert comparisons([], ("oracle",)) == []


def test_reproduce_with_the_oracle_writes_comparisons_per_seed_and_verdict(tmp_path):
    out = tmp_path / "r"
    argv = ["reproduce", "--backends", "oracle", "--seeds", "2", "--train-pairs", "12", "--test-pairs", "8"]
    assert main([*argv, "--out", str(out), "--quiet"]) == 0
    rec = json.loads((out / "results.json").read_text())
    comp, per_seed = rec["tables"]["comparisons"], rec["tables"]["per_seed"]
    assert [r["role"] for r in comp] == ["primary", "secondary", "secondary"]
    assert comp[0]["name"].endswith("oracle, orthogonal") and comp[0]["n"] == 2
    ortho = [r for r in per_seed if r["setting"] == "orthogonal"]
    diffs = [100 * (r["agreement_constitutional"] - r["agreement_default"]) for r in ortho]
    assert comp[0]["mean_difference"] == pytest.approx(sum(diffs) / 2)
    assert rec["metrics"]["paper_effect"] == pytest.approx(48.9)
    assert isinstance(rec["metrics"]["verdict"], str)
