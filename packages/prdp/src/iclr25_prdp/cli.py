"""``iclr25-prdp``: run one PRDP experiment, reproduce the paper's comparison, or benchmark the solvers."""

from __future__ import annotations

import dataclasses
import sys
from typing import Annotated, Literal

import tyro

from iclr25_prdp import __version__
from iclr25_shared.cli import CommonOptions, check_range, run
from iclr25_shared.results import RunRecord, markdown_table, package_versions

Experiment = Literal["poisson-inverse", "heat-emulator", "heat2d-emulator"]
Method = Literal["jacobi", "gauss_seidel", "conjugate_gradient", "steepest_descent"]
Diff = Literal["implicit", "unrolled"]
_VERSIONS = ("jax", "jaxlib", "flax", "optax", "lineax", "equinox", "iclr25-prdp")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig(CommonOptions):
    """Train one experiment with PRDP (default) or with a fixed solver iteration count (--iterations)."""

    experiment: Annotated[Experiment, tyro.conf.Positional] = "poisson-inverse"
    """poisson-inverse (1-parameter inverse problem), heat-emulator (1-D), heat2d-emulator (2-D, 30x30)."""
    iterations: int | None = None
    """Fixed solver iterations K per solve (a baseline); omit to let the PRDP controller choose K."""
    epochs: int | None = None
    """Epochs (gradient steps for poisson-inverse); default: the experiment's (180 / 50 / 60)."""
    diff: Diff = "implicit"
    """Differentiate the solver implicitly (adjoint solve with A^T, same K) or by unrolling the iterations."""
    method: Method = "jacobi"
    """Iterative linear solver."""
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
            check_range("iterations", self.iterations, low=0)
        if self.epochs is not None:
            check_range("epochs", self.epochs, low=1)
        for name in ("plateau_threshold", "stop_threshold"):
            value = getattr(self, name)
            if value is not None:
                check_range(name, value, low=0, high=1, low_inclusive=False)
        for name, low in (("initial_iterations", 0), ("step", 1), ("ema_window", 1), ("plateau_window", 1)):
            value = getattr(self, name)
            if value is not None:
                check_range(name, value, low=low)
        if (
            self.max_iterations is not None
            and self.initial_iterations is not None
            and self.max_iterations < self.initial_iterations
        ):
            raise ValueError(
                f"max_iterations must be >= initial_iterations ({self.initial_iterations}), got {self.max_iterations}"
            )
        if self.method in ("conjugate_gradient", "steepest_descent") and self.experiment == "poisson-inverse":
            raise ValueError(
                f"method {self.method} needs a positive definite operator; the Poisson matrix is negative definite "
                "(use jacobi or gauss_seidel)"
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """Each experiment three ways: fully converged fixed K, PRDP, coarse fixed K; savings table and plots."""

    experiments: tuple[Experiment, ...] = ("poisson-inverse", "heat-emulator", "heat2d-emulator")
    """Experiments to run."""
    epochs: int | None = None
    """Override every experiment's epoch count (default: 180 / 50 / 60)."""
    diff: Diff = "implicit"
    """Differentiation mode of the solver."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.experiments:
            raise ValueError("experiments must name at least one experiment")
        if self.epochs is not None:
            check_range("epochs", self.epochs, low=1)


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

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.iterations:
            raise ValueError("iterations must list at least one K")
        if not self.methods:
            raise ValueError("methods must list at least one solver")
        for k in self.iterations:
            check_range("iterations", k, low=0)
        check_range("repeats", self.repeats, low=1)


def _say(quiet: bool):
    def say(message: str) -> None:
        if not quiet:
            print(message, file=sys.stderr, flush=True)

    return say


def run_experiment(cfg: RunConfig) -> int:
    import jax

    from iclr25_prdp._experiment import controller_for, make_experiment
    from iclr25_prdp._reproduce import jax_device, save_plots, summary_row

    device = jax_device(cfg.device)
    experiment = make_experiment(cfg.experiment, method=cfg.method, diff=cfg.diff)
    spec = experiment.spec
    epochs = cfg.epochs or spec.epochs
    say = _say(cfg.quiet)
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

    def progress(epoch: int, log) -> None:
        if epoch % 10 == 0 or epoch == epochs:
            say(
                f"epoch {epoch:4d}  K {log.iterations[-1]}  metric {log.metric[-1]:.4g}  iterations {log.total_iterations}"
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
    print(markdown_table([row]))
    if cfg.out is not None:
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
        record = RunRecord(
            command=f"iclr25-prdp run {cfg.experiment}",
            config=cfg,
            metrics={
                "final_metric": result.final_metric,
                "metric": spec.metric_name,
                "total_solver_iterations": result.total_iterations,
                "final_iterations": result.final_iterations,
                "controller_state": controller.state_dict() if controller is not None else None,
                **result.extra,
            },
            tables={"summary": [row], "per epoch": per_epoch},
            timings={"train_s": result.wall_time},
            device=str(device),
            versions=package_versions(_VERSIONS),
        )
        record.save(cfg.out)
        save_plots(cfg.experiment, {arm: result}, spec.metric_name, cfg.out)
        say(f"wrote {cfg.out}")
    return 0


def reproduce(cfg: ReproduceConfig) -> int:
    import jax

    from iclr25_prdp._reproduce import jax_device, reproduce_experiment, save_plots, summary_row

    device = jax_device(cfg.device)
    say = _say(cfg.quiet)
    rows, metrics, all_arms = [], {}, {}
    with jax.default_device(device):
        for name in cfg.experiments:
            say(f"{name}:")
            arms, extra = reproduce_experiment(
                name,
                epochs=cfg.epochs,
                diff=cfg.diff,
                method="jacobi",
                key=jax.random.key(cfg.seed),
                say=say,
            )
            baseline = next(iter(arms.values()))
            rows += [summary_row(name, label, result, baseline) for label, result in arms.items()]
            metrics[name] = extra
            all_arms[name] = arms
    table = markdown_table(rows)
    print(table)
    if cfg.out is not None:
        record = RunRecord(
            command="iclr25-prdp reproduce",
            config=cfg,
            metrics=metrics,
            tables={"savings": rows},
            timings={
                f"{name}/{label}": r.wall_time for name, arms in all_arms.items() for label, r in arms.items()
            },
            notes=[
                "solver iterations = K x (forward + adjoint solves) summed over training; savings = 1 - PRDP / converged",
                "heat metrics: 2-step validation nMSE of the network rollout; poisson: |theta - theta_ref| / theta_ref",
            ],
            device=str(device),
            versions=package_versions(_VERSIONS),
        )
        record.save(cfg.out)
        for name, arms in all_arms.items():
            save_plots(name, arms, metrics[name]["metric"], cfg.out)
        say(f"wrote {cfg.out}")
    return 0


def bench(cfg: BenchConfig) -> int:
    import jax

    from iclr25_prdp._experiment import make_experiment
    from iclr25_prdp._reproduce import bench_rows, jax_device

    device = jax_device(cfg.device)
    problem = make_experiment(cfg.experiment, diff="implicit")
    with jax.default_device(device):
        rows = bench_rows(problem, cfg.iterations, cfg.repeats, _say(cfg.quiet), cfg.methods)
    print(markdown_table(rows, floatfmt=".3g"))
    if cfg.out is not None:
        RunRecord(
            command="iclr25-prdp bench",
            config=cfg,
            metrics={"device_kind": device.device_kind},
            tables={"step time and memory": rows},
            notes=[
                "ms/step: minimum wall time over the repeats of one jitted value_and_grad of the 2-step emulator loss "
                "(batch 25)",
                "temp MiB: XLA's temporary buffer size of the compiled step (compiled.memory_analysis())",
            ],
            device=str(device),
            versions=package_versions(_VERSIONS),
        ).save(cfg.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``iclr25-prdp``; returns the exit code."""
    return run(
        "iclr25-prdp",
        {
            "run": (RunConfig, run_experiment),
            "reproduce": (ReproduceConfig, reproduce),
            "bench": (BenchConfig, bench),
        },
        argv,
        default="run",
        description=(
            "PRDP (ICLR 2025): train through iterative PDE solvers with progressively refined iteration counts. "
            "run: one experiment; reproduce: converged K vs PRDP vs coarse K; bench: step time and memory."
        ),
        version=__version__,
    )
