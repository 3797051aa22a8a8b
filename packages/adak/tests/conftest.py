"""Shared fixtures: tiny random configurations of every Hugging Face MoE family the patch supports."""

from __future__ import annotations

import pytest
import torch

COMMON = dict(
    vocab_size=64,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
)


def _configs():
    import transformers as T

    return {
        # Mixtral: top-2 of 6, renormalised over the selected experts
        "mixtral": (
            T.MixtralForCausalLM,
            lambda: T.MixtralConfig(
                intermediate_size=24, num_local_experts=6, num_experts_per_tok=2, **COMMON
            ),
        ),
        # Qwen2-MoE: top-3 of 6, no renormalisation, sigmoid-gated shared expert
        "qwen2_moe": (
            T.Qwen2MoeForCausalLM,
            lambda: T.Qwen2MoeConfig(
                intermediate_size=24,
                moe_intermediate_size=16,
                shared_expert_intermediate_size=20,
                num_experts=6,
                num_experts_per_tok=3,
                norm_topk_prob=False,
                **COMMON,
            ),
        ),
        # Qwen3-MoE: top-3 of 6, renormalised
        "qwen3_moe": (
            T.Qwen3MoeForCausalLM,
            lambda: T.Qwen3MoeConfig(
                intermediate_size=24,
                moe_intermediate_size=16,
                num_experts=6,
                num_experts_per_tok=3,
                norm_topk_prob=True,
                head_dim=8,
                **COMMON,
            ),
        ),
        # OLMoE: top-3 of 6, softmax weights not renormalised
        "olmoe": (
            T.OlmoeForCausalLM,
            lambda: T.OlmoeConfig(intermediate_size=16, num_experts=6, num_experts_per_tok=3, **COMMON),
        ),
        # DeepSeek-V2: group-limited greedy top-3 of 8 in 1 of 2 groups, scaling factor, shared expert
        "deepseek_v2": (
            T.DeepseekV2ForCausalLM,
            lambda: T.DeepseekV2Config(
                intermediate_size=24,
                moe_intermediate_size=16,
                n_routed_experts=8,
                num_experts_per_tok=3,
                n_shared_experts=1,
                first_k_dense_replace=0,
                n_group=2,
                topk_group=1,
                topk_method="group_limited_greedy",
                routed_scaling_factor=1.5,
                kv_lora_rank=8,
                q_lora_rank=None,
                qk_rope_head_dim=4,
                qk_nope_head_dim=4,
                v_head_dim=8,
                **COMMON,
            ),
        ),
        # DeepSeek-V3: sigmoid scores + correction bias, grouped top-3 of 8, renormalised, shared expert
        "deepseek_v3": (
            T.DeepseekV3ForCausalLM,
            lambda: T.DeepseekV3Config(
                intermediate_size=24,
                moe_intermediate_size=16,
                n_routed_experts=8,
                num_experts_per_tok=3,
                n_shared_experts=1,
                first_k_dense_replace=0,
                n_group=2,
                topk_group=2,
                routed_scaling_factor=2.0,
                kv_lora_rank=8,
                q_lora_rank=16,
                qk_rope_head_dim=4,
                qk_nope_head_dim=4,
                v_head_dim=8,
                **COMMON,
            ),
        ),
    }


FAMILIES = ["mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3"]


def tiny_model(family: str, seed: int = 0, experts_implementation: str | None = None):
    """A tiny random model of ``family`` in eval mode, with routers and experts drawn at a scale where routing
    matters (several init schemes start routers at zero)."""
    cls, make = _configs()[family]
    torch.manual_seed(seed)
    config = make()
    if experts_implementation is not None:
        config._experts_implementation = experts_implementation
    model = cls(config).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".gate.weight" in name or ".experts." in name or "shared_expert" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        for name, b in model.named_buffers():
            if "e_score_correction_bias" in name:
                b.copy_(torch.randn(b.shape, generator=g) * 0.1)
    return model


def pytest_generate_tests(metafunc):
    if "family" in metafunc.fixturenames:
        metafunc.parametrize("family", FAMILIES)


@pytest.fixture
def make_tiny():
    return tiny_model


@pytest.fixture(autouse=True)
def _one_thread():
    # tiny models: thread start-up costs more than it saves, and CI machines are shared
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
