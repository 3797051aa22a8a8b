"""``iclr25-qqa``: Parallel Quasi-Quantum Annealing (Ichikawa & Arai, ICLR 2025, arXiv:2409.02135) in JAX: solve a
graph problem, reproduce the paper's benchmark, bench against simulated annealing."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import tyro

from iclr25_shared import inputs
from iclr25_shared.checks import check_float, check_int, check_probability
from iclr25_shared.cli import CommonOptions, run
from iclr25_shared.errors import InputError

__all__ = ["COMMANDS", "DEFAULT", "PROG", "BenchConfig", "ReproduceConfig", "SolveConfig", "main"]

PROG = "iclr25-qqa"
DEFAULT = "solve"

ProblemName = Literal["mis", "clique", "maxcut", "coloring", "partition"]


def _check_graph_file(value: Any, label: str) -> None:
    """A graph given as a file (a value that is not a spec such as ``torus:60x50`` or a G-set name such as ``G11``
    must be a non-empty UTF-8 text file); the file's own format is checked when it is read (``--fmt`` decides)."""
    from iclr25_qqa._graphs import is_graph_file

    text = str(value)
    if not is_graph_file(text):
        return
    path = inputs.check_file(text, label=label, expected="a graph file (G-set/rudy, DIMACS or an edge list)")
    try:
        content = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(
            f"{label}: {text!r} is not a text file; expected a graph file (G-set/rudy, DIMACS or an edge list)"
        ) from None
    if not content.strip():
        raise InputError(f"{label}: {text!r} holds only blank lines; expected a graph file")


def _check_python(path: Path, label: str) -> None:
    """An interpreter to run: an existing, executable file."""
    p = inputs.check_file(path, label=label, expected="a Python interpreter (e.g. ~/qqa-env/bin/python)")
    if not os.access(p, os.X_OK):
        raise InputError(f"{label}: {str(path)!r} is not executable; expected a Python interpreter")


_GRAPH = inputs.custom(_check_graph_file, kind="graph_file", may_be_name=True)
"""A graph spec or name (not checked here) or a graph file."""


