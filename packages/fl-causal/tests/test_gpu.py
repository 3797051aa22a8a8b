"""CUDA tier (issue 40) for a CPU-only package. Skipped where no CUDA device is visible.

fl-causal's estimators are numpy / scipy (IRLS logistic and linear regressions, influence functions, bootstrap):
nothing runs on a GPU, nothing runs in reduced precision, and the README makes no GPU memory claim. What a GPU
machine can still break is the contract of ``--device`` (accepted and ignored): these tests check that ``--device
cuda`` changes no number and that the package never creates a CUDA context (which would take ~500 MiB of another
job's GPU memory for nothing).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from iclr25_fl_causal.cli import main  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("estimator", ["gcomp", "ipw", "dr"])
def test_device_cuda_gives_the_cpu_numbers_bit_for_bit(sim_args, sim_csv, tmp_path, estimator):
    """The same data, seed and options with --device cpu and --device cuda: identical estimate tables (the device
    must not reach any computation; the bootstrap's seed is the same)."""
    tables = {}
    for device in ("cpu", "cuda"):
        out = tmp_path / device
        argv = ["estimate", "--data", str(sim_csv), "--estimator", estimator, "--grid", "0.5,0.2", "--n-boot",
                "5", "--device", device, "--quiet", "--out", str(out), *sim_args]  # fmt: skip
        assert main(argv) == 0
        tables[device] = json.loads((out / "results.json").read_text())["tables"]["estimates"]
    assert tables["cuda"] == tables["cpu"]


def test_a_cuda_run_never_initialises_cuda(sim_args, sim_csv, tmp_path):
    """In a fresh process, ``estimate --device cuda`` ends with no CUDA context (torch may be imported to resolve the
    device string; ``torch.cuda.is_initialized()`` stays False)."""
    code = (
        "import sys\n"
        "from iclr25_fl_causal.cli import main\n"
        f"rc = main(['estimate', '--data', {str(sim_csv)!r}, '--estimator', 'dr', '--grid', '0.5', '--device', "
        f"'cuda', '--quiet', '--out', {str(tmp_path / 'run')!r}, *{sim_args!r}])\n"
        "torch = sys.modules.get('torch')\n"
        "print(rc, bool(torch is not None and torch.cuda.is_initialized()))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.stdout.split()[-2:] == ["0", "False"], done.stdout + done.stderr
