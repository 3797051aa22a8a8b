"""The shared Hugging Face integration contract (iclr25_shared.testing) on a representative set of the decoder
layouts the adapter supports (pre-norm Llama and Qwen3, OLMo's non-parametric LayerNorm, norm-after-branch OLMo2,
sandwich Gemma2, parallel Phi): casts to bf16/fp16/fp64 and device moves after the conversion, forward and backward,
and ``save_pretrained`` -> :func:`iclr25_hyper_connections.load_pretrained` restoring the model bit for bit. The
conversion has no ``remove()`` (it rewires the layers for good; documented in the README), so that test is skipped.
"""

from __future__ import annotations

import transformers

from iclr25_hyper_connections import apply_hyper_connections, load_pretrained
from iclr25_shared.testing import HFIntegrationContract

TINY = {
    "vocab_size": 64,
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "max_position_embeddings": 32,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
MODEL_TYPES = ("llama", "qwen3", "olmo", "olmo2", "gemma2", "phi")


def _tiny(model_type: str):
    extra = {"sliding_window": 4} if model_type == "gemma2" else {}
    config = transformers.AutoConfig.for_model(model_type, **TINY, **extra)
    config._attn_implementation = "eager"
    return transformers.AutoModelForCausalLM.from_config(config)


class TestHyperConnectionsKeepTheHFContract(HFIntegrationContract):
    roundtrip = "exact"
    removable = False  # a conversion: the layers are rewired for good (README, "Hugging Face decoders")

    def architectures(self):
        return {t: (lambda t=t: _tiny(t)) for t in MODEL_TYPES}

    def patch(self, model):
        return apply_hyper_connections(model, expansion_rate=4)

    def load_patched(self, path):
        return load_pretrained(path, attn_implementation="eager")
