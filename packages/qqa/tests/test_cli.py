"""The CLI end to end on tiny inputs, and every bad input the issue names (exit 2, one line)."""

from __future__ import annotations

import json

import networkx as nx
import pytest

from iclr25_qqa.cli import main

FAST = ["--steps", "200", "--replicas", "8", "--quiet"]


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_help_lists_verbs(capsys):
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0
    assert all(v in out for v in ("solve", "reproduce", "bench"))


def test_solve_writes_a_feasible_solution_and_record(tmp_path, capsys):
    # every binary CLI test uses a 24-node, degree-4 graph: one compiled program serves them all
    code, out, err = run_cli(capsys, "solve", "mis", "--graph", "torus:4x6", *FAST, "--out", str(tmp_path))
    assert code == 0, err
    assert "set size" in out
    assert "feasible" in out
    rows = (tmp_path / "solution.csv").read_text().splitlines()
    assert rows[0] == "node,label"
    assert len(rows) == 25
    chosen = {int(r.split(",")[0]) for r in rows[1:] if r.endswith(",1")}
    g = nx.convert_node_labels_to_integers(nx.grid_2d_graph(4, 6, periodic=True), ordering="sorted")
    record = json.loads((tmp_path / "results.json").read_text())
    assert record["metrics"]["objective"] == len(chosen)
    assert record["metrics"]["feasible"] == nx.is_empty(g.subgraph(chosen))
    assert (tmp_path / "results.md").is_file()
    assert (tmp_path / "config.json").is_file()


def test_solve_maxcut_reports_gap_to_best_known(tmp_path, capsys):
    code, out, _ = run_cli(capsys, "solve", "maxcut", "--graph", "torus:4x6", *FAST)
    assert code == 0
    assert "gap to best known 48" in out


def test_solve_reads_a_gset_file(tmp_path, capsys):
    g = nx.convert_node_labels_to_integers(nx.grid_2d_graph(4, 6, periodic=True), ordering="sorted")
    p = tmp_path / "torus.txt"
    p.write_text(f"24 {g.number_of_edges()}\n" + "".join(f"{u + 1} {v + 1} 1\n" for u, v in g.edges()))
    code, out, _ = run_cli(capsys, "solve", "maxcut", "--graph", str(p), "--best-known", "48", *FAST)
    assert code == 0
    assert "cut weight 48" in out


def test_coloring_below_lower_bound_is_reported_not_an_error(capsys):
    code, out, _ = run_cli(capsys, "solve", "coloring", "--graph", "complete:5", "--k", "4", *FAST)
    assert code == 0
    assert "INFEASIBLE" in out
    assert "below the lower bound 5" in out


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["solve", "mis", "--graph", "nope:3"], "unknown graph spec"),
        (["solve", "mis", "--steps", "0"], r"steps must be an integer in \[1, inf\), got 0"),
        (["solve", "mis", "--replicas", "0"], r"replicas must be an integer in \[1, inf\), got 0"),
        (["solve", "mis", "--gamma", "0.1", "-3"], "gamma must be increasing"),
        (["solve", "mis", "--p", "3"], "p must be an even"),
        (["solve", "coloring", "--graph", "karate"], "coloring needs --k"),
        (
            ["solve", "coloring", "--graph", "complete:4", "--k", "0"],
            r"k must be an integer in \[1, inf\), got 0",
        ),
        (["solve", "coloring", "--graph", "complete:4", "--k", "9"], r"k must be an integer in \[1, 4\]"),
        (["solve", "mis", "--graph", "missing_file.col"], "does not exist"),
        (["solve", "tsp"], "tsp"),
        (["solve", "mis", "--device", "tpu"], "device must be"),
        (["frobnicate"], "unknown subcommand"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, message):
    code, _, err = run_cli(capsys, *argv)
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert __import__("re").search(message, lines[0]), lines[0]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("empty.col", "p edge 0 0\n", "n must be >= 1"),
        ("loop.txt", "2 2\n1 1 1\n1 2 1\n", "self-loop"),
        ("neg.txt", "2 1\n1 2 -1\n", "weights >= 0"),
        ("nan.txt", "2 1\n1 2 nan\n", r"nan.txt:2: .*finite"),
        ("bad.col", "p edge 3 1\ne 1 x\n", r"bad.col:2: "),
    ],
)
def test_bad_graph_files_exit_2(tmp_path, capsys, name, text, message):
    code, _, err = run_cli(capsys, "solve", "mis", "--graph", write(tmp_path, name, text), *FAST)
    assert code == 2
    assert __import__("re").search(message, err), err
    assert len(err.strip().splitlines()) == 1


