"""Models for the CLI: the packaged SmolLM2 (via iclr25_shared.models), any local/Hub causal LM, or ``tiny``.

``tiny`` is a 2-layer randomly initialised Llama with a word-level tokenizer built from the Wikipedia summaries:
it exercises exactly the code paths of a real Hugging Face Llama in a second, for tests and smoke runs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from iclr25_shared.models import CausalLM, load_causal_lm

__all__ = ["TINY", "bench_model_and_batch", "load_model", "tiny_llama"]

TINY = "tiny"


def _word_level_tokenizer(texts: list[str], extra_words: list[str], vocab_size: int) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    counts = Counter(w for t in texts for w in t.split())
    specials = ["<unk>", "<pad>", "</s>"]
    words = [w.strip() for w in extra_words]
    words += [w for w, _ in counts.most_common(vocab_size) if w not in words]
    vocab = {w: i for i, w in enumerate(specials + words[: vocab_size - len(specials)])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    from tokenizers import decoders

    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="</s>"
    )


def tiny_llama(
    texts: list[str], extra_words: list[str], *, seed: int = 0, vocab_size: int = 2048
) -> CausalLM:
    """A 2-layer, 64-wide random Llama with a word-level tokenizer over ``texts`` (``extra_words`` always in vocab)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = _word_level_tokenizer(texts, extra_words, vocab_size)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return CausalLM(model.eval(), tokenizer, "tiny")


def load_model(
    name: str, *, texts: list[str], label_words: list[str], device: Any, dtype: str, seed: int
) -> CausalLM:
    """``tiny`` → :func:`tiny_llama`; anything else → :func:`iclr25_shared.models.load_causal_lm`."""
    if name == TINY:
        lm = tiny_llama(texts, label_words, seed=seed)
        dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
        lm.model.to(device=device, dtype=dtypes[dtype])
        return lm
    return load_causal_lm(name, device=device, dtype=dtype)


def bench_model_and_batch(
    model: str, *, device: torch.device, dtype: str, batch_size: int, seq_len: int
) -> tuple[torch.nn.Module, torch.Tensor]:
    """The model and the fixed random batch that ``bench`` measures every method on.

    Args:
        model: as ``load_model``; ``"tiny"`` builds its word-level tokenizer from 500 Wikipedia summaries.
        device, dtype: where and in which precision the weights live.
        batch_size, seq_len: shape of the batch of token ids (int64, on the CPU; drawn with seed 0, so every
            process and every method sees the same tokens).

    Returns:
        ``(model, ids)`` with ``ids`` of shape (batch_size, seq_len).
    """
    from iclr25_lozo._task import WIKI_LABEL_WORDS
    from iclr25_shared.data import wiki_summaries

    texts = wiki_summaries().texts[:500] if model == "tiny" else []
    lm = load_model(
        model, texts=texts, label_words=list(WIKI_LABEL_WORDS.values()), device=device, dtype=dtype, seed=0
    )
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, lm.model.config.vocab_size, (batch_size, seq_len), generator=gen)
    return lm.model, ids
