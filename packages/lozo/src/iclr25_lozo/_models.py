"""Models for the CLI: the packaged SmolLM2 (via iclr25_shared.models), any local/Hub causal LM, or ``tiny``.

``tiny`` is a 2-layer randomly initialised Llama with a word-level tokenizer built from the Wikipedia summaries:
it exercises exactly the code paths of a real Hugging Face Llama in a second, for tests and smoke runs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from iclr25_shared.models import CausalLM, load_causal_lm

__all__ = ["TINY", "load_model", "tiny_llama"]

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
