"""``solve``: one problem on one graph with QQA; writes solution.csv (and solution_local_search.csv) with
``--out``."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from iclr25_qqa._anneal import anneal
from iclr25_qqa._experiment import _device_label, _devices
from iclr25_qqa._graphs import load_graph
from iclr25_qqa._problems import Problem, make_problem
from iclr25_shared.checks import check_int
from iclr25_shared.cli import Result, RunContext, check_interrupted
from iclr25_shared.errors import InputError
from iclr25_shared.inputs import validating

if TYPE_CHECKING:
    from iclr25_qqa.cli import SolveConfig

__all__ = ["solve"]

T = TypeVar("T")


def _read_graph(option: str, read: Callable[[], T]) -> T:
    """``read()`` of a graph the user named with ``option``; a missing or malformed file, an unknown spec, or a graph
    the problem cannot take is bad input (exit 2), named with the option."""
    try:
        with validating(option):
            return read()
    except FileNotFoundError as exc:
        raise InputError(f"{option}: {exc}") from None


@contextlib.contextmanager
def _bar(ctx: RunContext, desc: str) -> Iterator[Callable[[int, int], None]]:
    """A ``callback(done, total)`` for :func:`anneal`: the runner's Ctrl-C check (a Ctrl-C that JAX swallowed in
    its garbage-collection callback stops the anneal at the next chunk) and a progress bar (none when ``--quiet``).

    The bar is closed on the way out, also when a Ctrl-C or an error stops the anneal, so that the runner's one
    line is not printed onto the half-drawn bar.
    """
    state: dict[str, Any] = {}

    def cb(done: int, total: int) -> None:
        check_interrupted()
        if ctx.quiet:
            return
        if "bar" not in state:
            state["bar"] = ctx.progress(range(total), total=total, desc=desc)
            state["n"] = 0
        bar = state["bar"]
        if hasattr(bar, "update"):
            bar.update(done - state["n"])
            state["n"] = done

    try:
        yield cb
    finally:
        if hasattr(state.get("bar"), "close"):
            state["bar"].close()


def _gap(problem: Problem, value: float, best: float | None) -> str:
    if best is None:
        return ""
    if problem.sense == "max":
        gap = (best - value) / abs(best) if best else 0.0
        return f", gap to best known {best:g}: {100 * gap:.2f}%"
    return f", best known {best:g}"


def _solution_csv(problem: Problem, solution: np.ndarray) -> str:
    lines = ["node,label"] + [f"{node},{int(v)}" for node, v in zip(problem.nodes, solution)]
    return "\n".join(lines) + "\n"


def solve(cfg: SolveConfig, ctx: RunContext) -> Result:
    """Solve one problem on one graph; writes solution.csv (and solution_local_search.csv) with ``--out``."""
    spec = _read_graph("--graph", lambda: load_graph(cfg.graph, fmt=cfg.fmt))
    k = cfg.k
    if cfg.problem == "coloring" and k is None:
        if "chromatic" not in spec.best_known:
            raise InputError(
                "--k: coloring needs --k (the number of colours); the graph spec does not fix it"
            )
        k = int(spec.best_known["chromatic"])
    if k is not None:  # at most one class per node
        with validating("--k"):
            check_int("k", k, low=1, high=spec.graph.number_of_nodes())
    problem = _read_graph("--graph", lambda: make_problem(cfg.problem, spec.graph, k=k, penalty=cfg.penalty))
    best = cfg.best_known
    if best is None and cfg.problem == "coloring":
        chi = spec.best_known.get("chromatic")
        best = 0.0 if chi is not None and problem.num_classes >= chi else None
    elif best is None:
        best = spec.best_known.get(cfg.problem)
    devices = _devices(ctx)
    acfg = cfg.anneal_config(local_search=cfg.local_search)
    with _bar(ctx, f"QQA {cfg.problem}") as callback:
        result = anneal(problem, key=cfg.seed, devices=devices, callback=callback, **dataclasses.asdict(acfg))
    n_edges = spec.graph.number_of_edges()
    feas = "feasible" if result.feasible else f"INFEASIBLE ({result.violations} violations)"
    summary = (
        f"{cfg.problem} on {spec.name} (N={problem.num_nodes}, |E|={n_edges}"
        + (f", k={problem.num_classes}" if problem.num_classes > 1 else "")
        + f"): {problem.objective_name} {result.best_objective:g}, {feas}"
        + _gap(problem, result.best_objective, best)
        + f"; {result.wall_time:.2f} s (+{result.compile_time:.2f} s compile) on {_device_label(devices)}"
    )
    metrics: dict[str, Any] = {"summary": summary}
    if result.polished_objective is not None:
        pfeas = "feasible" if result.polished_feasible else "INFEASIBLE"
        metrics["after local search"] = (
            f"{problem.objective_name} {result.polished_objective:g}, {pfeas}"
            + _gap(problem, result.polished_objective, best)
        )
    if result.notes:
        metrics["warning"] = "; ".join(result.notes)
    metrics.update(
        {
            "graph": spec.name,
            "num_nodes": problem.num_nodes,
            "num_edges": n_edges,
            "objective": result.best_objective,
            "objective_name": problem.objective_name,
            "feasible": result.feasible,
            "violations": result.violations,
            "energy": result.best_energy,
            "best_known": best,
            "polished_objective": result.polished_objective,
            "polished_feasible": result.polished_feasible,
            "num_devices": result.num_devices,
        }
    )
    ctx.save_text("solution.csv", _solution_csv(problem, result.best_solution))
    if result.polished_solution is not None:
        ctx.save_text("solution_local_search.csv", _solution_csv(problem, result.polished_solution))
    return Result(
        metrics=metrics,
        tables={"quality vs time": [dict(r) for r in result.trace]},
        timings={"anneal_s": result.wall_time, "compile_s": result.compile_time},
        notes=list(result.notes),
    )
