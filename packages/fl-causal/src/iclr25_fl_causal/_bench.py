"""``bench``: scaling of the estimators in n and grid size against a statsmodels ICE baseline, and the same-run
comparison with zEpid's ICE g-computation."""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from iclr25_fl_causal._estimators import doubly_robust, g_computation, ipw
from iclr25_fl_causal._experiment import SIM_MODELS, _quiet
from iclr25_fl_causal._simulate import simulate
from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_fl_causal.cli import BenchConfig

__all__ = ["bench", "bench_rows", "ice_statsmodels", "wide_for_zepid", "zepid_rows"]


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Scaling in n and K (ratios to the smallest cell) and the same-run comparison with zEpid's ICE."""
    t0 = time.perf_counter()
    rows, raw = bench_rows(
        ns=cfg.integers("ns"),
        intervals=cfg.integers("intervals"),
        repeats=cfg.repeats,
        seed=cfg.seed,
        quiet=cfg.quiet,
    )
    res = Result(
        tables={"scaling": rows},
        metrics={"bench": {"scaling": raw}},
        timings={"scaling": time.perf_counter() - t0},
        notes=[
            f"iclr25_shared.bench.interleaved per (n, K) cell: one warm-up call of each arm, then {cfg.repeats} "
            "rounds with the arms rotated; wall seconds (median); speed-ups are medians of per-round ratios with "
            "a 95 % bootstrap interval over rounds; peak memory from one more call (peak RSS growth)"
        ],
    )
    if cfg.zepid:
        t0 = time.perf_counter()
        zrows, notes, zraw = zepid_rows(
            ns=cfg.integers("ns"), intervals=cfg.integers("intervals"), repeats=cfg.repeats, seed=cfg.seed,
            quiet=cfg.quiet,
        )  # fmt: skip
        if zrows:
            res.tables["zepid"] = zrows
            res.metrics["max_abs_diff_vs_zepid"] = max(r["abs_diff"] for r in zrows)
            res.metrics["bench"]["zepid"] = zraw
        res.notes += notes
        res.timings["zepid"] = time.perf_counter() - t0
    return res


def ice_statsmodels(dd, formula: str, regime_value: int = 1) -> float:
    """Baseline: the ICE g-computation of a mean outcome (no death or censoring) the way a user would write it,
    one ``statsmodels`` GLM per interval, with the treatment history set to a static regime.

    Used by ``bench`` as the reference time and by the tests as an independent implementation.
    """
    import statsmodels.api as sm

    from iclr25_fl_causal._glm import design

    if dd.death.any() or dd.censored.any():
        raise ValueError("the statsmodels baseline covers the mean outcome without death or censoring")
    K = dd.num_intervals
    obs = dd.frame()
    path = np.where(dd.at_risk, float(regime_value), np.nan)
    reg = dd.frame(past=path, current=path)
    q_next = dd.outcome.copy()
    for k in range(K - 1, -1, -1):
        rows = (obs["k"] == k).to_numpy()
        ids = obs.loc[rows, "_i"].to_numpy()
        X_obs, X_reg = design(formula, [obs[rows].reset_index(drop=True), reg[rows].reset_index(drop=True)])
        with (
            warnings.catch_warnings()
        ):  # the first interval's integrals are all 0: rank-deficient, still unique fits
            warnings.simplefilter("ignore")
            fit = sm.GLM(q_next[ids], X_obs, family=sm.families.Gaussian()).fit()
        q = np.full(dd.n, np.nan)
        q[ids] = fit.predict(X_reg)
        q_next = q
    return float(np.mean(q_next))


