"""A tiny diffusers text-to-video pipeline with random weights, built offline (no Hub), for smoke tests.

``TextToVideoSDPipeline`` (ModelScope's architecture) with a 2-block 3-D UNet, a 1-level VAE and a 2-layer CLIP
text encoder whose tokenizer has a byte-level vocabulary written to a temporary folder. Its videos are noise: it
exists to run the generation path end to end, not to make videos.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["tiny_text_to_video_pipeline"]


def _byte_vocab(folder: Path) -> None:
    # GPT-2 / CLIP byte-to-unicode table: every byte maps to a printable character.
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    chars = [chr(c) for c in cs]
    vocab = {}
    for c in chars:
        vocab[c] = len(vocab)
    for c in chars:
        vocab[c + "</w>"] = len(vocab)
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")


def tiny_text_to_video_pipeline(seed: int = 0, device: Any = "cpu") -> Any:
    """Build the pipeline (random weights from ``seed``); 16x16-latent videos, a few seconds per call on a CPU."""
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, TextToVideoSDPipeline, UNet3DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    torch.manual_seed(seed)
    unet = UNet3DConditionModel(
        block_out_channels=(8, 16),
        layers_per_block=1,
        sample_size=16,
        in_channels=4,
        out_channels=4,
        down_block_types=("CrossAttnDownBlock3D", "DownBlock3D"),
        up_block_types=("UpBlock3D", "CrossAttnUpBlock3D"),
        cross_attention_dim=16,
        attention_head_dim=4,
        norm_num_groups=4,
    )
    vae = AutoencoderKL(
        block_out_channels=(8,),
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",),
        up_block_types=("UpDecoderBlock2D",),
        latent_channels=4,
        norm_num_groups=4,
        sample_size=16,
    )
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=514,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            max_position_embeddings=77,
            bos_token_id=512,
            eos_token_id=513,
            pad_token_id=513,
        )
    )
    with tempfile.TemporaryDirectory(prefix="iclr25-tiny-clip-tok-") as tmp:
        _byte_vocab(Path(tmp))
        tokenizer = CLIPTokenizer(
            str(Path(tmp) / "vocab.json"), str(Path(tmp) / "merges.txt"), model_max_length=77
        )
    scheduler = DDIMScheduler(
        beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False
    )
    pipe = TextToVideoSDPipeline(
        vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet, scheduler=scheduler
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe.to(device)
