"""Few-shot split, k-hop subgraphs, images as graphs, loading by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from iclr25_edgeprompt import (
    digit_grid_graphs,
    few_shot_split,
    from_pyg,
    load_dataset,
    node_subgraphs,
    superpixel_graph,
)
from iclr25_shared.errors import DatasetUnavailable


def test_few_shot_split_takes_exactly_k_per_class_disjoint_and_seeded():
    labels = torch.tensor([0] * 10 + [1] * 7 + [2] * 4)
    train, test = few_shot_split(labels, 3, seed=0)
    assert torch.bincount(labels[train]).tolist() == [3, 3, 3]
    assert not set(train.tolist()) & set(test.tolist())
    assert sorted(train.tolist() + test.tolist()) == list(range(21))  # test_fraction=1: everything else
    again = few_shot_split(labels, 3, seed=0)
    assert torch.equal(again[0], train)
    assert torch.equal(again[1], test)
    assert any(not torch.equal(few_shot_split(labels, 3, seed=s)[0], train) for s in range(1, 5))


def test_few_shot_split_test_fraction():
    labels = np.repeat(np.arange(4), 25)
    train, test = few_shot_split(labels, 5, test_fraction=0.4, seed=1)
    assert len(train) == 20
    assert len(test) == round(0.4 * 80)
    assert not set(train.tolist()) & set(test.tolist())


def test_shots_larger_than_a_class_is_an_error_unless_allowed():
    labels = torch.tensor([0] * 10 + [1] * 3)
    with pytest.raises(ValueError, match=r"shots=3 but class 1 has only 3 samples.*at most 2"):
        few_shot_split(labels, 3)
    train, test = few_shot_split(labels, 5, allow_fewer=True)  # the official code's behaviour
    assert torch.bincount(labels[train]).tolist() == [5, 3]
    assert (labels[test] == 0).all()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"shots": 0}, r"shots must be an integer in \[1, inf\)"),
        ({"shots": 1, "test_fraction": 0.0}, "test_fraction"),
    ],
)
def test_few_shot_split_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        few_shot_split(torch.tensor([0, 0, 1, 1]), **kwargs)
    with pytest.raises(ValueError, match="non-negative integer class ids"):
        few_shot_split(torch.tensor([0.5, 1.0]), 1)


def test_two_hop_subgraphs_match_breadth_first_search_on_karate():
    data = load_dataset("karate")
    src = data.source
    assert len(data.graphs) == 34
    assert data.num_classes == 4
    neighbours = {i: set() for i in range(34)}
    for u, v in src.edge_index.t().tolist():
        neighbours[u].add(v)
    for node in (0, 11, 33):
        one = neighbours[node]
        two = {node} | one | set().union(*(neighbours[j] for j in one))
        g = data.graphs[node]
        assert g.num_nodes == len(two)
        center = int(g.center)
        assert 0 <= center < g.num_nodes
        assert torch.equal(g.x[center], src.x[node].float())
        assert int(g.y) == int(src.y[node])
        induced = sum(1 for u, v in src.edge_index.t().tolist() if u in two and v in two)
        assert g.edge_index.size(1) == induced


def test_isolated_node_subgraph_is_the_node_alone():
    data = Data(x=torch.eye(4), edge_index=torch.tensor([[0, 1], [1, 0]]), y=torch.tensor([0, 1, 0, 1]))
    graphs = node_subgraphs(data, 2)
    assert graphs[3].num_nodes == 1
    assert graphs[3].edge_index.size(1) == 0
    assert int(graphs[3].center) == 0
    assert torch.equal(graphs[3].x[0], torch.eye(4)[3])


def test_graph_without_edges_or_labels_is_rejected():
    with pytest.raises(ValueError, match="no edges"):
        node_subgraphs(Data(x=torch.eye(3), edge_index=torch.empty(2, 0, dtype=torch.long), y=torch.zeros(3)))
    with pytest.raises(ValueError, match="needs node labels"):
        node_subgraphs(Data(x=torch.eye(3), edge_index=torch.tensor([[0], [1]])))
    unlabeled = [Data(x=torch.ones(2, 1), edge_index=torch.tensor([[0], [1]]))]
    with pytest.raises(ValueError, match="one label per graph"):
        from_pyg(unlabeled, task="graph")
    edgeless = [Data(x=torch.ones(2, 1), edge_index=torch.empty(2, 0, dtype=torch.long), y=torch.tensor([0]))]
    with pytest.raises(ValueError, match="no graph in the dataset has an edge"):
        from_pyg(edgeless, task="graph")


def test_superpixel_graph_is_a_symmetric_region_adjacency_graph():
    from iclr25_shared.data import fashion_mnist

    images, _ = fashion_mnist("test")
    g = superpixel_graph(images[0])
    assert 20 <= g.num_nodes <= 120
    assert g.x.shape == (g.num_nodes, 4)
    assert float(g.x.min()) >= 0
    assert float(g.x.max()) <= 1
    ei = g.edge_index
    assert (ei[0] != ei[1]).all()
    pairs = set(map(tuple, ei.t().tolist()))
    assert all((v, u) in pairs for u, v in pairs)
    # a half-black / half-white image: two touching regions at least, mean intensities 0 and 1 present
    img = np.zeros((28, 28), np.uint8)
    img[:, 14:] = 255
    g2 = superpixel_graph(img, n_segments=4)
    assert {0.0, 1.0} <= set(g2.x[:, 0].tolist())
    assert g2.edge_index.size(1) >= 2
    with pytest.raises(ValueError, match="2-D"):
        superpixel_graph(np.zeros((2, 28, 28)))


def test_digit_grid_graph_has_the_4_neighbour_grid():
    g = digit_grid_graphs(np.random.default_rng(0).random((2, 8, 8)), np.array([3, 4]))
    assert g[0].num_nodes == 64
    assert g[0].edge_index.size(1) == 2 * (2 * 8 * 7)
    assert g[1].x[9, 1:].tolist() == pytest.approx([1 / 7, 1 / 7])
    assert int(g[1].y) == 4


def test_unknown_dataset_and_offline_pyg_dataset_are_clear(tmp_path):
    with pytest.raises(ValueError, match="dataset must be one of karate, fashion-superpixels"):
        load_dataset("imagenet")
    with pytest.raises(ValueError, match="pass root=<folder>"):
        load_dataset("Cora")
    with pytest.raises(
        DatasetUnavailable, match=r"'Cora' is not in .*would fetch it from https://github.com/kimiyoung"
    ):
        load_dataset("Cora", root=tmp_path)
    with pytest.raises(DatasetUnavailable, match=r"ENZYMES\.zip"):
        load_dataset("enzymes", root=tmp_path)
    with pytest.raises(DatasetUnavailable, match=r"graphkerneldatasets/REDDIT-BINARY\.zip"):
        load_dataset("tu:REDDIT-BINARY", root=tmp_path)


def test_fashion_superpixels_is_class_balanced_and_seeded():
    a = load_dataset("fashion-superpixels", num_graphs=30, seed=0)
    b = load_dataset("fashion-superpixels", num_graphs=30, seed=0)
    assert torch.bincount(a.labels).tolist() == [3] * 10
    assert all(torch.equal(x.x, y.x) for x, y in zip(a.graphs, b.graphs))


def test_a_tu_dataset_already_in_root_loads_without_download(tmp_path):
    """The offline path of a PyG dataset: raw TU files in <root>/<name>/raw are processed by PyG, no download."""
    raw = tmp_path / "TINY" / "raw"
    raw.mkdir(parents=True)
    # two triangles (nodes 1-3 and 4-6, 1-based as in the TU format), graph labels 0 and 1
    edges = [(1, 2), (2, 3), (3, 1), (4, 5), (5, 6), (6, 4)]
    (raw / "TINY_A.txt").write_text("".join(f"{u}, {v}\n{v}, {u}\n" for u, v in edges))
    (raw / "TINY_graph_indicator.txt").write_text("1\n1\n1\n2\n2\n2\n")
    (raw / "TINY_graph_labels.txt").write_text("0\n1\n")
    (raw / "TINY_node_attributes.txt").write_text("".join(f"{i}.0, 1.0\n" for i in range(6)))
    data = load_dataset("tu:TINY", root=tmp_path)
    assert data.task == "graph" and len(data.graphs) == 2 and data.num_classes == 2
    assert data.graphs[0].edge_index.size(1) == 6 and data.in_channels == 2