def _zepid_ice_class() -> Any:
    """zEpid's IterativeCondGFormula, or None when zepid (or the pkg_resources it imports) is missing."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from zepid.causal.gformula import IterativeCondGFormula
    except ModuleNotFoundError:
        return None
    return IterativeCondGFormula


def wide_for_zepid(dd) -> pd.DataFrame:
    """A discretised data set without censoring in zEpid's wide ICE layout: L1..LK, A1..AK and Y1..YK, where Y_k
    is death in interval k (1), survival through it (0), or missing once dead before it."""
    if dd.has_censoring:
        raise ValueError("the zEpid comparison covers death without censoring")
    K = dd.num_intervals
    cols: dict[str, np.ndarray] = {}
    for k in range(K):
        cols[f"L{k + 1}"] = dd.covariates["L"][:, k]
        cols[f"A{k + 1}"] = dd.treatment[:, k]
        cols[f"Y{k + 1}"] = np.where(dd.at_risk[:, k], dd.death[:, k].astype(float), np.nan)
    return pd.DataFrame(cols)


def zepid_rows(
    *,
    ns: Sequence[int],
    intervals: Sequence[int],
    n_fine: int = 40,
    repeats: int = 3,
    seed: int = 0,
    quiet: bool,
) -> tuple[list[dict[str, Any]], list[str], dict[str, Any]]:
    """Risk of death at τ under always-treat by ICE g-computation: ours vs zEpid's ``IterativeCondGFormula`` on the
    same data, same estimand, same per-interval models (``A_k + L_k``), interleaved in the same run
    (:func:`iclr25_shared.bench.interleaved`); returns rows, notes and the raw timings."""
    from iclr25_fl_causal._simulate import SimulationParams
    from iclr25_shared.bench import interleaved
    from iclr25_shared.cli import progress

    ice = _zepid_ice_class()
    if ice is None:
        return (
            [],
            ['zEpid comparison skipped: zepid is not importable (pip install zepid "setuptools<82")'],
            {},
        )
    rows, raw = [], {}
    params = SimulationParams(eta0=-1.0)
    cells = [(n, K) for n in ns for K in intervals]
    for n, K in progress(cells, total=len(cells), desc="zEpid", quiet=quiet):
        dd = simulate(n, params, n_fine=n_fine, seed=seed).discretise(1.0 / K)
        wide = wide_for_zepid(dd)

        def theirs(wide=wide, K=K) -> float:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = ice(
                    wide, exposures=[f"A{k + 1}" for k in range(K)], outcomes=[f"Y{k + 1}" for k in range(K)]
                )
                ref.outcome_model(models=[f"A{k + 1} + L{k + 1}" for k in range(K)], print_results=False)
                ref.fit(treatments=[1] * K)
            return float(ref.marginal_outcome)

        def ours(method: str, dd=dd) -> float:
            kw = {"outcome_model": "A + L", "estimand": "risk", "risk_method": method, "se": "none"}
            return _quiet(g_computation, dd, "always", **kw).estimate

        values: dict[str, float] = {}
        arms = {
            "zepid": lambda values=values, theirs=theirs: values.__setitem__("zepid", theirs()),
            "endpoint": lambda values=values, ours=ours: values.__setitem__("endpoint", ours("endpoint")),
            "curve": lambda values=values, ours=ours: values.__setitem__("curve", ours("direct")),
        }
        run = interleaved(arms, repeats=repeats, warmup=1)
        raw[f"{n}x{K}"] = run.as_dict()
        speed = run.speedup("endpoint", "zepid")
        rows.append(
            {
                "n": n,
                "intervals": K,
                "risk_zepid": values["zepid"],
                "risk_ours": values["endpoint"],
                "abs_diff": abs(values["zepid"] - values["endpoint"]),
                "zepid_s": run.median("zepid"),
                "ours_endpoint_s": run.median("endpoint"),
                "ours_whole_curve_s": run.median("curve"),
                "speedup_vs_zepid": speed.value,
                "interval": f"[{speed.low:.3g}, {speed.high:.3g}]",
                "rounds": repeats,
                "held_equal": "the same data, estimand (risk at tau, always-treat) and per-interval models; the "
                "whole curve does K(K+1)/2 fits instead of K",
            }
        )
    return rows, [], raw


def bench_rows(
    *,
    ns: Sequence[int] = (500, 1000, 2000, 4000),
    intervals: Sequence[int] = (10, 20, 40),
    n_fine: int = 40,
    repeats: int = 3,
    seed: int = 0,
    quiet: bool = True,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Time and peak memory of each estimator vs n and grid size, as ratios to the smallest (n, K) cell.

    Per cell the three estimators and the statsmodels ICE baseline are interleaved
    (:func:`iclr25_shared.bench.interleaved`: one warm-up call each, ``repeats`` rotated rounds); peak memory comes
    from one more call each. Linear scaling in n × K shows as time / (n·K) roughly constant
    (``time_per_row_ratio`` ≈ 1; a ratio between cells, i.e. between separate interleaved runs).
    """
    from iclr25_shared.cli import progress

    cells = [(n, K) for n in ns for K in intervals]
    out = []
    data = {n: simulate(n, n_fine=n_fine, seed=seed) for n in ns}
    warm = data[ns[0]].discretise(1.0 / intervals[0])  # imports and first-call costs stay out of the timings
    _quiet(
        doubly_robust,
        warm,
        "always",
        outcome_model=SIM_MODELS["outcome"],
        treatment_model=SIM_MODELS["treatment"],
    )
    ice_statsmodels(warm, SIM_MODELS["outcome"])
    raw = {}
    for n, K in progress(cells, total=len(cells), desc="bench", quiet=quiet):
        rows, raw[f"{n}x{K}"] = _bench_cell(data[n].discretise(1.0 / K), n, K, repeats)
        out += rows
    _scaling_ratios(out)
    return out, raw


