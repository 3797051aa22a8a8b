"""The Ada-K routing patch (arXiv:2410.10456, Section 3.2) on tiny random configs of every supported HF MoE class.

Expected values come from the unpatched host model, from per-token loops through the host's own router and experts,
or from the expert weights directly (dense softmax mixture); never from the code under test.
"""

import pytest
import torch
from torch import nn

from iclr25_adak import apply_adak, variable_k_route

IDS = torch.tensor([[3, 17, 5, 60, 22, 9, 41], [8, 8, 33, 2, 50, 11, 27]])


def _logits(model, ids=IDS):
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.parametrize("impl", [None, "eager"])
def test_forcing_k_equal_K_reproduces_topk_bit_for_bit(family, make_tiny, impl):
    # renormalisation (Mixtral, Qwen3, DeepSeek-V3), none (Qwen2, OLMoE), scaling factors, grouped top-k and shared
    # experts all come from the host, so the patched model at k = K must be the original, bit for bit
    model = make_tiny(family, experts_implementation=impl)
    ref = _logits(model)
    patch = apply_adak(model)
    with patch.mode_as("fixed", patch.host_top_k):
        out = _logits(model)
    assert torch.equal(out, ref)
    # and the allocator path, when its argmax is K for every token (the initial policy), too
    assert torch.equal(_logits(model), ref)
    patch.remove()
    assert torch.equal(_logits(model), ref)


@pytest.mark.parametrize("impl", [None, "eager", "batched_mm"])
def test_bf16_model_at_k_equal_K_is_unchanged_and_mixed_k_stays_finite(make_tiny, impl):
    model = make_tiny("qwen2_moe", experts_implementation=impl).to(torch.bfloat16)
    ref = _logits(model)
    patch = apply_adak(model, init_logit=0.0)
    with patch.mode_as("fixed", patch.host_top_k):
        assert torch.equal(_logits(model), ref)
    with patch.mode_as("sample"):
        for _ in range(3):
            assert torch.isfinite(_logits(model)).all()


def _mixtral_expert(experts, e, x):
    gate, up = (x @ experts.gate_up_proj[e].T).chunk(2, dim=-1)
    return (nn.functional.silu(gate) * up) @ experts.down_proj[e].T


