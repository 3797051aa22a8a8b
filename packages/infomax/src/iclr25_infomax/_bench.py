"""``bench``: selection time, memory and objective quality against the exact optimum."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_infomax._baselines import (
    facility_location_select,
    greedy_select,
    milp_select,
)
from iclr25_infomax._similarity import knn_similarity
from iclr25_infomax._solver import objective, solve
from iclr25_infomax._validate import resolve_budget
from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_infomax.cli import BenchConfig

__all__ = ["bench"]


def _random_graph(n: int, k: int, rng: np.random.Generator) -> Any:
    """k random neighbours per sample, weights in [0.5, 1), symmetrised by max, zero diagonal (bench only)."""
    import scipy.sparse as sp

    rows = np.repeat(np.arange(n), k)
    cols = rng.integers(0, n, size=n * k)
    A = sp.csr_matrix((rng.uniform(0.5, 1.0, size=n * k), (rows, cols)), shape=(n, n))
    from ._similarity import without_diagonal

    return without_diagonal(A.maximum(A.T))


def _infomax_indices(
    scores: np.ndarray, K: Any, p: int, alpha: float, iterations: int, init: str
) -> np.ndarray:
    return solve(scores, K, p, alpha=alpha, iterations=iterations, init=init).indices


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Time / peak memory of InfoMax vs greedy vs facility location at growing N, and objective quality."""
    from iclr25_shared.bench import interleaved
    from iclr25_shared.device import PeakMemory, Timer

    log = ctx.log.info

    rows, raw = [], {}
    for n in cfg.sizes:
        rng = np.random.default_rng(cfg.seed)
        if cfg.graph == "random":
            with Timer() as t_knn:
                K = _random_graph(n, cfg.k, rng)
        else:
            centres = rng.normal(size=(max(10, n // 1000), cfg.dim)).astype(np.float32)
            feats = centres[rng.integers(len(centres), size=n)]
            feats += 0.5 * rng.normal(size=(n, cfg.dim)).astype(np.float32)
        scores = rng.random(n)
        if cfg.graph == "knn":
            with Timer() as t_knn:
                K = knn_similarity(feats, k=cfg.k, threads=cfg.threads or None)
        p = resolve_budget(cfg.budget, n)
        row: dict[str, Any] = {"N": n, "knn_s": round(t_knn.seconds, 2), "nnz_per_N": round(K.nnz / n, 1)}
        results: dict[str, tuple[float, float, float]] = {}
        runners: dict[str, Callable[[], np.ndarray]] = {
            "infomax": partial(_infomax_indices, scores, K, p, cfg.alpha, cfg.iterations, "relaxed"),
            "greedy": partial(greedy_select, scores, K, p, alpha=cfg.alpha),
        }
        if n <= cfg.max_score_init_n:
            runners["infomax_score_init"] = partial(
                _infomax_indices, scores, K, p, cfg.alpha, cfg.iterations, "score"
            )
        if n <= cfg.max_facility_n:
            runners["facility_location"] = partial(facility_location_select, K, p)
        for name, fn in runners.items():  # one call each: peak memory and the objective; also the warm-up
            with PeakMemory() as mem:
                idx = fn()
            results[name] = (0.0, mem.peak_bytes / 2**20, objective(idx, scores, K, alpha=cfg.alpha))
        rounds = cfg.repeats if n <= 50_000 else max(3, cfg.repeats // 2)
        run = interleaved(runners, repeats=rounds, warmup=0, threads=ctx.threads or None)
        raw[str(n)] = run.as_dict()
        for name in runners:
            results[name] = (run.median(name), *results[name][1:])
            log(f"N={n} {name}: {run.median(name):.2f}s, peak +{results[name][1]:.0f} MiB")
        row["infomax_s"] = round(results["infomax"][0], 3)
        row["infomax_MiB"] = round(results["infomax"][1], 1)
        row["K_MiB"] = round((K.data.nbytes + K.indices.nbytes + K.indptr.nbytes) / 2**20, 1)
        ratio = run.ratio("infomax", "greedy")
        row["time_vs_greedy"] = round(ratio.value, 2)
        row["interval"] = f"[{ratio.low:.3g}, {ratio.high:.3g}]"
        # every row has every column (None where a method was skipped at this N), so tables render as one
        row["time_vs_FL"] = row["interval_FL"] = None
        if "facility_location" in results:
            ratio = run.ratio("infomax", "facility_location")
            row["time_vs_FL"] = round(ratio.value, 3)
            row["interval_FL"] = f"[{ratio.low:.3g}, {ratio.high:.3g}]"
        row["objective_vs_greedy"] = round(results["infomax"][2] / results["greedy"][2], 4)
        row["score_init_time_vs_greedy"] = row["score_init_objective_vs_greedy"] = None
        if "infomax_score_init" in results:
            row["score_init_time_vs_greedy"] = round(run.ratio("infomax_score_init", "greedy").value, 2)
            row["score_init_objective_vs_greedy"] = round(
                results["infomax_score_init"][2] / results["greedy"][2], 4
            )
        row["rounds"] = rounds
        row["held_equal"] = (
            "the same K, scores, budget p and alpha; not equal: the objective reached (columns)"
        )
        rows.append(row)

    quality = _quality_vs_optimum(cfg, log)
    return Result(
        tables={"selection": rows, "quality_vs_milp": quality},
        metrics={
            "win_rate_vs_greedy_where_redundancy_binds": _win_rate(quality),
            "bench": raw,
        },
        notes=[
            "Features: a Gaussian mixture (seeded), d and k as configured; scores uniform in [0, 1).",
            "Peak memory is the process's peak RSS growth during one call (CPU), above what was allocated before; "
            "that call is also each method's warm-up.",
            f"Time: iclr25_shared.bench.interleaved, wall seconds, {cfg.repeats} rounds (half, at least 3, above "
            "N = 50 000), methods rotated each round; ratios are medians of per-round ratios with a 95 % bootstrap "
            "interval over rounds. Selection is numpy/scipy on the host whatever --device says.",
            "Small instances: gap = (optimum − objective) / |optimum| over random instances per row (MILP optimum, "
            "HiGHS); win/tie/loss compares each method's objective with greedy's on the same instance. "
            "'Redundancy binds' = the rows with α >= 0.3, where greedy is off the optimum on some instance.",
        ],
    )


def _small_instance(kind: str, n: int, k: int, seed: int) -> tuple[np.ndarray, Any]:
    """Scores uniform in [0, 1) and K from 8-d Gaussian features: a cosine kNN graph, or all clipped cosines."""
    rng = np.random.default_rng(10_000 + seed)
    feats = rng.normal(size=(n, 8)).astype(np.float32)
    scores = rng.random(n)
    if kind == "knn":
        return scores, knn_similarity(feats, k=k)
    f = feats / np.linalg.norm(feats, axis=1, keepdims=True)
    K = np.clip(f @ f.T, 0.0, None).astype(np.float64)
    np.fill_diagonal(K, 0.0)
    return scores, K


def _quality_vs_optimum(cfg: BenchConfig, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Objective of each solver against the exact MILP optimum and against greedy, over an α grid."""
    variants: dict[str, dict[str, Any]] = {
        "infomax (relaxed + exchanges, default)": {},
        "infomax (greedy start + exchanges)": {"init": "greedy"},
        "infomax (score start + exchanges)": {"init": "score"},
        "infomax (score start, gradient phase only)": {"init": "score", "refine": False},
    }
    instances = [("knn", cfg.small_n, cfg.small_p, cfg.small_k), ("dense", cfg.dense_n, cfg.dense_p, 0)]
    quality = []
    for kind, n_small, p_small, k_small in instances:
        for alpha in cfg.alphas:
            values: dict[str, list[float]] = {name: [] for name in [*variants, "greedy"]}
            optima = []
            for s in range(cfg.small_trials):
                scores, K = _small_instance(kind, n_small, k_small, s)
                optima.append(objective(milp_select(scores, K, p_small, alpha=alpha), scores, K, alpha=alpha))
                for name, kw in variants.items():
                    values[name].append(solve(scores, K, p_small, alpha=alpha, **kw).objective)
                greedy = greedy_select(scores, K, p_small, alpha=alpha)
                values["greedy"].append(objective(greedy, scores, K, alpha=alpha))
            opt = np.asarray(optima)
            greedy_vals = np.asarray(values["greedy"])
            label = f"{kind} N={n_small}, p={p_small}" + (f", k={k_small}" if kind == "knn" else "")
            for name, vals in values.items():
                v = np.asarray(vals)
                gap = (opt - v) / np.maximum(np.abs(opt), 1e-12)
                tol = 1e-9 * np.maximum(1.0, np.abs(opt))
                row = {
                    "instance": label,
                    "α": alpha,
                    "method": name,
                    "gap mean (%)": round(100 * float(gap.mean()), 2),
                    "gap max (%)": round(100 * float(gap.max()), 2),
                    "optimal": f"{int(np.sum(opt - v <= tol))}/{v.size}",
                }
                if name != "greedy":
                    row["win/tie/loss vs greedy"] = (
                        f"{int(np.sum(v > greedy_vals + tol))}/{int(np.sum(np.abs(v - greedy_vals) <= tol))}/"
                        f"{int(np.sum(v < greedy_vals - tol))}"
                    )
                quality.append(row)
            log(f"small instances {label} α={alpha}: done")
    return quality


def _win_rate(quality: list[dict[str, Any]]) -> str:
    """Strict wins of the default solver over greedy, summed over the rows with α >= 0.3."""
    wins = total = losses = 0
    for row in quality:
        if row["method"].endswith("default)") and row["α"] >= 0.3:
            w, t, lo = (int(v) for v in row["win/tie/loss vs greedy"].split("/"))
            wins, total, losses = wins + w, total + w + t + lo, losses + lo
    return f"{wins}/{total} strictly better, {losses} worse"
