"""Node subgraphs: the CSR extraction equals PyG's k_hop_subgraph node by node. Raw TU files: read in place."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import k_hop_subgraph

from iclr25_edgeprompt import load_dataset, node_subgraphs, read_tu


@pytest.mark.parametrize("seed", range(6))
def test_subgraphs_equal_k_hop_subgraph_on_random_directed_multigraphs(seed):
    """Duplicated edges, self-loops, one-directional edges, isolated nodes, 1-3 hops, tiny chunks."""
    gen = torch.Generator().manual_seed(seed)
    n = int(torch.randint(2, 30, (1,), generator=gen))
    edge_index = torch.randint(n, (2, int(torch.randint(1, 80, (1,), generator=gen))), generator=gen)
    edge_index = torch.cat([edge_index, edge_index[:, :3]], dim=1)  # duplicates
    data = Data(x=torch.randn(n, 3, generator=gen), edge_index=edge_index, y=torch.arange(n) % 3)
    hops = seed % 3 + 1
    got = node_subgraphs(data, hops, chunk_size=4)
    assert len(got) == n
    for v, g in enumerate(got):
        subset, sub_edges, mapping, _ = k_hop_subgraph(v, hops, edge_index, relabel_nodes=True, num_nodes=n)
        assert torch.equal(g.x, data.x[subset])
        assert torch.equal(g.edge_index, sub_edges)
        assert int(g.center) == int(mapping) and int(g.y) == v % 3


def test_subgraphs_of_selected_nodes_and_bad_ids():
    data = Data(
        x=torch.ones(4, 1), edge_index=torch.tensor([[0, 1], [1, 2]]), y=torch.zeros(4, dtype=torch.long)
    )
    got = node_subgraphs(data, 1, nodes=[2, 3])
    assert [g.num_nodes for g in got] == [2, 1]  # node 2 has in-neighbour 1; node 3 is isolated
    assert got[1].edge_index.shape == (2, 0)
    with pytest.raises(ValueError, match=r"nodes must be ids in \[0, 3\]"):
        node_subgraphs(data, 1, nodes=[4])
    bad = Data(
        x=torch.ones(4, 1), edge_index=torch.tensor([[0, 5], [1, 2]]), y=torch.zeros(4, dtype=torch.long)
    )
    with pytest.raises(ValueError, match=r"edge_index entries must be node ids in \[0, 3\]"):
        node_subgraphs(bad, 1)


def _write_tu(root, name, *, labels=True, attributes=True):
    raw = root / name / "raw"
    raw.mkdir(parents=True)
    # graph 1: path 1-2-3; graph 2: edge 4-5 (1-based, both directions); graph labels -1 / 1 like MUTAG
    edges = [(1, 2), (2, 3), (4, 5)]
    (raw / f"{name}_A.txt").write_text("".join(f"{u}, {v}\n{v}, {u}\n" for u, v in edges))
    (raw / f"{name}_graph_indicator.txt").write_text("1\n1\n1\n2\n2\n")
    (raw / f"{name}_graph_labels.txt").write_text("-1\n1\n")
    if labels:
        (raw / f"{name}_node_labels.txt").write_text("0\n2\n1\n0\n0\n")
    if attributes:
        (raw / f"{name}_node_attributes.txt").write_text("".join(f"{i}.5\n" for i in range(5)))
    return raw


def test_read_tu_uses_one_hot_node_labels_like_the_official_code_and_writes_nothing(tmp_path):
    raw = _write_tu(tmp_path, "TOY")
    before = sorted(p.name for p in raw.parent.rglob("*"))
    data = read_tu("TOY", tmp_path)
    assert sorted(p.name for p in raw.parent.rglob("*")) == before  # no processed/ folder
    assert [int(g.y) for g in data.graphs] == [0, 1]  # -1/1 renumbered
    assert data.in_channels == 3  # node labels 0..2 one-hot, attributes left out
    torch.testing.assert_close(data.graphs[0].x, torch.eye(3)[[0, 2, 1]])
    assert data.graphs[0].edge_index.tolist() == [[0, 1, 1, 2], [1, 0, 2, 1]]
    assert data.graphs[1].edge_index.tolist() == [[0, 1], [1, 0]]  # local ids
    with_attr = read_tu("TOY", tmp_path, node_attributes=True)
    assert with_attr.in_channels == 4 and with_attr.graphs[1].x[0, 0] == 3.5


def test_read_tu_falls_back_to_attributes_and_matches_tudataset(tmp_path):
    from torch_geometric.datasets import TUDataset

    _write_tu(tmp_path / "a", "NOLAB", labels=False)
    data = read_tu("NOLAB", tmp_path / "a")
    assert data.in_channels == 1
    _write_tu(tmp_path / "b", "TOY")
    ours = read_tu("TOY", tmp_path / "b")
    theirs = TUDataset(str(tmp_path / "b"), "TOY")  # processes into tmp, offline
    for g, h in zip(ours.graphs, theirs, strict=True):
        assert torch.equal(g.x, h.x) and torch.equal(g.edge_index, h.edge_index) and int(g.y) == int(h.y)


def test_read_tu_missing_files_and_no_features(tmp_path):
    with pytest.raises(FileNotFoundError, match="MISSING_A.txt"):
        read_tu("MISSING", tmp_path)
    _write_tu(tmp_path, "BARE", labels=False, attributes=False)
    with pytest.raises(ValueError, match="has no node labels"):
        read_tu("BARE", tmp_path)


def test_load_dataset_reads_raw_tu_in_place(tmp_path):
    _write_tu(tmp_path, "MUTAG")
    data = load_dataset("MUTAG", root=tmp_path)
    assert len(data.graphs) == 2 and data.in_channels == 3
    assert not (tmp_path / "MUTAG" / "processed").exists()


@pytest.mark.slow
def test_superpixel_graphs_are_cached_by_content(tmp_path, monkeypatch):
    from iclr25_edgeprompt import _data

    monkeypatch.setenv("ICLR25_CACHE", str(tmp_path))
    first = load_dataset("fashion-superpixels", num_graphs=20, seed=1)
    assert len(list((tmp_path / "edgeprompt-superpixels").glob("*.pt"))) == 1

    def boom(*args, **kwargs):
        raise AssertionError("segmentation ran again")

    monkeypatch.setattr(_data, "superpixel_graphs", boom)
    again = load_dataset("fashion-superpixels", num_graphs=20, seed=1)
    for g, h in zip(first.graphs, again.graphs, strict=True):
        assert torch.equal(g.x, h.x) and torch.equal(g.edge_index, h.edge_index) and torch.equal(g.y, h.y)
    with pytest.raises(AssertionError, match="segmentation ran again"):  # other images: not in the cache
        load_dataset("fashion-superpixels", num_graphs=20, seed=2)
    # a damaged cache file is recomputed
    monkeypatch.undo()
    monkeypatch.setenv("ICLR25_CACHE", str(tmp_path))
    next((tmp_path / "edgeprompt-superpixels").glob("*.pt")).write_bytes(b"junk")
    fixed = load_dataset("fashion-superpixels", num_graphs=20, seed=1)
    assert torch.equal(fixed.graphs[0].x, first.graphs[0].x)


def test_non_finite_features_and_bad_edges_are_caught_when_the_task_is_built():
    from iclr25_edgeprompt import from_pyg

    x = torch.ones(3, 2)
    x[1, 0] = float("nan")
    ei = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match=r"graph 1 has non-finite node features"):
        from_pyg(
            [
                Data(x=torch.ones(3, 2), edge_index=ei, y=torch.tensor([0])),
                Data(x=x, edge_index=ei, y=torch.tensor([1])),
            ],
            task="graph",
        )
    with pytest.raises(
        ValueError, match=r"graph 0: edge_index entries must be node ids in \[0, 2\], got min 0, max 3"
    ):
        from_pyg(
            [Data(x=torch.ones(3, 2), edge_index=torch.tensor([[0], [3]]), y=torch.tensor([0]))], task="graph"
        )
    with pytest.raises(ValueError, match="non-finite node features"):
        from_pyg(Data(x=x, edge_index=ei, y=torch.tensor([0, 1, 0])), task="node")


def test_the_default_tu_folder_is_found_without_a_machine_specific_path(tmp_path, monkeypatch, write_tiny_tu):
    """Regression (issue 37): --tu-root defaulted to /work/shared/data/tu, a path of the development machines."""
    from iclr25_edgeprompt import _data
    from iclr25_edgeprompt._reproduce import _reproduce_data
    from iclr25_edgeprompt.cli import ReproduceConfig
    from iclr25_shared.errors import DatasetUnavailable, InputError

    cfg = ReproduceConfig(datasets=["TINYTU"])
    assert cfg.tu_root is None
    write_tiny_tu(tmp_path / "tu")
    monkeypatch.setenv("ICLR25_DATA", str(tmp_path))
    assert _data.default_tu_root() == tmp_path / "tu"
    assert len(_reproduce_data("TINYTU", cfg).graphs) == 24
    with pytest.raises(InputError, match=r"--datasets: .*NOPE_A.txt' does not exist.*--tu-root \(default"):
        _reproduce_data("NOPE", cfg)
    monkeypatch.delenv("ICLR25_DATA")
    monkeypatch.setattr(_data, "__file__", str(tmp_path / "site-packages" / "iclr25_edgeprompt" / "_data.py"))
    assert _data.default_tu_root() is None  # an installed wheel, no kit data above it
    with pytest.raises(DatasetUnavailable, match="--tu-root"):
        _reproduce_data("TINYTU", cfg)
