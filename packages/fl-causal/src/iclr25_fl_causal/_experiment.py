"""What the CLI runs (estimate, simulate, bench) and the real-cohort studies and models ``reproduce``
(:mod:`iclr25_fl_causal._reproduce`) uses.

Each command takes ``(cfg, ctx)`` and returns an :class:`iclr25_shared.cli.Result`; the runner writes
results.json / results.md into ``--out`` and prints the tables. Files of its own a command writes through ``ctx``.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from iclr25_fl_causal._data import LongitudinalData
from iclr25_fl_causal._datasets import gvhd, hiv_art
from iclr25_fl_causal._estimators import doubly_robust, g_computation, inputs_named, ipw
from iclr25_fl_causal._glm import Model
from iclr25_fl_causal._simulate import simulate, true_value
from iclr25_shared.cli import Result, RunContext
from iclr25_shared.errors import InputError
from iclr25_shared.inputs import validating

if TYPE_CHECKING:
    from iclr25_fl_causal.cli import BenchConfig, EstimateConfig, SimulateConfig

__all__ = [
    "SIM_MODELS",
    "bench",
    "bench_rows",
    "estimate",
    "gvhd_study",
    "hiv_study",
    "ice_statsmodels",
    "plot_curves",
    "simulate_cmd",
    "wide_for_zepid",
    "zepid_rows",
]

# Correct models for the simulation on the finest grid (see _simulate): the outcome regressions are
# linear in (∫L, ∫A, L, A); the per-step treatment switching is logistic within (first step, A_lag) strata.
SIM_MODELS = {
    "outcome": "cum_L + cum_A + L + A",
    "treatment": "first + L + first:L + A_lag + A_lag:L",
    "outcome_wrong": "cum_A + A",  # drops the confounder L and its integral
    "treatment_wrong": "first + A_lag",  # drops L
}


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


HIV_BASE = "male + age0 + cd40_100 + dvl0"
HIV_MODELS = {
    "outcome": Model(f"art + {HIV_BASE} + cd4_100 + dvl", penalty=1.0),
    "treatment": Model(f"{HIV_BASE} + cd4_100 + dvl + t", absorbing=True),
    "censoring": Model(f"art + {HIV_BASE} + cd4_100 + dvl"),
}
GVHD_COV = "relapse + platnorm + age + male + cmv + wait + all"
GVHD_MODELS = {
    "outcome": Model(f"gvhd + {GVHD_COV}", penalty=1.0),
    "treatment": Model(f"{GVHD_COV} + t", absorbing=True),
    "censoring": Model(f"gvhd + {GVHD_COV} + t"),
}


def _real_rows(
    data: LongitudinalData,
    regimes: Sequence[str],
    widths: Sequence[float],
    models: dict[str, Model],
    *,
    n_boot: int,
    boot_max_intervals: int,
    seed: int,
    label: str,
    quiet: bool,
) -> tuple[list[dict], dict[str, pd.DataFrame], list[str]]:
    from iclr25_shared.cli import progress

    rows, curves, notes = [], {}, []
    jobs = [(w, reg) for w in widths for reg in regimes]
    for w, reg in progress(jobs, total=len(jobs), desc=label, quiet=quiet):
        dd = data.discretise(w)
        K = dd.num_intervals
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            g = g_computation(
                dd,
                reg,
                outcome_model=models["outcome"],
                se="bootstrap" if boot_max_intervals >= K else "none",
                n_boot=n_boot,
                seed=seed,
            )
            i = ipw(
                dd,
                reg,
                treatment_model=models["treatment"],
                censoring_model=models["censoring"],
                se="influence",
            )
            d = doubly_robust(
                dd,
                reg,
                outcome_model=models["outcome"],
                treatment_model=models["treatment"],
                censoring_model=models["censoring"],
            )
        for c in caught:
            notes.append(f"{label} width {w:g} {reg}: {c.category.__name__}: {c.message}")
        for res in (g, i, d):
            rows.append(
                {
                    "data": label,
                    "width": float(w),
                    "intervals": K,
                    "regime": reg,
                    "estimator": res.estimator,
                    "risk": res.estimate,
                    "se": res.se,
                    "ci_low": res.ci[0],
                    "ci_high": res.ci[1],
                    "se_method": res.se_method if np.isfinite(res.se) else "none",
                    "max_weight": res.diagnostics.get("max_weight", float("nan")),
                    "ess": res.diagnostics.get("effective_sample_size", float("nan")),
                }
            )
            curves[f"{label}|{w:g}|{reg}|{res.estimator}"] = res.curve
    return rows, curves, notes


def hiv_study(
    *,
    widths: Sequence[float] = (9, 5, 3, 1),
    n_boot: int = 50,
    boot_max_intervals: int = 15,
    seed: int = 0,
    quiet: bool = True,
) -> tuple[list[dict], dict[str, pd.DataFrame], list[str]]:
    """45-week mortality under always-ART vs never-ART in zEpid's simulated HIV cohort, per grid width."""
    return _real_rows(
        hiv_art(45.0),
        ("always", "never"),
        widths,
        HIV_MODELS,
        n_boot=n_boot,
        boot_max_intervals=boot_max_intervals,
        seed=seed,
        label="hiv",
        quiet=quiet,
    )


