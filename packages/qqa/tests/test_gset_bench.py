"""The G-set benchmark helpers: instance loading from --gset-dir, best-known values, the bench's and the
reproduction's comparisons (iclr25_shared.stats at the call site), the official peer's runs scored here, times to a
target; the real G-set files when the data folder is present."""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest
from scipy import stats

from iclr25_qqa._gset import (
    GSET_BEST_KNOWN,
    default_gset_dir,
    first_time,
    load_instance,
    parse_official,
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


def _t_interval(d):
    ci = stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
    return float(np.mean(d)), ci.low, ci.high


def test_reproduce_primary_is_qqa_minus_sa_of_the_mean_over_instances():
    """The primary pairs seed i of QQA with seed i of SA on the mean % of the best known over the instances; the
    per-instance rows are secondary (Holm-adjusted), the polish's gain exploratory."""
    from iclr25_qqa._reproduce import comparisons, per_seed

    runs = []
    qqa = {("A", 0): 98.0, ("B", 0): 99.0, ("A", 1): 97.0, ("B", 1): 99.5, ("A", 2): 98.5, ("B", 2): 98.0}
    for (inst, seed), q in qqa.items():
        runs.append({"instance": inst, "seed": seed, "QQA %": q, "QQA+polish %": q + 0.25, "SA %": 100.0})
    table = per_seed(runs, ["A", "B"])
    assert [(r["seed"], r["arm"]) for r in table[:3]] == [(0, "QQA"), (0, "QQA+polish"), (0, "SA")]
    rows = comparisons(table, ["A", "B"])
    # per-seed means 98.5, 98.25, 98.25 against SA's 100: differences -1.5, -1.75, -1.75
    mean, low, high = _t_interval([-1.5, -1.75, -1.75])
    assert rows[0].role == "primary"
    assert rows[0].estimate.value == pytest.approx(mean)
    assert (rows[0].estimate.low, rows[0].estimate.high) == pytest.approx((low, high))
    assert [r.role for r in rows].count("primary") == 1
    by_name = {r.name: r for r in rows}
    on_a = by_name["QQA − SA, % of best known on A"]
    assert on_a.role == "secondary" and on_a.estimate.value == pytest.approx(-(2.0 + 3.0 + 1.5) / 3)
    assert on_a.p_adjusted >= on_a.p_value
    polish = by_name["QQA+polish − QQA (the 1-flip polish)"]
    assert polish.role == "exploratory" and polish.estimate.value == pytest.approx(0.25)


def _bench_row(budget, inst, seed, qqa, official=None):
    row = {"budget s": budget, "instance": inst, "seed": seed, "QQA %": qqa, "QQA+polish %": qqa + 0.5,
           "SA %": 100.0, "QQA cut": 1.0}  # fmt: skip
    if official is not None:
        row.update({"official cut": 1.0, "official %": official, "official+polish %": official + 0.5})
    return row


def test_bench_has_one_primary_qqa_minus_official_pooled_at_the_first_budget():
    runs = [
        _bench_row(10.0, "G1", 0, 99.0, 98.0), _bench_row(10.0, "G1", 1, 99.5, 98.0),
        _bench_row(10.0, "G22", 0, 98.0, 98.5), _bench_row(10.0, "G22", 1, 98.5, 97.5),
        _bench_row(30.0, "G22", 0, 90.0, 99.0), _bench_row(30.0, "G22", 1, 90.0, 99.0),
    ]  # fmt: skip
    from iclr25_qqa._bench import comparisons

    rows = comparisons(runs, 10.0)
    assert [r.role for r in rows].count("primary") == 1
    # seed 0: (99 + 98)/2 - (98 + 98.5)/2 = 0.25; seed 1: (99.5 + 98.5)/2 - (98 + 97.5)/2 = 1.25 (30 s left out)
    assert rows[0].name.startswith("QQA − official")
    assert rows[0].estimate.value == pytest.approx(0.75)
    assert rows[0].estimate.n == 2
    names = {r.name: r.role for r in rows}
    assert names["QQA − official, % of best known, G22 at 30 s"] == "secondary"
    assert names["official − SA, % of best known, G1 at 10 s"] == "exploratory"
    without_peer = comparisons(
        [{k: v for k, v in r.items() if not k.startswith("official")} for r in runs], 10.0
    )
    assert without_peer[0].name.startswith("QQA − SA")
    assert without_peer[0].estimate.value == pytest.approx(((98.5 - 100) + (99.0 - 100)) / 2)


def test_official_answers_are_scored_here_from_their_assignment():
    """The peer's cut is recomputed from the assignment it returns (a 5-cycle: alternating 0/1 on nodes 0-3 and 0 on
    node 4 cuts 4 of the 5 edges), its own reported value only kept; a wrong-length or non-binary answer is refused."""
    from iclr25_qqa import MaxCut

    problem = MaxCut(nx.cycle_graph(5))
    run = {"budget": 1.0, "seed": 0, "seconds": 1.0, "epochs": 10, "reported_energy": -3.0,
           "solution": [0, 1, 0, 1, 0]}  # fmt: skip
    (scored,) = parse_official(problem, [run])
    assert scored["cut"] == 4
    assert scored["reported_cut"] == 3.0  # what it said, not what is used
    assert scored["polished_cut"] == 4  # C5's maximum cut is 4
    with pytest.raises(ValueError, match="expected 5 values"):
        parse_official(problem, [dict(run, solution=[0, 1, 0, 1])])
    with pytest.raises(ValueError, match="expected 5 values"):
        parse_official(problem, [dict(run, solution=[0, 1, 2, 1, 0])])


@pytest.mark.slow
def test_the_official_package_runs_on_our_instance_and_agrees_on_its_cut():
    """The official qqa (the peer extra / test group), in its subprocess, on a torus: every profile returns a binary
    assignment of our node order, whose cut computed here equals the cut it reports."""
    pytest.importorskip("qqa")
    from iclr25_qqa import _gset

    inst = load_instance("torus:4x6")
    profiles = {k: _gset.OFFICIAL_PROFILES[k] for k in ("fast", "anneal-defaults")}
    version, runs = _gset.official_runs(inst.problem, _gset.official_python(), [0.3], [0, 1], profiles, 5)
    assert version.startswith("0.")
    assert {(r["profile"], r["seed"]) for r in runs} == {(p, s) for p in profiles for s in (0, 1)}
    for r in runs:
        assert r["cut"] == r["reported_cut"]
        assert 0 < r["cut"] <= 48


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
                 "--sa-reads", "1", "2", "--long-instances", "torus:4x6", "--tune-budget", "0.3",
                 "--official-profiles", "fast", "--quiet", "--out", str(out)])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    data = json.loads((out / "results.json").read_text())
    assert [r["role"] for r in data["tables"]["comparisons"]].count("primary") == 1
    assert {r["instance"] for r in data["tables"]["step time"]} == {"G11", "torus:4x6"}
    assert len(data["tables"]["runs"]) == 2 * 2  # instances x seeds at the one budget


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


def test_pace_learns_the_runs_own_rate():
    """The first run uses the calibration; later ones the mean rate the runs actually had, after the fixed cost
    (calibration 2 ms per unit, 0.5 s fixed: 10 s -> 4750 units; a run of 4750 units in 5.25 s -> 1 ms per unit
    -> 9500; another of 9500 in 19.5 s -> 2 ms; mean 1.5 ms -> 6333)."""
    from iclr25_qqa._gset import Pace

    pace = Pace(2e-3, fixed=0.5)
    assert pace.units(10.0) == 4750
    pace.observe(4750, 5.25)
    assert pace.units(10.0) == 9500
    pace.observe(9500, 19.5)
    assert pace.units(10.0) == 6333
    pace.observe(100, 0.4)  # not above the fixed cost: ignored
    assert pace.units(10.0) == 6333
    assert Pace(1.0).units(0.5) == 2  # at least two steps


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