@dataclass(frozen=True, kw_only=True)
class _AnnealOptions(CommonOptions):
    replicas: int = 100
    """Parallel replicas S (sharded over the visible devices)."""
    steps: int = 3000
    """Gradient steps T."""
    lr: float = 1.0
    """AdamW learning rate (also sets the Langevin noise scale)."""
    temperature: float = 1e-3
    """Langevin temperature (0 = no noise)."""
    gamma: tuple[float, float] = (-3.0, 0.1)
    """Start and end of the linear γ schedule (start < end)."""
    p: int = 4
    """Even exponent of the QQA penalty."""
    diversity: float = 0.2
    """Weight λ in [0, 1] of the replica-diversity term."""
    weight_decay: float = 0.0
    """AdamW weight decay."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("replicas", self.replicas, low=1)
        check_int("steps", self.steps, low=1)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)
        check_float("temperature", self.temperature, low=0.0)
        for i, g in enumerate(self.gamma):
            check_float(f"gamma[{i}]", g)
        if not self.gamma[0] < self.gamma[1]:
            raise ValueError(
                f"gamma must be increasing (start < end), got start={self.gamma[0]}, end={self.gamma[1]}"
            )
        check_int("p", self.p, low=2)
        if self.p % 2:
            raise ValueError(
                f"p must be an even integer >= 2 (odd p makes the penalty unbounded below), got {self.p}"
            )
        check_probability("diversity", self.diversity)
        check_float("weight_decay", self.weight_decay, low=0.0)

    def anneal_config(self, **changes: object) -> Any:
        """The :class:`~iclr25_qqa.AnnealConfig` these options describe (``changes`` override fields)."""
        from iclr25_qqa._anneal import AnnealConfig

        values = {
            "replicas": self.replicas,
            "steps": self.steps,
            "lr": self.lr,
            "temperature": self.temperature,
            "gamma": self.gamma,
            "p": self.p,
            "diversity": self.diversity,
            "weight_decay": self.weight_decay,
        }
        values.update(changes)
        return AnnealConfig(**values)  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class SolveConfig(_AnnealOptions):
    """Solve one problem on one graph with QQA; print the objective, feasibility, gap and time."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {"graph": _GRAPH}

    problem: tyro.conf.Positional[ProblemName] = "maxcut"
    """mis, clique, maxcut, coloring or partition."""
    graph: str = "torus:60x50"
    """A graph file (Gset/rudy, DIMACS .col/.clq, edge list) or a spec: rrg:d=3,n=100,seed=0, er:n=60,p=0.1,
    torus:60x50, myciel:5, karate, lesmis, petersen, cycle:9, complete:5, bipartite:3x5."""
    fmt: Literal["auto", "gset", "dimacs", "edgelist"] = "auto"
    """File format (auto: by extension and content)."""
    k: int | None = None
    """Colours (coloring; default: the chromatic number when the spec knows it) or parts (partition; default 2)."""
    penalty: float = 2.0
    """Constraint penalty P of the MIS / clique QUBO (> 0.5)."""
    local_search: bool = True
    """Also report a greedy repair/improvement of the best solution (the raw QQA result is always shown)."""
    best_known: float | None = None
    """Best-known objective to report the gap to (default: known for torus/myciel/named specs)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.k is not None:
            check_int("k", self.k, low=1)
            if self.problem not in ("coloring", "partition"):
                raise ValueError(f"k is only used by coloring and partition, not {self.problem}")
        check_float("penalty", self.penalty, low=0.5, low_inclusive=False)
        if self.best_known is not None:
            check_float("best_known", self.best_known)


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """The declared primary comparison: G-set max-cut, QQA vs simulated annealing at equal wall time, the cut as %
    of the best-known cut, paired over seeds; on request the paper's other problems at small scale.

    ``gset`` (the default ``--tasks``): every instance of the size (quick: G1, G15, G22, G43) at ``--budget`` seconds
    per run and method, ``--seeds`` paired seeds. ``tori``, ``mis``, ``coloring``, ``clique``: the Gset-size tori, MIS
    on random regular graphs (with S=1 and λ=0 ablations), colouring of myciel3-5 at k = χ, max-clique on real
    networks, one seed each (exploratory tables and a quality-vs-time plot)."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {
        "gset_dir": inputs.folder(expected="a folder of G-set files (G<k>.txt)"),
    }

    size: Literal["quick", "full", "gpu"] = "quick"
    """quick (G1, G15, G22, G43: about 5 min on one CPU thread), full (adds G2, G11, G55; with --tasks, n = 10^4 MIS
    and S = 100 on the tori) or gpu (adds G55 and G70; with --tasks, MIS at N = 10^4 and 10^5, the tori at S = 256)."""
    seeds: int = 5
    """Seeds of the G-set comparison (paired: seed i of QQA beside seed i of SA)."""
    budget: float = 5.0
    """Wall-time seconds per G-set run, the same for both methods (QQA: compilation excluded; SA: model building
    excluded)."""
    gset_dir: Path | None = None
    """Folder holding the G-set files G<k>.txt. Default: $ICLR25_DATA/gset, else the kit's shared/data/gset found
    in a folder above this package."""
    qqa_replicas: int = 32
    """QQA replicas on the G-set (the bench's tuned profile)."""
    qqa_gamma_start: float = 0.4
    """QQA γ start on the G-set in units of the mean weighted degree d̄ (γ runs from -c·d̄ to 0.1)."""
    exact_time_limit: float = 120.0
    """Seconds for each exact MILP (HiGHS) reference (--tasks mis)."""
    sa_reads: int = 4
    """Simulated-annealing reads; the sweeps per read fill the budget (G-set) or QQA's wall time (other tasks)."""
    tasks: tuple[Literal["gset", "tori", "mis", "coloring", "clique"], ...] = ("gset",)
    """Which parts to run: gset (the primary comparison), tori, mis, coloring, clique (exploratory)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.tasks:
            raise ValueError("tasks must name at least one of gset, tori, mis, coloring, clique")
        check_int("seeds", self.seeds, low=1)
        check_float("budget", self.budget, low=0.0, low_inclusive=False)
        check_int("qqa_replicas", self.qqa_replicas, low=1)
        check_float("qqa_gamma_start", self.qqa_gamma_start, low=0.0, low_inclusive=False)
        check_float("exact_time_limit", self.exact_time_limit, low=0.0, low_inclusive=False)
        check_int("sa_reads", self.sa_reads, low=1)


@dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions):
    """G-set max-cut at equal wall time: QQA beside the official qqa (when installed) and simulated annealing, and
    QQA's step time against the energy-gradient floor.

    Each method runs its own tuned profile, chosen on one instance that is not scored (QQA: replicas x learning rate
    x γ start; SA: reads; the official: --official-profiles), then every instance for several seeds at the same
    wall-time budget. Reports cut / best known, time to 99 %, paired differences with 95 % intervals (one primary:
    QQA − official, or QQA − SA without the peer), and the milliseconds of one QQA step beside the energy gradient."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {
        "instances": _GRAPH,
        "long_instances": _GRAPH,
        "tune_on": _GRAPH,
        "gset_dir": inputs.folder(expected="a folder of G-set files (G<k>.txt)"),
        "official_python": inputs.custom(_check_python),
    }

    instances: tuple[str, ...] = ("G1", "G15", "G22", "G43")
    """G-set names (read from --gset-dir), rudy file paths, or graph specs (torus:60x50 has a proven optimum). G15 stands
    in for G14 (same rudy family: 800-node planar, 4661 vs 4694 edges), which the kit's data folder lacks."""
    long_instances: tuple[str, ...] = ("G15",)
    """Instances that also run at the budgets after the first (empty: every instance at every budget)."""
    gset_dir: Path | None = None
    """Folder holding the G-set files G<k>.txt. Default: $ICLR25_DATA/gset, else the kit's shared/data/gset found
    in a folder above this package (the project checkout's offline copies)."""
    budget: tuple[float, ...] = (10.0, 30.0)
    """Wall-time seconds per run (one or more budgets), the same for every method (QQA: compilation excluded; SA:
    model building excluded; the 1-flip polish is reported separately)."""
    seeds: int = 3
    """Seeds per instance and budget (>= 2 for an interval; paired: seed i of QQA beside seed i of SA)."""
    tune_on: str = "G2"
    """Instance the grids are tuned on (not scored; one tuning seed); empty, or one point per grid: no tuning."""
    tune_budget: float = 5.0
    """Wall-time seconds per tuning run."""
    qqa_replicas: tuple[int, ...] = (32,)
    """QQA replica grid (tuned profile: 32, see the README)."""
    qqa_lr: tuple[float, ...] = (1.0,)
    """QQA learning-rate grid."""
    qqa_gamma_start: tuple[float, ...] = (0.4,)
    """QQA γ-start grid, in units of the instance's mean weighted degree d̄: γ runs from -c·d̄ to 0.1 (the
    relaxed max-cut energy is concave with curvature ~ d̄, so the convex start must scale with it)."""
    sa_reads: tuple[int, ...] = (4,)
    """SA reads grid (sweeps per read fill the budget)."""
    layout: Literal["auto", "edges", "dense"] = "auto"
    """How Q reaches the solver: edge list, dense matrix, or by fill (auto)."""
    step_chunk: int = 50
    """Steps per timed call in the step-time comparison."""
    step_repeats: int = 5
    """Interleaved rounds of the step-time comparison."""
    official_profiles: tuple[Literal["balanced", "fast", "anneal-defaults"], ...] = (
        "balanced",
        "fast",
        "anneal-defaults",
    )
    """The official's own settings to tune over on --tune-on (balanced and fast: profiles of its qqa.solve API,
    balanced its default; anneal-defaults: its legacy qqa.anneal with every default); one name: no tuning."""
    official_python: Path | None = None
    """Python interpreter of an environment with the official implementation (``pip install qqa``, torch); default:
    this interpreter when ``qqa`` is importable here. It runs beside ours on every instance, same budgets and seeds,
    with its own profile (the best of --official-profiles on --tune-on; in a subprocess)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.instances:
            raise ValueError("instances must name at least one instance (G-set name, rudy file or spec)")
        if not self.budget:
            raise ValueError("budget must list at least one number of seconds")
        for b in self.budget:
            check_float("budget", b, low=0.0, low_inclusive=False)
        check_int("seeds", self.seeds, low=1)
        check_float("tune_budget", self.tune_budget, low=0.0, low_inclusive=False)
        if not self.official_profiles:
            raise ValueError("official_profiles must name at least one profile")
        check_int("step_chunk", self.step_chunk, low=1)
        check_int("step_repeats", self.step_repeats, low=1)
        for name in ("qqa_replicas", "sa_reads"):
            if not getattr(self, name):
                raise ValueError(f"{name} must list at least one value")
            for v in getattr(self, name):
                check_int(name, v, low=1)
        for name in ("qqa_lr", "qqa_gamma_start"):
            if not getattr(self, name):
                raise ValueError(f"{name} must list at least one value")
            for v in getattr(self, name):
                check_float(name, v, low=0.0, low_inclusive=False)


COMMANDS = {
    "solve": (SolveConfig, "iclr25_qqa._solve:solve"),
    "reproduce": (ReproduceConfig, "iclr25_qqa._reproduce:reproduce"),
    "bench": (BenchConfig, "iclr25_qqa._bench:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-qqa``; returns the exit code (0 ok, 1 failure, 2 bad input, 130 Ctrl-C)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
