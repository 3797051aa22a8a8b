"""The G-set benchmark helpers: instance loading from --gset-dir, best-known values, paired intervals (against
scipy's one-sample t interval), times to a target; the real G-set files when the data folder is present."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from scipy import stats

from iclr25_qqa._gset import (
    GSET_BEST_KNOWN,
    default_gset_dir,
    first_time,
    load_instance,
    paired_interval,
)
from iclr25_qqa.cli import main


def write_rudy(path, g):
    lines = [f"{g.number_of_nodes()} {g.number_of_edges()} "]  # trailing space, as the G-set copies
    lines += [f"{u + 1} {v + 1} {int(d.get('weight', 1))}" for u, v, d in g.edges(data=True)]
    path.write_text("\r\n".join(lines) + "\r\n")  # CRLF, as several G-set copies


def test_load_instance_reads_g_names_from_the_folder(tmp_path):
    g = nx.convert_node_labels_to_integers(nx.grid_2d_graph(4, 6, periodic=True))
    write_rudy(tmp_path / "G11.txt", g)
    inst = load_instance("G11", tmp_path)
    assert inst.label == "G11"
    assert inst.best_known == GSET_BEST_KNOWN["G11"] == 564
    assert inst.problem.num_nodes == 24
    assert len(inst.problem.edge_u) == 48
    with pytest.raises(FileNotFoundError, match=r"G12.*G12\.txt"):
        load_instance("G12", tmp_path)


def test_the_default_gset_folder_is_found_without_a_machine_specific_path(tmp_path, monkeypatch):
    """Regression (issue 37): --gset-dir defaulted to /work/shared/data/gset, a path of the development machines."""
    from iclr25_qqa import _gset
    from iclr25_qqa.cli import BenchConfig
    from iclr25_shared.errors import DatasetUnavailable

    assert BenchConfig().gset_dir is None
    monkeypatch.setenv("ICLR25_DATA", str(tmp_path))
    assert default_gset_dir() == tmp_path / "gset"
    (tmp_path / "gset").mkdir()
    write_rudy(tmp_path / "gset" / "G11.txt", nx.convert_node_labels_to_integers(nx.cycle_graph(6)))
    assert load_instance("G11").problem.num_nodes == 6
    monkeypatch.delenv("ICLR25_DATA")
    monkeypatch.setattr(_gset, "__file__", str(tmp_path / "site-packages" / "iclr25_qqa" / "_gset.py"))
    assert default_gset_dir() is None  # an installed wheel, no kit data above it
    with pytest.raises(DatasetUnavailable, match="--gset-dir"):
        load_instance("G11")


def test_torus_spec_carries_its_proven_optimum(tmp_path):
    inst = load_instance("torus:4x6", tmp_path)
    assert inst.best_known == 48
    assert inst.kind == "optimal (torus)"


def test_paired_interval_equals_scipy_t_interval():
    d = [3.0, -1.0, 4.0, 1.5, 0.0]
    mean, lo, hi = paired_interval(d)
    ci = stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert mean == pytest.approx(np.mean(d))
    assert (lo, hi) == pytest.approx((ci.low, ci.high))
    assert all(math.isnan(v) for v in paired_interval([1.0])[1:])


def test_first_time_is_the_first_point_at_or_above_target():
    trace = [(0.5, 90.0), (1.0, 98.9), (1.5, 99.0), (2.0, 100.0)]
    assert first_time(trace, 99.0) == 1.5
    assert first_time(trace, 100.5) is None


_KIT_GSET = default_gset_dir()


@pytest.mark.skipif(
    _KIT_GSET is None or not (_KIT_GSET / "G11.txt").is_file(), reason="the kit's G-set files are not here"
)
def test_real_gset_files_match_their_documented_sizes():
    for name, n, m in [("G11", 800, 1600), ("G15", 800, 4661), ("G1", 800, 19176)]:
        inst = load_instance(name)  # found without a folder: $ICLR25_DATA or the checkout's shared/data
        assert (inst.problem.num_nodes, len(inst.problem.edge_u)) == (n, m)
    g11 = load_instance("G11", _KIT_GSET).problem
    assert set(np.unique(g11.edge_w)) == {-1.0, 1.0}  # toroidal ±1 weights
    assert g11.resolved_layout() == "edges"
    assert load_instance("G1", _KIT_GSET).problem.resolved_layout() == "dense"  # 6 % fill


@pytest.mark.slow
def test_bench_end_to_end_on_a_small_rudy_file(tmp_path, capsys):
    g = nx.convert_node_labels_to_integers(nx.grid_2d_graph(6, 8, periodic=True))
    write_rudy(tmp_path / "G11.txt", g)
    out = tmp_path / "out"
    code = main(["bench", "--instances", "G11", "torus:4x6", "--gset-dir", str(tmp_path), "--budget", "0.3",
                 "--seeds", "2", "--tune-on", "torus:4x6", "--qqa-replicas", "8", "--qqa-lr", "1.0",
                 "--sa-reads", "1", "2", "--quiet", "--out", str(out)])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    text = (out / "results.md").read_text()
    assert "step time vs floor" in text
    assert "QQA − SA (95% CI)" in text


# s1 = 100 sweeps in t1; s2 = max(int(1/4 / (t1/100)), 200) sweeps in t2; sweeps = (1 - a) / b with b the slope,
# floored at a quarter of t2/s2 (case 1: b = 0.05/250, a = 0.10 - 100 b = 0.08 -> 4600; case 2: s2 = 1250,
# b = 0.24/1150, a = 0 -> 4791.67)
@pytest.mark.parametrize(("t1", "t2", "expected"), [(0.10, 0.05, 4600.0), (0.02, 0.26, 1150 / 0.24)])
def test_sa_calibration_survives_timing_noise(monkeypatch, t1, t2, expected):
    """Regression: a second timing below the first (load noise) gave a zero slope and ~1e8 sweeps (a hang)."""
    from types import SimpleNamespace

    from iclr25_qqa import _gset

    times = iter([t1, t2])
    monkeypatch.setattr(_gset, "simulated_annealing", lambda *a, **k: SimpleNamespace(seconds=next(times)))
    assert _gset.calibrate_sa(object(), 0, 1, 1.0) == pytest.approx(expected)


def test_qqa_run_reports_the_polish_separately():
    """The bench's QQA+polish: the 1-flip polish of the best replica never lowers the cut; the steps follow the
    budget and the measured step time."""
    from iclr25_qqa import MaxCut
    from iclr25_qqa._gset import qqa_run

    g = nx.random_regular_graph(3, 60, seed=4)
    problem = MaxCut(g)
    run = qqa_run(problem, 0.05, 0, 8, 1e-3, gamma=(-1.0, 0.1))
    assert run["steps"] == 50
    assert run["polished_cut"] >= run["cut"]
    assert run["polish_s"] >= 0.0
