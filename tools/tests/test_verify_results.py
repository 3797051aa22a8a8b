"""tools/verify_results.py: a rerun reproduces when its primary difference lies inside the committed interval."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parent.parent / "verify_results.py"
spec = importlib.util.spec_from_file_location("verify_results", TOOL)
verify_results = importlib.util.module_from_spec(spec)
spec.loader.exec_module(verify_results)


def _results(value: float, low: float | None, high: float | None, loss: float = 1.0) -> dict:
    rows = [
        {"name": "A - B", "role": "primary", "mean_difference": value, "low": low, "high": high},
        {"name": "C - B", "role": "secondary", "mean_difference": 9.0, "low": 8.0, "high": 10.0},
    ]
    return {"metrics": {"loss": loss}, "tables": {"comparisons": rows}}


def test_inside_the_committed_interval_passes_outside_fails():
    committed = _results(0.5, 0.2, 0.8)
    assert verify_results.verify(committed, _results(0.79, 0.0, 1.0), deterministic=False) == []
    [problem] = verify_results.verify(committed, _results(0.81, 0.7, 0.9), deterministic=False)
    assert "outside the committed interval [0.2, 0.8]" in problem


def test_determinism_compares_everything_and_nulls_are_reported():
    committed = _results(0.5, 0.2, 0.8)
    assert verify_results.verify(committed, _results(0.5, 0.2, 0.8), deterministic=True) == []
    problems = verify_results.verify(committed, _results(0.5, 0.2, 0.8, loss=1.0 + 1e-12), deterministic=True)
    assert problems == ["metrics differ from the committed run (the package promises bit-identical reruns)"]
    [problem] = verify_results.verify(_results(0.5, None, None), _results(0.5, 0.1, 0.9), deterministic=False)
    assert "no finite interval" in problem


def test_exactly_one_primary_row_is_required():
    results = _results(0.5, 0.2, 0.8)
    results["tables"]["comparisons"][1]["role"] = "primary"
    with pytest.raises(ValueError, match="found 2"):
        verify_results.primary_row(results, "committed")
    with pytest.raises(ValueError, match="found 0"):
        verify_results.primary_row({"tables": {}}, "fresh")


def test_the_command_exits_0_1_2(tmp_path):
    def run(committed: dict, fresh: dict | str) -> int:
        (tmp_path / "c.json").write_text(json.dumps(committed))
        (tmp_path / "f.json").write_text(fresh if isinstance(fresh, str) else json.dumps(fresh))
        cmd = [sys.executable, str(TOOL), str(tmp_path / "c.json"), str(tmp_path / "f.json")]
        return subprocess.run(cmd, capture_output=True, check=False).returncode

    assert run(_results(0.5, 0.2, 0.8), _results(0.6, 0, 1)) == 0
    assert run(_results(0.5, 0.2, 0.8), _results(0.9, 0, 1)) == 1
    assert run(_results(0.5, 0.2, 0.8), "{not json") == 2


def test_the_weekly_matrix_lists_the_packages_that_declare_a_primary_reproduction(tmp_path):
    for slug, table in [
        ("a", "[tool.iclr25.verify]\nreproduce = []\ncommitted = 'r'\n"),
        ("b", "[tool.iclr25.gpu]\n"),
    ]:
        (tmp_path / "packages" / slug).mkdir(parents=True)
        (tmp_path / "packages" / slug / "pyproject.toml").write_text("[project]\nname = 'x'\n" + table)
    assert verify_results.sessions(tmp_path) == ["verify(a)"]
