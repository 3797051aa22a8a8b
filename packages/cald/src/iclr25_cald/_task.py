"""Real-data tasks for the CLI: a SmolLM2 layer prefix as teacher, Wikipedia topic classification / LM batches.

Everything here is plumbing around well-kept libraries (``transformers`` models and tokenizers,
``iclr25_shared.models.load_causal_lm`` for the packaged SmolLM2-135M, ``iclr25_shared.data.wiki_summaries`` for the
Wikipedia lead summaries); the method itself is in ``_convert`` / ``_distill``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from iclr25_shared.checks import check_choice, check_int

__all__ = ["TokenizedTask", "batch_at", "batches", "prefix_model", "tokenize"]


def prefix_model(lm: Any, layers: int, *, task: str = "classify", num_labels: int = 2, seed: int = 0) -> Any:
    """The first ``layers`` decoder layers of a Llama-family causal LM as a new model (embeddings, final norm kept).

    ``task="classify"`` gives a ``LlamaForSequenceClassification`` (last real token pooled; the score head is new,
    initialised from ``seed``); ``task="lm"`` a ``LlamaForCausalLM`` with the LM head kept.

    Raises:
        ValueError: ``layers`` outside ``[1, num_hidden_layers]``, unknown ``task``.
    """
    import transformers

    check_choice("task", task, ("classify", "lm"))
    total = int(lm.config.num_hidden_layers)
    check_int("layers", layers, low=1, high=total)
    config = copy.deepcopy(lm.config)
    config.num_hidden_layers = layers
    config.use_cache = False
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = list(config.layer_types)[:layers]
    config.__dict__.pop("quantization_config", None)
    torch.manual_seed(seed)
    if task == "classify":
        check_int("num_labels", num_labels, low=2)
        config.num_labels = num_labels
        config.pad_token_id = config.pad_token_id if config.pad_token_id is not None else config.eos_token_id
        model = transformers.LlamaForSequenceClassification(config)
    else:
        model = transformers.LlamaForCausalLM(config)
    state = {
        k: v
        for k, v in lm.state_dict().items()
        if not k.startswith("model.layers.") or int(k.split(".")[2]) < layers
    }
    if task == "classify":
        state.pop("lm_head.weight", None)
    result = model.load_state_dict(state, strict=False)
    allowed = {"score.weight"} if task == "classify" else {"lm_head.weight"}
    if set(result.missing_keys) - allowed or result.unexpected_keys:
        raise ValueError(
            f"prefix weights do not fit: missing {result.missing_keys}, unexpected {result.unexpected_keys}"
        )
    if task == "lm" and config.tie_word_embeddings:
        model.tie_weights()
    return model.to(next(lm.parameters()).device).eval()


@dataclass
class TokenizedTask:
    """Tokenised texts: ``input_ids``/``attention_mask`` ``(n, seq)`` int64 (right-padded), ``labels`` ``(n,)``."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor


def tokenize(tokenizer: Any, texts: list[str], labels: np.ndarray | None, seq_len: int) -> TokenizedTask:
    """Right-pad / truncate ``texts`` to ``seq_len`` tokens."""
    check_int("seq_len", seq_len, low=2)
    tokenizer.padding_side = "right"
    enc = tokenizer(texts, padding="max_length", truncation=True, max_length=seq_len, return_tensors="pt")
    lab = (
        torch.as_tensor(labels, dtype=torch.long)
        if labels is not None
        else torch.zeros(len(texts), dtype=torch.long)
    )
    return TokenizedTask(enc["input_ids"], enc["attention_mask"], lab)


def batches(data: TokenizedTask, batch_size: int, *, task: str, seed: int, epochs: int = 1000):
    """Shuffled batches (dicts for the HF forward) for ``task`` ``classify`` (labels = classes) or ``lm``."""
    check_int("batch_size", batch_size, low=1)
    rng = np.random.default_rng(seed)
    n = data.input_ids.shape[0]
    for _ in range(epochs):
        order = rng.permutation(n)
        for i in range(0, n - batch_size + 1, batch_size):
            idx = torch.as_tensor(order[i : i + batch_size])
            yield batch_at(data, idx, task=task)


def batch_at(data: TokenizedTask, idx: torch.Tensor, *, task: str) -> dict[str, torch.Tensor]:
    """The batch of rows ``idx``."""
    ids, mask = data.input_ids[idx], data.attention_mask[idx]
    if task == "classify":
        labels = data.labels[idx]
    else:
        labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}
