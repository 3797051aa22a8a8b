"""``reproduce``: the declared primary comparison — G-set max-cut, QQA against simulated annealing at equal wall
time, the cut as a percentage of the best-known cut, paired over seeds — and, on request (``--tasks``), the paper's
other problems at small scale (tori, MIS, colouring, clique: one seed per graph, exploratory tables)."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np

from iclr25_qqa._anneal import Result as AnnealResult
from iclr25_qqa._anneal import anneal
from iclr25_qqa._baselines import exact_mis, greedy, rrg_mis_density_rs, simulated_annealing
from iclr25_qqa._experiment import _check, _device_label, _devices, _load_instance
from iclr25_qqa._graphs import parse_spec
from iclr25_qqa._problems import BinaryProblem, Problem, make_problem
from iclr25_shared.cli import Result, RunContext, check_interrupted

if TYPE_CHECKING:
    from iclr25_qqa._gset import Instance
    from iclr25_qqa.cli import ReproduceConfig

PAPER_EFFECT = 0.1
"""QQA − SA in percentage points of the best-known cut, as this comparison reads the paper: no G-set number is
given there; its max-cut experiments (Section 5, the DISCS max-cut benchmarks) report PQQA at least on par with the
sampling baselines (SA, iSCO) at comparable time. +0.1 points, the smallest difference a one-decimal table shows,
encodes "on par or better"; an interval entirely below 0 reads "not reproduced" for any positive value."""

GSET_INSTANCES: dict[str, tuple[str, ...]] = {
    "quick": ("G1", "G15", "G22", "G43"),
    "full": ("G1", "G2", "G11", "G15", "G22", "G43", "G55"),
    "gpu": ("G1", "G15", "G22", "G43", "G55", "G70"),
}
"""G-set instances per size (G15 stands in for G14, which the kit's data folder lacks; the same rudy family)."""

ARMS = ("QQA", "QQA+polish", "SA")
_TASK_OF = {"maxcut": "tori"}
"""``--tasks`` name of each problem of the small-scale benchmark (its max-cut instances are the tori)."""


def _gset_runs(
    cfg: ReproduceConfig, inst: Instance, devices: list[Any], ctx: RunContext
) -> list[dict[str, Any]]:
    """Every seed on one instance at ``cfg.budget`` seconds per run: QQA (its steps from the step time measured on
    the instance, compilation excluded; the 1-flip polish of its best replica reported separately) and SA (sweeps
    per read fitted to fill the budget on the instance), paired by seed; after the first seed each method's pace is
    the one its runs on the instance actually had (:class:`~iclr25_qqa._gset.Pace`)."""
    from iclr25_qqa import _gset

    prob = inst.problem
    gamma = (-cfg.qqa_gamma_start * _gset.mean_weighted_degree(prob), 0.1)
    kw: dict[str, Any] = {"lr": 1.0, "gamma": gamma, "devices": devices, "callback": _check}
    qqa_pace = _gset.Pace(_gset.calibrate_qqa(prob, cfg.qqa_replicas, cfg.seed, **kw))
    fixed, per_sweep = _gset.calibrate_sa_fit(prob, cfg.seed, cfg.sa_reads, cfg.budget)
    sa_pace = _gset.Pace(per_sweep, fixed)
    rows = []
    for seed in range(cfg.seed, cfg.seed + cfg.seeds):
        check_interrupted()
        q = _gset.qqa_run(prob, cfg.budget, seed, cfg.qqa_replicas, qqa_pace, **kw)
        a = _gset.sa_run(prob, cfg.budget, seed, cfg.sa_reads, sa_pace)
        best = inst.best_known
        rows.append({
            "instance": inst.label, "seed": seed, "best known": best,
            "QQA cut": q["cut"], "QQA+polish cut": q["polished_cut"], "SA cut": a["cut"],
            "QQA %": 100 * q["cut"] / best, "QQA+polish %": 100 * q["polished_cut"] / best,
            "SA %": 100 * a["cut"] / best,
            "QQA steps": q["steps"], "QQA s": round(q["seconds"], 3), "QQA compile s": round(q["compile_s"], 3),
            "polish ms": round(1e3 * q["polish_s"], 2), "SA sweeps": a["sweeps"], "SA s": round(a["seconds"], 3),
        })  # fmt: skip
        ctx.log.info(f"{inst.label} seed {seed}: QQA {q['cut']:g} (+polish {q['polished_cut']:g}), "
                     f"SA {a['cut']:g}, best known {best:g}")  # fmt: skip
    return rows


def per_seed(runs: list[dict[str, Any]], instances: list[str]) -> list[dict[str, Any]]:
    """One row per seed × arm: the mean over instances of the cut as % of the best known (the primary's value)
    and each instance's %."""
    table = []
    for seed in sorted({r["seed"] for r in runs}):
        by_inst = {r["instance"]: r for r in runs if r["seed"] == seed}
        for arm in ARMS:
            pct = {name: by_inst[name][f"{arm} %"] for name in instances}
            table.append({"seed": seed, "arm": arm, "mean % of best known": float(np.mean(list(pct.values()))),
                          **{f"{name} %": v for name, v in pct.items()}})  # fmt: skip
    return table


def comparisons(table: list[dict[str, Any]], instances: list[str]) -> list[Any]:
    """The primary (QQA − SA, mean % of the best known over the instances) first; QQA+polish − SA and QQA − SA per
    instance secondary (Holm-adjusted); the polish's own gain exploratory."""
    from iclr25_shared.stats import compare

    def col(arm: str, key: str = "mean % of best known") -> list[float]:
        return [r[key] for r in table if r["arm"] == arm]

    secondary = {"QQA+polish − SA, mean % of best known": (col("QQA+polish"), col("SA"))}
    for name in instances:
        secondary[f"QQA − SA, % of best known on {name}"] = (col("QQA", f"{name} %"), col("SA", f"{name} %"))
    return compare(
        primary=("QQA − SA, mean % of best known", col("QQA"), col("SA")),
        secondary=secondary,
        exploratory={"QQA+polish − QQA (the 1-flip polish)": (col("QQA+polish"), col("QQA"))},
    )


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """The declared primary comparison on G-set max-cut (``gset`` in ``--tasks``) and, when asked, the paper's other
    problems at small scale; ``results.json`` holds the comparisons, the per-seed values and the verdict."""
    from iclr25_shared.stats import verdict

    names = list(GSET_INSTANCES[cfg.size])
    instances = [_load_instance("--gset-dir", n, cfg.gset_dir) for n in names] if "gset" in cfg.tasks else []
    devices = _devices(ctx)
    t_start = time.perf_counter()
    metrics: dict[str, Any] = {"device": _device_label(devices), "paper_effect": PAPER_EFFECT}
    tables: dict[str, Any] = {}
    timings: dict[str, float] = {}
    notes: list[str] = []
    if instances:
        runs: list[dict[str, Any]] = []
        for inst in ctx.progress(instances, desc="G-set"):
            runs += _gset_runs(cfg, inst, devices, ctx)
        table = per_seed(runs, names)
        comp = comparisons(table, names)
        metrics["verdict"] = verdict(comp[0], PAPER_EFFECT)
        metrics["primary"] = comp[0].as_dict()
        for arm in ARMS:
            metrics[f"{arm} mean % of best known"] = float(np.mean([r["mean % of best known"] for r in table
                                                                    if r["arm"] == arm]))  # fmt: skip
        tables.update({"comparisons": [c.as_dict() for c in comp], "per_seed": table, "runs": runs})
        timings["gset_s"] = time.perf_counter() - t_start
        notes += [
            f"Primary (declared before the run): QQA − SA, the cut as % of the best-known cut averaged over "
            f"{', '.join(names)}, paired by seed ({cfg.seeds} seeds from {cfg.seed}), at equal wall time: "
            f"{cfg.budget:g} s per run for each method (QQA: steps = budget / its step time measured on the "
            "instance, compilation excluded; SA: sweeps per read fitted to fill the budget, model building "
            "excluded; after each instance's first seed, each method's pace is the one its runs there actually had; "
            f"the seconds are in 'runs'). Paper effect +{PAPER_EFFECT} points (see the README). Secondary (Holm-adjusted): "
            "QQA+polish − SA and QQA − SA per instance. Exploratory: the polish's own gain.",
            f"QQA (the bench's tuned max-cut profile): S={cfg.qqa_replicas} replicas, lr=1, T=1e-3, p=4, λ=0.2, "
            f"γ linear from -{cfg.qqa_gamma_start:g}·d̄ to 0.1 (d̄ the mean weighted degree). QQA+polish: its best "
            "replica improved by steepest 1-flip moves (MaxCut.local_search), milliseconds outside the budget. "
            f"SA: dwave-samplers, {cfg.sa_reads} reads.",
            "Best-known cuts: literature values (Benlic & Hao 2013 and later tables); G15 stands in for G14.",
        ]
    else:
        metrics["verdict"] = "no primary comparison: --tasks leaves out gset"
    others = [t for t in cfg.tasks if t != "gset"]
    if others:
        part = _tasks_part(cfg, ctx, devices)
        metrics["other problems (exploratory)"] = part["summary"]
        tables.update(part["tables"])
        timings["other_tasks_s"] = part["seconds"]
        notes += part["notes"]
    timings["total_s"] = time.perf_counter() - t_start
    return Result(metrics=metrics, tables=tables, timings=timings, notes=notes)


# ---------------------------------------------------------------------------------------------------------------
# the other problems (--tasks tori mis coloring clique)


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


def _tasks_part(cfg: ReproduceConfig, ctx: RunContext, devices: list[Any]) -> dict[str, Any]:
    """The paper's other problems at small scale (``--tasks tori mis coloring clique``): QQA beside SA at its wall
    time, greedy and exact references, one seed per graph (exploratory tables, no intervals); quality_vs_time.png."""
    from iclr25_qqa import _gset

    rows: list[dict[str, Any]] = []
    ablation_rows: list[dict[str, Any]] = []
    curves: dict[str, dict[str, Any]] = {}
    t_start = time.perf_counter()
    items = [it for it in _instances(cfg.size) if _TASK_OF.get(it["problem"], it["problem"]) in cfg.tasks]
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
    summary = _summarise(rows, ablation_rows)
    if ctx.writes:
        _plot(curves, ctx)
    return {
        "summary": summary,
        "tables": {
            "benchmark (one seed, exploratory)": rows,
            "ablations (MIS, random 3-regular, n=100)": ablation_rows,
        },
        "seconds": time.perf_counter() - t_start,
        "notes": [
            "Other problems (exploratory, one seed per graph, no intervals): QQA replicas=100, steps=3000, lr=1, "
            "T=1e-3, γ: -3 → 0.1, p=4, λ=0.2 (README config, normalised loss) unless the instance overrides "
            "replicas/steps (quick: tori S=32 and 2000 steps; MIS d=20 n=1000 S=32); ratio = objective / reference; "
            f"SA (dwave-samplers) {cfg.sa_reads} reads with sweeps filling QQA's wall time on the same instance.",
        ],
    }


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
