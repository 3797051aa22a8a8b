"""``iclr25-fl-causal``: causal effects of time-varying treatment regimes on functional longitudinal data (Ying,
ICLR 2025, arXiv:2206.12525): g-computation, IPW and doubly robust estimators on refining time grids, with death
and censoring. Config dataclasses and ``main`` only; each command's work is in its own module (``_estimate.py``,
``_simulate_cmd.py``, ``_reproduce.py``, ``_bench.py``)."""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import ClassVar, Literal

from iclr25_shared import inputs
from iclr25_shared.checks import check_choice, check_float, check_int
from iclr25_shared.cli import CommonOptions, run
from iclr25_shared.errors import InputError

__all__ = [
    "COMMANDS",
    "DEFAULT",
    "PROG",
    "BenchConfig",
    "EstimateConfig",
    "ReproduceConfig",
    "SimulateConfig",
    "check_long_csv",
    "main",
]

PROG = "iclr25-fl-causal"
DEFAULT = "estimate"


def check_long_csv(path: Path, label: str = "--data") -> Path:
    """A non-empty UTF-8 CSV file with a header row of at least two column names and at least one data row.

    Which columns it must hold depends on --id, --time, --treatment, ... : the command checks them when it reads
    the file (:func:`iclr25_fl_causal._estimate.read_long_csv`), still before any model is fitted.

    Raises:
        InputError: missing, empty, a folder, not UTF-8 text, or no header / no data row (names ``label`` and the
            file).
    """
    p = inputs.check_file(path, label=label, expected="a long-format CSV file")
    where = f"{label}: {str(path)!r}"
    try:
        with p.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            first = next(reader, None)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"{where} is not a readable CSV file ({type(exc).__name__})") from None
    if not header or len([c for c in header if c.strip()]) < 2:
        raise InputError(f"{where} has no header row of column names; expected a long-format CSV file")
    if first is None:
        raise InputError(f"{where} has a header but no data rows")
    return p


