"""The GCD data protocol: a labelled subset of the Old classes, and everything else unlabelled.

Vaze et al. (arXiv:2201.02609, Section 4.1): the classes are split into Old (labelled) and New; a fraction
(``prop_train_labels``, 0.5 in every GCD paper) of the Old-class training images is labelled; the unlabelled set is
the other Old-class images plus all New-class images. Methods are scored on the unlabelled set (transductive).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from iclr25_shared.checks import check_float, check_int, check_shape

__all__ = ["GCDSplit", "augment", "gcd_split", "load_images"]


@dataclass(frozen=True)
class GCDSplit:
    """A GCD split of ``n`` images whose classes are re-indexed so Old classes come first.

    ``labels[i]`` is in ``0..K-1``; ids ``0..K_old-1`` are the Old (known) classes in the order given, then the New
    classes in increasing order of their original id. ``original[k]`` is the original id of class ``k``.
    """

    labels: np.ndarray
    """``(n,)`` int64 re-indexed labels (ground truth for all images; used only where ``labelled`` for training)."""
    labelled: np.ndarray
    """``(n,)`` bool: the image's label is given to the method."""
    num_old: int
    num_classes: int
    original: tuple[int, ...]

    @property
    def unlabelled(self) -> np.ndarray:
        return ~self.labelled


def gcd_split(
    labels: object,
    known_classes: Sequence[int],
    labelled_fraction: float,
    *,
    num_classes: int | None = None,
    seed: int = 0,
) -> GCDSplit:
    """Split a labelled data set into the GCD protocol: ``labelled_fraction`` of each known class is labelled.

    Args:
        labels: ``(n,)`` non-negative integer class ids (the data set's ground truth).
        known_classes: the Old classes (original ids), distinct, each present in ``labels``.
        labelled_fraction: share of each Old class's images that is labelled, in ``(0, 1]`` (rounded down per
            class, at least one image).
        num_classes: total classes the model will have (default: the number present in ``labels``); must be ≥
            ``len(known_classes)`` and ≥ the classes present.
        seed: which images are labelled.

    Returns:
        :class:`GCDSplit`.

    Raises:
        ValueError: a known class is absent from ``labels``, repeated, or none is given; ``num_classes`` below the
            number of known classes or of classes present in ``labels``; ``labelled_fraction`` outside ``(0, 1]``.
        TypeError: a known class id is not an integer.
    """
    y = np.asarray(labels)
    check_shape("labels", y, ("n",))
    if y.size == 0 or not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
        raise ValueError("labels must be a non-empty 1-D array of non-negative integer class ids")
    frac = check_float("labelled_fraction", labelled_fraction, low=0.0, high=1.0, low_inclusive=False)
    known = [check_int("known_classes", int(c) if isinstance(c, np.integer) else c) for c in known_classes]
    present = sorted(np.unique(y).tolist())
    if not known:
        raise ValueError("known_classes must name at least one class")
    if len(set(known)) != len(known):
        raise ValueError(f"known_classes must be distinct, got {known}")
    absent = [c for c in known if c not in present]
    if absent:
        raise ValueError(f"known_classes {absent} are absent from the labels (present: {present})")
    k_total = len(present) if num_classes is None else check_int("num_classes", num_classes, low=1)
    if k_total < len(known) or k_total < len(present):
        raise ValueError(
            f"num_classes must be >= the {len(known)} known classes and the {len(present)} classes present, "
            f"got {k_total}"
        )
    new = [c for c in present if c not in known]
    order = known + new
    remap = np.full(int(y.max()) + 1, -1, np.int64)
    remap[order] = np.arange(len(order))
    rng = np.random.default_rng(seed)
    labelled = np.zeros(y.size, bool)
    for c in known:
        idx = np.flatnonzero(y == c)
        take = max(1, int(np.floor(frac * idx.size)))
        labelled[rng.choice(idx, size=take, replace=False)] = True
    return GCDSplit(
        labels=remap[y], labelled=labelled, num_old=len(known), num_classes=k_total, original=tuple(order)
    )


def load_images(
    name: str,
    *,
    root: str | Path | None = None,
    per_class: int | None = None,
    seed: int = 0,
    label: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Real images as ``(n, 1, H, W)`` float32 in [0, 1] and ``(n,)`` int64 labels.

    Args:
        name: ``"fashion-mnist"`` (Xiao et al. 2017, 60 000 train images 28×28, through
            :func:`iclr25_shared.data.fashion_mnist`: ``root`` only when given, else Debian's
            ``dataset-fashion-mnist`` or the user cache) or ``"digits"`` (scikit-learn's 1 797 8×8 digits).
        root: Fashion-MNIST folder with the training IDX ``.gz`` files (directly or under ``FashionMNIST/raw``);
            no other copy is read then.
        per_class: keep this many images per class (a seeded random subset); None = all.
        label: the option that named ``root`` (e.g. ``"--root"``), for error messages.

    Raises:
        ValueError: unknown name or ``per_class`` < 1.
        iclr25_shared.errors.InputError: ``root`` lacks the training files, or one is not a gzip-compressed IDX file
            of the training split's size (the file is named).
        iclr25_shared.DatasetUnavailable: no ``root``, and the data are not installed (the message names the
            install command).
    """
    from iclr25_shared import data

    if name == "fashion-mnist":
        x, y = data.fashion_mnist("train", root=root, label=label)
        x = x.astype(np.float32) / 255.0
    elif name == "digits":
        x, y = data.digits()
    else:
        raise ValueError(f"data must be one of fashion-mnist, digits; got {name!r}")
    if per_class is not None:
        check_int("per_class", per_class, low=1)
        rng = np.random.default_rng(seed)
        keep = np.concatenate([rng.permutation(np.flatnonzero(y == c))[:per_class] for c in np.unique(y)])
        keep.sort()
        x, y = x[keep], y[keep]
    return np.ascontiguousarray(x[:, None], np.float32), y.astype(np.int64)


def augment(images, *, shift: int, flip: bool, noise: float, generator):
    """A random view of each image: per-image random translation by up to ``shift`` pixels (zero padding), optional
    horizontal flip (p = 0.5), additive Gaussian noise of std ``noise``, clipped to [0, 1].

    Args:
        images: ``(N, C, H, W)`` float tensor in [0, 1].
        generator: ``torch.Generator`` for the randomness (the same generator gives the same views).

    Returns:
        ``(N, C, H, W)`` float tensor.
    """
    import torch
    import torch.nn.functional as F

    n, _, h, w = images.shape
    dev = images.device
    if shift > 0:
        pad = F.pad(images, (shift, shift, shift, shift))
        dy = torch.randint(0, 2 * shift + 1, (n,), generator=generator).to(dev)
        dx = torch.randint(0, 2 * shift + 1, (n,), generator=generator).to(dev)
        rows = (dy[:, None] + torch.arange(h, device=dev)[None, :])[:, None, :, None]
        cols = (dx[:, None] + torch.arange(w, device=dev)[None, :])[:, None, None, :]
        b = torch.arange(n, device=dev)[:, None, None, None]
        c = torch.arange(images.shape[1], device=dev)[None, :, None, None]
        images = pad[b, c, rows, cols]
    if flip:
        doit = (torch.rand(n, generator=generator) < 0.5).to(dev)
        images = torch.where(doit[:, None, None, None], images.flip(-1), images)
    if noise > 0:
        images = images + noise * torch.randn(images.shape, generator=generator).to(dev)
    return images.clamp(0.0, 1.0)