def gvhd_study(
    *,
    widths: Sequence[float] = (365, 91.25, 36.5),
    n_boot: int = 50,
    boot_max_intervals: int = 20,
    seed: int = 0,
    quiet: bool = True,
) -> tuple[list[dict], dict[str, pd.DataFrame], list[str]]:
    """5-year risk of death under "no GvHD" vs the natural course in the BMT cohort (Keil et al. 2014)."""
    return _real_rows(
        gvhd(1825.0),
        ("never", "natural"),
        widths,
        GVHD_MODELS,
        n_boot=n_boot,
        boot_max_intervals=boot_max_intervals,
        seed=seed,
        label="gvhd",
        quiet=quiet,
    )


def plot_curves(curves: dict[str, pd.DataFrame], keys: Sequence[str], title: str, xlabel: str) -> Any:
    """Risk curves (with 95% bands where available) as a matplotlib figure."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for key in keys:
        c = curves[key]
        label = " ".join(key.split("|")[2:])
        ax.step(c["time"], c["estimate"], where="post", label=label)
        if np.isfinite(c["se"]).all() and (c["se"] > 0).any():
            ax.fill_between(c["time"], c["low"], c["high"], step="post", alpha=0.15)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("cumulative risk of death")
    ax.set_title(title)
    ax.set_ylim(0, None)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


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
    from iclr25_shared.bench import interleaved
    from iclr25_shared.cli import progress
    from iclr25_shared.device import PeakMemory

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
        dd = data[n].discretise(1.0 / K)
        rows = int(dd.at_risk.sum())
        fns = {
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
        run = interleaved(fns, repeats=repeats, warmup=1)
        raw[f"{n}x{K}"] = run.as_dict()
        speed = run.speedup("gcomp", "statsmodels_ice")
        ours = fns["gcomp"]().estimate
        ref = fns["statsmodels_ice"]()
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
                row["held_equal"] = (
                    "the same data, estimand and per-interval outcome models (estimates agree)"
                )
            out.append(row)
    base = {}
    for r in out:
        key = r["estimator"]
        if key not in base:
            base[key] = r
        b = base[key]
        r["time_ratio"] = r["seconds"] / b["seconds"]
        r["size_ratio"] = r["person_intervals"] / b["person_intervals"]
        r["time_per_row_ratio"] = r["time_ratio"] / r["size_ratio"]
    return out, raw


@dataclasses.dataclass
class StudySizes:
    """Sizes of the reproduction (quick: about 5 minutes on 2 cores)."""

    sim_ns: tuple[int, ...] = (500, 2000)
    sim_fine: int = 40
    sim_intervals: tuple[int, ...] = (5, 10, 20, 40)
    sim_reps: int = 40
    sim_boot: int = 20
    dr_n: int = 2000
    dr_reps: int = 40
    real_boot: int = 50


# ---------------------------------------------------------------------------------------------- commands
def read_long_csv(
    path: Any, *, label: str = "--data", columns: Sequence[tuple[str, str]] = ()
) -> pd.DataFrame:
    """Read a long-format CSV file and check that it has the named columns.

    Args:
        path: the file.
        label: the option that named it, for messages.
        columns: ``(option, column)`` pairs: each column must be in the file (the message names the option).

    Raises:
        InputError: missing, empty, not a readable CSV, or a named column missing (lists the file's columns).
    """
    from iclr25_fl_causal.cli import check_long_csv

    p = check_long_csv(path, label)
    where = f"{label}: {str(path)!r}"
    try:
        frame = pd.read_csv(p)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError, ValueError) as exc:
        raise InputError(f"{where} is not a readable CSV file ({type(exc).__name__}: {exc})") from None
    missing = [(opt, col) for opt, col in columns if col not in frame.columns]
    if missing:
        named = ", ".join(f"{col!r} ({opt})" for opt, col in missing)
        raise InputError(
            f"{where} has no column {named}; its columns are {', '.join(map(str, frame.columns))}"
        )
    return frame


def _load(cfg: EstimateConfig) -> tuple[LongitudinalData, str]:
    if cfg.data is None:
        return hiv_art(cfg.horizon or 45.0), "zEpid HIV/ART cohort"
    roles = [("--id", cfg.id), ("--time", cfg.time), ("--treatment", cfg.treatment)]
    roles += [("--covariates", c) for c in cfg.covariate_list()]
    roles += [
        (f"--{name}", getattr(cfg, name)) for name in ("outcome", "death", "censor") if getattr(cfg, name)
    ]
    frame = read_long_csv(cfg.data, columns=roles)
    horizon = cfg.horizon or None
    kw: dict[str, Any] = dict(
        id=cfg.id,
        time=cfg.time,
        treatment=cfg.treatment,
        covariates=cfg.covariate_list(),
        outcome=cfg.outcome or None,
        death=cfg.death or None,
        censor=cfg.censor or None,
    )
    with validating(f"--data {str(cfg.data)!r}"):  # the data's own checks (rows, values), not a computation
        if horizon is not None and (frame[cfg.time] > horizon).any():
            return LongitudinalData(frame, **kw).truncate(horizon), str(cfg.data)
        return LongitudinalData(frame, horizon=horizon, **kw), str(cfg.data)


_ESTIMATE_COLUMNS = (
    "width",
    "intervals",
    "estimator",
    "regime",
    "estimand",
    "estimate",
    "se",
    "ci_low",
    "ci_high",
    "se_method",
    "max_weight",
    "ess",
    "min_followers_through",
)


def estimate(cfg: EstimateConfig, ctx: RunContext) -> Result:
    """The chosen estimator under one regime on each grid width of ``--grid``."""
    data, source = _load(cfg)
    ctx.log.info(f"{source}: {data!r}")
    covs = " + ".join(data.covariates) or "1"
    a = data.treatment
    om = Model(cfg.outcome_model or f"{a} + {covs}", penalty=cfg.penalty)
    tm = Model(
        cfg.treatment_model or (covs if cfg.absorbing else f"{a}_lag + {covs}"), absorbing=cfg.absorbing
    )
    cm = cfg.censoring_model or f"{a} + {covs}"
    se = cfg.se if cfg.se != "auto" else ("influence" if cfg.estimator == "dr" else "bootstrap")
    fn = {"gcomp": g_computation, "ipw": ipw, "dr": doubly_robust}[cfg.estimator]
    kw: dict[str, Any] = {
        "se": se,
        "n_boot": cfg.n_boot,
        "seed": cfg.seed,
        "quiet": cfg.quiet,
        "min_followers": cfg.min_followers,
        "positivity": cfg.positivity,
    }
    if cfg.estimator in ("gcomp", "dr"):
        kw["outcome_model"] = om
    if cfg.estimator == "gcomp" and cfg.regime.strip().startswith("incremental:"):
        kw["treatment_model"] = tm
    if cfg.estimator in ("ipw", "dr"):
        kw.update(treatment_model=tm, censoring_model=cm, truncate=cfg.truncate or None)
    rows, notes = [], []
    for w in cfg.widths():  # every width fits the horizon before the first fit
        with validating("--grid"):
            data.grid(w)
    where = f"--data {str(cfg.data)!r}" if cfg.data is not None else source
    t0 = time.perf_counter()
    for w in cfg.widths():
        with warnings.catch_warnings(record=True) as caught, inputs_named(f"{where}, grid width {w:g}"):
            warnings.simplefilter("always")
            res = fn(data, cfg.regime, grid=w, **kw)
        notes += [f"width {w:g}: {c.category.__name__}: {c.message}" for c in caught]
        d = res.to_dict()
        d["max_weight"] = res.diagnostics.get("max_weight")
        d["ess"] = res.diagnostics.get("effective_sample_size")
        d["min_followers_through"] = res.diagnostics.get("min_followers_through")
        d["width"] = w
        rows.append({c: d.get(c) for c in _ESTIMATE_COLUMNS})
    return Result(
        metrics={"source": source, "data": repr(data)},
        tables={"estimates": rows},
        timings={"total": time.perf_counter() - t0},
        notes=notes,
    )


def simulate_cmd(cfg: SimulateConfig, ctx: RunContext) -> Result:
    """Simulated long-format data (``simulated.csv`` in ``--out``) and its closed-form truths."""
    from iclr25_fl_causal._simulate import SimulationParams

    params = SimulationParams(eta0=-1.0) if cfg.death else SimulationParams()
    data = simulate(cfg.n, params, horizon=cfg.horizon, n_fine=cfg.n_fine, seed=cfg.seed)
    notes = []
    if ctx.writes:
        ctx.save_text("simulated.csv", data.frame.to_csv(index=False))
    else:
        notes.append("no --out given: simulated.csv was not written")
    metrics: dict[str, Any] = {"data": repr(data)}
    if not cfg.death:
        for a in (1, 0):
            metrics[f"E[Y^{a}] (closed form)"] = true_value(a, params, horizon=cfg.horizon, n_fine=cfg.n_fine)
    return Result(metrics=metrics, notes=notes)


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
