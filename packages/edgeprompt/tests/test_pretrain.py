"""Pre-training objectives and the checkpoint format."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch_geometric.nn import GCNConv

from iclr25_edgeprompt import (
    GNNEncoder,
    PretrainSettings,
    digit_grid_graphs,
    load_backbone,
    nt_xent,
    pretrain,
    save_backbone,
)


@pytest.fixture(scope="module")
def graphs():
    from iclr25_shared.data import digits

    images, labels = digits()
    return digit_grid_graphs(images[:24], labels[:24])


def test_nt_xent_matches_the_written_out_formula():
    gen = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(5, 3, generator=gen), torch.randn(5, 3, generator=gen)
    tau = 0.3

    def one_way(a, b):
        total = 0.0
        for i in range(5):
            sims = [float(torch.cosine_similarity(a[i], b[k], dim=0)) / tau for k in range(5)]
            total += -sims[i] + math.log(sum(math.exp(s) for s in sims))
        return total / 5

    expected = 0.5 * (one_way(z1, z2) + one_way(z2, z1))
    assert float(nt_xent(z1, z2, tau)) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("strategy", ["graphcl", "simgrace", "edgepred"])
def test_each_strategy_trains_the_backbone_deterministically(graphs, strategy):
    def run() -> tuple[GNNEncoder, list[float]]:
        torch.manual_seed(0)
        model = GNNEncoder(conv="gin", in_channels=3, hidden_channels=16, num_layers=2)
        history = pretrain(
            model, graphs, PretrainSettings(strategy=strategy, epochs=4, batch_size=8, lr=1e-2), seed=7
        )
        return model, history

    torch.manual_seed(0)
    init = GNNEncoder(conv="gin", in_channels=3, hidden_channels=16, num_layers=2).state_dict()
    model, history = run()
    assert len(history) == 4
    assert all(math.isfinite(v) for v in history)
    assert not torch.equal(model.convs[0].nn[0].weight, init["convs.0.nn.0.weight"])
    assert not model.training
    model2, history2 = run()
    assert history == history2
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), model2.state_dict().values()))


def _edge_auc(model: GNNEncoder, graphs) -> float:
    """P(score of a true edge > score of a random same-graph pair), dot-product scores."""
    from torch_geometric.data import Batch

    b = Batch.from_data_list(graphs)
    with torch.no_grad():
        h = model.eval()(b.x, b.edge_index)
    gen = torch.Generator().manual_seed(1)
    neg = torch.randint(b.num_nodes, (2, b.edge_index.size(1)), generator=gen)
    neg[1] = (neg[0] // 64) * 64 + neg[1] % 64  # 64-node digit grids: same graph
    pos_s = (h[b.edge_index[0]] * h[b.edge_index[1]]).sum(-1)
    neg_s = (h[neg[0]] * h[neg[1]]).sum(-1)
    return float((pos_s[:, None] > neg_s[None, :]).float().mean())


def test_edge_prediction_learns_to_score_edges(graphs):
    torch.manual_seed(0)
    model = GNNEncoder(conv="gcn", in_channels=3, hidden_channels=16, num_layers=2, dropout=0.0)
    before = _edge_auc(model, graphs)
    history = pretrain(
        model, graphs, PretrainSettings(strategy="edgepred", epochs=15, batch_size=24, lr=1e-2)
    )
    after = _edge_auc(model, graphs)
    assert history[-1] < history[0] - 0.05
    assert after > 0.75
    assert after > before + 0.1


def test_pretrain_bad_input():
    model = GNNEncoder(conv="gcn", in_channels=3, hidden_channels=4)
    with pytest.raises(ValueError, match="strategy must be one of graphcl, simgrace, edgepred"):
        PretrainSettings(strategy="attrmask")
    with pytest.raises(ValueError, match="graphs is empty"):
        pretrain(model, [])
    from torch_geometric.data import Data

    edgeless = [Data(x=torch.ones(3, 3), edge_index=torch.empty(2, 0, dtype=torch.long))] * 2
    with pytest.raises(ValueError, match="no graph has an edge"):
        pretrain(model, edgeless)
    with pytest.raises(ValueError, match="needs >= 2 graphs"):
        pretrain(model, edgeless[:1])


def test_checkpoint_is_a_plain_state_dict_and_round_trips(tmp_path, graph):
    x, edge_index = graph
    torch.manual_seed(0)
    model = GNNEncoder(conv="gin", in_channels=5, hidden_channels=8, num_layers=3).eval()
    path = save_backbone(model, tmp_path / "bb", strategy="graphcl")
    state = torch.load(path, weights_only=True)
    assert isinstance(state, dict)
    assert all(isinstance(v, torch.Tensor) for v in state.values())
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["backbone"]["conv"] == "gin"
    assert meta["metadata"]["strategy"] == "graphcl"
    loaded = load_backbone(path).eval()
    assert torch.equal(loaded(x, edge_index), model(x, edge_index))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_backbone(tmp_path / "missing.pt")


def test_weights_of_a_stock_pyg_gcn_load_into_the_backbone(graph):
    """A backbone trained with plain GCNConv layers loads (same names) and gives the same output."""
    x, edge_index = graph
    stock = [GCNConv(5, 8), GCNConv(8, 8)]
    model = GNNEncoder(conv="gcn", in_channels=5, hidden_channels=8, num_layers=2).eval()
    state = {f"convs.{i}.{k}": v for i, conv in enumerate(stock) for k, v in conv.state_dict().items()}
    model.load_state_dict(state)
    expected = stock[1](torch.relu(stock[0](x, edge_index)), edge_index)
    assert torch.equal(model(x, edge_index), expected)
