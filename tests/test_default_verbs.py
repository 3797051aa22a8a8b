"""After the README's set-up (`uv sync`: every member with its runtime extras), every package's default verb runs.

Each CLI's default verb runs at its smallest size through its installed console script, in the workspace
environment, and must exit 0 (issue: `uv run iclr25-semiclip train` exited 1 with ModuleNotFoundError 'timm').
The arguments only shrink the run; they never switch to a different code path than the default's.
Run by the `workspace` nox session (slow: about a minute per package on 2 cores).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SMALLEST: dict[str, tuple[str, ...]] = {
    "adak": ("--steps", "1", "--epochs", "1", "--eval-blocks", "2"),
    "cald": ("--layers", "1"),
    "debgcd": ("--epochs", "1", "--per-class", "20"),
    "diffusion-curriculum": ("--steps", "4", "--max-steps-per-stage", "2", "--patience", "1"),
    "diffusion-shapley": (
        "--per-class",
        "20",
        "--retrain-steps",
        "2",
        "--prune-steps",
        "2",
        "--ft-steps",
        "2",
        "--unlearn-steps",
        "1",
        "--num-samples",
        "8",
    ),
    "edgeprompt": ("--pretrain-epochs", "1", "--epochs", "2"),
    "fl-causal": (),
    "hyper-connections": ("--num-seeds", "1", "--steps", "2", "--checkpoints", "1"),
    "icai": ("--max-principles", "1", "--max-pairs", "8"),
    "infomax": (),
    "lantern": ("--samples", "1"),
    "levattention": (),
    "lozo": ("--steps", "1", "--eval-per-class", "1", "--shots", "1", "--batch-size", "2"),
    "prdp": ("--epochs", "2"),
    "qqa": ("--steps", "20", "--replicas", "4"),
    "semiclip": (
        "--pool",
        "400",
        "--test-size",
        "32",
        "--stage1-steps",
        "1",
        "--stage2-steps",
        "1",
        "--batch-size",
        "8",
        "--unlabelled-batch",
        "8",
    ),
    "simhand": ("--pool", "16", "--steps", "1", "--batch-size", "8"),
    "videophy": (),
    "vl-interp": (),
}

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_is_listed():
    assert sorted(SMALLEST) == sorted(
        p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").is_file()
    )


@pytest.mark.slow
@pytest.mark.parametrize("slug", sorted(SMALLEST))
def test_the_default_verb_runs_in_the_workspace(slug, tmp_path):
    script = Path(sys.executable).parent / f"iclr25-{slug}"
    command = str(script) if script.exists() else shutil.which(f"iclr25-{slug}")
    assert command, f"iclr25-{slug} is not installed in this environment"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(
        [command, *SMALLEST[slug], "--quiet", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    assert (tmp_path / "out" / "results.json").is_file()
