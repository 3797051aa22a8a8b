"""apply_hyper_connections on tiny random Hugging Face decoders (paper Algorithm 3)."""

from __future__ import annotations

import copy

import pytest
import torch
import transformers
from torch import nn

from iclr25_hyper_connections import (
    HyperConnectedDecoderLayer,
    HyperConnection,
    apply_hyper_connections,
    hyper_connections_of,
    param_groups,
)

COMMON = {
    "vocab_size": 97,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "attn_implementation": "eager",
}


def tiny(model_type: str = "llama", seed: int = 0) -> nn.Module:
    config_cls = {
        "llama": transformers.LlamaConfig,
        "mistral": transformers.MistralConfig,
        "qwen2": transformers.Qwen2Config,
        "qwen3": transformers.Qwen3Config,
    }[model_type]
    extra = {"head_dim": 8} if model_type == "qwen3" else {}
    config = config_cls(**COMMON, **extra)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # larger-than-default weights so every layer changes the logits visibly
        for p in model.parameters():
            if p.ndim >= 2:
                p.normal_(0, 0.2)
    return model.eval()


IDS = torch.randint(0, 97, (2, 11), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2", "qwen3"])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_logits_unchanged_at_init(model_type: str, n: int) -> None:
    base = tiny(model_type)
    with torch.no_grad():
        ref = base(IDS).logits
        hc_mean = apply_hyper_connections(copy.deepcopy(base), expansion_rate=n, reduce="mean")
        torch.testing.assert_close(hc_mean(IDS).logits, ref, rtol=0, atol=1e-5)
        # reduce="sum" (paper): RMSNorm_eps(n h) = RMSNorm_{eps/n²}(h), so it equals the base model with that eps
        hc_sum = apply_hyper_connections(copy.deepcopy(base), expansion_rate=n)
        base_eps = copy.deepcopy(base)
        base_eps.model.norm.variance_epsilon = base.config.rms_norm_eps / n**2
        torch.testing.assert_close(hc_sum(IDS).logits, base_eps(IDS).logits, rtol=0, atol=1e-5)
    assert len(hyper_connections_of(hc_sum)) == 2 * base.config.num_hidden_layers
    assert [hc.layer_index for hc in hyper_connections_of(hc_sum)] == list(
        range(2 * base.config.num_hidden_layers)
    )


def test_logits_change_when_the_connections_change() -> None:
    # the equality above is not vacuous: perturbing one A_r changes the output
    base = tiny()
    model = apply_hyper_connections(copy.deepcopy(base), expansion_rate=2, reduce="mean")
    with torch.no_grad():
        hyper_connections_of(model)[2].static_alpha[:, 1:] = torch.tensor([[0.0, 1.0], [1.0, 0.5]])
        assert (model(IDS).logits - base(IDS).logits).abs().max() > 1e-3


def test_greedy_generation_with_kv_cache_matches_at_init() -> None:
    base = tiny()
    model = apply_hyper_connections(copy.deepcopy(base), expansion_rate=4, reduce="mean")
    kwargs = {
        "max_new_tokens": 6,
        "do_sample": False,
        "pad_token_id": 0,
        "attention_mask": torch.ones_like(IDS),
    }
    with torch.no_grad():
        assert torch.equal(model.generate(IDS, **kwargs), base.generate(IDS, **kwargs))


def test_trains_and_loss_decreases() -> None:
    model = apply_hyper_connections(tiny(), expansion_rate=4, dynamic=True).train()
    opt = torch.optim.AdamW(param_groups(model, weight_decay=0.01), lr=3e-3)
    batch = torch.randint(0, 97, (4, 16), generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(25):
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]
    hcs = hyper_connections_of(model)
    assert all(hc.dynamic_alpha_fn.grad is not None for hc in hcs)
    assert any(hc.dynamic_alpha_fn.abs().max() > 0 for hc in hcs)  # the dynamic part actually moved
    assert any(
        not torch.equal(
            hc.static_alpha, HyperConnection(32, expansion_rate=4, layer_index=hc.layer_index).static_alpha
        )
        for hc in hcs
    )


def test_structure_first_layer_expands_last_reduces_and_state_dict_round_trips() -> None:
    model = apply_hyper_connections(tiny(), expansion_rate=2)
    layers = model.model.layers
    assert all(isinstance(layer, HyperConnectedDecoderLayer) for layer in layers)
    assert [layer.expand_input for layer in layers] == [True, False, False]
    assert [layer.reduce_output for layer in layers] == [False, False, True]
    assert model.config.hyper_connections["expansion_rate"] == 2
    with torch.no_grad():
        hyper_connections_of(model)[1].static_beta.fill_(0.5)
        ref = model(IDS).logits
    fresh = apply_hyper_connections(tiny(seed=5), expansion_rate=2)
    fresh.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(fresh(IDS).logits, ref, rtol=0, atol=0)


def test_bf16_model_gets_bf16_hyper_connections_and_runs() -> None:
    model = apply_hyper_connections(tiny().to(torch.bfloat16), expansion_rate=2)
    assert all(p.dtype == torch.bfloat16 for hc in hyper_connections_of(model) for p in hc.parameters())
    with torch.no_grad():
        out = model(IDS).logits
    assert out.dtype == torch.bfloat16
    assert torch.isfinite(out.float()).all()


def test_unsupported_architecture_names_the_supported_ones() -> None:
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50)
    )
    with pytest.raises(
        ValueError, match=r"model_type in llama, mistral, .*qwen2, .*qwen3, .*got model_type 'gpt2'"
    ):
        apply_hyper_connections(gpt2)
    with pytest.raises(ValueError, match=r"no \.config"):
        apply_hyper_connections(nn.Linear(3, 3))


def test_double_application_is_refused() -> None:
    model = apply_hyper_connections(tiny(), expansion_rate=2)
    with pytest.raises(ValueError, match="already has hyper-connections"):
        apply_hyper_connections(model, expansion_rate=2)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"expansion_rate": 0}, ValueError, r"expansion_rate must be an integer in \[1, inf\), got 0"),
        ({"expansion_rate": "4"}, TypeError, "expansion_rate must be an integer"),
        ({"reduce": "max"}, ValueError, "reduce must be one of sum, mean"),
    ],
)
def test_bad_arguments(kwargs: dict, error: type, match: str) -> None:
    model = tiny()
    with pytest.raises(error, match=match):
        apply_hyper_connections(model, **kwargs)
    assert not hyper_connections_of(model)  # nothing was half-applied


def test_layer_with_extra_positional_arguments_is_refused() -> None:
    model = apply_hyper_connections(tiny(), expansion_rate=2)
    with pytest.raises(TypeError, match="positionally"):
        model.model.layers[0](torch.zeros(1, 3, 32), None)
