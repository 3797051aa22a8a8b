"""Tiny random-weight LLaVA models built from a config (no hub, no weights): tests and the CLI smoke path."""

from __future__ import annotations

from typing import Any

IMAGE_TOKEN = 9
"""Image placeholder id of the tiny config (the code reads it from the config)."""
VOCAB = 64
IMAGE_SIZE, PATCH = 16, 4  # 4 x 4 = 16 image tokens (CLS dropped by the "default" strategy)
N_IMAGE = (IMAGE_SIZE // PATCH) ** 2


def tiny_llava(seed: int = 0, layers: int = 3, dtype: Any = None) -> Any:
    """A ``LlavaForConditionalGeneration`` with CLIP 16x16 images (16 image tokens), a 3-layer Llama, vocab 64."""
    import torch
    import transformers

    torch.manual_seed(seed)
    vision = transformers.CLIPVisionConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=IMAGE_SIZE,
        patch_size=PATCH,
        num_channels=3,
    )
    text = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
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
