"""``iclr25-simhand``: SiMHand contrastive pre-training on rendered hands, 3-D fine-tuning and evaluation.

Config dataclasses and ``main`` only; each command runs in its own module (``_pretrain.py``, ``_finetune.py``,
``_evaluate.py``, ``_reproduce.py``, ``_bench.py``) on the loops in ``_training.py``.
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
    "FinetuneConfig",
    "PretrainConfig",
    "ReproduceConfig",
    "main",
]

PROG = "iclr25-simhand"
DEFAULT = "pretrain"


def _check_checkpoint(path: Path, label: str) -> Any:
    from iclr25_simhand._checkpoint import check_checkpoint  # torch loads only when a checkpoint is checked

    return check_checkpoint(path, label)


_CHECKPOINT = inputs.custom(_check_checkpoint, kind="torch_checkpoint")
"""encoder.pt / model.pt: a safe torch checkpoint holding a SiMHand encoder (checked before any rendering)."""


@dataclass(frozen=True, kw_only=True)
class PretrainConfig(CommonOptions):
    """Contrastive pre-training (SimCLR, PeCLR, SiM or SiM-W) on a pool of rendered hands over real photos.

    Writes encoder.pt (state_dict + meta) to --out; prints the first and final loss."""

    method: Literal["simclr", "peclr", "sim", "simw"] = "simw"
    """simclr: two views of one image; peclr: + equivariant latent; sim: mined similar hand from another image as
    positive; simw: sim + adaptive pose-distance weights."""
    pool: int = 512
    """Rendered images in the pre-training pool (>= 2)."""
    size: int = 32
    """Image side in pixels (>= 8)."""
    steps: int = 50
    """Optimiser steps (>= 1)."""
    batch_size: int = 64
    """Pairs per step (>= 2, <= pool)."""
    lr: float = 1e-3
    """Adam learning rate (> 0)."""
    temperature: float = 0.5
    """NT-Xent temperature tau (> 0); the paper uses 0.5."""
    weights: Literal["linear", "nonlinear"] = "linear"
    """Adaptive weight form for simw."""
    width: int = 16
    """Channels of the first conv block of the small backbone (>= 1)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("pool", self.pool, low=2)
        check_int("size", self.size, low=8)
        check_int("steps", self.steps, low=1)
        check_int("batch_size", self.batch_size, low=2, high=self.pool)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)
        check_float("temperature", self.temperature, low=0.0, low_inclusive=False)
        check_int("width", self.width, low=1)


@dataclass(frozen=True, kw_only=True)
class FinetuneConfig(CommonOptions):
    """Fine-tune an encoder (or train from scratch) to regress 3-D joints; report MPJPE / PA-MPJPE (mm).

    Writes model.pt to --out."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {"encoder": _CHECKPOINT}

    encoder: Path | None = None
    """encoder.pt from `pretrain` (default: random initialisation)."""
    train: int = 512
    """Rendered labelled images (>= 2)."""
    test: int = 256
    """Rendered test images, on held-out photos (>= 1)."""
    fraction: float = 1.0
    """Fraction of the labelled images used (0, 1]."""
    size: int = 32
    """Image side in pixels (>= 8); must match the size the encoder records (else exit 2)."""
    steps: int = 100
    """Optimiser steps (>= 1)."""
    batch_size: int = 64
    """Images per step (>= 1)."""
    lr: float = 1e-3
    """Adam learning rate (> 0)."""
    width: int = 16
    """Backbone width when no encoder is given (>= 1)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("train", self.train, low=2)
        check_int("test", self.test, low=1)
        check_probability("fraction", self.fraction, open_low=True)
        check_int("size", self.size, low=8)
        check_int("steps", self.steps, low=1)
        check_int("batch_size", self.batch_size, low=1)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)
        check_int("width", self.width, low=1)


@dataclass(frozen=True, kw_only=True)
class EvaluateConfig(CommonOptions):
    """MPJPE / PA-MPJPE (mm) of a fine-tuned model.pt on rendered test hands over held-out photos."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {"checkpoint": _CHECKPOINT}

    checkpoint: Path = Path("model.pt")
    """model.pt written by `finetune` (default: model.pt in the current folder)."""
    test: int = 256
    """Rendered test images (>= 1)."""
    size: int = 32
    """Image side in pixels (>= 8); must match the size the checkpoint records (else exit 2)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("test", self.test, low=1)
        check_int("size", self.size, low=8)


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """scratch vs SimCLR vs PeCLR vs SiM vs SiM-W: pre-train at equal budget, fine-tune at label fractions, 3-D error."""

    size: Literal["tiny", "quick", "full", "gpu"] = "quick"
    """tiny (seconds, a smoke test), quick (minutes on 2 CPU cores), full, or gpu (about a minute or two on one
    H200 with --device cuda, an estimate)."""
    seeds: int = 5
    """Independent seeds (>= 2 for an interval; the README's declared run uses 5)."""
    fractions: tuple[float, ...] = (0.1, 1.0)
    """Label fractions for fine-tuning, each in (0, 1]."""
    size_px: int = 32
    """Image side in pixels (>= 8)."""
    lr: float = 1e-3
    """Pre-training learning rate (> 0)."""
    finetune_lr: float = 1e-3
    """Fine-tuning learning rate (> 0)."""
    temperature: float = 0.5
    """NT-Xent temperature (> 0)."""
    width: int = 16
    """Backbone width (>= 1)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("seeds", self.seeds, low=1)
        if not self.fractions:
            raise ValueError("fractions must list at least one label fraction in (0, 1]")
        for f in self.fractions:
            check_probability("fractions", f, open_low=True)
        check_int("size_px", self.size_px, low=8)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)
        check_float("finetune_lr", self.finetune_lr, low=0.0, low_inclusive=False)
        check_float("temperature", self.temperature, low=0.0, low_inclusive=False)
        check_int("width", self.width, low=1)


@dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions):
    """Weighted loss vs plain NT-Xent, PCA+kNN mining vs brute force and a SiM-W vs SimCLR pre-training step, as
    time ratios from interleaved rounds in one run; under torchrun also the bytes communicated per step."""

    repeats: int = 5
    """Timed rounds (each runs every arm once, order rotated; medians and bootstrap intervals of the ratios)."""
    train_batch: int = 64
    """Global batch of the timed pre-training steps (split across ranks under torchrun)."""
    batch_sizes: tuple[int, ...] = (64, 256, 1024)
    """Contrastive batch sizes N (each >= 2)."""
    pool_sizes: tuple[int, ...] = (1000, 5000)
    """Pool sizes for the mining (each >= 2)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("repeats", self.repeats, low=1)
        check_int("train_batch", self.train_batch, low=2)
        for b in self.batch_sizes:
            check_int("batch_sizes", b, low=2)
        for p in self.pool_sizes:
            check_int("pool_sizes", p, low=2)


COMMANDS = {
    "pretrain": (PretrainConfig, "iclr25_simhand._pretrain:pretrain"),
    "finetune": (FinetuneConfig, "iclr25_simhand._finetune:finetune"),
    "evaluate": (EvaluateConfig, "iclr25_simhand._evaluate:evaluate"),
    "reproduce": (ReproduceConfig, "iclr25_simhand._reproduce:reproduce"),
    "bench": (BenchConfig, "iclr25_simhand._bench:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-simhand``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
