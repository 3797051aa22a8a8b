"""The official backbone layout (per-layer BatchNorm, learnable ε), old checkpoints, and bad backbone inputs."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from torch_geometric.nn import GINConv

from iclr25_edgeprompt import (
    BackboneConfig,
    EdgePrompt,
    GNNEncoder,
    PromptTuner,
    load_backbone,
    save_backbone,
)
from iclr25_edgeprompt.cli import main
from iclr25_shared.errors import InputError


def _trained_stats(model: GNNEncoder, x: torch.Tensor, edge_index: torch.Tensor) -> GNNEncoder:
    """Give every BatchNorm non-trivial running statistics and affine weights, so eval mode uses them."""
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(x * 3 + 1, edge_index)
        for m in model.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
        for conv in model.convs:
            conv.eps.fill_(0.3)
    return model.eval()


def test_gin_defaults_are_the_official_layout():
    gin = BackboneConfig(conv="gin", in_channels=4)
    gcn = BackboneConfig(conv="gcn", in_channels=4)
    assert gin.batch_norm is True and gcn.batch_norm is False
    model = GNNEncoder(BackboneConfig(conv="gin", in_channels=4, hidden_channels=8, num_layers=3))
    assert len(model.batch_norms) == 3
    assert all(isinstance(conv.eps, nn.Parameter) for conv in model.convs)  # learnable ε (official)
    assert not hasattr(GNNEncoder(gcn), "batch_norms")


def test_gin_layer_order_is_conv_batchnorm_relu_like_the_official_code(graph):
    """Reference built from stock PyG GINConv + BatchNorm1d: conv → BN → ReLU (not after the last layer)."""
    x, edge_index = graph
    x = x.abs()  # ReLU'd messages equal stock GINConv messages on non-negative layer-0 inputs
    torch.manual_seed(0)
    model = _trained_stats(
        GNNEncoder(conv="gin", in_channels=5, hidden_channels=6, num_layers=3), x, edge_index
    )
    h = x
    for layer, conv in enumerate(model.convs):
        stock = GINConv(conv.nn, train_eps=True)
        stock.eps.data.copy_(conv.eps.data)
        h = model.batch_norms[layer](stock(h, edge_index))
        if layer < 2:
            h = torch.relu(h)
    torch.testing.assert_close(model(x, edge_index), h, rtol=0, atol=1e-6)
    # the pre-v2 layout (no per-layer BatchNorm) gives a different function with the same conv weights
    old = GNNEncoder(
        BackboneConfig(conv="gin", in_channels=5, hidden_channels=6, num_layers=3, batch_norm=False)
    )
    old.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("batch_norms")})
    assert not torch.allclose(old.eval()(x, edge_index), h, atol=1e-3)


def test_batchnorm_statistics_and_eps_stay_frozen_while_tuning(graph):
    x, edge_index = graph
    torch.manual_seed(1)
    model = _trained_stats(
        GNNEncoder(conv="gin", in_channels=5, hidden_channels=6, num_layers=2), x, edge_index
    )
    before = {k: v.clone() for k, v in model.state_dict().items()}
    from torch_geometric.data import Data

    graphs = [Data(x=x * (i + 1), edge_index=edge_index, y=torch.tensor([i % 2])) for i in range(6)]
    tuner = PromptTuner(model, EdgePrompt(2, model.layer_dims), nn.Linear(6, 2))
    assert not any(p.requires_grad for p in model.parameters())  # ε included
    from iclr25_edgeprompt import TuneSettings

    tuner.fit(graphs, TuneSettings(epochs=3, lr=0.1, batch_size=4))
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before), "a BatchNorm buffer or ε moved"


def test_checkpoint_round_trip_and_old_json_without_the_new_fields(tmp_path, graph):
    x, edge_index = graph
    torch.manual_seed(2)
    model = _trained_stats(
        GNNEncoder(conv="gin", in_channels=5, hidden_channels=6, num_layers=2), x, edge_index
    )
    path = save_backbone(model, tmp_path / "bb.pt", note="t")
    loaded = load_backbone(path)
    assert loaded.config == model.config
    assert torch.equal(loaded.eval()(x, edge_index), model(x, edge_index))
    assert not list(tmp_path.glob(".*")), "temporary files left behind"
    # a checkpoint written before batch_norm / train_eps existed: no per-layer BN, fixed ε
    old = GNNEncoder(
        BackboneConfig(conv="gin", in_channels=5, hidden_channels=6, num_layers=2, batch_norm=False)
    )
    old_path = save_backbone(old, tmp_path / "old.pt")
    meta = json.loads(old_path.with_suffix(".json").read_text())
    del meta["backbone"]["batch_norm"], meta["backbone"]["train_eps"]
    old_path.with_suffix(".json").write_text(json.dumps(meta))
    again = load_backbone(old_path)
    assert again.config.batch_norm is False and again.config.train_eps is False


@pytest.mark.parametrize(
    ("json_text", "message"),
    [
        ("{}", "does not describe an architecture"),
        ('{"backbone": {}}', "does not describe an architecture"),
        ("not json", "is not valid JSON"),
        (
            '{"backbone": {"conv": "gin", "in_channels": 3, "width": 9}}',
            "unknown architecture fields ['width']",
        ),
        ('{"backbone": {"conv": "gat", "in_channels": 3}}', "conv must be one of gcn, gin"),
    ],
)
def test_bad_checkpoint_json_is_a_clear_error(tmp_path, json_text, message):
    model = GNNEncoder(conv="gin", in_channels=3, hidden_channels=4, num_layers=1)
    path = save_backbone(model, tmp_path / "bb.pt")
    path.with_suffix(".json").write_text(json_text)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_backbone(path)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"garbage, not a pickle", r"is not a PyTorch state dict .*\(no zip or pickle header\)"),
        (b"", r"is empty \(0 bytes\)"),
        (b"PK\x03\x04broken zip", "is not a PyTorch state dict .* that loads safely"),
    ],
)
def test_garbage_pt_is_a_clear_error(tmp_path, payload, message):
    model = GNNEncoder(conv="gin", in_channels=3, hidden_channels=4, num_layers=1)
    path = save_backbone(model, tmp_path / "bb.pt")
    path.write_bytes(payload)
    with pytest.raises(InputError, match=message):
        load_backbone(path)


def test_a_pickled_object_or_nan_weights_are_refused_without_running_code(tmp_path):
    """The .pt is read with weights_only=True (issue 37): a pickled object is refused, never unpickled."""
    model = GNNEncoder(conv="gin", in_channels=3, hidden_channels=4, num_layers=1)
    path = save_backbone(model, tmp_path / "bb.pt")
    torch.save({"layer": torch.nn.Linear(2, 2)}, path)  # a module, not a state dict: needs unsafe unpickling
    with pytest.raises(InputError, match="only unsafe unpickling can load"):
        load_backbone(path)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    next(iter(state.values()))[0] = float("nan")
    torch.save(state, path)
    with pytest.raises(InputError, match="holds non-finite values"):
        load_backbone(path)


def test_pt_holding_something_else_than_tensors_is_rejected(tmp_path):
    model = GNNEncoder(conv="gin", in_channels=3, hidden_channels=4, num_layers=1)
    path = save_backbone(model, tmp_path / "bb.pt")
    torch.save({"a": 1}, path)
    with pytest.raises(ValueError, match="does not hold a state dict of tensors"):
        load_backbone(path)


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_non_finite_node_features_are_rejected(graph, bad):
    x, edge_index = graph
    x = x.clone()
    x[3, 1] = float(bad)
    model = GNNEncoder(conv="gin", in_channels=5, hidden_channels=4, num_layers=1).eval()
    with pytest.raises(ValueError, match=r"1 non-finite entries \(NaN/inf\), first at \(3, 1\)"):
        model(x, edge_index)


@pytest.mark.parametrize(("low", "high"), [(-1, 0), (0, 9)])
def test_out_of_range_edge_index_is_rejected(graph, low, high):
    x, edge_index = graph  # 9 nodes
    edge_index = edge_index.clone()
    edge_index[0, 0], edge_index[1, 0] = low, high
    model = GNNEncoder(conv="gcn", in_channels=5, hidden_channels=4, num_layers=1).eval()
    with pytest.raises(ValueError, match=r"edge_index entries must be node ids in \[0, 8\]"):
        model(x, edge_index)


def test_cli_bad_backbone_files_exit_2_with_one_line(tmp_path, capsys):
    model = GNNEncoder(conv="gcn", in_channels=34, hidden_channels=4, num_layers=2)
    path = save_backbone(model, tmp_path / "bb.pt")
    path.with_suffix(".json").write_text("{}")
    assert main(["tune", "--quiet", "--backbone", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "does not describe an architecture" in err and len(err.splitlines()) == 1
    save_backbone(model, path)
    path.write_bytes(b"garbage")
    assert main(["tune", "--quiet", "--backbone", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--backbone: " in err and "is not a PyTorch state dict" in err and len(err.splitlines()) == 1
