"""The grouped expert dispatch (issue 43): equal to a brute-force per-token loop and to the host kernels it replaces,
with cost that follows the number of activated experts.

References are computed from the expert weights directly (a per-token, per-slot loop in float64) or by the host's
own kernels of transformers; never by the code under test.
"""

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from iclr25_adak import apply_adak, expert_flops_per_token, grouped_experts_forward, variable_k_route
from iclr25_adak._dispatch import supports_grouped_dispatch

N_EXP = 6


def _experts(dtype=torch.float64, seed=0):
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralExperts

    conf = MixtralConfig(hidden_size=32, intermediate_size=24, num_local_experts=N_EXP)
    experts = MixtralExperts(conf)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        experts.gate_up_proj.copy_(torch.randn(experts.gate_up_proj.shape, generator=g) * 0.3)
        experts.down_proj.copy_(torch.randn(experts.down_proj.shape, generator=g) * 0.3)
    experts._is_expert_parallel = True  # the host kernels' sentinel handling (what apply_adak switches on)
    return experts.to(dtype)


def _brute_force(experts, x, idx, w):
    """out[t] = sum over slots j with idx[t, j] < N of w[t, j] * E_idx(x[t]): one token, one slot at a time."""
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(idx.shape[1]):
            e = int(idx[t, j])
            if e >= experts.num_experts:
                continue
            gate, up = (x[t] @ experts.gate_up_proj[e].T).chunk(2)
            out[t] += w[t, j] * ((nn.functional.silu(gate) * up) @ experts.down_proj[e].T)
    return out


