"""The reproduction's statistics and diagnostics, and the reproduction end to end on a tiny Fashion-MNIST run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from iclr25_infomax._experiment import _redundancy_diagnostics, _t_interval
from iclr25_infomax.cli import main
from iclr25_shared.testing import require


def test_t_interval_matches_the_t_table():
    mean, lo, hi = _t_interval(np.array([1.0, 2.0, 3.0]))
    half = 4.302652729911275 / np.sqrt(3)  # t_{0.975, 2} from the table; sd = 1
    assert mean == pytest.approx(2.0)
    assert lo == pytest.approx(2.0 - half)
    assert hi == pytest.approx(2.0 + half)
    one = _t_interval(np.array([0.5]))
    assert one[0] == 0.5
    assert np.isnan(one[1])
    assert np.isnan(one[2])


def test_redundancy_diagnostics_on_a_path_graph():
    # path 0-1-2-3 with weight 0.5 on each edge; selecting {0, 1, 3}: one kept edge (0-1), counted twice
    rows, cols = [0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]
    K = sp.csr_matrix((np.full(6, 0.5), (rows, cols)), shape=(4, 4))
    scores = np.array([1.0, 2.0, 3.0, 4.0])
    d = _redundancy_diagnostics(np.array([0, 1, 3]), scores, K, 2.0, top=np.array([1, 2, 3]))
    assert d["Σ_S I"] == pytest.approx(7.0)
    assert d["α Σ_S K"] == pytest.approx(2.0 * 2 * 0.5)
    assert d["redundancy / importance"] == pytest.approx(2.0 / 7.0, abs=1e-3)
    assert d["kept with a kept kNN neighbour (%)"] == pytest.approx(100 * 2 / 3, abs=0.1)
    assert d["overlap with top-p by score (%)"] == pytest.approx(100 * 2 / 3, abs=0.1)


@pytest.mark.slow
def test_reproduce_tiny_end_to_end(tmp_path):
    from iclr25_shared.data import fashion_mnist

    require(fashion_mnist, "test")
    out = tmp_path / "r"
    argv = [
        "reproduce",
        "--num-train", "1200", "--num-val", "300", "--num-test", "400",
        "--train-steps", "20", "--seeds", "2", "--budgets", "0.1", "0.3",
        "--alphas", "0.1", "1", "--ccs-betas", "0", "0.1", "--score-epochs", "2",
        "--out", str(out), "--quiet",
    ]  # fmt: skip
    assert main(argv) == 0
    rec = json.loads((out / "results.json").read_text())
    tables = rec["tables"]
    acc = tables["test accuracy (%) mean ± SD over seeds"]
    assert [r["method"] for r in acc] == [
        "random",
        "hard_first",
        "ccs",
        "kcenter",
        "greedy",
        "infomax",
        "full pool",
    ]
    paired = tables["paired differences (pp), InfoMax − baseline"]
    assert {r["InfoMax −"] for r in paired} == {"random", "hard_first", "ccs", "kcenter", "greedy"}
    diag = tables["redundancy diagnostics (does the α term bind?)"]
    assert any(r["method"].startswith("greedy at InfoMax") for r in diag)
    counts = tables["per-class counts of the chosen sets"]
    for r in counts:
        n = sum(int(v) for v in r["counts (classes 0–9)"].split())
        assert n == (120 if r["kept"] == "10%" else 360)
    assert (out / "accuracy_vs_budget.png").stat().st_size > 0
