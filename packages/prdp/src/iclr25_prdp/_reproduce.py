"""``iclr25-prdp reproduce``: the converged fixed ``K_eps`` against PRDP for every seed, cost at equal accuracy,
and the paired comparisons (``iclr25_shared.stats``) with the declared primary first.

Primary (README "Primary comparison"): Navier-Stokes, wall time to equal accuracy, PRDP / converged - 1 per seed,
against the paper's -0.62 (abstract: 62 % less training time). Secondary (Holm-adjusted among themselves): the
iteration ratios and the 2-D heat time ratio, and the Navier-Stokes final-metric ratio (accuracy kept).
Exploratory: what cannot be resolved here (1-D heat and Poisson wall times, a run of well under a second; the
deterministic Poisson iterations) and the heat final-metric ratios.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

# numpy first, from Python (see _experiment.py)

# isort: split
import jax

from iclr25_prdp._experiment import nothing, save_plots, summary_row
from iclr25_prdp._navier_stokes import NavierStokesEmulator
from iclr25_prdp._problems import ArmResult, HeatEmulator, controller_for, make_experiment
from iclr25_shared.cli import Result, RunContext, check_interrupted

if TYPE_CHECKING:
    from iclr25_prdp.cli import ReproduceConfig

__all__ = [
    "PAPER_EFFECT",
    "comparisons",
    "equal_accuracy",
    "interleave",
    "iterations_to_reach",
    "per_seed_rows",
    "reproduce",
    "reproduce_experiment",
    "solve_share",
]

PAPER_EFFECT = -0.62
"""The paper's headline (abstract): Navier-Stokes training with PRDP takes 62 % less time, i.e. a time ratio
PRDP / converged of 0.38; the primary comparison's sign convention is ratio - 1."""
PRIMARY_ORDER = ("navier-stokes", "heat2d-emulator", "heat-emulator", "poisson-inverse")
"""The primary is the wall-time ratio of the first of these that ran (navier-stokes in the declared run)."""
LABELS = {
    "navier-stokes": "Navier-Stokes",
    "heat2d-emulator": "2-D heat",
    "heat-emulator": "1-D heat",
    "poisson-inverse": "Poisson",
}


def iterations_to_reach(result: ArmResult, threshold: float) -> int | None:
    """Cumulative solver iterations when the metric first falls to ``threshold`` (``None`` if never)."""
    for metric, spent in zip(result.log.metric, result.log.cumulative_iterations):
        if metric <= threshold:
            return spent
    return None


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
    tick: Callable[[], None] = nothing,
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
        "converged iterations": spec.converged_iterations,
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
    tick: Callable[[], None] = nothing,
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
    tick: Callable[[], None] = nothing,
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


def per_seed_rows(seed_rows: Sequence[dict[str, Any]], methods: dict[str, str]) -> list[dict[str, Any]]:
    """One row per experiment x seed x arm with the raw values the comparisons are computed from: the common
    target, the epoch each arm first reached it, the solver iterations and wall seconds spent until then, and the
    arm's final metric and ``K``."""
    out = []
    for r in seed_rows:
        for arm, short in (("converged", "converged"), ("PRDP", "PRDP")):
            row: dict[str, Any] = {
                "experiment": r["experiment"],
                "solver": methods[r["experiment"]],
                "seed": r["seed"],
                "arm": arm,
                "target metric": r["target metric"],
                "epoch reaching target": r[f"{short}: epoch"],
                "iterations to target": r[f"{short}: iterations"],
                "wall s to target": r[f"{short}: wall s"],
                "final metric": r[f"{short}: final metric"],
                "final K": r["PRDP final K"] if arm == "PRDP" else r["converged K"],
            }
            if f"{short}: exact-pressure nMSE" in r:
                row["final exact-pressure nMSE"] = r[f"{short}: exact-pressure nMSE"]
            out.append(row)
    return out


def _ratio(
    per_seed: Sequence[dict[str, Any]], experiment: str, key: str
) -> tuple[list[float], list[float], list[int]]:
    """PRDP / converged of ``key`` per seed (and ones as the baseline); seeds whose converged value is 0 (the
    ratio is undefined) are left out and returned as the third element."""
    arms: dict[int, dict[str, float]] = {}
    for row in per_seed:
        if row["experiment"] == experiment:
            arms.setdefault(row["seed"], {})[row["arm"]] = float(row[key])
    ratios, dropped = [], []
    for seed, pair in arms.items():
        value = pair["PRDP"] / pair["converged"] if pair["converged"] > 0 else math.nan
        if math.isfinite(value):
            ratios.append(value)
        else:
            dropped.append(seed)
    return ratios, [1.0] * len(ratios), dropped


