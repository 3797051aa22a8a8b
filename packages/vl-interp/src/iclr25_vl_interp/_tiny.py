"""Tiny random-weight LLaVA models built from a config (no hub, no weights): tests and the CLI smoke path."""

from __future__ import annotations

from typing import Any

IMAGE_TOKEN = 9
"""Image placeholder id of the tiny config (the code reads it from the config)."""
VOCAB = 64
IMAGE_SIZE, PATCH = 16, 4  # 4 x 4 = 16 image tokens (CLS dropped by the "default" strategy)
N_IMAGE = (IMAGE_SIZE // PATCH) ** 2


def tiny_llava(
    seed: int = 0,
    layers: int = 3,
    dtype: Any = None,
    *,
    hidden: int = 32,
    vocab: int = VOCAB,
    image_size: int = IMAGE_SIZE,
) -> Any:
    """A random-weight ``LlavaForConditionalGeneration``: CLIP (patch 4, ``(image_size/4)^2`` image tokens) and a
    Llama with ``layers`` layers, width ``hidden``, vocabulary ``vocab`` (defaults: 16 image tokens, 3 layers, 32, 64)."""
    import torch
    import transformers

    torch.manual_seed(seed)
    vision = transformers.CLIPVisionConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=image_size,
        patch_size=PATCH,
        num_channels=3,
    )
    text = transformers.LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    )
    config = transformers.LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_id=IMAGE_TOKEN,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
    )
    model = transformers.LlavaForConditionalGeneration(config).eval()
    if dtype is not None:
        model = model.to(dtype)
    return model


def tiny_inputs(prefix: int = 3, suffix: int = 4, seed: int = 0, dtype: Any = None) -> dict[str, Any]:
    """BOS, ``prefix`` random text tokens, the 16 image placeholders, ``suffix`` text tokens; random pixels."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.cat(
        [
            torch.tensor([1]),
            torch.randint(10, VOCAB, (prefix,), generator=g),
            torch.full((N_IMAGE,), IMAGE_TOKEN),
            torch.randint(10, VOCAB, (suffix,), generator=g),
        ]
    ).unsqueeze(0)
    pixels = torch.randn(1, 3, IMAGE_SIZE, IMAGE_SIZE, generator=g)
    if dtype is not None:
        pixels = pixels.to(dtype)
    return {"input_ids": ids, "pixel_values": pixels, "attention_mask": torch.ones_like(ids)}


TINY_WORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "cat",
    "dog",
    "bird",
    "car",
    "tree",
    "house",
    "person",
    "boat",
    "plane",
    "a",
    "an",
    "the",
    "this",
    "is",
    "of",
    "and",
    "with",
    "in",
    "on",
    "image",
    "picture",
    "photo",
    "there",
    "are",
    "two",
    "some",
    "near",
    "next",
    "to",
    "left",
    "right",
    "top",
    "bottom",
    "red",
    "blue",
    "green",
    "small",
    "large",
    "shows",
]


def tiny_tokenizer() -> Any:
    """A word-level ``PreTrainedTokenizerFast`` over the 64-id tiny vocabulary (ids 0-3 special, 9 = ``<image>``).

    Words not listed tokenise to ``[UNK]``, so the unknown-word error path can be exercised without a hub.
    """
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, "<pad>": 3, "<image>": IMAGE_TOKEN}
    free = [i for i in range(VOCAB) if i not in vocab.values()]
    for word, idx in zip(TINY_WORDS, free, strict=False):
        vocab[word] = idx
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<image>", "<s>", "</s>", "<pad>"])
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )


def tiny_prompt(tokenizer: Any, prompt: str, seed: int = 0) -> dict[str, Any]:
    """``<s> <image>*16 prompt`` as model inputs with random pixels (the processor's job for a real model)."""
    import torch

    text = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([[1, *([IMAGE_TOKEN] * N_IMAGE), *text]])
    g = torch.Generator().manual_seed(seed)
    pixels = torch.randn(1, 3, IMAGE_SIZE, IMAGE_SIZE, generator=g)
    return {"input_ids": ids, "pixel_values": pixels, "attention_mask": torch.ones_like(ids)}