def _table(n=23, slots=4, seed=1, dtype=torch.float64):
    """A routing table with every hard case: tokens with k = 0 (all sentinels), k = slots, the same expert twice in
    one token, expert 4 never used, sentinels in the middle of a row, and random weights."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, N_EXP - 1, (n, slots), generator=g)
    idx[idx == 4] = 0  # expert 4 gets no token
    k = torch.randint(0, slots + 1, (n,), generator=g)
    k[0], k[1], k[2] = 0, slots, 2
    idx[torch.arange(slots)[None, :] >= k[:, None]] = N_EXP  # sentinel past k
    idx[2, :2] = 3  # a duplicate: expert 3 in both slots of token 2
    idx[3] = torch.tensor([N_EXP, 1, N_EXP, 2])  # sentinels between real slots
    w = torch.rand((n, slots), generator=g, dtype=dtype)
    w[idx == N_EXP] = 0.0
    return idx, w


def test_loop_dispatch_equals_a_brute_force_loop_in_float64():
    experts = _experts()
    idx, w = _table()
    x = torch.randn(idx.shape[0], 32, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    with torch.no_grad():
        ref = _brute_force(experts, x, idx, w)
        out = grouped_experts_forward(experts, x, idx, w, impl="loop")
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    assert torch.equal(out[0], torch.zeros(32, dtype=torch.float64))  # the k = 0 token gets nothing


@pytest.mark.parametrize("impl", ["eager", "batched_mm", "grouped_mm"])
def test_grouped_dispatch_equals_every_host_kernel_on_the_padded_table(impl):
    # the old dispatch: the host kernel on the sentinel-padded table (float32: grouped_mm has no float64 kernel)
    experts = _experts(torch.float32)
    experts.config._experts_implementation = impl
    idx, w = _table(dtype=torch.float32)
    x = torch.randn(idx.shape[0], 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        host = experts(x, idx, w)
        for mine in ("loop", "grouped_mm"):
            out = grouped_experts_forward(experts, x, idx, w, impl=mine)
            # float32 rounding of two summation orders over <= 4 slots of O(1) terms
            torch.testing.assert_close(out, host, rtol=1e-5, atol=1e-6)


def test_loop_dispatch_is_the_eager_kernel_bit_for_bit():
    # same GEMM rows, same expert order of accumulation: the per-expert loop adds exactly what eager adds
    experts = _experts(torch.float32)
    experts.config._experts_implementation = "eager"
    idx, w = _table(dtype=torch.float32)
    x = torch.randn(idx.shape[0], 32, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert torch.equal(grouped_experts_forward(experts, x, idx, w, impl="loop"), experts(x, idx, w))


def test_dispatch_cost_follows_the_activated_experts_not_the_padded_width():
    # one token with k = 4 pads the table to 4 slots; the other tokens use 1: the GEMM FLOPs must be sum_t k_t
    # expert evaluations. The host's batched_mm (the old default on CUDA-less hosts with old torch) computes every
    # slot, sentinels included: the same counter sees n * 4 there. (torch's FLOP counter does not count
    # grouped_mm; its offsets end at the last real slot by construction, checked on CUDA in test_gpu.py.)
    from transformers.integrations.moe import batched_mm_experts_forward

    experts = _experts(torch.float32)
    n = 40
    idx = torch.full((n, 4), N_EXP)
    idx[:, 0] = torch.arange(n) % N_EXP
    idx[0] = torch.tensor([0, 1, 2, 3])
    w = (idx < N_EXP).float()
    x = torch.randn(n, 32)
    c = expert_flops_per_token(experts)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        grouped_experts_forward(experts, x, idx, w, impl="loop")
    assert counter.get_total_flops() == (n + 3) * c
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        batched_mm_experts_forward(experts, x, idx, w)
    assert counter.get_total_flops() == n * 4 * c


def test_empty_inputs_and_bad_shapes():
    experts = _experts()
    x = torch.zeros(0, 32, dtype=torch.float64)
    idx = torch.zeros(0, 2, dtype=torch.long)
    assert grouped_experts_forward(experts, x, idx, idx.double()).shape == (0, 32)
    with pytest.raises(ValueError, match="tokens, slots"):
        grouped_experts_forward(
            experts, torch.zeros(3, 32), torch.zeros(3, 2, dtype=torch.long), torch.zeros(3, 1)
        )
    with pytest.raises(ValueError, match="rows"):
        grouped_experts_forward(
            experts, torch.zeros(3, 32), torch.zeros(2, 2, dtype=torch.long), torch.zeros(2, 2)
        )
    with pytest.raises(ValueError, match="impl"):
        grouped_experts_forward(
            experts, torch.zeros(3, 32), torch.zeros(3, 2, dtype=torch.long), torch.zeros(3, 2), impl="bogus"
        )


def test_patched_model_grouped_equals_host_dispatch_in_float64(family, make_tiny, monkeypatch):
    # end to end, every supported family (shared experts, grouped top-k, scaling factors), mixed k per token:
    # the grouped dispatch gives the old (host kernel, sentinel-padded) result
    calls = _spy(monkeypatch)
    model = make_tiny(family, experts_implementation="eager").double()
    ids = torch.randint(0, 64, (3, 9), generator=torch.Generator().manual_seed(7))
    patch = apply_adak(model, init_logit=0.0, seed=11)
    assert all(supports_grouped_dispatch(b.experts) for b in patch.blocks)
    with torch.no_grad(), patch.mode_as("sample"):
        patch.reseed(11)
        grouped = model(input_ids=ids).logits
        patch.dispatch = "host"
        patch.reseed(11)
        host = model(input_ids=ids).logits
    torch.testing.assert_close(grouped, host, rtol=1e-12, atol=1e-12)
    assert len(calls) == len(
        patch.blocks
    )  # the first pass ran the grouped dispatch in every block, the second not


def _spy(monkeypatch):
    import iclr25_adak._routing as routing

    calls = []
    real = routing.grouped_experts_forward
    monkeypatch.setattr(
        routing, "grouped_experts_forward", lambda *a, **kw: calls.append(1) or real(*a, **kw)
    )
    return calls


def test_grouped_dispatch_runs_only_for_mixed_k_and_remove_uninstalls_it(make_tiny, monkeypatch):
    calls = _spy(monkeypatch)
    model = make_tiny("mixtral")
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(1))
    patch = apply_adak(model, init_logit=0.0)
    with torch.no_grad():
        with patch.mode_as("fixed", 2):
            model(input_ids=ids)
        assert calls == []  # one k for every token: the host kernel
        with patch.mode_as("sample"):
            model(input_ids=ids)
        blocks = list(patch.blocks)
        assert len(calls) == len(blocks) == 2
        patch.remove()
        assert all("forward" not in b.experts.__dict__ for b in blocks)
        model(input_ids=ids)
    assert len(calls) == 2


def test_one_call_routing_equals_the_host_router_per_token(family, make_tiny):
    # softmax-top-k routers (Mixtral, Qwen2/3-MoE, OLMoE) are routed with one call at the largest k and each token
    # cut to its own k; the reference is the host router itself called on each token with top_k = k_t
    from iclr25_adak._routing import _is_softmax_topk_router

    model = make_tiny(family)
    patch = apply_adak(model)
    router = patch.blocks[0].gate.router
    assert _is_softmax_topk_router(router) == (family in ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe"))
    n = 30
    x = torch.randn(n, 32, generator=torch.Generator().manual_seed(5))
    k = torch.randint(1, patch.reachable_k + 1, (n,), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        logits, w, ix = variable_k_route(router, x, k, patch.num_experts)
        old = router.top_k
        try:
            for t in range(n):
                router.top_k = int(k[t])
                lg, wt, it = router(x[t : t + 1])
                kt = int(k[t])
                # float32: a one-row and a batched GEMM round the 32-term logits differently (ulps)
                torch.testing.assert_close(logits[t : t + 1], lg, rtol=1e-5, atol=1e-6)
                torch.testing.assert_close(w[t, :kt], wt[0], rtol=1e-5, atol=1e-6)
                assert torch.equal(ix[t, :kt], it[0].long())
                assert (ix[t, kt:] == patch.num_experts).all() and (w[t, kt:] == 0).all()
        finally:
            router.top_k = old
