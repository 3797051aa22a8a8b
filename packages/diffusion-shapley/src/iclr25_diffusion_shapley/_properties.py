"""Global properties ``F`` of a generative model's samples, and the non-Shapley baselines of the paper's evaluation.

A property is a function ``images (num_samples, C, H, W) float32 in [-1, 1] -> float``. The paper (arXiv:2407.03153,
Section 4) uses image quality (FID / IS / precision), demographic diversity (entropy of predicted attributes) and
aesthetic score; here: the share of one class and the entropy of the class histogram under a classifier, a Fréchet
distance to the data, and a pixel diversity score.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from iclr25_shared.checks import check_finite, check_int, check_shape

__all__ = [
    "PixelClassifier",
    "class_entropy",
    "class_share",
    "downsample",
    "fashion_mnist_contributors",
    "frechet_pixel_distance",
    "pixel_diversity",
    "pixel_similarity_attribution",
    "size_only_attribution",
]


def _flat01(images: np.ndarray) -> np.ndarray:
    """``(N, C, H, W)`` in ``[-1, 1]`` → ``(N, C·H·W)`` float64 in ``[0, 1]``."""
    check_shape("images", images, ("N", "C", "H", "W"))
    check_finite("images", images)
    return (np.asarray(images, dtype=np.float64).reshape(len(images), -1) + 1.0) / 2.0


def downsample(images: np.ndarray, factor: int) -> np.ndarray:
    """Average-pool ``(N, H, W)`` images by ``factor`` (e.g. 28×28 → 14×14 with ``factor=2``).

    Raises:
        ValueError: ``H`` or ``W`` not divisible by ``factor``.
    """
    factor = check_int("factor", factor, low=1)
    n, h, w = check_shape("images", images, ("N", "H", "W")).values()
    if h % factor or w % factor:
        raise ValueError(f"image size {h}x{w} is not divisible by factor={factor}")
    return (
        np.asarray(images, np.float32).reshape(n, h // factor, factor, w // factor, factor).mean(axis=(2, 4))
    )


def fashion_mnist_contributors(
    groups: tuple[tuple[int, ...], ...] = ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9)),
    *,
    per_class: int = 300,
    factor: int = 2,
    root: str | None = None,
    seed: int = 0,
    label: str | None = None,
):
    """Fashion-MNIST training images as contributors = groups of classes (``iclr25_shared.data.fashion_mnist``).

    Args:
        groups: disjoint tuples of class ids in ``0..9``; at least 2.
        per_class: images drawn (without replacement, seeded) per class, ``1..6000``.
        factor: downsampling factor (2 gives 14×14).
        root: a folder with the IDX files (directly or under ``FashionMNIST/raw``); only that folder is read then
            (default: Debian's package / the user cache).
        label: the option that named ``root`` (e.g. ``"--data-root"``), for error messages.

    Returns:
        :class:`~iclr25_diffusion_shapley._diffusion.ContributorData` with images ``(N, 1, H, W)`` in ``[-1, 1]``.

    Raises:
        ValueError: fewer than 2 groups, a class outside ``0..9``, overlapping or empty groups.
        InputError: ``root`` lacks the training files, or they are not the gzip-compressed IDX files of
            Fashion-MNIST's training split (the file is named).
        DatasetUnavailable: no ``root``, and the data are not available offline and cannot be fetched.
    """
    from iclr25_diffusion_shapley._diffusion import make_contributors
    from iclr25_shared.data import FASHION_MNIST_CLASSES, fashion_mnist

    per_class = check_int("per_class", per_class, low=1, high=6000)
    if len(groups) < 2:
        raise ValueError(f"contributors must number at least 2, got {len(groups)}")
    for g in groups:
        for c in g:
            check_int("groups", c, low=0, high=9)
    images, labels = fashion_mnist("train", root=root, label=label)
    rng = np.random.default_rng(seed)
    idx = np.concatenate(
        [rng.choice(np.flatnonzero(labels == c), size=per_class, replace=False) for g in groups for c in g]
    )
    x = downsample(images[idx].astype(np.float32) / 255.0, factor) * 2.0 - 1.0
    names = tuple("+".join(FASHION_MNIST_CLASSES[c] for c in g) for g in groups)
    return make_contributors(x[:, None], labels[idx], groups, names)


@dataclass
class PixelClassifier:
    """Multinomial logistic regression on pixels (scikit-learn), the judge of class-based properties.

    ``fit(images (N, C, H, W) in [-1, 1], labels (N,))``; ``predict(images) -> (N,)`` int64.
    """

    max_iter: int = 300
    c: float = 1.0

    def fit(self, images: np.ndarray, labels: np.ndarray) -> PixelClassifier:
        from sklearn.linear_model import LogisticRegression

        x = _flat01(images)
        self.model_ = LogisticRegression(max_iter=self.max_iter, C=self.c).fit(x, np.asarray(labels))
        self.classes_ = self.model_.classes_
        return self

    def predict(self, images: np.ndarray) -> np.ndarray:
        return np.asarray(self.model_.predict(_flat01(images)), dtype=np.int64)

    def accuracy(self, images: np.ndarray, labels: np.ndarray) -> float:
        return float(np.mean(self.predict(images) == np.asarray(labels)))


def class_share(classifier: Any, target: int) -> Callable[[np.ndarray], float]:
    """Property: the fraction of generated images that ``classifier.predict`` assigns to class ``target``."""
    target = check_int("target", target, low=0)

    def share(images: np.ndarray) -> float:
        return float(np.mean(classifier.predict(images) == target))

    share.__name__ = f"class_share_{target}"
    return share


def class_entropy(classifier: Any, num_classes: int) -> Callable[[np.ndarray], float]:
    """Property (a diversity score): the entropy, in nats, of the histogram of predicted classes of the generated
    images (``log(num_classes)`` when every class is equally frequent, 0 when all images get one class)."""
    num_classes = check_int("num_classes", num_classes, low=2)

    def entropy(images: np.ndarray) -> float:
        counts = np.bincount(classifier.predict(images), minlength=num_classes).astype(np.float64)
        p = counts[counts > 0] / counts.sum()
        return float(-(p * np.log(p)).sum())

    entropy.__name__ = "class_entropy"
    return entropy


def frechet_pixel_distance(reference: np.ndarray, *, dims: int = 16) -> Callable[[np.ndarray], float]:
    """Property: Fréchet distance (the FID formula, ``iclr25_shared.metrics.frechet_distance``) between Gaussians
    fitted to generated and ``reference`` images in the ``dims``-dimensional PCA space of ``reference`` pixels.
    A pixel-space stand-in for FID (no Inception network offline); lower is better.

    Raises:
        ValueError: ``dims`` outside ``[1, min(N, D)]``; NaN/inf pixels.
    """
    from iclr25_shared.metrics import frechet_distance

    ref = _flat01(reference)
    dims = check_int("dims", dims, low=1, high=min(ref.shape))
    mean = ref.mean(axis=0)
    _, _, vt = np.linalg.svd(ref - mean, full_matrices=False)
    basis = vt[:dims].T
    z_ref = (ref - mean) @ basis
    mu_r, cov_r = z_ref.mean(axis=0), np.cov(z_ref, rowvar=False)

    def fd(images: np.ndarray) -> float:
        z = (_flat01(images) - mean) @ basis
        if len(z) < 2:
            raise ValueError("the Fréchet distance needs at least 2 generated images")
        return frechet_distance(
            z.mean(axis=0), np.atleast_2d(np.cov(z, rowvar=False)), mu_r, np.atleast_2d(cov_r)
        )

    fd.__name__ = "frechet_pixel_distance"
    return fd


def pixel_diversity(images: np.ndarray) -> float:
    """Property: mean pairwise Euclidean distance between generated images (pixels in ``[0, 1]``).

    Raises:
        ValueError: fewer than 2 images; NaN/inf.
    """
    x = _flat01(images)
    if len(x) < 2:
        raise ValueError("pixel_diversity needs at least 2 images")
    sq = (x**2).sum(axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2 * x @ x.T, 0.0)
    n = len(x)
    return float(np.sqrt(d2).sum() / (n * (n - 1)))


def pixel_similarity_attribution(
    generated: np.ndarray,
    images: np.ndarray,
    owners: np.ndarray,
    num_contributors: int,
    *,
    reduce: str = "mean",
) -> np.ndarray:
    """Pixel-similarity baseline: contributor ``i``'s score is the average over generated images of the cosine
    similarity to ``i``'s training images, aggregated per generated image by ``mean`` or ``max`` over them
    (the similarity baseline of arXiv:2407.03153 Section 4, aggregated to contributors).

    Args:
        generated: ``(G, C, H, W)`` images of the model trained on everyone. images: ``(N, C, H, W)`` training
            images; owners: ``(N,)`` their contributors in ``0..n-1``.
        reduce: "mean" or "max".

    Returns:
        ``(n,)`` float64.

    Raises:
        ValueError: bad shapes or ``reduce``; a contributor with no images.
    """
    if reduce not in ("mean", "max"):
        raise ValueError(f"reduce must be one of mean, max; got {reduce!r}")
    g = _flat01(generated)
    x = _flat01(images)
    owners = np.asarray(owners)
    g = g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    sim = g @ x.T
    out = np.zeros(num_contributors)
    for i in range(num_contributors):
        cols = owners == i
        if not cols.any():
            raise ValueError(f"contributor {i} has no data")
        s = sim[:, cols]
        out[i] = float((s.mean(axis=1) if reduce == "mean" else s.max(axis=1)).mean())
    return out


def size_only_attribution(num_contributors: int) -> np.ndarray:
    """The subset-size-only baseline: every contributor scores 1, so ``sum_{i ∈ S} phi_i = |S|``."""
    return np.ones(check_int("num_contributors", num_contributors, low=2))
