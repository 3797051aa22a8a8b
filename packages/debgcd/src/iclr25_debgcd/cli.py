"""``iclr25-debgcd``: generalized category discovery with DebGCD (ICLR 2025) beside SimGCD, on real images.

Config dataclasses and ``main`` only; the work is in ``_discover.py``, ``_reproduce.py`` and ``_bench.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from iclr25_shared import inputs
from iclr25_shared.checks import check_choice, check_float, check_int, check_probability
from iclr25_shared.cli import CommonOptions, run

__all__ = ["COMMANDS", "DEFAULT", "PROG", "BenchConfig", "DiscoverConfig", "ReproduceConfig", "main"]

PROG = "iclr25-debgcd"
DEFAULT = "discover"
_NAMED = ("fashion-mnist", "digits")


def _check_data(value: Any, label: str) -> None:
    from iclr25_debgcd._experiment import check_data

    check_data(value, label)


_DATA = inputs.Input("npz", False, _check_data, may_be_name=True)
"""--data: a data set's name, or an .npz path read safely (images, labels) before the command starts."""
_ROOT = inputs.fashion_mnist_folder(splits=("train",))
"""--root: a folder holding Fashion-MNIST's training IDX .gz files (directly or under FashionMNIST/raw)."""


@dataclass(frozen=True, kw_only=True)
class DiscoverConfig(CommonOptions):
    """Label every unlabelled image of a GCD split (known classes partly labelled, new classes unlabelled).

    Default: Fashion-MNIST (300 training images per class), classes 0-4 known with half their images labelled,
    5-9 new; trains DebGCD (or SimGCD with --method simgcd) and prints All / Old / New accuracy on the unlabelled
    images (one Hungarian assignment) and the detector's known-vs-new AUROC. With --out, saves the predicted class
    of every unlabelled image (predictions.npy, ids in the data's original labels for Old classes)."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {"data": _DATA, "root": _ROOT}

    data: str = "fashion-mnist"
    """fashion-mnist, digits, or a .npz file with `images` (n, H, W) or (n, C, H, W) in [0, 1] or uint8, and
    integer `labels` (n,)."""
    root: Path | None = None
    """Folder with the Fashion-MNIST IDX .gz files (used instead of Debian's dataset-fashion-mnist and the cache;
    it must hold them)."""
    known_classes: tuple[int, ...] = (0, 1, 2, 3, 4)
    """Original ids of the Old (known) classes; each must occur in the labels."""
    labelled_fraction: float = 0.5
    """Share of each known class's images that is labelled, in (0, 1]."""
    num_classes: int | None = None
    """Classes the model has (default: the classes present); >= the known ones."""
    per_class: int | None = 300
    """Images kept per class (seeded subset); None/0 = all."""
    method: Literal["debgcd", "simgcd"] = "debgcd"
    backbone: Literal["mlp", "convnet", "efficientnet-lite0"] = "mlp"
    """mlp/convnet trained from scratch, or the packaged ImageNet EfficientNet-Lite0 with its last stage tuned."""
    epochs: int = 20
    batch_size: int = 128
    lr: float = 0.1
    threshold: float = 0.9
    """Pseudo-label confidence threshold of the debiased classifier (official CIFAR-10 script: 0.9)."""
    adl_weight: float = 2.0
    """Weight of the debiased classifier's loss (official CIFAR-10 script: 2.0)."""
    sdl_weight: float = 0.01
    """Weight of the detector's loss (official CIFAR-10 script: 0.01)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.data not in _NAMED and not str(self.data).endswith(".npz"):
            raise ValueError(f"data must be one of {', '.join(_NAMED)} or a .npz file; got {self.data!r}")
        if not self.known_classes:
            raise ValueError("known_classes must name at least one class")
        for c in self.known_classes:
            check_int("known_classes", c, low=0, high=9 if self.data in _NAMED else None)
        if len(set(self.known_classes)) != len(self.known_classes):
            raise ValueError(f"known_classes must be distinct, got {list(self.known_classes)}")
        check_float("labelled_fraction", self.labelled_fraction, low=0.0, high=1.0, low_inclusive=False)
        if self.num_classes is not None:
            check_int("num_classes", self.num_classes, low=1)
            if self.num_classes < len(self.known_classes):
                raise ValueError(
                    f"num_classes must be >= the {len(self.known_classes)} known classes, got {self.num_classes}"
                )
        if self.per_class is not None:
            check_int("per_class", self.per_class, low=0)
        check_choice("method", self.method, ("debgcd", "simgcd"))
        check_choice("backbone", self.backbone, ("mlp", "convnet", "efficientnet-lite0"))
        check_int("epochs", self.epochs, low=1)
        check_int("batch_size", self.batch_size, low=2)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)
        check_probability("threshold", self.threshold)
        check_float("adl_weight", self.adl_weight, low=0.0)
        check_float("sdl_weight", self.sdl_weight, low=0.0)


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """k-means, SimGCD and DebGCD on GCD splits of Fashion-MNIST and scikit-learn digits, paired over seeds.

    Equal budget: SimGCD and DebGCD get the same backbone, epochs, batches and augmentations (same seed).
    Primary comparison: DebGCD − SimGCD All accuracy on the first data set, paired over seeds (95% t-interval and
    the verdict against the paper's +2.9 points); the other differences are secondary (Holm) or exploratory.
    Also reports Old / New, the detector's AUROC, diagnostics, and accuracy-per-epoch curves (curves.png)."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {"root": _ROOT}

    size: Literal["tiny", "quick", "full", "gpu"] = "quick"
    """tiny (seconds, a smoke test), quick (minutes on 2 CPU cores), full, or gpu (about a minute on one H200 with
    --device cuda --seeds 5, an estimate)."""
    seeds: int = 5
    """Independent seeds (>= 2 for an interval)."""
    datasets: tuple[Literal["fashion-mnist", "digits"], ...] = ("fashion-mnist", "digits")
    root: Path | None = None
    """Folder with the Fashion-MNIST IDX .gz files."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("size", self.size, ("tiny", "quick", "full", "gpu"))
        check_int("seeds", self.seeds, low=1)
        if not self.datasets:
            raise ValueError("datasets must name at least one of fashion-mnist, digits")
        for d in self.datasets:
            check_choice("datasets", d, _NAMED)


@dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions):
    """Training-step time and memory of DebGCD as ratios against SimGCD, same backbone and batch, one run."""

    repeats: int = 10
    """Timed rounds (each runs one step of every backbone x method, order rotated), after 2 warm-up steps."""
    batch_size: int = 128
    backbones: tuple[Literal["mlp", "convnet", "efficientnet-lite0"], ...] = ("mlp", "convnet")
    image_size: int = 28
    """Side of the (random, 1-channel) input images."""
    hidden: int = 512
    """Width of the heads' MLPs (the paper uses 2048)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("repeats", self.repeats, low=1)
        check_int("batch_size", self.batch_size, low=2)
        check_int("image_size", self.image_size, low=8)
        check_int("hidden", self.hidden, low=1)
        if not self.backbones:
            raise ValueError("backbones must name at least one of mlp, convnet, efficientnet-lite0")
        for b in self.backbones:
            check_choice("backbones", b, ("mlp", "convnet", "efficientnet-lite0"))


COMMANDS = {
    "discover": (DiscoverConfig, "iclr25_debgcd._discover:discover"),
    "reproduce": (ReproduceConfig, "iclr25_debgcd._reproduce:reproduce"),
    "bench": (BenchConfig, "iclr25_debgcd._bench:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-debgcd``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