def test_k_equal_N_is_the_dense_softmax_mixture(make_tiny):
    model = make_tiny("mixtral")
    patch = apply_adak(model)
    block = patch.blocks[0]
    x = torch.randn(11, 32, generator=torch.Generator().manual_seed(3))
    n = patch.num_experts
    with torch.no_grad():
        _, w, ix = variable_k_route(block.gate.router, x, torch.full((11,), n), n)
        out = block.experts(x, ix, w)
        probs = torch.softmax(x @ block.gate.router.weight.T, dim=-1)
        dense = sum(probs[:, e : e + 1] * _mixtral_expert(block.experts, e, x) for e in range(n))
    torch.testing.assert_close(out, dense, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("impl", [None, "eager", "batched_mm"])
def test_variable_k_dispatch_equals_a_per_token_loop(family, make_tiny, impl):
    # every expert kernel of transformers (default grouped_mm on recent torch, eager loop, batched_mm) must skip the
    # sentinel slots; batched_mm indexed out of range and grouped_mm read uninitialised rows before the patch
    # switched their sentinel handling on
    model = make_tiny(family, experts_implementation=impl)
    patch = apply_adak(model)
    block = patch.blocks[0]
    router = block.gate.router
    n_tok = 40
    x = torch.randn(n_tok, 32, generator=torch.Generator().manual_seed(5))
    k = torch.randint(1, patch.reachable_k + 1, (n_tok,), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        _, w, ix = variable_k_route(router, x, k, patch.num_experts)
        batched = block.experts(x, ix, w)
        for t in range(n_tok):
            old = router.top_k
            router.top_k = int(k[t])
            _, wt, it = router(x[t : t + 1])
            router.top_k = old
            one = block.experts(x[t : t + 1], it, wt)
            torch.testing.assert_close(batched[t : t + 1], one, rtol=1e-4, atol=2e-5)
            assert int((ix[t] < patch.num_experts).sum()) == int(k[t])  # exactly k_t experts evaluated


def test_mixtral_variable_k_matches_the_weights_directly(make_tiny):
    # an independent reference: renormalised top-k_t softmax weights times each expert computed from its weights
    model = make_tiny("mixtral")
    patch = apply_adak(model)
    block = patch.blocks[1]
    x = torch.randn(25, 32, generator=torch.Generator().manual_seed(8))
    k = torch.randint(1, 7, (25,), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        _, w, ix = variable_k_route(block.gate.router, x, k, 6)
        out = block.experts(x, ix, w)
        probs = torch.softmax(x @ block.gate.router.weight.T, dim=-1)
        for t in range(25):
            top = torch.topk(probs[t], int(k[t])).indices
            wt = probs[t, top] / probs[t, top].sum()
            ref = sum(wt[j] * _mixtral_expert(block.experts, int(e), x[t : t + 1]) for j, e in enumerate(top))
            torch.testing.assert_close(out[t : t + 1], ref, rtol=1e-4, atol=1e-5)


def test_k_is_always_within_1_and_N_and_N_is_reachable(make_tiny):
    # regression for a public simulation that drew k = multinomial index (k = 0 possible, k = N never)
    model = make_tiny("olmoe")
    patch = apply_adak(model, init_logit=0.0)  # uniform policy over k = 1..N
    patch.set_mode("sample")
    seen = set()
    ids = torch.randint(0, 64, (8, 32), generator=torch.Generator().manual_seed(0))
    patch.record = True
    with torch.no_grad():
        model(input_ids=ids)
    for router, chunks in zip(patch.routers, patch.take_records(), strict=True):
        for _, a, _ in chunks:
            k = a + router.allocator.k_min
            assert int(k.min()) >= 1 and int(k.max()) <= patch.num_experts
            seen |= set(k.tolist())
    assert seen == set(range(1, patch.num_experts + 1))


def test_k_bounds_are_respected(make_tiny):
    model = make_tiny("mixtral")
    patch = apply_adak(model, k_min=2, k_max=4, init_logit=0.0)
    patch.set_mode("sample")
    with torch.no_grad():
        model(input_ids=IDS)
    assert min(patch.mean_k_per_layer()) >= 2 and max(patch.mean_k_per_layer()) <= 4


def test_argmax_k_is_deterministic(make_tiny):
    model = make_tiny("qwen3_moe")
    patch = apply_adak(model)
    with torch.no_grad():
        for a in patch.allocators():  # a token-dependent policy
            a.proj.weight.normal_(0, 1.0, generator=torch.Generator().manual_seed(1))
    patch.record = True
    outs, ks = [], []
    for _ in range(3):
        outs.append(_logits(model))
        ks.append([c[0][1] for c in patch.take_records()])
    assert all(torch.equal(outs[0], o) for o in outs[1:])
    assert all(torch.equal(a, b) for run in ks[1:] for a, b in zip(ks[0], run, strict=True))
    assert len(set(torch.cat(ks[0]).tolist())) > 1  # k really varies across tokens


def test_flops_reduction_is_one_minus_mean_k_over_K(make_tiny):
    model = make_tiny("deepseek_v3")
    patch = apply_adak(model, init_logit=0.0)
    patch.set_mode("sample")
    patch.record = True
    with torch.no_grad():
        model(input_ids=IDS)
    ks = torch.cat(
        [c[0][1] + r.allocator.k_min for r, c in zip(patch.routers, patch.take_records(), strict=True)]
    )
    f = patch.flops()
    expected = 1 - ks.double().mean().item() / patch.host_top_k
    assert f["flops_reduction"] == pytest.approx(expected, abs=1e-12)
    # per layer: k_l * tokens * (FLOPs of one expert = 2 * (2f*d + d*f)) with f = 16, d = 32
    per_expert = 2 * (2 * 16 * 32 + 32 * 16)
    assert f["expert_flops_per_layer"] == [r.counters.experts * per_expert for r in patch.routers]
    assert f["expert_flops"] == int(ks.sum()) * per_expert


def test_grouped_routing_caps_k_at_the_reachable_experts(make_tiny):
    # DeepSeek-V2 group-limited greedy with topk_group=1 of 2 groups of 4: only 4 experts are reachable
    patch = apply_adak(make_tiny("deepseek_v2"))
    assert patch.reachable_k == 4
    with pytest.raises(ValueError, match="k_max must be"):
        apply_adak(make_tiny("deepseek_v2"), k_max=5)


def test_only_allocator_parameters_are_trainable(make_tiny):
    model = make_tiny("mixtral")
    patch = apply_adak(model)
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    assert trainable == {id(p) for p in patch.parameters()}
    assert len(patch.parameters()) == 2 * len(patch.routers)  # one weight and one bias per layer


class _Dense(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Linear(4, 4)


class _FooMoeBlock(nn.Module):
    pass


def test_model_without_moe_blocks_is_refused():
    with pytest.raises(ValueError, match="has no MoE blocks"):
        apply_adak(_Dense())


def test_unknown_moe_architecture_is_refused_with_its_name():
    m = _Dense()
    m.moe = _FooMoeBlock()
    with pytest.raises(
        ValueError, match="unsupported architecture.*_FooMoeBlock.*supported: MixtralSparseMoeBlock"
    ):
        apply_adak(m)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"k_min": 0}, "k_min"),
        ({"k_max": 7}, "k_max"),
        ({"k_min": 3, "k_max": 2}, "k_max"),
        ({"k_min": 7}, "k_min"),
    ],
)
def test_k_bounds_outside_1_N_are_refused(make_tiny, kw, field):
    with pytest.raises(ValueError, match=f"{field} must be"):
        apply_adak(make_tiny("mixtral"), **kw)


