"""The CLI verbs: ``solve`` one instance, ``reproduce`` the paper's benchmark at small scale, ``bench`` QQA
against simulated annealing and greedy as quality-per-time ratios."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import networkx as nx
import numpy as np

from iclr25_qqa._anneal import Result as AnnealResult
from iclr25_qqa._anneal import anneal
from iclr25_qqa._baselines import exact_mis, greedy, rrg_mis_density_rs, simulated_annealing
from iclr25_qqa._graphs import load_graph, parse_spec
from iclr25_qqa._problems import BinaryProblem, Problem, make_problem
from iclr25_shared.checks import check_int
from iclr25_shared.cli import Result, RunContext, check_interrupted
from iclr25_shared.errors import InputError
from iclr25_shared.inputs import validating

if TYPE_CHECKING:
    from iclr25_qqa.cli import BenchConfig, ReproduceConfig, SolveConfig

T = TypeVar("T")


def _device_label(devices: list[Any]) -> str:
    return f"{len(devices)}x {devices[0].platform}" if devices else "none"


def _devices(ctx: RunContext) -> list[Any]:
    """The JAX devices ``--device`` names; one that is not there (``cuda`` without a GPU) is bad input.

    Importing JAX takes seconds: a Ctrl-C during it that JAX swallowed stops the run here, before any work.
    """
    with validating("--device"):
        devices = ctx.jax_devices()
    check_interrupted()
    return devices


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


def _check(done: int, total: int) -> None:
    """:func:`anneal`'s callback in ``reproduce`` and ``bench``: the runner's Ctrl-C check after every chunk."""
    check_interrupted()


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


# ---------------------------------------------------------------------------------------------------------------
# reproduce


def _qqa(problem: Problem, seed: int, devices: list[Any], **kw: Any) -> AnnealResult:
    kw.setdefault("local_search", True)
    return anneal(problem, key=seed, devices=devices, callback=_check, **kw)


def _ratio(problem: Problem, value: float, ref: float | None) -> float | None:
    if ref is None or not ref or not math.isfinite(ref):
        return None
    return value / ref if problem.sense == "max" else None


def _gpu_instances() -> list[dict[str, Any]]:
    """``--size gpu``: the paper's MIS scale (random regular graphs d = 3 at N = 10^4 and 10^5, d = 20 at 10^4: 10-100x
    the quick size's 10^3), the tori with S = 256 replicas (8x the quick size) and the largest colouring and clique
    instances; no n = 100 MIS (their exact MILP references are CPU-bound and their answers already exact). SA at
    equal time and the greedy baseline run on the CPU beside it."""
    torus_kw = {"replicas": 256, "steps": 3000}
    items: list[dict[str, Any]] = [
        {
            "task": "max-cut",
            "problem": "maxcut",
            "graph": "torus:60x50",
            "note": "G48/G49 size",
            "kw": torus_kw,
        },
        {"task": "max-cut", "problem": "maxcut", "graph": "torus:25x120", "note": "G50 size", "kw": torus_kw},
    ]
    for d, n in ((3, 10_000), (20, 10_000), (3, 100_000)):
        items.append({"task": "MIS", "problem": "mis", "graph": f"rrg:d={d},n={n},seed=0", "kw": {}})
    items.append(
        {"task": "colouring", "problem": "coloring", "graph": "myciel:5", "kw": {}, "note": "myciel5, k=χ=6"}
    )
    items.append({"task": "max-clique", "problem": "clique", "graph": "lesmis", "kw": {}})
    return items


def _instances(size: str) -> list[dict[str, Any]]:
    if size == "gpu":
        return _gpu_instances()
    torus_kw = {"replicas": 32, "steps": 2000} if size == "quick" else {"replicas": 100, "steps": 3000}
    items: list[dict[str, Any]] = [
        {
            "task": "max-cut",
            "problem": "maxcut",
            "graph": "torus:60x50",
            "note": "G48/G49 size",
            "kw": torus_kw,
        },
        {"task": "max-cut", "problem": "maxcut", "graph": "torus:25x120", "note": "G50 size", "kw": torus_kw},
    ]
    items += [
        {"task": "MIS", "problem": "mis", "graph": f"rrg:d=3,n=100,seed={s}", "kw": {}, "ablate": True}
        for s in range(5)
    ]
    items.append({"task": "MIS", "problem": "mis", "graph": "rrg:d=20,n=100,seed=0", "kw": {}})
    big = [1000] if size == "quick" else [1000, 10000]
    for n in big:
        for d in (3, 20):
            kw = {"replicas": 32} if (size == "quick" and d == 20) else {}
            items.append({"task": "MIS", "problem": "mis", "graph": f"rrg:d={d},n={n},seed=0", "kw": kw})
    items += [
        {
            "task": "colouring",
            "problem": "coloring",
            "graph": f"myciel:{k}",
            "kw": {},
            "note": f"myciel{k}, k=χ={k + 1}",
        }
        for k in (3, 4, 5)
    ]
    items += [{"task": "max-clique", "problem": "clique", "graph": g, "kw": {}} for g in ("karate", "lesmis")]
    return items


def _reference(
    item: dict[str, Any], spec: Any, problem: Problem, cfg: ReproduceConfig
) -> tuple[float | None, str]:
    kind = item["problem"]
    if kind == "maxcut":
        return spec.best_known.get("maxcut"), "best known (exact for the torus)"
    if kind == "coloring":
        return 0.0, f"χ = {int(spec.best_known['chromatic'])} (0 conflicts)"
    if kind == "clique":
        size = max(len(c) for c in nx.find_cliques(spec.graph))
        return float(size), "exact (networkx find_cliques)"
    n = problem.num_nodes
    d = int(item["graph"].split("d=")[1].split(",")[0])
    if n <= 100:
        value, bound, optimal = exact_mis(spec.graph, time_limit=cfg.exact_time_limit)
        if optimal:
            return value, "exact (HiGHS MILP)"
        return bound, f"MILP upper bound (best found {value:g} in {cfg.exact_time_limit:g} s)"
    return rrg_mis_density_rs(d) * n, f"RS density {rrg_mis_density_rs(d):.4f}·N"


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """The paper's benchmark at small scale: QQA beside SA, greedy and exact references; quality_vs_time.png."""
    from iclr25_qqa import _gset

    devices = _devices(ctx)
    rows: list[dict[str, Any]] = []
    ablation_rows: list[dict[str, Any]] = []
    curves: dict[str, dict[str, Any]] = {}
    t_start = time.perf_counter()
    items = [it for it in _instances(cfg.size) if it["problem"] in cfg.tasks]
    for item in ctx.progress(items, desc="instances"):
        spec = parse_spec(item["graph"])
        k = int(spec.best_known["chromatic"]) if item["problem"] == "coloring" else None
        problem = make_problem(item["problem"], spec.graph, k=k)
        ref, ref_kind = _reference(item, spec, problem, cfg)
        res = _qqa(problem, cfg.seed, devices, **item["kw"])
        row: dict[str, Any] = {
            "task": item["task"],
            "instance": item.get("note", item["graph"]) if item["problem"] == "coloring" else item["graph"],
            "N": problem.num_nodes,
            "|E|": spec.graph.number_of_edges(),
            "reference": ref,
            "reference kind": ref_kind,
            "QQA": res.best_objective,
            "QQA ratio": _ratio(problem, res.best_objective, ref),
            "QQA feasible": res.feasible,
            "QQA s": round(res.wall_time, 2),
            "QQA+LS": res.polished_objective,
        }
        if isinstance(problem, BinaryProblem):
            # SA at QQA's wall time on this instance: sweeps per read fill it (calibrated on this instance)
            sweeps = max(int(_gset.calibrate_sa(problem, cfg.seed, cfg.sa_reads, res.wall_time)), 1)
            sa = simulated_annealing(problem, num_reads=cfg.sa_reads, num_sweeps=sweeps, seed=cfg.seed)
            row.update(
                {
                    "SA": sa.objective,
                    "SA ratio": _ratio(problem, sa.objective, ref),
                    "SA feasible": sa.feasible,
                    "SA s": round(sa.seconds, 2),
                    "SA sweeps": sweeps,
                }
            )
        gr = greedy(problem, seeds=100 if problem.num_nodes <= 1000 else 10, seed=cfg.seed)
        row.update(
            {
                "greedy": gr.objective,
                "greedy ratio": _ratio(problem, gr.objective, ref),
                "greedy feasible": gr.feasible,
                "greedy s": round(gr.seconds, 2),
            }
        )
        rows.append(row)
        if item["graph"] in ("torus:60x50", "rrg:d=3,n=1000,seed=0"):
            curves[item["graph"]] = {
                "trace": res.trace,
                "ref": ref,
                "sa": row.get("SA"),
                "sa_s": row.get("SA s"),
                "greedy": gr.objective,
                "greedy_s": gr.seconds,
                "task": item["task"],
            }
        if item.get("ablate"):
            for label, change in (("S=1", {"replicas": 1}), ("λ=0", {"diversity": 0.0})):
                ab = _qqa(problem, cfg.seed, devices, local_search=False, **{**item["kw"], **change})
                ablation_rows.append(
                    {
                        "instance": item["graph"],
                        "variant": label,
                        "objective": ab.best_objective,
                        "ratio": _ratio(problem, ab.best_objective, ref),
                        "feasible": ab.feasible,
                    }
                )
            ablation_rows.append(
                {
                    "instance": item["graph"],
                    "variant": "S=100, λ=0.2 (default)",
                    "objective": res.best_objective,
                    "ratio": row["QQA ratio"],
                    "feasible": res.feasible,
                }
            )
        ctx.log.info(_row_line(row))
    total = time.perf_counter() - t_start
    summary = _summarise(rows, ablation_rows)
    if ctx.writes:
        _plot(curves, ctx)
    return Result(
        metrics={"summary": summary, "device": _device_label(devices)},
        tables={"benchmark": rows, "ablations (MIS, random 3-regular, n=100)": ablation_rows},
        timings={"total_s": total},
        notes=[
            "QQA: replicas=100, steps=3000, lr=1, T=1e-3, γ: -3 → 0.1, p=4, λ=0.2 (README config, normalised loss) "
            "unless the instance overrides replicas/steps (quick: tori S=32 and 2000 steps; MIS d=20 n=1000 S=32).",
            "ratio = objective / reference (max problems); colouring reports conflicts (0 is optimal).",
            f"SA (dwave-samplers) at equal wall time: {cfg.sa_reads} reads, sweeps filling QQA's wall time "
            "(compilation excluded) on the same instance.",
        ],
    )


