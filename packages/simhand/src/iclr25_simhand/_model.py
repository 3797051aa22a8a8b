"""Encoders: a small convolutional backbone for tiny images, the contrastive projection head and the 3-D head.

Any torch module that maps ``(n, 3, h, w)`` images to ``(n, features)`` can be the backbone (a timm model with
``num_classes=0``, torchvision's ResNet-50 without its ``fc``, ...); the paper uses ResNet-50 with a
2048 -> 512 -> 128 projection head (arXiv:2502.15251, Section 4.1) and a 3-D keypoint regressor for fine-tuning.
"""

from __future__ import annotations

import torch
from torch import nn

from iclr25_shared.checks import check_int

__all__ = ["HandEncoder", "SmallConvNet"]


class SmallConvNet(nn.Module):
    """Four stride-2 conv blocks (conv 3x3, BatchNorm, ReLU) and global average pooling.

    Input ``(n, 3, h, w)`` float images; output ``(n, width * 8)`` features.
    """

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        width = check_int("width", width, low=1)
        layers: list[nn.Module] = []
        c_in = 3
        for c_out in (width, width * 2, width * 4, width * 8):
            layers += [
                nn.Conv2d(c_in, c_out, 3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(c_out),
                nn.ReLU(),
            ]
            c_in = c_out
        self.body = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.out_features = c_in

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class HandEncoder(nn.Module):
    """Backbone + projection head (pre-training) + 3-D keypoint head (fine-tuning).

    Args:
        backbone: module ``(n, 3, h, w) -> (n, features)``; default :class:`SmallConvNet`.
        features: the backbone's output size (read from ``backbone.out_features`` when omitted).
        projection_dim: size of the contrastive projection (even: PeCLR reads it as 2-D points); paper: 128.
        joints: number of keypoints regressed by :meth:`pose` (21).
    """

    def __init__(
        self,
        backbone: nn.Module | None = None,
        *,
        features: int | None = None,
        projection_dim: int = 128,
        joints: int = 21,
    ) -> None:
        super().__init__()
        self.backbone = SmallConvNet() if backbone is None else backbone
        feat = features if features is not None else getattr(self.backbone, "out_features", None)
        if feat is None:
            raise ValueError("features must be given when the backbone has no out_features attribute")
        feat = check_int("features", feat, low=1)
        projection_dim = check_int("projection_dim", projection_dim, low=2)
        if projection_dim % 2:
            raise ValueError(f"projection_dim must be even (read as 2-D points), got {projection_dim}")
        self.joints = check_int("joints", joints, low=1)
        self.projection = nn.Sequential(nn.Linear(feat, feat), nn.ReLU(), nn.Linear(feat, projection_dim))
        self.head = nn.Linear(feat, self.joints * 3)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """``(n, 3, h, w)`` -> ``(n, projection_dim)`` projections for the contrastive loss."""
        return self.projection(self.backbone(images))

    def pose(self, images: torch.Tensor) -> torch.Tensor:
        """``(n, 3, h, w)`` -> ``(n, joints, 3)`` root-relative 3-D keypoints (the training target's units)."""
        return self.head(self.backbone(images)).reshape(images.shape[0], self.joints, 3)