def test_patching_twice_is_refused(make_tiny):
    model = make_tiny("mixtral")
    apply_adak(model)
    with pytest.raises(ValueError, match="already patched"):
        apply_adak(model)


def test_fixed_mode_needs_k_in_range(make_tiny):
    patch = apply_adak(make_tiny("mixtral"))
    with pytest.raises(ValueError, match="k must be"):
        patch.set_mode("fixed", 0)
    with pytest.raises(ValueError, match="k must be given"):
        patch.set_mode("fixed")
    with pytest.raises(ValueError, match="mode must be"):
        patch.set_mode("greedy")


def test_route_rejects_k_outside_1_N(make_tiny):
    patch = apply_adak(make_tiny("mixtral"))
    x = torch.randn(3, 32)
    with pytest.raises(ValueError, match=r"k must be in \[1, 6\]"):
        variable_k_route(patch.blocks[0].gate.router, x, torch.tensor([1, 0, 2]), 6)
    with pytest.raises(ValueError, match="k must have shape"):
        variable_k_route(patch.blocks[0].gate.router, x, torch.tensor([1, 2]), 6)


def test_allocator_state_round_trip(make_tiny):
    model = make_tiny("olmoe")
    patch = apply_adak(model)
    with torch.no_grad():
        for a in patch.allocators():
            a.proj.weight.normal_()
    state = {k: v.clone() for k, v in patch.allocator_state_dict().items()}
    ref = _logits(model)
    patch2 = apply_adak(make_tiny("olmoe"))
    patch2.load_allocator_state_dict(state)
    assert torch.equal(_logits(patch2.model), ref)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_k_equal_K_is_unchanged_and_sampling_is_seeded(make_tiny):
    model = make_tiny("mixtral").cuda()
    ids = IDS.cuda()
    ref = _logits(model, ids)
    patch = apply_adak(model, init_logit=0.0, seed=3)
    with patch.mode_as("fixed", patch.host_top_k):
        assert torch.equal(_logits(model, ids), ref)
    runs = []
    for _ in range(2):
        patch.reseed(3)
        with patch.mode_as("sample"):
            runs.append(_logits(model, ids))
    assert torch.equal(runs[0], runs[1])


# -- the model stays a Hugging Face model: casts, removal, save/load (issue 38) ---------------------------------------


