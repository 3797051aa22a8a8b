"""Prompt modules through the backbone: zero prompts, EdgePrompt+ weights, M = 1, equivariance, dims."""

from __future__ import annotations

import pytest
import torch

from iclr25_edgeprompt import GPF, EdgePrompt, EdgePromptPlus, GNNEncoder, GPFPlus


def _backbone(conv: str, seed: int = 0) -> GNNEncoder:
    torch.manual_seed(seed)
    model = GNNEncoder(conv=conv, in_channels=5, hidden_channels=8, num_layers=3, dropout=0.5)
    if conv == "gin":  # non-trivial BatchNorm statistics
        model.train()
        model(torch.randn(30, 5), torch.randint(30, (2, 60)))
    return model.eval()


@pytest.mark.parametrize("conv", ["gcn", "gin"])
def test_zero_prompts_give_exactly_the_frozen_gnn(graph, conv):
    x, edge_index = graph
    model = _backbone(conv)
    plain = model(x, edge_index)
    ep = EdgePrompt(3, model.layer_dims)
    epp = EdgePromptPlus(3, model.layer_dims, num_anchors=4)
    with torch.no_grad():
        for p in ep.global_prompt:
            p.zero_()
        for a in epp.anchors:  # zero anchors → zero prompt whatever the weights b are
            a.zero_()
    assert torch.equal(model(x, edge_index, ep), plain)
    assert torch.equal(model(x, edge_index, epp), plain)


def test_nonzero_prompt_changes_every_layer_input(graph):
    x, edge_index = graph
    model = _backbone("gcn")
    ep = EdgePrompt(3, model.layer_dims)
    with torch.no_grad():
        for p in ep.global_prompt:
            p.zero_()
        ep.global_prompt[2].fill_(1.0)  # only the last layer prompted
    assert not torch.allclose(model(x, edge_index, ep), model(x, edge_index))


def test_anchor_weights_are_a_softmax_over_anchors(graph):
    x, edge_index = graph
    epp = EdgePromptPlus(2, [5, 8], num_anchors=6)
    b = epp.anchor_weights(0, x, edge_index)
    assert b.shape == (edge_index.size(1), 6)
    assert (b >= 0).all()
    assert torch.allclose(b.sum(-1), torch.ones(edge_index.size(1)))
    # b = softmax(LeakyReLU(Lin([h_src || h_dst]))), checked for one edge by hand
    j, i = edge_index[:, 3].tolist()
    lin = epp.scores[0]
    logits = torch.nn.functional.leaky_relu(lin.weight @ torch.cat([x[j], x[i]]) + lin.bias)
    assert torch.allclose(b[3], torch.softmax(logits, -1), atol=1e-6)
    prompts = epp(0, x, edge_index)
    assert torch.allclose(prompts[3], torch.softmax(logits, -1) @ epp.anchors[0], atol=1e-6)


@pytest.mark.parametrize("conv", ["gcn", "gin"])
def test_edgeprompt_plus_with_one_anchor_is_edgeprompt(graph, conv):
    x, edge_index = graph
    model = _backbone(conv)
    epp = EdgePromptPlus(3, model.layer_dims, num_anchors=1)
    ep = EdgePrompt(3, model.layer_dims)
    with torch.no_grad():
        for a, p in zip(epp.anchors, ep.global_prompt):
            p.copy_(a)
    assert torch.allclose(model(x, edge_index, epp), model(x, edge_index, ep), atol=1e-6)


@pytest.mark.parametrize("conv", ["gcn", "gin"])
def test_permutation_equivariance_with_edgeprompt_plus(make_graph, conv):
    """Brief §5.5 item 3: prompts stay aligned with the message edges, self-loops included."""
    x, edge_index = make_graph(12, 30, 5, seed=4, self_loops=3)
    model = _backbone(conv)
    torch.manual_seed(1)
    epp = EdgePromptPlus(3, model.layer_dims, num_anchors=4)
    out = model(x, edge_index, epp)
    gen = torch.Generator().manual_seed(5)
    perm = torch.randperm(12, generator=gen)  # new node k is old node perm[k]
    pos = torch.empty_like(perm)
    pos[perm] = torch.arange(12)
    out_nodes = model(x[perm], pos[edge_index], epp)
    assert torch.allclose(out_nodes, out[perm], atol=1e-5)
    eperm = torch.randperm(edge_index.size(1), generator=gen)
    out_edges = model(x, edge_index[:, eperm], epp)
    assert torch.allclose(out_edges, out, atol=1e-5)


def test_prompt_dims_must_match_the_backbone(graph):
    x, edge_index = graph
    model = _backbone("gcn")
    with pytest.raises(ValueError, match=r"prompt dims \[5, 16, 16\] do not match .* \[5, 8, 8\]"):
        model(x, edge_index, EdgePrompt(3, [5, 16, 16]))
    with pytest.raises(ValueError, match="layer 1 was built for 4-dim inputs"):
        EdgePrompt(2, [5, 4])(1, torch.zeros(3, 8), edge_index)
    with pytest.raises(ValueError, match="dims must give one input dim per layer"):
        EdgePromptPlus(3, [5, 8])
    with pytest.raises(ValueError, match=r"num_anchors must be an integer in \[1, inf\)"):
        EdgePromptPlus(2, 5, num_anchors=0)
    with pytest.raises(ValueError, match="built for 4-dim node features"):
        model(x, edge_index, GPF(4))


def test_gpf_adds_one_vector_and_gpf_plus_a_softmax_mixture(graph):
    x, _ = graph
    gpf = GPF(5)
    assert torch.allclose(gpf(x) - x, gpf.global_emb.expand_as(x))
    plus = GPFPlus(5, num_basis=3)
    alpha = torch.softmax(x @ plus.attention.weight.t(), dim=-1)
    assert torch.allclose(plus(x), x + alpha @ plus.basis, atol=1e-6)
    with torch.no_grad():
        plus.basis.zero_()
    assert torch.equal(plus(x), x)
