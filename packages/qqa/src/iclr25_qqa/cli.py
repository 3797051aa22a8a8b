"""``iclr25-qqa``: solve a problem on a graph with QQA, reproduce the paper's benchmark, bench against SA/greedy."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import tyro

from iclr25_qqa import __version__
from iclr25_qqa._anneal import AnnealConfig
from iclr25_shared.cli import CommonOptions, check_range, run

__all__ = ["BenchConfig", "ReproduceConfig", "SolveConfig", "main"]

ProblemName = Literal["mis", "clique", "maxcut", "coloring", "partition"]


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
        self.anneal_config()  # validates every hyper-parameter with a message naming it

    def anneal_config(self, **changes: object) -> AnnealConfig:
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
            check_range("k", self.k, low=1)
        if self.best_known is not None and not math.isfinite(self.best_known):
            raise ValueError(f"best_known must be finite, got {self.best_known}")


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """The paper's benchmark at small scale, QQA beside SA, greedy and exact references.

    Max-cut on the Gset-size tori, MIS on random regular graphs (with S=1 and λ=0 ablations), colouring of
    myciel3-5 at k = χ, max-clique on real networks; writes a table and a quality-vs-time plot."""

    size: Literal["quick", "full"] = "quick"
    """quick (about 5-10 min on 2 CPU cores) or full (adds n = 10^4 MIS and S = 100 on the tori)."""
    exact_time_limit: float = 120.0
    """Seconds for each exact MILP (HiGHS) reference."""
    sa_sweeps: int = 1000
    """Simulated-annealing sweeps per read (SA gets as many reads as QQA has replicas on that instance)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("exact_time_limit", self.exact_time_limit, low=0.0, low_inclusive=False)
        check_range("sa_sweeps", self.sa_sweeps, low=1)


@dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions):
    """Quality per second of QQA against simulated annealing and greedy, as ratios from one run.

    QQA at several step budgets, simulated annealing (dwave-samplers) at several sweep budgets and the networkx
    greedy, on the same instances."""

    instances: tuple[str, ...] = ("maxcut@torus:60x50", "mis@rrg:d=3,n=1000,seed=0")
    """PROBLEM@GRAPH pairs."""
    qqa_steps: tuple[int, ...] = (300, 1000, 3000)
    """QQA step budgets."""
    replicas: int = 32
    """QQA replicas."""
    sa_sweeps: tuple[int, ...] = (100, 1000, 3000)
    """SA sweep budgets."""
    sa_reads: int = 32
    """SA reads (the SA counterpart of replicas)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.instances:
            raise ValueError("instances must name at least one PROBLEM@GRAPH pair")
        for item in self.instances:
            if "@" not in item:
                raise ValueError(f"instances: expected PROBLEM@GRAPH, got {item!r}")
        for name, values in (("qqa_steps", self.qqa_steps), ("sa_sweeps", self.sa_sweeps)):
            if not values:
                raise ValueError(f"{name} must list at least one budget")
            for v in values:
                check_range(name, v, low=1)
        check_range("replicas", self.replicas, low=1)
        check_range("sa_reads", self.sa_reads, low=1)


def _solve(cfg: SolveConfig) -> int:
    from iclr25_qqa._experiment import solve_command

    return solve_command(cfg)


def _reproduce(cfg: ReproduceConfig) -> int:
    from iclr25_qqa._experiment import reproduce_command

    return reproduce_command(cfg)


def _bench(cfg: BenchConfig) -> int:
    from iclr25_qqa._experiment import bench_command

    return bench_command(cfg)


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-qqa``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(
        "iclr25-qqa",
        {
            "solve": (SolveConfig, _solve),
            "reproduce": (ReproduceConfig, _reproduce),
            "bench": (BenchConfig, _bench),
        },
        argv,
        default="solve",
        description="Parallel Quasi-Quantum Annealing (Ichikawa & Arai, ICLR 2025, arXiv:2409.02135) in JAX.",
        version=__version__,
    )


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
