"""``iclr25-prdp``: train through iterative PDE solvers with progressively refined iteration counts (PRDP, ICLR 2025).

run: one experiment; reproduce: converged K vs PRDP vs coarse K; bench: step time and memory.
Config dataclasses and ``main`` only; the work is in ``_run.py``, ``_reproduce.py`` and ``_bench.py``.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Literal

import tyro

from iclr25_shared.checks import check_choice, check_float, check_int
from iclr25_shared.cli import CommonOptions, run

__all__ = ["COMMANDS", "DEFAULT", "PROG", "BenchConfig", "ReproduceConfig", "RunConfig", "main"]

PROG = "iclr25-prdp"
DEFAULT = "run"

Experiment = Literal["poisson-inverse", "heat-emulator", "heat2d-emulator", "navier-stokes"]
Method = Literal["jacobi", "gauss_seidel", "conjugate_gradient", "steepest_descent"]
Diff = Literal["implicit", "unrolled"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig(CommonOptions):
    """Train one experiment with PRDP (default) or with a fixed solver iteration count (--iterations)."""

    experiment: Annotated[Experiment, tyro.conf.Positional] = "poisson-inverse"
    """poisson-inverse (1-parameter inverse problem), heat-emulator (1-D), heat2d-emulator (2-D, 30x30),
    navier-stokes (neural-hybrid corrector for 2-D Kolmogorov flow; the solver is the pressure Poisson solve)."""
    iterations: int | None = None
    """Fixed solver iterations K per solve (a baseline); omit to let the PRDP controller choose K."""
    epochs: int | None = None
    """Epochs (gradient steps for poisson-inverse); default: the experiment's (180 / 50 / 60 / 30)."""
    grid: int = 32
    """navier-stokes: cells per axis of the coarse grid (the reference runs on twice as many)."""
    diff: Diff = "implicit"
    """Differentiate the solver implicitly (adjoint solve with A^T, same K) or by unrolling the iterations."""
    method: Method | None = None
    """Iterative linear solver (default: jacobi; conjugate_gradient for navier-stokes)."""
    initial_iterations: int | None = None
    """PRDP: starting K (default: the experiment's)."""
    step: int | None = None
    """PRDP: K increment per refinement."""
    max_iterations: int | None = None
    """PRDP: cap on K."""
    plateau_threshold: float | None = None
    """PRDP: smoothed improvement ratio above which the metric has plateaued, in (0, 1]."""
    stop_threshold: float | None = None
    """PRDP: refine only if the metric fell below this fraction of its value at the last refinement, in (0, 1]."""
    ema_window: int | None = None
    """PRDP: EMA span of the metric (1 = no smoothing)."""
    plateau_window: int | None = None
    """PRDP: window W of the plateau test."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.iterations is not None:
            check_int("iterations", self.iterations, low=0)
        if self.epochs is not None:
            check_int("epochs", self.epochs, low=1)
        check_int("grid", self.grid, low=4)
        if self.experiment == "navier-stokes" and self.method is not None:
            check_choice("method", self.method, ("jacobi", "conjugate_gradient"))
        for name in ("plateau_threshold", "stop_threshold"):
            value = getattr(self, name)
            if value is not None:
                check_float(name, value, low=0.0, high=1.0, low_inclusive=False)
        for name, low in (("initial_iterations", 0), ("step", 1), ("ema_window", 1), ("plateau_window", 1)):
            value = getattr(self, name)
            if value is not None:
                check_int(name, value, low=low)
        if self.max_iterations is not None:
            check_int("max_iterations", self.max_iterations, low=self.initial_iterations or 0)
        if self.method in ("conjugate_gradient", "steepest_descent") and self.experiment == "poisson-inverse":
            raise ValueError(
                f"method {self.method} needs a positive definite operator; the Poisson matrix is negative definite "
                "(use jacobi or gauss_seidel)"
            )


SIZES = {"quick": (5, 32), "gpu": (5, 48)}
"""``--size`` presets of ``reproduce``: (seeds, Navier-Stokes grid)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """Converged fixed K vs PRDP per seed, cost at equal accuracy; paired comparisons (PRDP / converged - 1) with the
    declared primary (Navier-Stokes wall time) first and its verdict; coarse K on the first seed."""

    experiments: tuple[Experiment, ...] = (
        "poisson-inverse",
        "heat-emulator",
        "heat2d-emulator",
        "navier-stokes",
    )
    """Experiments to run."""
    size: Literal["quick", "gpu"] = "quick"
    """quick: the CPU size (5 seeds, Navier-Stokes on 32x32); gpu: for one GPU, never run (5 seeds, Navier-Stokes
    on 48x48 with K_eps = 675 for Jacobi: about 5x the quick size's solver work; estimate in the README). --seeds
    and --grid override either preset."""
    epochs: int | None = None
    """Override every experiment's epoch count (default: 180 / 50 / 60 / 30)."""
    seeds: int | None = None
    """Seeds per experiment (network initialisation and batch order; poisson-inverse is deterministic); default:
    the size's (quick 5, gpu 5)."""
    grid: int | None = None
    """navier-stokes: cells per axis of the coarse grid (the reference runs on twice as many); default: the
    size's (quick 32, gpu 48)."""
    ns_method: Literal["jacobi", "conjugate_gradient"] = "jacobi"
    """navier-stokes: pressure solver (jacobi: K_eps = 300, the solves dominate a training epoch;
    conjugate_gradient: K_eps = 40, they do not)."""
    diff: Diff = "implicit"
    """Differentiation mode of the solver."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.experiments:
            raise ValueError("experiments must name at least one experiment")
        if self.epochs is not None:
            check_int("epochs", self.epochs, low=1)
        if self.seeds is not None:
            check_int("seeds", self.seeds, low=1)
        if self.grid is not None:
            check_int("grid", self.grid, low=4)

    def resolved(self) -> tuple[int, int]:
        """``(seeds, grid)``: the given values, else the size preset's."""
        seeds, grid = SIZES[self.size]
        return (self.seeds or seeds, self.grid or grid)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions):
    """Seconds per training step and XLA temporary memory at each K, unrolled vs implicit differentiation."""

    experiment: Literal["heat-emulator", "heat2d-emulator"] = "heat2d-emulator"
    """Emulator whose training step is timed (batch of 25, MLP + Jacobi solve + backward pass)."""
    iterations: tuple[int, ...] = (1, 10, 30, 120)
    """Solver iteration counts K to time."""
    methods: tuple[Method, ...] = ("jacobi", "conjugate_gradient")
    """Solvers to time (Jacobi is linear, so unrolled reverse mode stores no iterates; CG is not)."""
    repeats: int = 10
    """Timed repetitions per (method, K, mode); the minimum is reported."""
    solve_grid: int = 64
    """Grid side of the 2-D heat operator used to time the public solve call against a caller-jitted one."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.iterations:
            raise ValueError("iterations must list at least one K")
        if not self.methods:
            raise ValueError("methods must list at least one solver")
        for k in self.iterations:
            check_int("iterations", k, low=0)
        check_int("repeats", self.repeats, low=1)
        check_int("solve_grid", self.solve_grid, low=2)


COMMANDS = {
    "run": (RunConfig, "iclr25_prdp._run:run_experiment"),
    "reproduce": (ReproduceConfig, "iclr25_prdp._reproduce:reproduce"),
    "bench": (BenchConfig, "iclr25_prdp._bench:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-prdp``; returns the exit code (0 ok, 1 failure, 2 bad input, 130 Ctrl-C)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
