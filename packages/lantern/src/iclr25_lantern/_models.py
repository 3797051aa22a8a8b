"""Small models for the visual-AR setting, trained here on Fashion-MNIST: a VQ-VAE tokenizer, a class-conditional
token transformer with a KV cache (target and drafter), and a CNN whose features/softmax measure image quality.

These are standard components (van den Oord et al. 2017, arXiv:1711.00937 for the VQ-VAE; a GPT-style decoder),
not part of LANTERN; they exist because no pretrained visual AR model or VQ tokenizer loads offline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["VQVAE", "FeatureCNN", "TokenTransformer", "TransformerConfig"]


class VQVAE(nn.Module):
    """28×28 greyscale images ↔ a 7×7 grid of codebook indices (raster order → 49 tokens).

    Args:
        codebook_size: V, the number of codes.
        code_dim: embedding dimension of a code.
    """

    def __init__(self, codebook_size: int = 256, code_dim: int = 16) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(1, 16, 4, 2, 1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 4, 2, 1),
            nn.ReLU(),
            nn.Conv2d(32, code_dim, 1),
        )
        self.decoder = nn.Sequential(
            nn.Conv2d(code_dim, 32, 3, 1, 1),
            nn.ReLU(),
            nn.ConvTranspose2d(32, 16, 4, 2, 1),
            nn.ReLU(),
            nn.ConvTranspose2d(16, 1, 4, 2, 1),
        )
        self.codebook = nn.Parameter(torch.randn(codebook_size, code_dim) * 0.1)

    @property
    def codebook_size(self) -> int:
        return int(self.codebook.shape[0])

    def quantize(self, z: torch.Tensor) -> torch.Tensor:
        """``(B, D, 7, 7)`` encoder outputs → ``(B, 49)`` int64 code indices (nearest code, Euclidean)."""
        flat = z.permute(0, 2, 3, 1).reshape(-1, z.shape[1])
        d = (flat * flat).sum(1, keepdim=True) - 2 * flat @ self.codebook.T + (self.codebook**2).sum(1)
        return d.argmin(1).view(z.shape[0], -1)

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """``(B, 28, 28)`` floats in [0, 1] → ``(B, 49)`` int64 tokens."""
        return self.quantize(self.encoder(images.unsqueeze(1)))

    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        """``(B, 49)`` int64 tokens → ``(B, 28, 28)`` floats in [0, 1]."""
        e = self.codebook[tokens].view(tokens.shape[0], 7, 7, -1).permute(0, 3, 1, 2)
        return torch.sigmoid(self.decoder(e)).squeeze(1)

    def loss(self, images: torch.Tensor, beta: float = 0.25) -> tuple[torch.Tensor, torch.Tensor]:
        """VQ-VAE loss (reconstruction BCE + codebook + β·commitment) and the code indices used."""
        z = self.encoder(images.unsqueeze(1))
        idx = self.quantize(z)
        e = self.codebook[idx].view(z.shape[0], 7, 7, -1).permute(0, 3, 1, 2)
        zq = z + (e - z).detach()  # straight-through
        recon = self.decoder(zq).squeeze(1)
        rec = F.binary_cross_entropy_with_logits(recon, images, reduction="mean")
        vq = F.mse_loss(e, z.detach()) + beta * F.mse_loss(z, e.detach())
        return rec + vq, idx


@dataclass(frozen=True)
class TransformerConfig:
    """Size of a :class:`TokenTransformer`: ``vocab_size`` output tokens, ``num_classes`` (+1 null) condition tokens."""

    vocab_size: int = 256
    num_classes: int = 10
    seq_len: int = 49
    dim: int = 128
    layers: int = 4
    heads: int = 4


class TokenTransformer(nn.Module):
    """Class-conditional decoder-only transformer over image tokens with a KV cache (a :class:`CachedDecoder`).

    Input ids ``0 .. V-1`` are image tokens; ``V + c`` is the condition token of class ``c``, ``V + num_classes``
    the null (unconditional) token used for classifier-free guidance. Output logits cover the ``V`` image tokens.
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size + cfg.num_classes + 1, cfg.dim)
        self.pos = nn.Embedding(cfg.seq_len + 1, cfg.dim)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                {
                    "ln1": nn.LayerNorm(cfg.dim),
                    "qkv": nn.Linear(cfg.dim, 3 * cfg.dim),
                    "proj": nn.Linear(cfg.dim, cfg.dim),
                    "ln2": nn.LayerNorm(cfg.dim),
                    "mlp": nn.Sequential(
                        nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim)
                    ),
                }
            )
            for _ in range(cfg.layers)
        )
        self.ln = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size)
        self._k: list[torch.Tensor] = []
        self._v: list[torch.Tensor] = []

    def null_token(self) -> int:
        return self.cfg.vocab_size + self.cfg.num_classes

    def class_token(self, c: int) -> int:
        return self.cfg.vocab_size + int(c)

    # -- CachedDecoder ---------------------------------------------------------------------------------------
    @property
    def cache_len(self) -> int:
        return int(self._k[0].shape[2]) if self._k else 0

    def reset(self) -> None:
        self._k, self._v = [], []

    def crop(self, length: int) -> None:
        self._k = [k[:, :, :length] for k in self._k]
        self._v = [v[:, :, :length] for v in self._v]

    @torch.no_grad()
    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """``(R, t)`` new ids → ``(R, t, V)`` logits, extending the cache."""
        return self._run(ids, cache=True)

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        """Training forward over full sequences ``(B, T)`` → ``(B, T, V)`` (no cache, differentiable)."""
        return self._run(ids, cache=False)

    def _run(self, ids: torch.Tensor, *, cache: bool) -> torch.Tensor:
        cfg = self.cfg
        past = self.cache_len if cache else 0
        r, t = ids.shape
        h = self.embed(ids) + self.pos(torch.arange(past, past + t, device=ids.device))
        hd = cfg.dim // cfg.heads
        mask = None
        if cache and past > 0:
            mask = torch.ones(t, past + t, dtype=torch.bool, device=ids.device).tril(past)
        for i, blk in enumerate(self.blocks):
            q, k, v = blk["qkv"](blk["ln1"](h)).view(r, t, 3, cfg.heads, hd).permute(2, 0, 3, 1, 4)
            if cache:
                if i < len(self._k):
                    k = torch.cat([self._k[i], k], dim=2)
                    v = torch.cat([self._v[i], v], dim=2)
                    self._k[i], self._v[i] = k, v
                else:
                    self._k.append(k)
                    self._v.append(v)
            if mask is not None:
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            else:
                a = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
            h = h + blk["proj"](a.transpose(1, 2).reshape(r, t, cfg.dim))
            h = h + blk["mlp"](blk["ln2"](h))
        return self.head(self.ln(h))


class FeatureCNN(nn.Module):
    """A small Fashion-MNIST classifier; :meth:`features` (64-d) serve the Fréchet distance, the softmax the
    classifier-confidence quality proxy."""

    def __init__(self, feature_dim: int = 64) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 16, 3, 1, 1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, 1, 1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(32 * 7 * 7, feature_dim),
            nn.ReLU(),
        )
        self.out = nn.Linear(feature_dim, 10)

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """``(B, 28, 28)`` in [0, 1] → ``(B, feature_dim)``."""
        return self.body(images.unsqueeze(1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return self.out(self.features(images))


def cosine_lr(step: int, total: int, base: float, warmup: int = 50) -> float:
    """Linear warm-up then cosine decay to 10 % of ``base``."""
    if step < warmup:
        return base * (step + 1) / warmup
    frac = (step - warmup) / max(1, total - warmup)
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))
