"""LANTERN and a caller's Hugging Face model (issue 38's HF integration contract, the part that applies here).

LANTERN never patches, converts or hooks a Hugging Face model: :class:`HFDecoder` only calls ``model(...)`` under
``torch.no_grad()`` with its own ``DynamicCache``, and :func:`layer_prefix_drafter` builds a *new* model from a copy
of the first layers' weights. So :class:`iclr25_shared.testing.HFIntegrationContract` (casts, removal and
save/load of a patch) has nothing to test; what the contract asks of every package that is handed a model is that
the model is unchanged afterwards, which these tests prove: after greedy and sampled speculative and target-only
decoding the caller's model has bit-identical parameters and buffers (values, dtype, device), the same
``requires_grad`` flags, training modes, hooks and no gradients, and the drafter shares no storage with it.
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from iclr25_lantern import (  # noqa: E402
    HFDecoder,
    LogitsProcessor,
    Relaxation,
    autoregressive_generate,
    latent_proximity,
    layer_prefix_drafter,
    speculative_generate,
)

VOCAB = 48


def _tiny(arch: str):
    common = dict(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)  # fmt: skip
    torch.manual_seed(0)
    if arch == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common))


def _state(model):
    """Everything about the model a run could change, copied."""
    return {
        "tensors": {n: t.detach().clone() for n, t in [*model.named_parameters(), *model.named_buffers()]},
        "requires_grad": {n: p.requires_grad for n, p in model.named_parameters()},
        "grads": {n: p.grad for n, p in model.named_parameters() if p.grad is not None},
        "training": {n: m.training for n, m in model.named_modules()},
        "hooks": {
            n: (len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks))
            for n, m in model.named_modules()
        },
    }


def _assert_unchanged(model, before, what):
    after = _state(model)
    assert after["tensors"].keys() == before["tensors"].keys(), what
    for name, old in before["tensors"].items():
        new = after["tensors"][name]
        assert new.dtype == old.dtype and new.device == old.device, f"{what}: {name} moved or was cast"
        assert torch.equal(new, old), f"{what}: {name} changed"
    assert after["requires_grad"] == before["requires_grad"], f"{what}: requires_grad"
    assert after["training"] == before["training"], f"{what}: training modes"
    assert after["hooks"] == before["hooks"], f"{what}: hooks left on the model"
    assert not after["grads"], f"{what}: gradients written"


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decoding_leaves_the_callers_model_unchanged(arch, dtype):
    model = _tiny(arch).to(dtype)
    for i, p in enumerate(model.parameters()):
        p.requires_grad_(i % 3 != 0)  # the caller's own freezing pattern
    model.train()
    model.model.layers[0].eval()  # and a submodule in eval mode
    before = _state(model)
    drafter = layer_prefix_drafter(model, 1)
    _assert_unchanged(model, before, "layer_prefix_drafter")
    shared = {p.data_ptr() for p in model.parameters()} & {p.data_ptr() for p in drafter.parameters()}
    assert not shared, "the drafter shares weights with the caller's model"

    relax = Relaxation(neighbours=latent_proximity(torch.randn(VOCAB, 4), 3), delta=0.2)
    prefix = torch.tensor([[1, 5, 7]])
    for temperature in (0.0, 1.0):
        proc = LogitsProcessor(temperature=temperature)
        gen = torch.Generator().manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # greedy LANTERN warns (jadohu/LANTERN#6)
            speculative_generate(HFDecoder(model), HFDecoder(drafter), prefix, max_new_tokens=6, gamma=3,
                                 relax=relax, processor=proc, generator=gen)  # fmt: skip
        autoregressive_generate(HFDecoder(model), prefix, max_new_tokens=4, processor=proc, generator=gen)
        _assert_unchanged(model, before, f"decoding at temperature {temperature}")
