"""FID features for the reproduction: a small Fashion-MNIST classifier trained in the run, and the Fréchet
distance in its 64-d feature space."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["FeatureNet", "classifier_fid", "feature_net_accuracy", "feature_stats", "train_feature_net"]


class FeatureNet(torch.nn.Module):
    """MLP classifier ``H·W → 256 → 64 → 10``; :meth:`features` is the 64-d pre-activation of the second layer."""

    def __init__(self, image_size: int) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Flatten(),
            torch.nn.Linear(image_size * image_size, 256),
            torch.nn.ReLU(),
            torch.nn.Linear(256, 64),
        )
        self.head = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(64, 10))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def train_feature_net(
    images: torch.Tensor, labels: torch.Tensor, *, seed: int, epochs: int = 3, device: torch.device
) -> FeatureNet:
    """Train :class:`FeatureNet` with Adam (batch 256) for ``epochs`` epochs."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    net = FeatureNet(images.shape[-1]).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    for _ in range(epochs):
        perm = torch.randperm(images.shape[0], generator=g)
        for s in range(0, images.shape[0], 256):
            idx = perm[s : s + 256]
            loss = torch.nn.functional.cross_entropy(net(images[idx].to(device)), labels[idx].to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return net.eval()


@torch.no_grad()
def feature_net_accuracy(
    net: FeatureNet, images: torch.Tensor, labels: torch.Tensor, device: torch.device
) -> float:
    """Top-1 accuracy of the feature classifier on ``(images, labels)``."""
    preds = torch.cat(
        [net(images[s : s + 1000].to(device)).argmax(1).cpu() for s in range(0, len(images), 1000)]
    )
    return float((preds == labels).float().mean())


@torch.no_grad()
def feature_stats(
    net: FeatureNet, images: torch.Tensor, device: torch.device
) -> tuple[np.ndarray, np.ndarray]:
    """Mean ``(64,)`` and covariance ``(64, 64)`` (float64) of :meth:`FeatureNet.features` over ``images``."""
    feats = torch.cat(
        [net.features(images[s : s + 1000].to(device)).cpu() for s in range(0, len(images), 1000)]
    )
    f = feats.double().numpy()
    return f.mean(0), np.cov(f, rowvar=False)


def classifier_fid(
    net: FeatureNet, images: torch.Tensor, ref: tuple[np.ndarray, np.ndarray], device: torch.device
) -> float:
    """Fréchet distance (``iclr25_shared.metrics.frechet_distance``) between ``images`` and the reference feature
    statistics ``ref = (mean, cov)``, in :class:`FeatureNet`'s 64-d feature space (Heusel et al. 2017, Eq. 6, with
    this classifier in place of Inception)."""
    from iclr25_shared.metrics import frechet_distance

    mu, sigma = feature_stats(net, images, device)
    return frechet_distance(mu, sigma, ref[0], ref[1])
