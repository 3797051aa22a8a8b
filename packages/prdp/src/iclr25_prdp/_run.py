"""``iclr25-prdp run``: train one experiment with PRDP or a fixed ``K``; per-epoch table, summary row and plots."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from iclr25_prdp._experiment import device_of, save_plots, summary_row
from iclr25_shared.cli import Result, RunContext, check_interrupted

if TYPE_CHECKING:
    from iclr25_prdp.cli import RunConfig

__all__ = ["run_experiment"]


def run_experiment(cfg: RunConfig, ctx: RunContext) -> Result:
    """Train one experiment with PRDP or a fixed ``K``; per-epoch table, summary row and plots."""
    import jax

    from iclr25_prdp._problems import controller_for, make_experiment

    device = device_of(ctx)
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