def comparisons(per_seed: Sequence[dict[str, Any]]) -> tuple[list[Any], list[str]]:
    """The comparisons (``iclr25_shared.stats.compare`` rows, primary first) and notes on left-out seeds.

    Every comparison is PRDP / converged - 1 of one per-seed quantity (negative = PRDP cheaper / better), the
    seeds paired. The primary is the wall-time ratio of the first experiment of :data:`PRIMARY_ORDER` that ran.
    """
    from iclr25_shared.stats import compare

    ran = {r["experiment"]: r["solver"] for r in per_seed}
    present = [name for name in PRIMARY_ORDER if name in ran]
    notes: list[str] = []

    def name(experiment: str, what: str) -> str:
        solver = f" ({ran[experiment]})" if experiment == "navier-stokes" else ""
        return f"{LABELS[experiment]}{solver}: {what}, PRDP / converged - 1"

    def pair(experiment: str, key: str) -> tuple[list[float], list[float]]:
        method, baseline, dropped = _ratio(per_seed, experiment, key)
        if dropped:
            notes.append(
                f"{experiment} {key}: seeds {dropped} left out of the ratio (the converged arm's value is 0, the "
                "ratio is undefined; their raw values are in per_seed)"
            )
        return method, baseline

    time_, iters, final = "wall s to target", "iterations to target", "final metric"
    what = {
        time_: "wall time to equal accuracy",
        iters: "solver iterations to equal accuracy",
        final: "final metric",
    }
    primary_experiment = present[0]
    candidates = {
        "secondary": [
            ("navier-stokes", iters),
            ("navier-stokes", final),
            ("heat2d-emulator", time_),
            ("heat2d-emulator", iters),
            ("heat-emulator", iters),
        ],
        "exploratory": [
            ("heat-emulator", time_),
            ("poisson-inverse", iters),
            ("poisson-inverse", time_),
            ("heat2d-emulator", final),
            ("heat-emulator", final),
        ],
    }
    groups: dict[str, dict[str, tuple[list[float], list[float]]]] = {"secondary": {}, "exploratory": {}}
    for role, items in candidates.items():
        for experiment, key in items:
            if experiment in ran and (experiment, key) != (primary_experiment, time_):
                groups[role][name(experiment, what[key])] = pair(experiment, key)
    rows = compare(
        primary=(name(primary_experiment, what[time_]), *pair(primary_experiment, time_)),
        secondary=groups["secondary"],
        exploratory=groups["exploratory"],
    )
    return rows, notes


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """Converged K vs PRDP for every seed: cost at equal accuracy, the paired comparisons and the verdict; the
    first seed's whole runs (with coarse K), the Navier-Stokes timing diagnostic and plots."""
    from iclr25_prdp._experiment import device_of
    from iclr25_shared.stats import verdict

    device = device_of(ctx)
    n_seeds, grid = cfg.resolved()
    seeds = [cfg.seed + i for i in range(n_seeds)]
    rows, seed_rows, metrics, timings = [], [], {}, {}
    methods: dict[str, str] = {}
    diagnostics: list[dict[str, Any]] = []
    with jax.default_device(device):
        for name in cfg.experiments:
            ctx.log.info(f"{name}:")
            methods[name] = cfg.ns_method if name == "navier-stokes" else "jacobi"
            arms, extra, these = reproduce_experiment(
                name,
                epochs=cfg.epochs,
                diff=cfg.diff,
                method=methods[name],
                seeds=seeds,
                say=ctx.log.info,
                grid=grid,
                tick=check_interrupted,
            )
            baseline = next(iter(arms.values()))
            rows += [summary_row(name, label, result, baseline) for label, result in arms.items()]
            seed_rows += [{**r, "converged K": extra["converged iterations"]} for r in these]
            metrics[name] = extra
            if "timing diagnostic" in extra:
                diagnostics.append({"experiment": name, **extra["timing diagnostic"]})
            timings.update({f"{name}/{label}": r.wall_time for label, r in arms.items()})
            save_plots(ctx, name, arms, extra["metric"])
    per_seed = per_seed_rows(seed_rows, methods)
    compared, left_out = comparisons(per_seed)
    declared = compared[0].name.startswith("Navier-Stokes (jacobi)")
    metrics["primary"] = compared[0].name
    metrics["paper_effect"] = PAPER_EFFECT
    metrics["paper_effect_source"] = (
        "Bhatia, Koehler, Thuerey (ICLR 2025), abstract: PRDP cuts the Navier-Stokes emulator's training time by "
        "62 %, i.e. a time ratio PRDP / converged - 1 of -0.62"
    )
    metrics["verdict"] = verdict(compared[0], PAPER_EFFECT)
    ctx.log.info(f"primary: {compared[0].name}: {compared[0].estimate}; verdict: {metrics['verdict']}")
    return Result(
        metrics=metrics,
        tables={
            "comparisons": [c.as_dict() for c in compared],
            "per_seed": per_seed,
            f"whole runs, seed {seeds[0]}": rows,
            "timing diagnostic (navier-stokes: share of a converged epoch spent in the pressure solves)": (
                diagnostics
            ),
        },
        timings=timings,
        notes=[
            "primary (declared before the run): Navier-Stokes with the Jacobi pressure solve, wall time until the "
            "arm first reaches the common target, PRDP / converged - 1 per seed (paired t-interval over seeds), "
            "against the paper's -0.62 (abstract); secondary (Holm-adjusted among themselves): Navier-Stokes "
            "iterations and final-metric ratios, 2-D heat time and iteration ratios, 1-D heat iteration ratio; "
            "exploratory: 1-D heat and Poisson wall time (runs of well under a second after compilation), Poisson "
            "iterations (deterministic: every seed identical) and the heat final-metric ratios"
            + ("" if declared else f"; THIS RUN'S PRIMARY IS NOT THE DECLARED ONE: {compared[0].name}"),
            "equal accuracy: target = the worse of the two final validation metrics of a seed; cost = cumulative "
            "solver iterations and wall time until each arm first reaches it (per_seed has both arms' raw values)",
            "solver iterations = K x (forward + adjoint solves) summed over training; wall time excludes the "
            "one-off JIT compilation (done before the clock starts); Navier-Stokes arms run interleaved epoch by "
            "epoch in one process",
            "heat metrics: 2-step validation nMSE of the network rollout; navier-stokes: 3-step validation nMSE of "
            "the hybrid with the arm's current K (the final models are also scored with the exact pressure "
            "solve); poisson: |theta - theta_ref| / theta_ref",
            *left_out,
        ],
    )
