"""The shared Hugging Face integration contract (issue 38) on every architecture cald converts.

Tiny random models built with transformers' own classes (hidden 16, 2 layers): a Llama causal LM and a Llama
sequence classifier, BERT and RoBERTa (masked-LM heads and a BERT decoder). A conversion replaces modules for good
(``removable = False``); ``save_pretrained`` -> :func:`iclr25_cald.load_converted` restores it exactly.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from iclr25_cald import MambaConfig, convert, load_converted  # noqa: E402
from iclr25_shared.testing import HFIntegrationContract  # noqa: E402

SIZES = dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2)


def llama_lm():
    return transformers.LlamaForCausalLM(
        transformers.LlamaConfig(**SIZES, num_key_value_heads=1, max_position_embeddings=32)
    )


def llama_classifier():
    return transformers.LlamaForSequenceClassification(
        transformers.LlamaConfig(
            **SIZES, num_key_value_heads=1, max_position_embeddings=32, num_labels=3, pad_token_id=0
        )
    )


def bert_mlm():
    return transformers.BertForMaskedLM(transformers.BertConfig(**SIZES, max_position_embeddings=32))


def bert_decoder():
    return transformers.BertLMHeadModel(
        transformers.BertConfig(**SIZES, max_position_embeddings=32, is_decoder=True)
    )


def roberta_mlm():
    return transformers.RobertaForMaskedLM(
        transformers.RobertaConfig(**SIZES, max_position_embeddings=34, pad_token_id=1)
    )


class _Cald(HFIntegrationContract):
    removable = False  # a conversion replaces the attention modules for good (README: no remove())
    roundtrip = "exact"
    mixer = ""

    def patch(self, model):
        return convert(
            model, self.mixer, k=4, max_seq_len=8, mamba=MambaConfig(d_state=4), seed=0, inplace=True
        )

    def load_patched(self, path):
        return load_converted(path)  # the architecture from config.cald_conversion, weights strictly


class TestMamba(_Cald):
    """Mamba: causal in a causal LM (Llama, BERT decoder), a forward + backward pair in a BERT/RoBERTa encoder."""

    mixer = "mamba"

    def architectures(self):
        return {"llama": llama_lm, "bert": bert_mlm, "bert-decoder": bert_decoder, "roberta": roberta_mlm}


class TestLinformer(_Cald):
    """Linformer (bidirectional): where nothing predicts the next token (a classifier, a masked LM)."""

    mixer = "linformer"

    def architectures(self):
        return {"llama-classifier": llama_classifier, "bert": bert_mlm, "roberta": roberta_mlm}
