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

from iclr25_prdp._navier_stokes import NavierStokesEmulator
from iclr25_prdp._problems import ArmResult, HeatEmulator, controller_for, make_experiment
from iclr25_prdp._solvers import solve
from iclr25_shared.cli import RunContext

__all__ = [
    "bench_rows",
    "equal_accuracy",
    "iterations_to_reach",
    "mean_interval",
    "reproduce_experiment",
    "save_plots",
    "summary_row",
    "summary_rows",
]


def _nothing() -> None:
    """The default ``tick``: the CLI passes :func:`iclr25_shared.cli.check_interrupted` instead, so that a Ctrl-C
    a library swallowed stops a long loop at its next step."""


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


def mean_interval(values: Sequence[float]) -> dict[str, float]:
    """Mean, sample SD and the 95 % t-interval of the mean (``nan`` bounds for a single value)."""
    x = np.asarray(values, dtype=np.float64)
    mean = float(x.mean())
    if x.size < 2:
        return {"mean": mean, "sd": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n": int(x.size)}
    from iclr25_shared.metrics import paired_t_interval  # a one-sample t-interval of the mean

    est = paired_t_interval(x)
    return {
        "mean": mean,
        "sd": float(x.std(ddof=1)),
        "ci_low": est.low,
        "ci_high": est.high,
        "n": int(x.size),
    }


def first_reach(result: ArmResult, threshold: float) -> int | None:
    """Index of the first logged epoch whose validation metric is ``<= threshold`` (``None`` if never)."""
    for i, metric in enumerate(result.log.metric):
        if metric <= threshold:
            return i
    return None


def equal_accuracy(converged: ArmResult, prdp: ArmResult) -> dict[str, Any]:
    """Cost of each arm until it first reaches the same validation error, and the saving.

    The common target is the worse of the two final metrics, so both arms reach it within their runs.
    Cost = cumulative solver iterations and wall time (training + validation, after JIT compilation) up to
    and including the first epoch at or below the target. Savings are ``1 - PRDP / converged``.
    """
    target = max(converged.final_metric, prdp.final_metric)
    i_c, i_p = first_reach(converged, target), first_reach(prdp, target)
    assert i_c is not None and i_p is not None  # both final metrics are <= target
    it_c, it_p = converged.log.cumulative_iterations[i_c], prdp.log.cumulative_iterations[i_p]
    t_c, t_p = converged.log.wall_time[i_c], prdp.log.wall_time[i_p]
    return {
        "target metric": target,
        "converged: epoch": i_c,
        "PRDP: epoch": i_p,
        "converged: iterations": it_c,
        "PRDP: iterations": it_p,
        "iterations saved": 1 - it_p / it_c if it_c else math.nan,
        "converged: wall s": t_c,
        "PRDP: wall s": t_p,
        "time saved": 1 - t_p / t_c if t_c > 0 else math.nan,
        "PRDP final K": prdp.final_iterations,
    }


def reproduce_experiment(
    name: str,
    *,
    epochs: int | None,
    diff: str,
    method: str,
    seeds: Sequence[int],
    say: Callable[[str], None],
    grid: int | None = None,
    tick: Callable[[], None] = _nothing,
) -> tuple[dict[str, ArmResult], dict[str, Any], list[dict[str, Any]]]:
    """Train ``name`` with the converged fixed ``K_eps`` and with PRDP for every seed; the first seed also with a
    coarse fixed ``K`` (and a direct solve for 1-D heat and Navier-Stokes). For Navier-Stokes the two compared arms
    run interleaved epoch by epoch (:func:`interleave`), and the timing diagnostic (:func:`solve_share`) is measured
    first and returned in the summary under ``"timing diagnostic"``.

    ``tick()`` runs after every epoch of every arm (the CLI passes the runner's Ctrl-C check).

    Returns ``(arms of the first seed, summary, per-seed equal-accuracy rows)``.
    """
    experiment = make_experiment(name, method=method, diff=diff, grid=grid)
    spec = experiment.spec
    epochs = epochs or spec.epochs
    ns = isinstance(experiment, NavierStokesEmulator)
    data = experiment.data() if ns else None
    extra_kwargs = {"data": data} if data is not None else {}
    first: dict[str, ArmResult] = {}
    rows: list[dict[str, Any]] = []
    timing: dict[str, Any] = {}
    if ns and diff == "implicit":
        timing = solve_share(experiment, data, spec.converged_iterations, tick=tick)
        say(
            f"  {name}: compile {timing['compile s']:.1f} s (excluded from wall times); epoch at K=0 "
            f"{timing['epoch s at K=0']:.3f} s, at K_eps={spec.converged_iterations} "
            f"{timing['epoch s at K_eps']:.3f} s: pressure solves are {100 * timing['solve share']:.0f} % "
            "of a converged epoch"
        )
    for index, seed in enumerate(seeds):
        plan: list[tuple[str, dict[str, Any]]] = [
            (f"converged K={spec.converged_iterations}", {"iterations": spec.converged_iterations}),
            ("PRDP", {"controller": controller_for(spec)}),
        ]
        if index == 0:
            plan.append((f"coarse K={spec.coarse_iterations}", {"iterations": spec.coarse_iterations}))
            if (isinstance(experiment, HeatEmulator) and experiment.dim == 1) or data is not None:
                plan.append(("direct", {"direct": True}))
        arms: dict[str, ArmResult] = {}
        if ns:  # the two compared arms interleaved epoch by epoch in this process
            start = time.perf_counter()
            pair = interleave(
                experiment, plan[:2], epochs=epochs, key=jax.random.key(seed), data=data, tick=tick
            )
            for label, result in pair.items():
                result.label = label
                arms[label] = result
                say(
                    f"  {name:16s} seed {seed} {label:18s} metric {result.final_metric:.4g}  "
                    f"iterations {result.total_iterations}  own wall {result.wall_time:.1f} s"
                )
            say(f"  {name:16s} seed {seed} interleaved pair took {time.perf_counter() - start:.1f} s")
            plan_rest = plan[2:]
        else:
            plan_rest = plan
        for label, kwargs in plan_rest:
            start = time.perf_counter()
            result = experiment.train(
                epochs=epochs,
                key=jax.random.key(seed),
                callback=lambda epoch, log: tick(),
                **kwargs,
                **extra_kwargs,
            )
            result.label = label
            arms[label] = result
            say(
                f"  {name:16s} seed {seed} {label:18s} metric {result.final_metric:.4g}  "
                f"iterations {result.total_iterations}  ({time.perf_counter() - start:.1f} s)"
            )
        if index == 0:
            first = arms
        row = {"experiment": name, "seed": seed, **equal_accuracy(arms[plan[0][0]], arms["PRDP"])}
        row["converged: final metric"] = arms[plan[0][0]].final_metric
        row["PRDP: final metric"] = arms["PRDP"].final_metric
        for label in (plan[0][0], "PRDP"):
            if "final exact-pressure nMSE" in arms[label].extra:
                short = "converged" if label != "PRDP" else "PRDP"
                row[f"{short}: exact-pressure nMSE"] = arms[label].extra["final exact-pressure nMSE"]
        rows.append(row)
    summary: dict[str, Any] = {
        "epochs": epochs,
        "metric": spec.metric_name,
        "controller": spec.controller,
        "seeds": list(seeds),
        "iterations saved at equal accuracy": mean_interval([r["iterations saved"] for r in rows]),
        "time saved at equal accuracy": mean_interval([r["time saved"] for r in rows]),
    }
    if timing:
        summary["timing diagnostic"] = timing
    converged, prdp = first[plan_label(spec)], first["PRDP"]
    summary["savings_vs_converged (whole run, first seed)"] = (
        1 - prdp.total_iterations / converged.total_iterations
    )
    if name == "poisson-inverse":
        for threshold in (1e-3, 1e-4, 1e-5):
            a, b = iterations_to_reach(prdp, threshold), iterations_to_reach(converged, threshold)
            summary[f"iterations_to_theta_error_{threshold:g}"] = {"PRDP": a, "converged": b}
            if a is not None and b:
                summary[f"savings_to_theta_error_{threshold:g}"] = 1 - a / b
    return first, summary, rows


def interleave(
    experiment: NavierStokesEmulator,
    plan: Sequence[tuple[str, dict[str, Any]]],
    *,
    epochs: int,
    key: jax.Array,
    data: tuple[jax.Array, jax.Array],
    tick: Callable[[], None] = _nothing,
) -> dict[str, ArmResult]:
    """Train the arms of ``plan`` (``(label, train kwargs)``) with the same ``key``, one epoch of each in turn.

    The order within a round alternates (first arm first in even rounds, last arm first in odd rounds), so a
    load change on the machine hits every arm alike; each arm's wall time counts only its own epochs. ``tick()``
    runs after every epoch.
    """
    started = [
        (label, *experiment.start(epochs=epochs, key=key, data=data, **kwargs)) for label, kwargs in plan
    ]
    rounds = 0
    while not all(run.done for _, run, _ in started):
        order = started if rounds % 2 == 0 else started[::-1]
        for _, run, _ in order:
            if not run.done:
                run.step()
                tick()
        rounds += 1
    return {label: finish() for label, _, finish in started}


def solve_share(
    experiment: NavierStokesEmulator,
    data: tuple[jax.Array, jax.Array],
    iterations: int,
    repeats: int = 3,
    tick: Callable[[], None] = _nothing,
) -> dict[str, float]:
    """Compile time and the share of a ``K = iterations`` training epoch spent in the pressure solves.

    ``compile s`` = first warm-up call minus a second one (compilation alone); ``solve share`` =
    ``1 - t(K=0) / t(K)`` with ``t`` the minimum epoch time over ``repeats`` (the diagnostic that says whether
    fewer iterations can save wall time at all).
    """
    first = experiment.warm_up(data)
    again = experiment.warm_up(data)
    t0, tk = math.inf, math.inf
    for _ in range(repeats):  # alternated, so a load change hits both
        tick()
        t0 = min(t0, experiment.epoch_seconds(data, 0, repeats=1))
        tk = min(tk, experiment.epoch_seconds(data, iterations, repeats=1))
    return {
        "compile s": max(first - again, 0.0),
        "epoch s at K=0": t0,
        "epoch s at K_eps": tk,
        "solve share": 1 - t0 / tk,
    }


def plan_label(spec: Any) -> str:
    return f"converged K={spec.converged_iterations}"


def summary_rows(name: str, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Mean +- SD and the 95 % interval of the equal-accuracy savings, one row per measure."""
    out = []
    for measure in ("iterations saved at equal accuracy", "time saved at equal accuracy"):
        s = summary[measure]
        out.append(
            {
                "experiment": name,
                "measure": measure,
                "seeds": s["n"],
                "mean": f"{100 * s['mean']:.1f} %",
                "SD": f"{100 * s['sd']:.1f} %" if s["n"] > 1 else "",
                "95 % CI": f"[{100 * s['ci_low']:.1f}, {100 * s['ci_high']:.1f}] %" if s["n"] > 1 else "",
            }
        )
    return out


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
    tick: Callable[[], None] = _nothing,
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
                tick()
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


def solve_call_rows(
    grid: int, iterations: Sequence[int], repeats: int, tick: Callable[[], None] = _nothing
) -> list[dict[str, Any]]:
    """ms per call of the public :func:`solve` (compiled internally) against the same solve inside the caller's
    ``jax.jit``, and the number of compilations, for Jacobi on the 2-D heat operator ``grid x grid``.

    Time is the minimum over ``repeats`` calls after one warm-up call per ``K``.
    """
    from iclr25_prdp._operators import heat

    op = heat((grid, grid), nu=0.001)
    b = jnp.sin(jnp.arange(grid * grid, dtype=op.dtype))
    rows = []
    for diff in ("implicit", "unrolled"):
        user = jax.jit(
            lambda b, k, diff=diff: solve(op, b, method="jacobi", iterations=k, diff=diff), static_argnums=1
        )
        for k in iterations:
            row: dict[str, Any] = {"diff": diff, "grid": f"{grid}x{grid}", "K": k}
            calls = (
                ("solve", lambda k=k, diff=diff: solve(op, b, method="jacobi", iterations=k, diff=diff)),
                ("user jit", lambda k=k, user=user: user(b, k)),
            )
            for name, call in calls:
                tick()
                jax.block_until_ready(call())
                times = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    jax.block_until_ready(call())
                    times.append(time.perf_counter() - start)
                row[f"{name} ms"] = 1e3 * float(np.min(times))
            row["solve / user jit"] = row["solve ms"] / row["user jit ms"]
            rows.append(row)
    return rows
