"""Cross-check against the peer implementation (``hyper-connections`` on PyPI), wired into the same decoder."""

from __future__ import annotations

import copy

import pytest
import torch

from iclr25_hyper_connections import apply_hyper_connections, hyper_connections_of
from iclr25_hyper_connections._experiment import ModelSpec, build_model
from iclr25_hyper_connections._variants import Variant
from iclr25_shared.testing import require


@pytest.fixture(scope="module")
def peer():
    from iclr25_hyper_connections import _peer

    require(_peer.peer_version)
    return _peer


def _models(peer, n: int = 4):
    base = build_model(
        256, ModelSpec(dim=32, num_layers=3, num_heads=4, context=16), Variant.parse("residual"), seed=0
    )
    ours = apply_hyper_connections(copy.deepcopy(base).eval(), expansion_rate=n, norm="rmsnorm")
    theirs = peer.apply_peer_hyper_connections(copy.deepcopy(base).eval(), expansion_rate=n)
    return base.eval(), ours, theirs


IDS = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("n", [2, 4])
def test_identical_to_the_peer_at_initialisation(peer, n: int) -> None:
    base, ours, theirs = _models(peer, n)
    ref, a, b = base(IDS, labels=IDS), ours(IDS, labels=IDS), theirs(IDS, labels=IDS)
    assert torch.equal(a.logits, b.logits)  # measured: bit-identical
    a.loss.backward()
    b.loss.backward()
    ga = {k.replace(".layer.", "."): p.grad for k, p in ours.named_parameters() if ".hcs." not in k}
    gb = {k.replace(".layer.", "."): p.grad for k, p in theirs.named_parameters() if ".hcs." not in k}
    for name, grad in ga.items():
        torch.testing.assert_close(grad, gb[name], rtol=1e-5, atol=1e-7)
    # both differ from the residual model only through the final RMSNorm's eps acting on n·h (reduce = sum)
    assert (a.logits - ref.logits).abs().max() < 0.05


def test_same_function_with_random_connection_weights(peer) -> None:
    # Away from the initialisation the two agree once our stream norm's eps is ~0 (the peer's RMSNorm has none):
    # the same width/depth connections, the same per-token dynamic weights, the same mixing.
    base, ours, theirs = _models(peer)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for hc in hyper_connections_of(ours):
            for p in (
                hc.static_alpha,
                hc.static_beta,
                hc.dynamic_alpha_fn,
                hc.dynamic_beta_fn,
                hc.norm.weight,
            ):
                p.add_(0.3 * torch.randn(p.shape, generator=g))
            hc.dynamic_alpha_scale.fill_(0.5)
            hc.dynamic_beta_scale.fill_(0.5)
            hc.norm.eps = 1e-30
    assert peer.copy_connection_weights(ours, theirs) == 6
    with torch.no_grad():
        a, b, ref = ours(IDS).logits, theirs(IDS).logits, base(IDS).logits
    torch.testing.assert_close(a, b, rtol=0, atol=1e-5)  # measured: 1.6e-6
    assert (
        a - ref
    ).abs().max() > 0.5  # the weights moved the function far from the residual one (measured 1.5)
