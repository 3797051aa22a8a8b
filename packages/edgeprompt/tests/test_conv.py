"""The prompt-aware layers against stock PyG layers and against dense, loop-by-loop references."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch_geometric.nn import GCNConv, GINConv

from iclr25_edgeprompt import EdgePromptGCNConv, EdgePromptGINConv


def _mlp(d_in: int, d_out: int) -> nn.Module:
    return nn.Sequential(nn.Linear(d_in, d_out), nn.ReLU(), nn.Linear(d_out, d_out))


def _reference_gcn(conv: EdgePromptGCNConv, x, edge_index, prompts_by_edge) -> torch.Tensor:
    """Σ_j (d_i d_j)^-1/2 W (h_j + p_ji) + b, written out edge by edge (no PyG normalisation code)."""
    n = x.size(0)
    msg_edges = [(u, v) for u, v in edge_index.t().tolist() if u != v] + [(i, i) for i in range(n)]
    deg = [0.0] * n
    for _, v in msg_edges:
        deg[v] += 1.0
    w = conv.lin.weight
    out = torch.zeros(n, w.size(0), dtype=torch.float64)
    for (u, v), p in zip(msg_edges, prompts_by_edge(msg_edges)):
        norm = (deg[u] * deg[v]) ** -0.5
        out[v] += norm * (w.double() @ (x[u].double() + p.double()))
    return out + conv.bias.double()


def _reference_gin(conv: EdgePromptGINConv, x, edge_index, prompt) -> torch.Tensor:
    agg = torch.zeros_like(x, dtype=torch.float64)
    for e, (u, v) in enumerate(edge_index.t().tolist()):
        m = x[u].double() + prompt[e if prompt.size(0) > 1 else 0].double()
        agg[v] += torch.relu(m) if conv.relu_messages else m
    z = (1 + conv.eps.double()) * x.double() + agg
    return conv.nn.double()(z)


def test_gcn_without_prompt_is_bitwise_the_stock_gcnconv(graph):
    x, edge_index = graph
    stock = GCNConv(5, 7)
    ours = EdgePromptGCNConv(5, 7)
    ours.load_state_dict(stock.state_dict())  # strict: same parameter names and shapes
    weight = torch.rand(edge_index.size(1)) + 0.5
    assert torch.equal(ours(x, edge_index), stock(x, edge_index))
    assert torch.equal(ours(x, edge_index, weight), stock(x, edge_index, weight))


@pytest.mark.parametrize("relu_messages", [False, True])
def test_gin_without_prompt_matches_the_stock_ginconv(graph, relu_messages):
    x, edge_index = graph
    stock = GINConv(_mlp(5, 6), eps=0.3, train_eps=True)
    ours = EdgePromptGINConv(copy.deepcopy(stock.nn), eps=0.3, train_eps=True, relu_messages=relu_messages)
    ours.load_state_dict(stock.state_dict())
    if relu_messages:
        # The paper's ReLU messages equal GINConv's on non-negative inputs (post-ReLU hidden states) ...
        assert torch.equal(ours(x.relu(), edge_index), stock(x.relu(), edge_index))
        # ... and differ on signed inputs, which is why relu_messages=False exists for stock checkpoints.
        assert not torch.allclose(ours(x, edge_index), stock(x, edge_index))
    else:
        assert torch.equal(ours(x, edge_index), stock(x, edge_index))


def test_gcn_per_edge_prompts_match_the_dense_reference(graph):
    x, edge_index = graph
    conv = EdgePromptGCNConv(5, 7).double()
    conv.bias.data.normal_()
    x = x.double()
    msg = conv.prompt_edge_index(edge_index, x.size(0))
    prompts = torch.randn(msg.size(1), 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    table = {tuple(e): prompts[k] for k, e in enumerate(msg.t().tolist())}
    expected = _reference_gcn(conv, x, edge_index, lambda edges: [table[e] for e in edges])
    assert torch.allclose(conv(x, edge_index, edge_prompt=prompts), expected, atol=1e-10)


def test_gcn_prompt_is_per_message_not_scattered_onto_nodes(graph):
    """Regression (github.com/sheldonresearch/ProG, prompt_graph/prompt/EdgePrompt.py): scatter-adding edge prompts onto source nodes is a different model."""
    x, edge_index = graph
    conv = EdgePromptGCNConv(5, 7).double()
    x = x.double()
    msg = conv.prompt_edge_index(edge_index, x.size(0))
    prompts = torch.randn(msg.size(1), 5, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    ours = conv(x, edge_index, edge_prompt=prompts)
    x_scattered = x.index_add(0, msg[0], prompts)
    approx = conv(x_scattered, edge_index)
    assert not torch.allclose(ours, approx, atol=1e-3)


def test_gin_prompts_match_the_dense_reference(graph):
    x, edge_index = graph
    conv = EdgePromptGINConv(_mlp(5, 6).double(), eps=0.25)
    x = x.double()
    prompts = torch.randn(edge_index.size(1), 5, dtype=torch.float64)
    assert torch.allclose(
        conv(x, edge_index, edge_prompt=prompts), _reference_gin(conv, x, edge_index, prompts)
    )
    glob = torch.randn(1, 5, dtype=torch.float64)
    assert torch.allclose(conv(x, edge_index, edge_prompt=glob), _reference_gin(conv, x, edge_index, glob))


def test_gcn_global_prompt_adds_normalisation_sum_times_wp(graph):
    """Brief §5.5 item 2: out_prompt − out_plain = s ⊙ (W p), s_i = Σ_{j∈N(i)∪{i}} (d_i d_j)^-1/2."""
    x, edge_index = graph
    n = x.size(0)
    conv = EdgePromptGCNConv(5, 7).double()
    x = x.double()
    p = torch.randn(1, 5, dtype=torch.float64)
    adj = torch.zeros(n, n, dtype=torch.float64)
    adj[edge_index[1], edge_index[0]] = 1.0
    adj.fill_diagonal_(1.0)  # self-loops: one per node, existing ones not doubled
    d = adj.sum(1)
    s = (d.rsqrt()[:, None] * adj * d.rsqrt()[None, :]).sum(1)
    diff = conv(x, edge_index, edge_prompt=p) - conv(x, edge_index)
    assert torch.allclose(diff, s[:, None] * (p @ conv.lin.weight.t()), atol=1e-12)


@pytest.mark.parametrize("kind", ["gcn", "gin"])
def test_zero_prompt_is_exactly_no_prompt(graph, kind):
    x, edge_index = graph
    conv = EdgePromptGCNConv(5, 7) if kind == "gcn" else EdgePromptGINConv(_mlp(5, 7))
    n_msg = conv.prompt_edge_index(edge_index, x.size(0)).size(1)
    assert torch.equal(conv(x, edge_index, edge_prompt=torch.zeros(n_msg, 5)), conv(x, edge_index))
    assert torch.equal(conv(x, edge_index, edge_prompt=torch.zeros(1, 5)), conv(x, edge_index))


def test_message_edges_put_existing_self_loops_once_at_the_end():
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 1, 0]])  # (1, 1) is a self-loop
    msg = EdgePromptGCNConv(2, 2).prompt_edge_index(edge_index, 3)
    assert msg.t().tolist() == [[0, 1], [1, 0], [2, 0], [0, 0], [1, 1], [2, 2]]


def test_prompt_with_wrong_rows_or_width_is_rejected(graph):
    x, edge_index = graph
    conv = EdgePromptGCNConv(5, 7)
    with pytest.raises(ValueError, match=r"edge_prompt must have shape \[1, 5\] or \[29, 5\]"):
        conv(x, edge_index, edge_prompt=torch.zeros(edge_index.size(1), 5))  # forgot the 9 self-loops
    with pytest.raises(ValueError, match="edge_prompt must have shape"):
        conv(x, edge_index, edge_prompt=torch.zeros(1, 4))
    gin = EdgePromptGINConv(_mlp(5, 7))
    with pytest.raises(ValueError, match="edge_prompt must have shape"):
        gin(x, edge_index, edge_prompt=torch.zeros(3, 5))
    with pytest.raises(TypeError, match="edge_prompt must be a Tensor"):
        gin(x, edge_index, edge_prompt=lambda ei: [0.0])


def test_gcn_cached_is_refused():
    with pytest.raises(ValueError, match="cached"):
        EdgePromptGCNConv(3, 3, cached=True)


def test_random_graph_helper_has_the_requested_self_loops(make_graph):
    _, edge_index = make_graph(6, 8, 2, seed=3, self_loops=2)
    assert int((edge_index[0] == edge_index[1]).sum()) == 2


def test_edge_index_must_be_a_2_by_e_tensor(graph):
    x, edge_index = graph
    with pytest.raises(TypeError, match="edge_index must be a LongTensor"):
        EdgePromptGCNConv(5, 7)(x, edge_index.tolist())
    with pytest.raises(ValueError, match=r"edge_index must have shape \[2, E\]"):
        EdgePromptGINConv(_mlp(5, 7))(x, edge_index.t())
