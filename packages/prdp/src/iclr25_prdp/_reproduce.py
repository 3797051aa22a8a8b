"""Orchestration behind the CLI: one experiment, the three-way reproduction, the solver benchmark, plots."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from iclr25_prdp._problems import ArmResult, HeatEmulator, controller_for, make_experiment
from iclr25_prdp._solvers import solve
from iclr25_shared.cli import RunContext

__all__ = ["bench_rows", "iterations_to_reach", "reproduce_experiment", "save_plots", "summary_row"]


def summary_row(experiment: str, arm: str, result: ArmResult, baseline: ArmResult | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "experiment": experiment,
        "arm": arm,
        "final K": "direct"
        if result.final_iterations is None and arm == "direct"
        else result.final_iterations,
        "final metric": result.final_metric,
        "solver iterations": result.total_iterations,
        "wall time (s)": round(result.wall_time, 2),
    }
    if baseline is not None and baseline.total_iterations:
        row["iterations saved vs converged"] = (
            f"{100 * (1 - result.total_iterations / baseline.total_iterations):.1f}%"
            if arm != "direct"
            else ""
        )
        row["metric / converged metric"] = result.final_metric / baseline.final_metric
    return row


def iterations_to_reach(result: ArmResult, threshold: float) -> int | None:
    """Cumulative solver iterations when the metric first falls to ``threshold`` (``None`` if never)."""
    for metric, spent in zip(result.log.metric, result.log.cumulative_iterations):
        if metric <= threshold:
            return spent
    return None


def reproduce_experiment(
    name: str,
    *,
    epochs: int | None,
    diff: str,
    method: str,
    key: jax.Array,
    say: Callable[[str], None],
) -> tuple[dict[str, ArmResult], dict[str, Any]]:
    """Train ``name`` three ways (converged fixed K, PRDP, coarse fixed K; plus a direct solve for 1-D heat)."""
    experiment = make_experiment(name, method=method, diff=diff)
    spec = experiment.spec
    epochs = epochs or spec.epochs
    arms: dict[str, ArmResult] = {}
    plan: list[tuple[str, dict[str, Any]]] = [
        (f"converged K={spec.converged_iterations}", {"iterations": spec.converged_iterations}),
        ("PRDP", {"controller": controller_for(spec)}),
        (f"coarse K={spec.coarse_iterations}", {"iterations": spec.coarse_iterations}),
    ]
    if isinstance(experiment, HeatEmulator) and experiment.dim == 1:
        plan.append(("direct", {"direct": True}))
    for label, kwargs in plan:
        start = time.perf_counter()
        result = experiment.train(epochs=epochs, key=key, **kwargs)
        result.label = label
        arms[label] = result
        say(
            f"  {name:16s} {label:18s} metric {result.final_metric:.4g}  iterations {result.total_iterations}"
            f"  ({time.perf_counter() - start:.1f} s)"
        )
    extra: dict[str, Any] = {"epochs": epochs, "metric": spec.metric_name, "controller": spec.controller}
    converged = arms[plan[0][0]]
    prdp = arms["PRDP"]
    extra["savings_vs_converged"] = 1 - prdp.total_iterations / converged.total_iterations
    extra["final_metric_ratio_vs_converged"] = prdp.final_metric / converged.final_metric
    if name == "poisson-inverse":
        for threshold in (1e-3, 1e-4):
            a, b = iterations_to_reach(prdp, threshold), iterations_to_reach(converged, threshold)
            extra[f"iterations_to_theta_error_{threshold:g}"] = {"PRDP": a, "converged": b}
            if a is not None and b:
                extra[f"savings_to_theta_error_{threshold:g}"] = 1 - a / b
    return arms, extra


def save_plots(ctx: RunContext, name: str, arms: dict[str, ArmResult], metric_name: str) -> list[Path]:
    """K over epochs and metric over cumulative solver iterations, one PNG each (nothing without ``--out``)."""
    if not ctx.writes:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for label, result in arms.items():
        if label == "direct":
            continue
        ks = result.log.iterations[1:]
        ax.step(range(1, len(ks) + 1), ks, where="post", label=label)
    ax.set_xlabel("epoch")
    ax.set_ylabel("solver iterations K")
    ax.set_yscale("log")
    ax.set_title(f"{name}: K per epoch")
    ax.legend(fontsize=8)
    written.append(ctx.save_figure(f"{name}_iterations.png", fig, bbox_inches="tight"))

    fig, ax = plt.subplots(figsize=(5, 3.2))
    for label, result in arms.items():
        if label == "direct":
            continue
        ax.plot(np.maximum(result.log.cumulative_iterations, 1), result.log.metric, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("cumulative solver iterations")
    ax.set_ylabel(metric_name)
    ax.set_title(f"{name}: error vs cost")
    ax.legend(fontsize=8)
    written.append(ctx.save_figure(f"{name}_error_vs_iterations.png", fig, bbox_inches="tight"))
    return written


# --------------------------------------------------------------------------------------------------------------
# bench


def _train_step(problem: HeatEmulator, k: int, diff: str, method: str):
    """A jitted value-and-grad of the 2-step emulator loss on one batch (static ``k``), plus its inputs."""
    from flax import nnx

    from iclr25_prdp._problems import _mlp

    op = problem.operator()
    train, _ = problem.data()
    batch = train[: problem.batch_size]
    model = _mlp(problem.n**problem.dim, problem.width, problem.depth, jax.random.key(0))
    graphdef, params = nnx.split(model)

    def loss(params, batch):
        net = nnx.merge(graphdef, params)
        pred1 = jax.vmap(net)(batch[:, 0])
        pred2 = jax.vmap(lambda u: solve(op, u, method=method, iterations=k, diff=diff))(pred1)
        return jnp.mean((pred2 - batch[:, 2]) ** 2)

    return jax.jit(jax.value_and_grad(loss)), (params, batch)


def bench_rows(
    problem: HeatEmulator,
    iterations: Sequence[int],
    repeats: int,
    say: Callable[[str], None],
    methods: Sequence[str] = ("jacobi", "conjugate_gradient"),
) -> list[dict[str, Any]]:
    """Per (method, K): seconds per training step and XLA temporary memory, unrolled vs implicit, in one run.

    Time is the minimum over ``repeats`` calls of the compiled step (the least disturbed by other load on the
    machine); memory is the compiled executable's temporary buffer size (``memory_analysis().temp_size_in_bytes``).
    """
    rows = []
    for method in methods:
        for k in iterations:
            row: dict[str, Any] = {"method": method, "K": k}
            for diff in ("unrolled", "implicit"):
                step, args = _train_step(problem, k, diff, method)
                compiled = step.lower(*args).compile()
                memory = compiled.memory_analysis()
                temp = getattr(memory, "temp_size_in_bytes", math.nan) if memory is not None else math.nan
                jax.block_until_ready(compiled(*args))  # warm-up
                times = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    jax.block_until_ready(compiled(*args))
                    times.append(time.perf_counter() - start)
                row[f"{diff} ms/step"] = 1e3 * float(np.min(times))
                row[f"{diff} temp MiB"] = temp / 2**20
            row["time implicit/unrolled"] = row["implicit ms/step"] / row["unrolled ms/step"]
            row["memory implicit/unrolled"] = (
                row["implicit temp MiB"] / row["unrolled temp MiB"] if row["unrolled temp MiB"] else math.nan
            )
            rows.append(row)
            say(
                f"  {method} K={k:4d}  unrolled {row['unrolled ms/step']:.2f} ms {row['unrolled temp MiB']:.2f} MiB   "
                f"implicit {row['implicit ms/step']:.2f} ms {row['implicit temp MiB']:.2f} MiB"
            )
        largest = [r for r in rows if r["method"] == method][-1]
        for row in rows:
            if row["method"] == method:
                row["implicit time / at largest K"] = row["implicit ms/step"] / largest["implicit ms/step"]
    return rows
