"""``iclr25-__DIST__``: __ONE_LINE__. Config dataclasses and ``main`` only; the work is in one module per command."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from iclr25_shared import inputs
from iclr25_shared.checks import check_float, check_int
from iclr25_shared.cli import CommonOptions, run

__all__ = ["COMMANDS", "DEFAULT", "PROG", "BenchConfig", "ReproduceConfig", "__VERB_CLASS__Config", "main"]

PROG = "iclr25-__DIST__"
DEFAULT = "__VERB__"


@dataclass(frozen=True, kw_only=True)
class __VERB_CLASS__Config(CommonOptions):
    """One sentence: what the verb does (first sentence is the --help summary).

    More detail: the default input (real, offline) and what is printed."""

    # Every path option is checked by the core before the command is imported (docs/package-contract.md): a bad
    # file exits 2 naming it, before any model loads. Folders the command writes go in OUTPUTS; anything else
    # typed as a path goes in NOT_INPUTS with the reason.
    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {"data": inputs.npz(keys=("x",))}

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
    "__VERB__": (__VERB_CLASS__Config, "iclr25___SLUG__.___VERB__:__VERB__"),
    "reproduce": (ReproduceConfig, "iclr25___SLUG__._reproduce:reproduce"),
    "bench": (BenchConfig, "iclr25___SLUG__._bench:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-__DIST__``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
