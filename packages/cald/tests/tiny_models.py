"""Tiny random HF models for the fast tier (no download, no packaged weights)."""

import torch
import transformers


def tiny_llama(n_layers=2, *, dtype=torch.float64, seq=16, labels=0, seed=0):
    """A random Llama (4 heads, 2 K/V heads: grouped-query like SmolLM2)."""
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=40,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=n_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=seq,
        pad_token_id=0,
        use_cache=False,
        num_labels=max(labels, 2),
    )
    cls = transformers.LlamaForSequenceClassification if labels else transformers.LlamaForCausalLM
    return cls(cfg).to(dtype).eval()


def tiny_bert(n_layers=2, *, dtype=torch.float64, seq=16, seed=0, roberta=False):
    torch.manual_seed(seed)
    kw = dict(
        vocab_size=40,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=n_layers,
        num_attention_heads=4,
        max_position_embeddings=seq + (2 if roberta else 0),
        attention_probs_dropout_prob=0.1,
        hidden_dropout_prob=0.1,
    )
    if roberta:
        return transformers.RobertaModel(transformers.RobertaConfig(pad_token_id=1, **kw)).to(dtype).eval()
    return transformers.BertModel(transformers.BertConfig(**kw)).to(dtype).eval()
