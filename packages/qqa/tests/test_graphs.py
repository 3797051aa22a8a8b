"""Graph readers (Gset/rudy, DIMACS, edge lists) and generator specs."""

from __future__ import annotations

import networkx as nx
import pytest

from iclr25_qqa import GraphFormatError, load_graph, parse_spec, read_dimacs, read_edgelist, read_gset


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_gset_reader(tmp_path):
    p = write(tmp_path, "g.txt", "4 3\n1 2 1\n2 3 -1\n4 1 2.5\n")
    g = read_gset(p)
    assert g.number_of_nodes() == 4
    assert g.number_of_edges() == 3
    assert g[1][2]["weight"] == -1.0
    assert g[3][0]["weight"] == 2.5
    assert nx.utils.graphs_equal(load_graph(p).graph, g)  # sniffed as Gset


def test_dimacs_reader_keeps_repeated_edges_once(tmp_path):
    p = write(tmp_path, "myciel3.col", "c comment\np edge 3 3\ne 1 2\ne 2 3\ne 2 1\n")
    g = read_dimacs(p)
    assert sorted(g.edges()) == [(0, 1), (1, 2)]
    assert load_graph(p).graph.number_of_edges() == 2


def test_edgelist_reader(tmp_path):
    p = write(tmp_path, "e.edges", "# a comment\na b\nb c 2.0\n")
    g = read_edgelist(p)
    assert set(g.nodes) == {"a", "b", "c"}
    assert g["b"]["c"]["weight"] == 2.0


@pytest.mark.parametrize(
    ("name", "text", "line", "what"),
    [
        ("bad.txt", "3 2\n1 2 1\n1 x 1\n", 3, "must be an integer"),
        ("bad.txt", "3 2\n1 2 1\n1 9 1\n", 3, "outside 1..3"),
        ("bad.txt", "3 1\n1 2 nan\n", 2, "finite"),
        ("bad.col", "e 1 2\np edge 2 1\n", 1, "before the 'p edge"),
        ("bad.col", "p edge 2 1\nq 1 2\n", 2, "unknown line type"),
        ("bad.edges", "a b c d\n", 1, "expected 'u v'"),
        ("bad.edges", "a b\nb a\n", 2, "duplicate edge"),
    ],
)
def test_malformed_files_name_file_and_line(tmp_path, name, text, line, what):
    p = write(tmp_path, name, text)
    with pytest.raises(GraphFormatError, match=rf"{name}:{line}: .*{what}"):
        load_graph(p)


def test_gset_edge_count_mismatch_and_empty(tmp_path):
    with pytest.raises(GraphFormatError, match="announces m=3"):
        read_gset(write(tmp_path, "g.gset", "3 3\n1 2 1\n"))
    with pytest.raises(GraphFormatError, match="empty"):
        read_gset(write(tmp_path, "e.gset", "\n"))


def test_unreadable_and_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_graph(tmp_path / "nope.col")
    p = tmp_path / "bin.col"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(GraphFormatError, match="cannot read"):
        load_graph(p)


def test_networkx_graph_input():
    spec = load_graph(nx.karate_club_graph())
    assert spec.graph.number_of_nodes() == 34
    with pytest.raises(TypeError, match="undirected"):
        load_graph(nx.DiGraph([(0, 1)]))


def test_torus_specs_match_gset_sizes_and_best_cuts():
    g48 = parse_spec("torus:60x50")
    assert (g48.graph.number_of_nodes(), g48.graph.number_of_edges()) == (3000, 6000)
    assert g48.best_known["maxcut"] == 6000
    assert nx.is_bipartite(g48.graph)
    g50 = parse_spec("torus:25x120")
    assert (g50.graph.number_of_nodes(), g50.graph.number_of_edges()) == (3000, 6000)
    assert g50.best_known["maxcut"] == 5880


def test_small_torus_best_cut_by_brute_force():
    import itertools

    spec = parse_spec("torus:3x4")
    g = spec.graph
    best = max(
        nx.cut_size(g, {v for v, b in zip(g, bits) if b}) for bits in itertools.product([0, 1], repeat=12)
    )
    assert spec.best_known["maxcut"] == best


@pytest.mark.parametrize(("k", "nodes", "edges"), [(3, 11, 20), (4, 23, 71), (5, 47, 236)])
def test_myciel_specs_are_the_color_benchmark_graphs(k, nodes, edges):
    spec = parse_spec(f"myciel:{k}")
    assert (spec.graph.number_of_nodes(), spec.graph.number_of_edges()) == (nodes, edges)
    assert spec.best_known["chromatic"] == k + 1


def test_other_specs():
    g = parse_spec("rrg:d=3,n=20,seed=1").graph
    assert all(d == 3 for _, d in g.degree())
    assert g.number_of_nodes() == 20
    assert parse_spec("er:n=30,p=0.2,seed=0").graph.number_of_nodes() == 30
    assert parse_spec("karate").graph.number_of_edges() == 78
    assert parse_spec("lesmis").graph.number_of_nodes() == 77


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("nope:1", "unknown graph spec"),
        ("rrg:d=3", "missing n"),
        ("rrg:d=3,n=11", "n\\*d even"),
        ("rrg:d=x,n=10", "d must be int"),
        ("rrg:q=1,d=3,n=10", "unknown key 'q'"),
        ("torus:60by50", "ROWSxCOLS"),
        ("myciel:1", r"K must be in \[2, 9\]"),
        ("er:n=10,p=2", "0 <= p <= 1"),
        ("", "non-empty"),
        ("er:n=10,p=0.5,seed=x", "seed must be int"),
    ],
)
def test_bad_specs(spec, match):
    with pytest.raises(ValueError, match=match):
        load_graph(spec)
