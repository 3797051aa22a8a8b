"""Exact reduction at initialisation for every architecture in the adapter table (arXiv 2409.19606 §2.3, eq. 14).

Each model type in ``LAYOUTS`` is built from a tiny random config (``transformers.AutoConfig.for_model``, no
download) with larger-than-default weights so that every sub-layer visibly changes the output; converted with the
eq. 14 initialisation it must give the same logits and the same gradients for every original parameter.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch
import transformers
from torch import nn

from iclr25_hyper_connections import SUPPORTED_MODEL_TYPES, apply_hyper_connections, hyper_connections_of
from iclr25_hyper_connections._hf import LAYOUTS

VOCAB = 97
COMMON = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "head_dim": 8,
    "pad_token_id": 0,
}
MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16}
EXTRA: dict[str, dict] = {
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2_moe": {**MOE, "shared_expert_intermediate_size": 32},
    "qwen3_moe": MOE,
    "olmoe": {"num_experts": 4, "num_experts_per_tok": 2},
    "flex_olmo": {"num_experts": 4, "num_experts_per_tok": 2},
    "granite": {"residual_multiplier": 0.5},  # a branch scale != 1 that the adapter must keep
    "gemma2": {"sliding_window": 4},
    "gemma3_text": {"sliding_window": 4},
}
IDS = torch.randint(1, VOCAB, (2, 11), generator=torch.Generator().manual_seed(0))


def tiny(model_type: str, seed: int = 0) -> nn.Module:
    config = transformers.AutoConfig.for_model(model_type, **COMMON, **EXTRA.get(model_type, {}))
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # larger-than-default weights so every layer changes the logits visibly
        for p in model.parameters():
            if p.ndim >= 2:
                p.normal_(0, 0.2)
    return model.eval()


def _original_name(name: str) -> str:
    """Parameter name in the original model: the wrapper inserts ``.layer`` after ``layers.<k>``."""
    return re.sub(r"(layers\.\d+)\.layer\.", r"\1.", name)


def test_the_paper_family_and_more_are_in_the_table() -> None:
    assert {"olmo", "olmo2", "olmoe", "llama", "gemma2", "phi3", "qwen3"} <= set(SUPPORTED_MODEL_TYPES)


# the paper's family (OLMo, OLMo2, OLMoE) and one model per layout run in the fast tier; the rest are slow
FAST = {"olmo", "olmo2", "olmoe", "gemma2", "phi", "granite"}


@pytest.mark.parametrize(
    "model_type", [t if t in FAST else pytest.param(t, marks=pytest.mark.slow) for t in SUPPORTED_MODEL_TYPES]
)
def test_logits_and_gradients_unchanged_at_init(model_type: str) -> None:
    base = tiny(model_type)
    n = 4
    model = apply_hyper_connections(copy.deepcopy(base), expansion_rate=n, reduce="mean")
    per_layer = 1 if LAYOUTS[model_type].parallel else 2
    assert len(hyper_connections_of(model)) == per_layer * COMMON["num_hidden_layers"]

    ref = base(IDS, labels=IDS)
    out = model(IDS, labels=IDS)
    # measured bit-identical for every type but cohere, whose layer computes (h + attn) + mlp where the hyper-
    # connection adds h + (attn + mlp): one rounding apart (9e-8 at logits of size 0.3)
    tol = 1e-6 if model_type == "cohere" else 0.0
    torch.testing.assert_close(out.logits, ref.logits, rtol=0, atol=tol)
    ref.loss.backward()
    out.loss.backward()
    grads = {_original_name(k): p.grad for k, p in model.named_parameters() if ".hcs." not in k}
    checked = 0
    for name, p in base.named_parameters():
        if p.grad is None:  # e.g. experts not routed to
            assert grads[name] is None or not grads[name].any(), name
            continue
        # the backward pass sums the n streams' contributions in another order: equal to float rounding
        # (measured: max |Δ| <= 1.1e-6 · max |grad| over all 30 types)
        err = (grads[name] - p.grad).abs().max() / p.grad.abs().max().clamp_min(1e-30)
        assert err < 1e-5, (name, err.item())
        checked += 1
    assert checked >= 4 * COMMON["num_hidden_layers"]
    # the hyper-connection weights get gradients too (they will train)
    assert all(hc.static_alpha.grad is not None for hc in hyper_connections_of(model))


@pytest.mark.parametrize("model_type", ["olmo", "olmo2", "gemma2", "phi"])
def test_reduce_sum_equals_the_base_model_with_eps_over_n_squared(model_type: str) -> None:
    # reduce="sum" (the paper): Norm_eps(n·h) = Norm_{eps/n²}(h) for the final RMSNorm / LayerNorm
    base = tiny(model_type)
    n = 4
    model = apply_hyper_connections(copy.deepcopy(base), expansion_rate=n)
    base_eps = copy.deepcopy(base)
    if model_type == "olmo":  # OlmoLayerNorm: non-parametric, eps fixed at 1e-5 in its forward
        base_eps.model.norm = nn.LayerNorm(COMMON["hidden_size"], eps=1e-5 / n**2, elementwise_affine=False)
    else:
        final = base_eps.model.final_layernorm if model_type == "phi" else base_eps.model.norm
        attr = next(a for a in ("variance_epsilon", "eps") if hasattr(final, a))
        setattr(final, attr, getattr(final, attr) / n**2)
    with torch.no_grad():
        torch.testing.assert_close(model(IDS).logits, base_eps(IDS).logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("model_type", ["olmo", "olmo2", "phi"])
def test_perturbed_connections_change_the_output(model_type: str) -> None:
    base = tiny(model_type)
    model = apply_hyper_connections(copy.deepcopy(base), expansion_rate=2, reduce="mean")
    with torch.no_grad():
        hyper_connections_of(model)[1].static_alpha[:, 1:] = torch.tensor([[0.0, 1.0], [1.0, 0.5]])
        assert (model(IDS).logits - base(IDS).logits).abs().max() > 1e-3


def test_olmo2_kv_cache_generation_matches_at_init() -> None:
    base = tiny("olmo2")
    model = apply_hyper_connections(copy.deepcopy(base), expansion_rate=4, reduce="mean")
    kwargs = {
        "max_new_tokens": 6,
        "do_sample": False,
        "pad_token_id": 0,
        "attention_mask": torch.ones_like(IDS),
    }
    with torch.no_grad():
        assert torch.equal(model.generate(IDS, **kwargs), base.generate(IDS, **kwargs))


@pytest.mark.parametrize("output_scale", ["divide", "multiply"])
def test_output_scale_rescales_exactly_the_output_projections(output_scale: str) -> None:
    base = tiny("olmo")
    model = apply_hyper_connections(copy.deepcopy(base), expansion_rate=4, output_scale=output_scale)
    factor = 2.0 if output_scale == "multiply" else 0.5  # √4
    new = {_original_name(k): v for k, v in model.state_dict().items()}
    for name, value in base.state_dict().items():
        scaled = name.endswith(("o_proj.weight", "down_proj.weight"))
        torch.testing.assert_close(new[name], value * factor if scaled else value, rtol=0, atol=0)
    assert model.config.hyper_connections["output_scale"] == output_scale


def test_output_scale_refuses_moe_ffn_and_changes_nothing() -> None:
    model = tiny("olmoe")
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(ValueError, match=r"output_scale: decoder layer 0 has no nn.Linear mlp.down_proj"):
        apply_hyper_connections(model, expansion_rate=2, output_scale="divide")
    assert not hyper_connections_of(model)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_unsupported_architecture_lists_the_supported_ones() -> None:
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50)
    )
    with pytest.raises(ValueError, match=r"model_type in llama, .*olmo2.*; got model_type 'gpt2'"):
        apply_hyper_connections(gpt2)
    with pytest.raises(ValueError, match="output_scale must be one of None, divide, multiply; got 'up'"):
        apply_hyper_connections(tiny("olmo"), output_scale="up")  # type: ignore[arg-type]


def test_gradient_checkpointing_reaches_the_rewired_layers() -> None:
    model = apply_hyper_connections(tiny("olmo2"), expansion_rate=2).train()
    ckpt = copy.deepcopy(model)
    ckpt.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert all(layer.gradient_checkpointing for layer in ckpt.model.layers)
    calls = []
    hook = ckpt.model.layers[1].layer.self_attn.register_forward_hook(lambda *_: calls.append(1))
    model(IDS, labels=IDS).loss.backward()
    ckpt(IDS, labels=IDS).loss.backward()
    hook.remove()
    assert len(calls) == 2  # the rewired layer ran again in the backward pass: it was checkpointed
    for (name, a), (_, b) in zip(model.named_parameters(), ckpt.named_parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=0, msg=lambda m, k=name: f"{k}: {m}")
