"""tools/gpu_check.py without a GPU: its refusal, the [tool.iclr25.gpu] table, and the summary's parsing."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parent.parent / "gpu_check.py"
spec = importlib.util.spec_from_file_location("gpu_check", TOOL)
gpu_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_check)


@pytest.mark.skipif(
    shutil.which("nvidia-smi") is not None, reason="checks the refusal on a machine without a GPU"
)
def test_without_a_gpu_it_exits_2_with_one_line():
    slug = next(s for s, f in gpu_check.packages().items() if _has_table(f))
    proc = subprocess.run([sys.executable, str(TOOL), slug], capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "no CUDA device is visible" in proc.stderr


def _has_table(folder: Path) -> bool:
    try:
        gpu_check.gpu_table(folder)
    except ValueError:
        return False
    return True


def test_the_table_is_required_and_checked(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    with pytest.raises(ValueError, match=r"no \[tool.iclr25.gpu\] table"):
        gpu_check.gpu_table(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.iclr25.gpu]\nbench = ["bench"]\nreproduce = "reproduce"\n'
    )
    with pytest.raises(ValueError, match="reproduce must be a list of strings"):
        gpu_check.gpu_table(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.iclr25.gpu]\nbench = ["bench"]\nreproduce = ["reproduce"]\n'
    )
    assert gpu_check.gpu_table(tmp_path) == {"bench": ["bench"], "reproduce": ["reproduce"]}


def test_unknown_packages_are_refused():
    proc = subprocess.run([sys.executable, str(TOOL), "nope"], capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "unknown package(s) nope" in proc.stderr


def test_junit_counts_and_bench_metrics_are_read_from_the_files(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest" tests="5" failures="1" errors="1" skipped="1"></testsuite></testsuites>'
    )
    assert gpu_check.junit_counts(junit) == {"passed": 2, "failed": 2, "skipped": 1}
    assert gpu_check.junit_counts(tmp_path / "missing.xml") == {"passed": 0, "failed": 0, "skipped": 0}
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"metrics": {"speedup_vs_sd": 1.2, "peak_memory_mb": 3, "loss": 0.1}}))
    assert gpu_check.bench_metrics(results) == {"speedup_vs_sd": 1.2, "peak_memory_mb": 3}


def test_the_summary_flags_failures_and_parts_over_budget():
    rows = [
        {"package": "a", "part": "tests", "status": "pass", "passed": 3, "failed": 0, "skipped": 0, "seconds": 12.0,
         "over_budget": False},
        {"package": "a", "part": "bench", "status": "FAIL", "seconds": 75.0, "over_budget": True,
         "metrics": {"speedup": 1.5}},
    ]  # fmt: skip
    text = gpu_check.markdown(rows)
    assert "| a | tests | pass | 3/0/0 | 12.0 |  |" in text
    assert "| a | bench | FAIL |  | 75.0 (over 60 s) | speedup=1.5 |" in text
