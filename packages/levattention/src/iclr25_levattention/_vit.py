"""A small pre-norm Vision Transformer whose attention is :class:`LevAttention` (used by ``reproduce`` part B)."""

from __future__ import annotations

import torch
from torch import nn

from iclr25_levattention._layer import LevAttention, Normalization, Score

__all__ = ["ViT"]


class _Block(nn.Module):
    def __init__(self, dim: int, num_heads: int, mlp_ratio: float, attention: LevAttention) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = attention
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """ViT classifier (patch embedding, CLS token, learned positions, pre-norm blocks) with LevAttention.

    Args:
        image_size: side of the square input (pixels). patch_size: side of a patch; must divide ``image_size``.
        in_channels: input channels. num_classes: output logits.
        dim, depth, num_heads, mlp_ratio: width, blocks, heads, MLP expansion.
        top_k: keys per head kept by :class:`LevAttention` (``None``: full softmax attention).
        score, normalization, p: passed to every :class:`LevAttention`.

    Input ``(B, in_channels, image_size, image_size)`` float; output ``(B, num_classes)`` logits. Tokens per image:
    ``(image_size / patch_size)² + 1``.

    Raises:
        ValueError: ``patch_size`` does not divide ``image_size``, or a bad attention argument.
    """

    def __init__(
        self,
        *,
        image_size: int = 28,
        patch_size: int = 4,
        in_channels: int = 1,
        num_classes: int = 10,
        dim: int = 64,
        depth: int = 4,
        num_heads: int = 4,
        mlp_ratio: float = 2.0,
        top_k: int | None = None,
        score: Score = "leverage",
        normalization: Normalization = "softmax",
        p: int = 2,
    ) -> None:
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"patch_size ({patch_size}) must divide image_size ({image_size})")
        self.patch = nn.Conv2d(in_channels, dim, kernel_size=patch_size, stride=patch_size)
        num_tokens = (image_size // patch_size) ** 2 + 1
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, num_tokens, dim) * 0.02)
        self.blocks = nn.ModuleList(
            _Block(
                dim,
                num_heads,
                mlp_ratio,
                LevAttention(dim, num_heads, top_k=top_k, score=score, normalization=normalization, p=p),
            )
            for _ in range(depth)
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        self.num_tokens = num_tokens

    def set_top_k(self, top_k: int | None) -> None:
        """Set ``top_k`` of every attention layer (``None``: full attention), e.g. to apply selection at inference."""
        for block in self.blocks:
            block.attn.top_k = top_k

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x[:, 0]))