def _row_line(row: dict[str, Any]) -> str:
    def f(v: Any) -> str:
        return (
            "-"
            if v is None
            else (
                f"{v:.4f}"
                if isinstance(v, float) and not float(v).is_integer()
                else f"{v:g}"
                if isinstance(v, float)
                else str(v)
            )
        )

    return (
        f"{row['task']:>10} {row['instance']:<24} ref {f(row['reference'])} | QQA {f(row['QQA'])} "
        f"({f(row['QQA ratio'])}, {row['QQA s']} s, feasible={row['QQA feasible']}) | SA {f(row.get('SA'))} | "
        f"greedy {f(row.get('greedy'))}"
    )


def _summarise(rows: list[dict[str, Any]], ablation: list[dict[str, Any]]) -> list[str]:
    out = []
    mis100 = [r["QQA ratio"] for r in rows if r["instance"].startswith("rrg:d=3,n=100,")]
    if mis100:
        out.append(
            f"MIS d=3 n=100 (5 seeds): mean QQA ratio to exact {np.mean(mis100):.4f} (paper's bar: >= 0.97)"
        )
    col = [r for r in rows if r["task"] == "colouring"]
    if col:
        out.append(
            "colouring at k=χ: conflicts "
            + ", ".join(f"{r['instance'].split(',')[0]}={r['QQA']:g}" for r in col)
        )
    vs_sa = [(r["QQA"], r["SA"]) for r in rows if r.get("SA") is not None]
    if vs_sa:
        wins = sum(q >= s for q, s in vs_sa)
        out.append(
            f"QQA >= SA on {wins}/{len(vs_sa)} binary instances (objective, raw QQA without local search)"
        )
    for variant in ("S=1", "λ=0"):
        vals = [a["ratio"] for a in ablation if a["variant"] == variant and a["ratio"] is not None]
        base = [a["ratio"] for a in ablation if a["variant"].startswith("S=100") and a["ratio"] is not None]
        if vals and base:
            out.append(f"ablation {variant}: mean ratio {np.mean(vals):.4f} vs default {np.mean(base):.4f}")
    return out


