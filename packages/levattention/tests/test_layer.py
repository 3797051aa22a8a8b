"""The LevAttention torch layer (arXiv:2410.05462 §5) and the small ViT."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from iclr25_levattention import LevAttention, ViT, heavy_entries, leverage_scores, leverage_scores_torch


def make(top_k, *, dim=16, heads=2, seed=0, **kwargs):
    torch.manual_seed(seed)
    return LevAttention(dim, heads, top_k=top_k, **kwargs).double()


def split_heads(layer, x):
    """q, k, v of ``layer`` for input x, computed here from its weights: (B, H, n, head_dim) each."""
    b, n, _ = x.shape
    qkv = x @ layer.qkv.weight.T + layer.qkv.bias
    q, k, v = qkv.view(b, n, 3, layer.num_heads, layer.head_dim).permute(2, 0, 3, 1, 4)
    return q, k, v


def reference_full_attention(layer, x):
    q, k, v = split_heads(layer, x)
    out = F.scaled_dot_product_attention(q, k, v)
    b, n, _ = x.shape
    return out.transpose(1, 2).reshape(b, n, layer.dim) @ layer.proj.weight.T + layer.proj.bias


@pytest.mark.parametrize("n", [5, 12])
def test_top_k_at_least_n_is_full_attention(n):
    x = torch.randn(3, n, 16, dtype=torch.float64)
    layer = make(None)
    reference = reference_full_attention(layer, x)
    torch.testing.assert_close(layer(x), reference, rtol=1e-12, atol=1e-12)
    for top_k in (n, n + 7):
        layer.top_k = top_k
        torch.testing.assert_close(layer(x), reference, rtol=1e-12, atol=1e-12)


def test_unselected_keys_get_exactly_zero_weight_and_selection_is_top_leverage_per_head_and_example():
    torch.manual_seed(1)
    x = torch.randn(4, 20, 16, dtype=torch.float64)
    layer = make(5, seed=1)
    _, weights = layer(x, return_weights=True)
    _, k, _ = split_heads(layer, x)
    selections = set()
    for b in range(4):
        for h in range(layer.num_heads):
            tau = leverage_scores(k[b, h].detach().numpy())
            top = set(np.argsort(-tau)[:5].tolist())
            nonzero_cols = set(torch.nonzero(weights[b, h].abs().sum(0)).flatten().tolist())
            assert nonzero_cols == top
            unselected = sorted(set(range(20)) - top)
            assert torch.all(weights[b, h][:, unselected] == 0.0)
            torch.testing.assert_close(weights[b, h].sum(-1), torch.ones(20, dtype=torch.float64))
            selections.add(frozenset(top))
    assert len(selections) > 1  # different examples/heads select different keys


def test_examples_do_not_influence_each_others_selection():
    torch.manual_seed(2)
    x = torch.randn(3, 15, 16, dtype=torch.float64)
    layer = make(4, seed=2)
    batched = layer(x)
    for b in range(3):
        torch.testing.assert_close(layer(x[b : b + 1])[0], batched[b], rtol=1e-12, atol=1e-12)


def test_selected_weights_are_the_renormalised_softmax_over_the_top_keys():
    torch.manual_seed(3)
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    layer = make(3, seed=3)
    _, weights = layer(x, return_weights=True)
    q, k, _ = split_heads(layer, x)
    logits = q @ k.transpose(-2, -1) / math.sqrt(layer.head_dim)
    masked = logits.masked_fill(weights == 0, float("-inf"))
    torch.testing.assert_close(weights, masked.softmax(-1), rtol=1e-12, atol=1e-12)


def test_gradients_match_finite_differences():
    torch.manual_seed(4)
    layer = make(3, dim=4, heads=2, seed=4)
    x = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: layer(t), (x,), eps=1e-6, atol=1e-6)
    poly = make(3, dim=4, heads=2, seed=4, normalization="polynomial", p=2)
    assert torch.autograd.gradcheck(lambda t: poly(t), (x,), eps=1e-6, atol=1e-6)


def test_polynomial_layer_keeps_every_heavy_key_once_top_k_covers_the_universal_set():
    torch.manual_seed(5)
    n, eps = 200, 0.1
    x = torch.randn(2, n, 16, dtype=torch.float64)
    x *= 1 + torch.distributions.Pareto(1.0, 1.2).sample((2, n, 1)).double()  # a few long tokens
    layer = make(None, seed=5, normalization="polynomial", p=2)
    _, full = layer(x, return_weights=True)
    layer.top_k = int(layer.head_dim / eps)  # |U| <= head_dim / eps for p = 2
    assert layer.top_k < n
    _, sparse = layer(x, return_weights=True)
    q, k, _ = split_heads(layer, x)
    for b in range(2):
        for h in range(2):
            result = heavy_entries(q[b, h].detach().numpy(), k[b, h].detach().numpy(), eps, 2)
            assert result.universal_set.size <= layer.top_k
            heavy = full[b, h] >= eps
            assert heavy.any()
            assert set(zip(*np.nonzero(heavy.numpy()))) == {
                (int(i), int(j)) for i, j in zip(result.rows, result.cols)
            }
            assert torch.all(sparse[b, h][heavy] > 0)


def test_torch_leverage_scores_match_numpy():
    torch.manual_seed(6)
    K = torch.randn(3, 30, 5, dtype=torch.float64)
    K[1, :, 4] = K[1, :, 0]  # rank-deficient example
    tau = leverage_scores_torch(K)
    for b in range(3):
        np.testing.assert_allclose(tau[b].numpy(), leverage_scores(K[b].numpy()), rtol=1e-9, atol=1e-12)
    assert tau[1].sum().item() == pytest.approx(4.0, abs=1e-9)


def test_norm_score_baseline_selects_longest_keys():
    torch.manual_seed(7)
    x = torch.randn(1, 12, 16, dtype=torch.float64)
    layer = make(4, seed=7, score="norm")
    _, weights = layer(x, return_weights=True)
    _, k, _ = split_heads(layer, x)
    for h in range(2):
        longest = set(torch.topk(k[0, h].norm(dim=-1), 4).indices.tolist())
        assert set(torch.nonzero(weights[0, h].sum(0)).flatten().tolist()) == longest


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"top_k": 0}, "top_k must be an integer >= 1 or None"),
        ({"top_k": -3}, "top_k must be an integer >= 1 or None"),
        ({"top_k": 2.5}, "top_k must be an integer >= 1 or None"),
        ({"top_k": True}, "top_k must be an integer >= 1 or None"),
        ({"score": "random"}, "score must be one of leverage, norm"),
        ({"normalization": "exp"}, "normalization must be one of softmax, polynomial"),
        ({"normalization": "polynomial", "p": 0}, r"p must be an integer in \[2, inf\)"),
        ({"normalization": "polynomial", "p": 3}, "p must be a positive even integer"),
        ({"dropout": 1.0}, "dropout"),
    ],
)
def test_bad_layer_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LevAttention(16, 2, **({"top_k": 4} | kwargs))


def test_bad_shapes():
    with pytest.raises(ValueError, match="divisible"):
        LevAttention(10, 3)
    with pytest.raises(ValueError, match=r"num_heads must be an integer in \[1, inf\)"):
        LevAttention(16, 0)
    layer = LevAttention(16, 2, top_k=4)
    with pytest.raises(ValueError, match=r"x must have shape \(B, n, 16\)"):
        layer(torch.randn(3, 5, 8))
    with pytest.raises(ValueError, match="top_k"):
        layer.top_k = 0
    with pytest.raises(ValueError, match="patch_size"):
        ViT(image_size=28, patch_size=5)


def test_vit_shapes_and_inference_time_top_k():
    torch.manual_seed(8)
    model = ViT(image_size=8, patch_size=2, dim=16, depth=2, num_heads=2, top_k=None)
    images = torch.randn(3, 1, 8, 8)
    full = model(images)
    assert full.shape == (3, 10)
    assert model.num_tokens == 17
    model.set_top_k(17)
    torch.testing.assert_close(model(images), full, rtol=1e-5, atol=1e-5)
    model.set_top_k(3)
    assert all(block.attn.top_k == 3 for block in model.blocks)
    assert not torch.allclose(model(images), full)
    loss = model(images).logsumexp(-1).sum()
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize(("d", "p"), [(4, 4), (3, 6)])
def test_torch_sensitivities_match_numpy_for_higher_p(d, p):
    from iclr25_levattention import sensitivities

    torch.manual_seed(8)
    K = torch.randn(2, 60, d, dtype=torch.float64) * torch.logspace(0, -3, d, dtype=torch.float64)
    tau = leverage_scores_torch(K, p=p)
    for b in range(2):
        np.testing.assert_allclose(tau[b].numpy(), sensitivities(K[b].numpy(), p), rtol=1e-7, atol=1e-10)


def test_layer_ranks_keys_by_the_sensitivities_of_its_own_p():
    """Issue 14: with |x|^4 attention the universal set U_4 must lie inside the layer's top-|U_4| keys (the p = 2
    ranking missed it in 50 of 50 trials)."""
    from iclr25_levattention import universal_set
    from iclr25_levattention._layer import select_top_keys

    rng = np.random.default_rng(9)
    eps, inside = 0.2, 0
    for _ in range(50):
        K = rng.standard_normal((80, 3)) * (1 + rng.pareto(1.5, size=(80, 1)))
        u4 = universal_set(K, eps, 4)
        if u4.size == 0:
            continue
        chosen = select_top_keys(torch.from_numpy(K), u4.size, p=4).numpy()
        inside += set(u4.tolist()) <= set(chosen.tolist())
        assert set(u4.tolist()) <= set(chosen.tolist())
    assert inside >= 40  # the draw gives a non-empty U_4 in most trials


def test_polynomial_p4_layer_keeps_every_heavy_key_of_full_attention():
    torch.manual_seed(10)
    n, eps = 120, 0.2
    x = torch.randn(2, n, 8, dtype=torch.float64)
    x *= 1 + torch.distributions.Pareto(1.0, 1.2).sample((2, n, 1)).double()
    layer = make(None, dim=8, heads=2, seed=10, normalization="polynomial", p=4)
    _, full = layer(x, return_weights=True)
    _, k, _ = split_heads(layer, x)
    from iclr25_levattention import universal_set

    size = max(universal_set(k[b, h].detach().numpy(), eps, 4).size for b in range(2) for h in range(2))
    assert 0 < size < n
    layer.top_k = size
    _, sparse = layer(x, return_weights=True)
    heavy = full >= eps
    assert heavy.any()
    assert torch.all(sparse[heavy] > 0)
