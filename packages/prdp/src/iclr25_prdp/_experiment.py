"""What the CLI runs: one experiment (``run``), the three-way reproduction (``reproduce``) and the solver bench.

Each command takes ``(cfg, ctx)`` and returns an :class:`iclr25_shared.cli.Result`; the runner writes
results.json / results.md / config.json into ``--out`` and prints the tables. Plots go through
``ctx.save_figure``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# numpy first, from Python: imported first from a C extension's init instead (jaxlib._jax, torch._C), a Ctrl-C
# landing in that import is printed with a traceback (numpy's import_array) or swallowed (torch), not raised.
import numpy  # noqa: F401

from iclr25_shared.cli import Result, RunContext, check_interrupted
from iclr25_shared.inputs import validating

if TYPE_CHECKING:
    from iclr25_prdp.cli import BenchConfig, ReproduceConfig, RunConfig


def _device(ctx: RunContext) -> Any:
    """The first JAX device ``--device`` names; one that is not there (``cuda`` without a GPU) is bad input.

    Importing JAX takes seconds: a Ctrl-C during it that JAX swallowed stops the run here, before any work.
    """
    with validating("--device"):
        device = ctx.jax_devices()[0]
    check_interrupted()
    return device


def run_experiment(cfg: RunConfig, ctx: RunContext) -> Result:
    """Train one experiment with PRDP or a fixed ``K``; per-epoch table, summary row and plots."""
    import jax

    from iclr25_prdp._problems import controller_for, make_experiment
    from iclr25_prdp._reproduce import save_plots, summary_row

    device = _device(ctx)
    method = cfg.method or ("conjugate_gradient" if cfg.experiment == "navier-stokes" else "jacobi")
    experiment = make_experiment(cfg.experiment, method=method, diff=cfg.diff, grid=cfg.grid)
    check_interrupted()
    spec = experiment.spec
    epochs = cfg.epochs or spec.epochs
    controller = None
    if cfg.iterations is None:
        controller = controller_for(
            spec,
            initial_iterations=cfg.initial_iterations,
            step=cfg.step,
            max_iterations=cfg.max_iterations,
            plateau_threshold=cfg.plateau_threshold,
            stop_threshold=cfg.stop_threshold,
            ema_window=cfg.ema_window,
            plateau_window=cfg.plateau_window,
        )

    def progress(epoch: int, log: Any) -> None:
        check_interrupted()  # a Ctrl-C that JAX swallowed (in its gc callback) stops the run at the next epoch
        if epoch % 10 == 0 or epoch == epochs:
            ctx.log.info(
                f"epoch {epoch:4d}  K {log.iterations[-1]}  metric {log.metric[-1]:.4g}  "
                f"iterations {log.total_iterations}"
            )

    with jax.default_device(device):
        result = experiment.train(
            epochs=epochs,
            iterations=cfg.iterations,
            controller=controller,
            key=jax.random.key(cfg.seed),
            callback=progress,
        )
    arm = "PRDP" if controller is not None else f"fixed K={cfg.iterations}"
    result.label = arm
    row = summary_row(cfg.experiment, arm, result, None)
    per_epoch = [
        {"epoch": i, "K": k, "metric": m, "cumulative iterations": c, "wall time (s)": round(t, 3)}
        for i, (k, m, c, t) in enumerate(
            zip(
                result.log.iterations,
                result.log.metric,
                result.log.cumulative_iterations,
                result.log.wall_time,
            )
        )
    ]
    save_plots(ctx, cfg.experiment, {arm: result}, spec.metric_name)
    return Result(
        metrics={
            "final_metric": result.final_metric,
            "metric": spec.metric_name,
            "total_solver_iterations": result.total_iterations,
            "final_iterations": result.final_iterations,
            "controller_state": controller.state_dict() if controller is not None else None,
            **result.extra,
        },
        tables={"summary": [row], "per epoch": per_epoch if ctx.writes else []},
        timings={"train_s": result.wall_time},
    )


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """Converged K vs PRDP for every seed: cost at equal accuracy; the first seed's arms, coarse K and plots."""
    import jax

    from iclr25_prdp._reproduce import reproduce_experiment, save_plots, summary_row, summary_rows

    device = _device(ctx)
    n_seeds, grid = cfg.resolved()
    seeds = [cfg.seed + i for i in range(n_seeds)]
    rows, per_seed, summaries, metrics, timings = [], [], [], {}, {}
    diagnostics: list[dict[str, Any]] = []
    with jax.default_device(device):
        for name in cfg.experiments:
            ctx.log.info(f"{name}:")
            arms, extra, seed_rows = reproduce_experiment(
                name,
                epochs=cfg.epochs,
                diff=cfg.diff,
                method=cfg.ns_method if name == "navier-stokes" else "jacobi",
                seeds=seeds,
                say=ctx.log.info,
                grid=grid,
                tick=check_interrupted,
            )
            baseline = next(iter(arms.values()))
            rows += [summary_row(name, label, result, baseline) for label, result in arms.items()]
            per_seed += seed_rows
            summaries += summary_rows(name, extra)
            metrics[name] = extra
            if "timing diagnostic" in extra:
                diagnostics.append({"experiment": name, **extra["timing diagnostic"]})
            timings.update({f"{name}/{label}": r.wall_time for label, r in arms.items()})
            save_plots(ctx, name, arms, extra["metric"])
    return Result(
        metrics=metrics,
        tables={
            "equal accuracy (mean, SD, 95 % t-interval over seeds)": summaries,
            "equal accuracy per seed": per_seed,
            f"whole runs, seed {seeds[0]}": rows,
            "timing diagnostic (navier-stokes: share of a converged epoch spent in the pressure solves)": (
                diagnostics
            ),
        },
        timings=timings,
        notes=[
            "equal accuracy: target = the worse of the two final validation metrics; cost = cumulative solver "
            "iterations and wall time until each arm first reaches it; saved = 1 - PRDP / converged",
            "solver iterations = K x (forward + adjoint solves) summed over training; wall time excludes the "
            "one-off JIT compilation (done before the clock starts)",
            "heat metrics: 2-step validation nMSE of the network rollout; navier-stokes: 3-step validation nMSE of "
            "the hybrid with the arm's current K (the final models are also scored with the exact pressure "
            "solve); poisson: |theta - theta_ref| / theta_ref",
        ],
    )


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Per (method, K): ms per training step and XLA temporary memory, unrolled vs implicit, in one run."""
    import jax

    from iclr25_prdp._problems import make_experiment
    from iclr25_prdp._reproduce import bench_rows, solve_call_rows

    device = _device(ctx)
    problem = make_experiment(cfg.experiment, diff="implicit")
    with jax.default_device(device):
        rows = bench_rows(
            problem, cfg.iterations, cfg.repeats, ctx.log.info, cfg.methods, tick=check_interrupted
        )
        calls = solve_call_rows(cfg.solve_grid, cfg.iterations, cfg.repeats, tick=check_interrupted)
    return Result(
        metrics={"device_kind": device.device_kind},
        tables={"step time and memory": rows, "public solve vs a solve inside the caller's jit": calls},
        notes=[
            "ms/step: minimum wall time over the repeats of one jitted value_and_grad of the 2-step emulator loss "
            "(batch 25)",
            "temp MiB: XLA's temporary buffer size of the compiled step (compiled.memory_analysis())",
            "public solve: validation in Python, then one cached compiled call (traced K in implicit mode)",
        ],
    )