def _estimator_calls(dd: Any) -> dict[str, Any]:
    """The timed arms on one discretised data set: our three estimators and the statsmodels ICE baseline."""
    return {
        "gcomp": lambda dd=dd: _quiet(
            g_computation, dd, "always", outcome_model=SIM_MODELS["outcome"], se="none"
        ),
        "ipw": lambda dd=dd: _quiet(
            ipw, dd, "always", treatment_model=SIM_MODELS["treatment"], se="influence"
        ),
        "dr": lambda dd=dd: _quiet(
            doubly_robust,
            dd,
            "always",
            outcome_model=SIM_MODELS["outcome"],
            treatment_model=SIM_MODELS["treatment"],
        ),
        "statsmodels_ice": lambda dd=dd: ice_statsmodels(dd, SIM_MODELS["outcome"]),
    }


def _bench_cell(dd: Any, n: int, K: int, repeats: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One (n, K) cell: the arms interleaved, then one more call each for peak memory; its rows and raw timings."""
    from iclr25_shared.bench import interleaved
    from iclr25_shared.device import PeakMemory

    rows = int(dd.at_risk.sum())
    fns = _estimator_calls(dd)
    run = interleaved(fns, repeats=repeats, warmup=1)
    raw = run.as_dict()
    speed = run.speedup("gcomp", "statsmodels_ice")
    ours = fns["gcomp"]().estimate
    ref = fns["statsmodels_ice"]()
    out = []
    for name in ("gcomp", "ipw", "dr"):
        with PeakMemory("cpu") as mem:
            fns[name]()
        row = {
            "estimator": name,
            "n": n,
            "intervals": K,
            "person_intervals": rows,
            "seconds": run.median(name),
            "peak_mib": mem.peak_bytes / 2**20,
            "rounds": repeats,
        }
        if name == "gcomp":
            row["statsmodels_seconds"] = run.median("statsmodels_ice")
            row["speedup_vs_statsmodels"] = speed.value
            row["interval"] = f"[{speed.low:.3g}, {speed.high:.3g}]"
            row["abs_diff_vs_statsmodels"] = abs(ours - ref)
            row["held_equal"] = "the same data, estimand and per-interval outcome models (estimates agree)"
        out.append(row)
    return out, raw


def _scaling_ratios(out: list[dict[str, Any]]) -> None:
    """Add each row's time, size and time-per-row ratios to its estimator's first (smallest) cell."""
    base = {}
    for r in out:
        key = r["estimator"]
        if key not in base:
            base[key] = r
        b = base[key]
        r["time_ratio"] = r["seconds"] / b["seconds"]
        r["size_ratio"] = r["person_intervals"] / b["person_intervals"]
        r["time_per_row_ratio"] = r["time_ratio"] / r["size_ratio"]