def test_bad_reproduce_and_bench_options(tmp_path, capsys):
    assert run_cli(capsys, "reproduce", "--sa-reads", "0")[0] == 2
    assert run_cli(capsys, "reproduce", "--seeds", "0")[0] == 2
    assert run_cli(capsys, "reproduce", "--budget", "0")[0] == 2
    code, _, err = run_cli(capsys, "reproduce", "--gset-dir", str(tmp_path / "none"), "--quiet")
    assert code == 2
    assert "--gset-dir" in err
    code, _, err = run_cli(capsys, "bench", "--instances", "G999", "--gset-dir", str(tmp_path), "--quiet")
    assert code == 2
    assert "G999" in err
    assert "--gset-dir" in err
    assert len(err.strip().splitlines()) == 1
    code, _, err = run_cli(capsys, "bench", "--instances", "G11", "--gset-dir", "/nonexistent")
    assert code == 2
    assert "--gset-dir: '/nonexistent' does not exist" in err
    code, _, err = run_cli(capsys, "bench", "--budget", "0")
    assert code == 2
    assert "budget" in err
    code, _, err = run_cli(capsys, "bench", "--qqa-replicas", "0")
    assert code == 2
    assert "qqa_replicas" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["solve", "maxcut", "--k", "3"], "k is only used by coloring and partition, not maxcut"),
        (["solve", "mis", "--graph", "{folder}"], r"--graph: '.*' is a folder"),
        (["solve", "mis", "--graph", "{binary}"], r"--graph: '.*junk.txt' is not a text file"),
        (["bench", "--instances", "torus:4x6", "{missing}"], r"--instances: '.*missing.txt' does not exist"),
        (["bench", "--official-python", "{text}"], r"--official-python: '.*edges.txt' is not executable"),
        (["bench", "--official-python", "{folder}"], r"--official-python: '.*' is a folder"),
    ],
)
def test_bad_paths_and_options_exit_2_before_any_work(tmp_path, monkeypatch, capsys, argv, message):
    """Every path option is checked before the command runs (issue 37): exit 2, one line naming the option."""
    from iclr25_qqa import cli

    ran = []
    for name, (cls, _) in list(cli.COMMANDS.items()):
        monkeypatch.setitem(cli.COMMANDS, name, (cls, lambda cfg, ctx: ran.append(cfg)))
    (tmp_path / "junk.txt").write_bytes(b"\x89\x00\xff\xfe")
    (tmp_path / "edges.txt").write_text("1 2\n")
    paths = {"folder": tmp_path, "binary": tmp_path / "junk.txt", "missing": tmp_path / "missing.txt",
             "text": tmp_path / "edges.txt"}  # fmt: skip
    code, _, err = run_cli(capsys, *[a.format(**paths) for a in argv])
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert __import__("re").search(message, err), err
    assert not ran


def test_an_executable_official_python_passes_the_check(monkeypatch, capsys):
    import sys

    from iclr25_qqa import cli

    ran = []
    monkeypatch.setitem(cli.COMMANDS, "bench", (cli.BenchConfig, lambda cfg, ctx: ran.append(cfg)))
    assert run_cli(capsys, "bench", "--official-python", sys.executable)[0] == 0
    assert str(ran[0].official_python) == sys.executable


def test_reproduce_size_gpu_is_the_papers_mis_scale():
    """--size gpu (issue 40): MIS up to N = 10^5 (quick stops at 10^3), tori at S = 256; quick is unchanged."""
    from iclr25_qqa._reproduce import _instances
    from iclr25_qqa.cli import ReproduceConfig

    assert ReproduceConfig(size="gpu").size == "gpu"
    quick, gpu = _instances("quick"), _instances("gpu")
    assert [i["graph"] for i in quick][:3] == ["torus:60x50", "torus:25x120", "rrg:d=3,n=100,seed=0"]
    assert max(parse_n(i["graph"]) for i in quick) == 1000
    assert max(parse_n(i["graph"]) for i in gpu) == 100_000
    assert all(i["kw"].get("replicas") == 256 for i in gpu if i["problem"] == "maxcut")


def parse_n(graph: str) -> int:
    return int(graph.split("n=")[1].split(",")[0]) if "n=" in graph else 0


@pytest.mark.slow
def test_reproduce_writes_one_primary_the_per_seed_values_and_a_verdict(tmp_path, capsys):
    """The reproduction's wiring on four tiny rudy files named as the quick size's G-set instances: the primary
    row first (the only one), one per-seed row per seed and arm whose means the primary differences, a verdict."""
    import json

    import networkx as nx

    from iclr25_qqa._reproduce import GSET_INSTANCES

    for i, name in enumerate(GSET_INSTANCES["quick"]):
        g = nx.convert_node_labels_to_integers(nx.random_regular_graph(3, 20 + 2 * i, seed=i))
        lines = [f"{g.number_of_nodes()} {g.number_of_edges()}"] + [
            f"{u + 1} {v + 1} 1" for u, v in g.edges()
        ]
        (tmp_path / f"{name}.txt").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "reproduce", "--gset-dir", str(tmp_path), "--seeds", "2", "--budget", "0.1",
                           "--qqa-replicas", "4", "--sa-reads", "1", "--quiet", "--out", str(out))  # fmt: skip
    assert code == 0, err
    data = json.loads((out / "results.json").read_text())
    comps = data["tables"]["comparisons"]
    assert comps[0]["role"] == "primary"
    assert [c["role"] for c in comps].count("primary") == 1
    table = data["tables"]["per_seed"]
    assert len(table) == 2 * 3
    mean = {(r["seed"], r["arm"]): r["mean % of best known"] for r in table}
    diffs = [mean[s, "QQA"] - mean[s, "SA"] for s in (0, 1)]
    assert comps[0]["mean_difference"] == pytest.approx(sum(diffs) / 2)
    assert isinstance(data["metrics"]["verdict"], str) and data["metrics"]["verdict"]
    assert len(data["tables"]["runs"]) == 4 * 2
