"""``iclr25-vl-interp``: __ONE_LINE__. Config dataclasses and ``main`` only; the work is in ``_experiment.py``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iclr25_shared.checks import check_float, check_int
from iclr25_shared.cli import CommonOptions, run

__all__ = ["COMMANDS", "DEFAULT", "PROG", "BenchConfig", "LensConfig", "ReproduceConfig", "main"]

PROG = "iclr25-vl-interp"
DEFAULT = "lens"


@dataclass(frozen=True, kw_only=True)
class LensConfig(CommonOptions):
    """One sentence: what the verb does (first sentence is the --help summary).

    More detail: the default input (real, offline) and what is printed."""

    data: Path | None = None
    """Input file (default: the embedded real example)."""
    k: int = 10
    """Number of ... (>= 1)."""
    lr: float = 1e-3
    """Learning rate (> 0)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("k", self.k, low=1)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """The paper's headline claim at small scale on real data, method beside its baseline."""

    size: Literal["quick", "full"] = "quick"
    """quick (minutes on 2 CPU cores) or full."""
    seeds: int = 3
    """Independent seeds (>= 3 for an interval)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("seeds", self.seeds, low=1)


@dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions):
    """Speed and memory of the method as ratios against the baseline, measured in one run."""

    repeats: int = 5
    """Timed repetitions per point (the median is reported)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("repeats", self.repeats, low=1)


COMMANDS = {
    "lens": (LensConfig, "iclr25_vl_interp._experiment:lens"),
    "reproduce": (ReproduceConfig, "iclr25_vl_interp._experiment:reproduce"),
    "bench": (BenchConfig, "iclr25_vl_interp._experiment:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-vl-interp``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
