"""The fused width connection is the same function as the op-by-op reference path (values and gradients)."""

from __future__ import annotations

import copy

import pytest
import torch

from iclr25_hyper_connections import HyperConnection, apply_hyper_connections, hyper_connections_of
from iclr25_hyper_connections._fused import fused_dynamic_width_connection

D, N = 12, 3


def _randomised(hc: HyperConnection, seed: int) -> HyperConnection:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in hc.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.7)
    return hc


def test_gradcheck_float64() -> None:
    g = torch.Generator().manual_seed(0)

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_(True)

    # shifted, unevenly scaled streams: the (H W - μ 1ᵀW) / σ rewriting must hold away from zero mean too
    streams = (rnd(2, 3, N, D) * 3 + 5).detach().requires_grad_(True)
    args = (streams, rnd(D, N + 1), rnd(D), rnd(1), rnd(1), rnd(N, N + 1), rnd(N))
    for use_tanh in (True, False):
        assert torch.autograd.gradcheck(
            lambda *a, t=use_tanh: fused_dynamic_width_connection(*a, eps=1e-5, use_tanh=t), args
        )


@pytest.mark.parametrize("tanh", [True, False])
def test_same_values_and_gradients_as_the_reference_path(tanh: bool) -> None:
    ref = _randomised(HyperConnection(D, expansion_rate=N, layer_index=1, tanh=tanh, recompute=False), 1)
    fused = HyperConnection(D, expansion_rate=N, layer_index=1, tanh=tanh, fused=True)
    fused.load_state_dict(ref.state_dict())
    x = torch.randn(4, 5, N, D, generator=torch.Generator().manual_seed(2)) * 2 + 1
    branch = torch.nn.Linear(D, D)
    outs, grads = [], []
    for hc in (ref, fused):
        h = x.clone().requires_grad_(True)
        out = hc(h, branch)
        out.square().sum().backward()
        outs.append(out.detach())
        grads.append([h.grad] + [p.grad.clone() for p in hc.parameters()])
        hc.zero_grad()
        branch.zero_grad()
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)
    for a, b in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert grads[0][1].abs().max() > 1e-2  # gradients reach the dynamic weights (not a vacuous comparison)


def test_fused_model_is_exact_at_init_and_trains_like_the_reference() -> None:
    import transformers

    config = transformers.OlmoConfig(
        vocab_size=61, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2
    )
    torch.manual_seed(0)
    base = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids = torch.randint(0, 61, (2, 9), generator=torch.Generator().manual_seed(0))
    models = [
        apply_hyper_connections(copy.deepcopy(base), expansion_rate=4, fused=f, reduce="mean") for f in (0, 1)
    ]
    with torch.no_grad():
        assert torch.equal(models[1](ids).logits, base(ids).logits)
    losses = []
    for model in models:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        run = []
        for _ in range(5):
            loss = model(input_ids=ids, labels=ids).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            run.append(loss.item())
        losses.append(run)
    assert losses[1] == pytest.approx(losses[0], rel=1e-4)
    assert any(hc.dynamic_alpha_fn.abs().max() > 0 for hc in hyper_connections_of(models[1]))


def test_fused_needs_dynamic_layernorm() -> None:
    with pytest.raises(ValueError, match="fused=True needs dynamic=True and norm='layernorm'"):
        HyperConnection(D, expansion_rate=2, layer_index=0, dynamic=False, fused=True)
    with pytest.raises(ValueError, match="fused=True needs"):
        HyperConnection(D, expansion_rate=2, layer_index=0, norm="rmsnorm", fused=True)