@dataclass(frozen=True, kw_only=True)
class EstimateConfig(CommonOptions):
    """Estimate a regime's effect on long-format data, on each grid width (default: zEpid's HIV/ART cohort)."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {"data": inputs.custom(check_long_csv, kind="csv")}

    data: Path | None = None
    """Long-format CSV (one row per id and time). Default: zEpid's simulated HIV/ART cohort (needs zepid)."""
    regime: str = "always"
    """always | never | natural | threshold:VAR<CUT (also <=, >, >=) | random:P | incremental:DELTA."""
    estimator: str = "dr"
    """gcomp | ipw | dr."""
    grid: str = "9,5,3"
    """Comma-separated grid widths (each must divide the horizon), coarse to fine."""
    id: str = "id"
    """Subject id column."""
    time: str = "time"
    """Time column (the study starts at 0)."""
    treatment: str = "art"
    """Binary 0/1 treatment column."""
    covariates: str = "male,age0,cd40_100,dvl0,cd4_100,dvl"
    """Comma-separated confounder columns."""
    outcome: str = ""
    """Outcome column (its value at the horizon); empty: estimate the risk of death."""
    death: str = "dead"
    """0/1 death column (empty: none)."""
    censor: str = "drop"
    """0/1 censoring column (empty: none)."""
    horizon: float = 0.0
    """τ: rows after it are dropped (subjects alive past it count as followed to it). 0: 45 weeks for the
    default cohort, else the largest time in the data."""
    outcome_model: str = ""
    """Right-hand side of the outcome regressions (default: treatment + covariates)."""
    treatment_model: str = ""
    """Right-hand side of the treatment model (default: covariates, plus A_lag unless --absorbing)."""
    censoring_model: str = ""
    """Right-hand side of the censoring model (default: treatment + covariates)."""
    absorbing: bool = True
    """The treatment is absorbing (once 1, always 1): fit the treatment model before initiation only."""
    penalty: float = 1.0
    """Ridge penalty of the outcome regressions (0: plain maximum likelihood)."""
    se: str = "auto"
    """auto (bootstrap for gcomp/ipw, influence for dr) | bootstrap | influence | sandwich (ipw) | none."""
    n_boot: int = 100
    """Bootstrap replicates (>= 2)."""
    truncate: float = 0.0
    """Cap the weights at this quantile (e.g. 0.99); 0: no truncation."""
    min_followers: int = 1
    """Positivity along the path: the fewest subjects at risk at each grid time who followed the regime in every
    interval so far (>= 1)."""
    positivity: str = "raise"
    """raise | warn: what fewer than --min-followers regime followers does."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("estimator", self.estimator, ("gcomp", "ipw", "dr"))
        check_choice("se", self.se, ("auto", "bootstrap", "influence", "sandwich", "none"))
        check_int("n_boot", self.n_boot, low=2)
        check_int("min_followers", self.min_followers, low=1)
        check_choice("positivity", self.positivity, ("raise", "warn"))
        check_float("penalty", self.penalty, low=0.0)
        check_float("horizon", self.horizon, low=0.0)
        if self.truncate != 0:
            check_float(
                "truncate", self.truncate, low=0.5, high=1.0, low_inclusive=False, high_inclusive=False
            )
        self.widths()
        from iclr25_fl_causal._regimes import Regime

        Regime.parse(self.regime)

    def widths(self) -> list[float]:
        """The grid widths, coarse to fine (raises ValueError naming ``grid``)."""
        try:
            out = [float(s) for s in self.grid.split(",") if s.strip()]
        except ValueError:
            raise ValueError(
                f"grid must be comma-separated widths such as 1,2,4; got {self.grid!r}"
            ) from None
        if not out or any(not w > 0 or w == float("inf") for w in out):
            raise ValueError(
                f"grid must be comma-separated positive finite widths such as 1,2,4; got {self.grid!r}"
            )
        return out

    def covariate_list(self) -> list[str]:
        return [s.strip() for s in self.covariates.split(",") if s.strip()]


@dataclass(frozen=True, kw_only=True)
class SimulateConfig(CommonOptions):
    """Simulate long-format data with a closed-form truth; writes simulated.csv into --out and prints the truths."""

    n: int = 1000
    """Subjects (>= 1)."""
    n_fine: int = 40
    """Euler steps on [0, horizon] (>= 1)."""
    horizon: float = 1.0
    """τ (> 0)."""
    death: bool = False
    """Add a death hazard exp(-1 + 0.5 L)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("n", self.n, low=1)
        check_int("n_fine", self.n_fine, low=1)
        check_float("horizon", self.horizon, low=0.0, low_inclusive=False)


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """Simulation (bias/SE/coverage by grid and n, double robustness) and the HIV and BMT cohorts."""

    size: Literal["quick", "gpu"] = "quick"
    """quick: the defaults below; gpu: the options still at their quick defaults take GPU_SIZE (10x the Monte Carlo
    replicates, 2.5x the bootstrap). The package has no GPU path: on a GPU machine this runs on one CPU core
    (README "GPU" has the time estimate). Explicit options win."""
    reps: int = 40
    """Monte Carlo replicates per simulation cell (>= 2)."""
    n_boot: int = 20
    """Bootstrap replicates for g-computation SEs in the simulation (real data: 2.5x this)."""
    parts: str = "simulation,dr,hiv,gvhd"
    """Comma-separated parts to run: simulation, dr, hiv, gvhd."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("reps", self.reps, low=2)
        check_int("n_boot", self.n_boot, low=2)
        for p in self.part_list():
            check_choice("parts", p, ("simulation", "dr", "hiv", "gvhd"))
        check_choice("size", self.size, ("quick", "gpu"))

    def sized(self) -> ReproduceConfig:
        """This config with the ``--size`` preset applied to every option still at its quick default."""
        if self.size == "quick":
            return self
        defaults = {f.name: f.default for f in fields(self)}
        return replace(self, **{k: v for k, v in GPU_SIZE.items() if getattr(self, k) == defaults[k]})

    def part_list(self) -> list[str]:
        return [s.strip() for s in self.parts.split(",") if s.strip()]


GPU_SIZE = {"reps": 400, "n_boot": 50}
"""``reproduce --size gpu``: 400 Monte Carlo replicates per cell (10x quick: coverage to +-1 point instead of
+-3.5) and 50 bootstrap replicates (125 on the cohorts)."""


@dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions):
    """Time and peak memory vs n and grid size, and ours vs zEpid's ICE g-formula on the same data, in one run."""

    ns: str = "500,1000,2000,4000"
    """Comma-separated numbers of subjects."""
    intervals: str = "10,20,40"
    """Comma-separated numbers of grid intervals (must divide 40)."""
    repeats: int = 5
    """Interleaved timing rounds per cell (median and a bootstrap interval over rounds; >= 1)."""
    zepid: bool = True
    """Also time zEpid's IterativeCondGFormula against ours on the same data (skipped when zepid is missing)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("repeats", self.repeats, low=1)
        for name in ("ns", "intervals"):
            self.integers(name)
        for k in self.integers("intervals"):
            if 40 % k:
                raise ValueError(f"intervals must divide 40 (the simulation's fine steps); got {k}")

    def integers(self, name: str) -> list[int]:
        """``ns`` or ``intervals`` as positive integers (raises ValueError naming the option)."""
        text = getattr(self, name)
        try:
            vals = [int(s) for s in text.split(",") if s.strip()]
        except ValueError:
            raise ValueError(f"{name} must be comma-separated positive integers, got {text!r}") from None
        if not vals or min(vals) < 1:
            raise ValueError(f"{name} must be comma-separated positive integers, got {text!r}")
        return vals


COMMANDS = {
    "estimate": (EstimateConfig, "iclr25_fl_causal._estimate:estimate"),
    "simulate": (SimulateConfig, "iclr25_fl_causal._simulate_cmd:simulate_cmd"),
    "reproduce": (ReproduceConfig, "iclr25_fl_causal._reproduce:reproduce"),
    "bench": (BenchConfig, "iclr25_fl_causal._bench:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-fl-causal``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