@pytest.mark.parametrize(
    ("dtype", "impl"),
    [
        (torch.bfloat16, None),
        (torch.bfloat16, "batched_mm"),
        (torch.float16, None),
        (torch.float16, "eager"),
        (torch.float64, "eager"),  # grouped_mm has no float64 kernel (the unpatched host fails too)
    ],
)
def test_a_cast_after_patching_runs_in_that_dtype(make_tiny, dtype, impl):
    # the allocator computed in a fixed float32 with weights the cast had moved: "mat1 and mat2 must have the same
    # dtype" on the first forward after model.to(bfloat16)
    model = make_tiny("qwen2_moe", experts_implementation=impl)
    patch = apply_adak(model, init_logit=0.0)
    with torch.no_grad():
        for a in patch.allocators():
            a.proj.weight.normal_(generator=torch.Generator().manual_seed(0))  # k varies per token
    model.to(dtype)
    assert {p.dtype for p in model.parameters()} == {dtype}
    out = _logits(model)
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert len(set(patch.routers[0].choose_k(torch.randn(64, 32, dtype=dtype))[0].tolist())) > 1


def test_float64_allocator_keeps_float64(make_tiny):
    model = make_tiny("mixtral", experts_implementation="eager")
    patch = apply_adak(model)
    model.to(torch.float64)
    assert patch.allocators()[0](torch.randn(3, 32, dtype=torch.float64)).dtype == torch.float64


def test_remove_gives_back_each_parameters_own_flag_and_each_modules_mode(make_tiny):
    # remove() left every parameter requires_grad=False (30 of 30 in this model) although the user had trained
    # some of them, and apply-time modes were not restored
    model = make_tiny("mixtral")
    params = list(model.parameters())
    for i, p in enumerate(params):
        p.requires_grad_(i % 2 == 0)
    model.train()
    model.model.layers[0].eval()
    flags = [p.requires_grad for p in params]
    modes = {n: m.training for n, m in model.named_modules()}
    patch = apply_adak(model)
    assert not any(p.requires_grad for p in params)  # frozen while patched
    model.eval()
    patch.remove()
    assert [p.requires_grad for p in model.parameters()] == flags
    assert {n: m.training for n, m in model.named_modules()} == modes
    assert "save_pretrained" not in vars(model)
    patch.remove()  # twice: nothing more happens
    assert [p.requires_grad for p in model.parameters()] == flags


def test_save_pretrained_of_a_patched_model_loads_back_exactly(make_tiny, tmp_path):
    # save_pretrained stored the routers as gate.router.weight: from_pretrained reported gate.weight MISSING and
    # initialised the routers at random, silently
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    model = make_tiny("olmoe")
    host = _logits(model)
    patch = apply_adak(model, k_max=5, init_logit=0.5, seed=3)
    with torch.no_grad():
        for a in patch.allocators():
            a.proj.weight.normal_(generator=torch.Generator().manual_seed(1))
    patched = _logits(model)
    assert not torch.equal(patched, host)
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", framework="pt") as f:
        keys = set(f.keys())
    assert not [k for k in keys if ".router." in k or "allocator" in k]
    assert "model.layers.0.mlp.gate.weight" in keys
    assert type(model.model.layers[0].mlp.gate).__name__ == "AdaKRouter"  # still patched after saving

    plain = AutoModelForCausalLM.from_pretrained(tmp_path).eval()  # the host's checkpoint, routers included
    # (a tolerance, not equality: from_pretrained leaves weights off 64-byte boundaries, where MKL may round one ulp
    # differently; a re-initialised router moves logits by ~1e-1)
    torch.testing.assert_close(_logits(plain), host, rtol=0, atol=1e-5)
    from iclr25_adak import ALLOCATORS_FILE, load_pretrained

    loaded = load_pretrained(tmp_path)
    assert (loaded.names, loaded.settings) == (patch.names, patch.settings)
    assert torch.equal(_logits(loaded.model), patched)
    assert (tmp_path / ALLOCATORS_FILE).is_file()


def test_load_pretrained_of_a_plain_checkpoint_says_what_to_do(make_tiny, tmp_path):
    from iclr25_adak import load_pretrained

    make_tiny("mixtral").save_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="not saved from an Ada-K model.*apply_adak"):
        load_pretrained(tmp_path)


def test_push_to_hub_from_a_patched_model_is_refused(make_tiny, tmp_path):
    model = make_tiny("mixtral")
    apply_adak(model)
    with pytest.raises(ValueError, match="save it locally, then upload the folder"):
        model.save_pretrained(tmp_path, push_to_hub=True)
    assert not list(tmp_path.iterdir())