def _plot(curves: dict[str, dict[str, Any]], ctx: RunContext) -> None:
    if not curves:
        return
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(5.5 * len(curves), 4), squeeze=False)
    for ax, (name, c) in zip(axes[0], curves.items()):
        ref = c["ref"] or 1.0
        pts = [p for p in c["trace"] if p["feasible"]]  # early lowest-energy points can be infeasible
        t = [p["seconds"] for p in pts]
        q = [p["best_objective"] / ref for p in pts]
        ax.plot(t, q, "-o", ms=3, label="QQA (best so far, feasible)")
        if c["sa"] is not None:
            ax.plot([c["sa_s"]], [c["sa"] / ref], "s", ms=8, label="SA (dwave-samplers)")
        ax.plot([c["greedy_s"]], [c["greedy"] / ref], "^", ms=8, label="greedy (networkx)")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("wall time (s)")
        ax.set_ylabel("objective / reference")
        ax.set_title(f"{c['task']}: {name}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    ctx.save_figure("quality_vs_time.png", fig)


# ---------------------------------------------------------------------------------------------------------------
# bench


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """G-set max-cut at equal wall time: QQA (raw, and its best replica 1-flip polished), SA (each tuned on
    ``cfg.tune_on``) and, when installed, the official ``qqa`` with its own profile, ``cfg.seeds`` paired seeds at
    every budget; the QQA step's cost against the energy-gradient floor under the shared interleaved protocol."""
    from iclr25_qqa import _gset
    from iclr25_shared.bench import interleaved

    def instance(option: str, name: str) -> Any:
        try:
            with validating(option):  # an unknown spec, a malformed file
                return _gset.load_instance(name, cfg.gset_dir, cfg.layout)
        except FileNotFoundError as exc:  # a G-set name whose file is not in the folder
            hint = (
                f"--gset-dir is {str(cfg.gset_dir)!r}"
                if cfg.gset_dir is not None
                else "pass --gset-dir FOLDER"
            )
            raise InputError(f"{option}: {exc} ({hint})") from None

    instances = [instance("--instances", name) for name in cfg.instances]  # every file read before any work
    tune = instance("--tune-on", cfg.tune_on) if cfg.tune_on else None
    official_py = cfg.official_python if cfg.official_python is not None else _gset.official_python()
    devices = _devices(ctx)
    t_start = time.perf_counter()
    qqa_kw: dict[str, Any] = {"devices": devices, "callback": _check}
    grid_rows: list[dict[str, Any]] = []
    best_qqa = (cfg.qqa_replicas[0], cfg.qqa_lr[0], cfg.qqa_gamma_start[0])
    first_budget = cfg.budget[0]

    def gamma_for(prob: Any, c: float) -> tuple[float, float]:
        return (-c * _gset.mean_weighted_degree(prob), 0.1)

    best_reads = cfg.sa_reads[0]
    tunable = len(cfg.qqa_replicas) * len(cfg.qqa_lr) * len(cfg.qqa_gamma_start) > 1 or len(cfg.sa_reads) > 1
    if tune is not None and tunable:
        tune_seed = cfg.seed + 10_000  # not one of the scored seeds
        ctx.log.info(f"tuning on {tune.label} at {first_budget:g} s per run")
        scores: dict[Any, float] = {}
        for replicas in cfg.qqa_replicas:
            check_interrupted()
            step_s = _gset.calibrate_qqa(tune.problem, replicas, tune_seed, **qqa_kw)
            for lr in cfg.qqa_lr:
                for c in cfg.qqa_gamma_start:
                    gamma = gamma_for(tune.problem, c)
                    run = _gset.qqa_run(
                        tune.problem, first_budget, tune_seed, replicas, step_s, lr=lr, gamma=gamma, **qqa_kw
                    )
                    scores[("qqa", replicas, lr, c)] = run["cut"]
                    grid_rows.append({"method": "QQA", "setting": f"S={replicas}, lr={lr:g}, γ0={gamma[0]:.3g}"
                                      f" ({c:g}·d̄)", "steps/sweeps": run["steps"], "cut": run["cut"],
                                      "seconds": round(run["seconds"], 2)})  # fmt: skip
        for reads in cfg.sa_reads:
            check_interrupted()  # simulated annealing is not JAX, but JAX's gc callback runs during it too
            sweeps = _gset.calibrate_sa(tune.problem, tune_seed, reads, first_budget)
            run = _gset.sa_run(tune.problem, first_budget, tune_seed, reads, sweeps)
            scores[("sa", reads)] = run["cut"]
            grid_rows.append({"method": "SA", "setting": f"reads={reads}", "steps/sweeps": run["sweeps"],
                              "cut": run["cut"], "seconds": round(run["seconds"], 2)})  # fmt: skip
        qqa_keys = [k for k in scores if k[0] == "qqa"]
        best_qqa = max(qqa_keys, key=lambda k: scores[k])[1:]  # first grid point wins ties
        best_reads = max((k for k in scores if k[0] == "sa"), key=lambda k: scores[k])[1]
    replicas, lr, gamma_c = best_qqa
    ctx.log.info(f"chosen: QQA S={replicas}, lr={lr:g}, γ0={gamma_c:g}·d̄; SA reads={best_reads}")

    long_names = (
        {instance("--long-instances", n).label for n in cfg.long_instances} if cfg.long_instances else None
    )
    official_version = "not installed" if official_py is None else "?"
    step_rows: list[dict[str, Any]] = []
    raw_rows: list[dict[str, Any]] = []
    loads: list[dict[str, Any]] = []
    run_rows: list[dict[str, Any]] = []
    summary_rows: list[dict[str, Any]] = []
    pooled: dict[str, list[float]] = {}
    seeds = [cfg.seed + k for k in range(cfg.seeds)]
    for inst in ctx.progress(instances, desc="instances"):
        prob = inst.problem
        gamma = gamma_for(prob, gamma_c)
        budgets = [
            b for i, b in enumerate(cfg.budget) if i == 0 or long_names is None or inst.label in long_names
        ]
        # step cost, interleaved rounds (the shared protocol): the step beside its parts and the gradient floor
        check_interrupted()
        arms = _gset.step_arms(prob, replicas, chunk=cfg.step_chunk, devices=devices, lr=lr, gamma=gamma)
        timing = interleaved(arms, repeats=cfg.step_repeats, warmup=1)
        for index, names in enumerate(timing.order):
            raw_rows += [{"instance": inst.label, "round": index, "position": pos, "arm": arm,
                          "seconds": round(timing.times[arm][index], 5)} for pos, arm in enumerate(names)]  # fmt: skip
        loads.append({"instance": inst.label, "load before": timing.env.get("load_average_1m"),
                      "load after": timing.env.get("load_average_1m_after")})  # fmt: skip
        best_floor = min(("value+grad (edges)", "value+grad (dense)"), key=timing.median)
        for arm in arms:
            s_arm = int(arm.split("S=")[1].split(",")[0]) if arm.startswith("QQA") else replicas
            est = timing.ratio(arm, best_floor)
            step_rows.append({
                "instance": inst.label, "N": prob.num_nodes, "|E|": len(prob.edge_u),
                "layout used": prob.resolved_layout(), "arm": arm,
                "ms per step": round(1e3 * timing.median(arm) / cfg.step_chunk, 3),
                "µs per replica-step": round(1e6 * timing.median(arm) / cfg.step_chunk / s_arm, 2),
                "time / floor (95% CI)": f"{est.value:.2f} [{est.low:.2f}, {est.high:.2f}]",
                "floor": f"{best_floor}, S={replicas}",
                "rounds": cfg.step_repeats,
            })  # fmt: skip
        step_s = _gset.calibrate_qqa(prob, replicas, cfg.seed, lr=lr, gamma=gamma, **qqa_kw)
        official: dict[tuple[float, int], dict[str, Any]] = {}
        if official_py is not None:
            official_version, runs = _gset.official_runs(prob, official_py, budgets, seeds)
            official = {(r["budget"], r["seed"]): r for r in runs}
        for budget in budgets:
            sa_sweeps = _gset.calibrate_sa(prob, cfg.seed, best_reads, budget)
            diffs: dict[str, list[float]] = {}
            rows_b: list[dict[str, Any]] = []
            for seed in seeds:
                check_interrupted()
                q = _gset.qqa_run(prob, budget, seed, replicas, step_s, lr=lr, gamma=gamma, **qqa_kw)
                a = _gset.sa_run(prob, budget, seed, best_reads, sa_sweeps)
                row: dict[str, Any] = {"budget s": budget, "instance": inst.label, "seed": seed}
                cuts = {"QQA": q["cut"], "QQA+polish": q["polished_cut"], "SA": a["cut"]}
                row.update({"QQA steps": q["steps"], "QQA s": round(q["seconds"], 2),
                            "polish ms": round(1e3 * q["polish_s"], 1), "SA sweeps": a["sweeps"],
                            "SA s": round(a["seconds"], 2)})  # fmt: skip
                off = official.get((budget, seed))
                if off is not None:
                    cuts["official"] = off["cut"]
                    cuts["official+polish"] = off["polished_cut"]
                    row.update({"official epochs": off["epochs"], "official s": round(off["seconds"], 2)})
                for name, cut in cuts.items():
                    row[f"{name} cut"] = cut
                    if inst.best_known:
                        row[f"{name} cut/best"] = round(cut / inst.best_known, 5)
                if inst.best_known:
                    for name, r in (("QQA", q), ("SA", a)):
                        t = _gset.first_time(r["trace"], 0.99 * inst.best_known)
                        row[f"{name} t99% s"] = None if t is None else round(t, 2)
                for name in cuts:
                    if name != "SA":
                        diffs.setdefault(f"{name} − SA", []).append(cuts[name] - cuts["SA"])
                if "official" in cuts:
                    diffs.setdefault("QQA − official", []).append(cuts["QQA"] - cuts["official"])
                    diffs.setdefault("QQA+polish − official+polish", []).append(
                        cuts["QQA+polish"] - cuts["official+polish"]
                    )
                rows_b.append(row)
                ctx.log.info(f"{inst.label} {budget:g} s seed {seed}: QQA {q['cut']:g} (+polish "
                             f"{q['polished_cut']:g}), SA {a['cut']:g}, best known {inst.best_known}")  # fmt: skip
            run_rows += rows_b
            summary: dict[str, Any] = {"budget s": budget, "instance": inst.label, "best": inst.best_known}
            for name in ("QQA", "QQA+polish", "SA", "official", "official+polish"):
                if f"{name} cut" in rows_b[0]:
                    summary[f"{name} % of best"] = _pct(rows_b, f"{name} cut/best")
            for label, values in diffs.items():
                mean, lo, hi = _gset.paired_interval(values)
                summary[f"{label} (95% CI)"] = f"{mean:+.1f} [{lo:+.1f}, {hi:+.1f}]"
                if inst.best_known:
                    pooled.setdefault(f"{budget:g} s: ({label})/best", []).extend(
                        v / inst.best_known for v in values
                    )
            summary["QQA reached 99% (runs)"] = sum(r.get("QQA t99% s") is not None for r in rows_b)
            summary["SA reached 99% (runs)"] = sum(r.get("SA t99% s") is not None for r in rows_b)
            summary_rows.append(summary)
    pooled_metrics = {}
    for label, values in pooled.items():
        m, lo, hi = _gset.paired_interval(values)
        pooled_metrics[label] = f"{m:+.4f} [{lo:+.4f}, {hi:+.4f}] over {len(values)} pairs"
    total = time.perf_counter() - t_start
    return Result(
        metrics={
            "device": _device_label(devices),
            "budgets_s": list(cfg.budget),
            "chosen": f"QQA S={replicas}, lr={lr:g}, γ from -{gamma_c:g}·d̄ to 0.1; SA reads={best_reads}",
            "official qqa": official_version if official_py is not None else "not installed (not run)",
            "pooled paired differences, 95% CI": pooled_metrics,
            "load average around each step-time comparison": loads,
        },
        tables={
            "tuning (on " + (cfg.tune_on or "none") + ")": grid_rows,
            "equal wall time, per instance": summary_rows,
            "step time (interleaved rounds)": step_rows,
            "runs": run_rows,
            "step time, every timed call": raw_rows,
        },
        timings={"total_s": total},
        notes=[
            "Equal wall time: each run gets the budget; QQA steps = budget / its step time measured on the instance "
            "(compilation excluded, reported), SA sweeps per read fitted to fill the budget (t = a + b·sweeps from "
            "two timed calls; model building excluded); the official qqa (when installed) runs its own default "
            "profile with epochs = budget / its measured epoch time, one torch thread.",
            "QQA+polish: the best replica after the budget, improved by steepest 1-flip moves to a local optimum "
            "(MaxCut.local_search); its milliseconds are reported per run and are outside the budget. "
            "official+polish: the same 1-flip polish applied to the official package's answer.",
            "Step time: the shared interleaved protocol (iclr25_shared.bench.interleaved: warm-up, rotated rounds, "
            "median and bootstrap interval of per-round ratios), every arm running the same number of steps; the "
            "floor is the energy's value+gradient alone at the chosen S, in the faster layout.",
            "Differences: mean paired difference of cuts over seeds with a two-sided 95 % Student-t interval.",
        ],
    )


def _pct(rows: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return round(100 * float(np.mean(vals)), 2) if vals else None


def _official_summary(rows: list[dict[str, Any]], diffs: list[float]) -> dict[str, Any]:
    mean, lo, hi = _gset_interval(diffs)
    return {
        "official qqa mean cut": round(float(np.mean([r["official qqa cut"] for r in rows])), 1),
        "QQA − official (95% CI)": f"{mean:+.1f} [{lo:+.1f}, {hi:+.1f}]",
    }


def _gset_interval(diffs: list[float]) -> tuple[float, float, float]:
    from iclr25_qqa._gset import paired_interval

    return paired_interval(diffs)


def _mean_of(rows: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return round(float(np.mean(vals)), 4) if vals else None


def _time_to_reach(problem: Problem, runs: list[AnnealResult], target: float) -> float | None:
    times = [
        p["seconds"]
        for r in runs
        for p in r.trace
        if p["feasible"] and not problem.better(target, p["best_objective"])
    ]
    return min(times) if times else None
