"""``iclr25-fl-causal``: estimate, simulate, reproduce, bench."""

from __future__ import annotations

import dataclasses
import time
import warnings
from pathlib import Path

from iclr25_shared.cli import CommonOptions, UsageError, check_choice, check_range, run
from iclr25_shared.results import RunRecord, markdown_table, package_versions

__all__ = ["main"]

_PROG = "iclr25-fl-causal"
_VERSIONS = ("iclr25-fl-causal", "pandas", "statsmodels", "formulaic", "scipy")


def _split(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()] if text else []


def _widths(text: str) -> list[float]:
    try:
        out = [float(s) for s in _split(text)]
    except ValueError:
        raise ValueError(f"grid must be comma-separated widths such as 1,2,4; got {text!r}") from None
    if not out or any(w <= 0 for w in out):
        raise ValueError(f"grid must be comma-separated positive widths such as 1,2,4; got {text!r}")
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class EstimateConfig(CommonOptions):
    """Estimate a regime's effect on long-format data, on each grid width (default: zEpid's HIV/ART cohort)."""

    data: Path | None = None
    """Long-format CSV (one row per id and time). Default: zEpid's simulated HIV/ART cohort (needs zepid)."""
    regime: str = "always"
    """always | never | natural | threshold:VAR<CUT (also <=, >, >=) | random:P | incremental:DELTA."""
    estimator: str = "dr"
    """gcomp | ipw | dr."""
    grid: str = "9,5,3"
    """Comma-separated grid widths (each must divide the horizon), coarse to fine."""
    id: str = "id"
    """Subject id column."""
    time: str = "time"
    """Time column (the study starts at 0)."""
    treatment: str = "art"
    """Binary 0/1 treatment column."""
    covariates: str = "male,age0,cd40_100,dvl0,cd4_100,dvl"
    """Comma-separated confounder columns."""
    outcome: str = ""
    """Outcome column (its value at the horizon); empty: estimate the risk of death."""
    death: str = "dead"
    """0/1 death column (empty: none)."""
    censor: str = "drop"
    """0/1 censoring column (empty: none)."""
    horizon: float = 0.0
    """τ: rows after it are dropped (subjects alive past it count as followed to it). 0: 45 weeks for the
    default cohort, else the largest time in the data."""
    outcome_model: str = ""
    """Right-hand side of the outcome regressions (default: treatment + covariates)."""
    treatment_model: str = ""
    """Right-hand side of the treatment model (default: covariates, plus A_lag unless --absorbing)."""
    censoring_model: str = ""
    """Right-hand side of the censoring model (default: treatment + covariates)."""
    absorbing: bool = True
    """The treatment is absorbing (once 1, always 1): fit the treatment model before initiation only."""
    penalty: float = 1.0
    """Ridge penalty of the outcome regressions (0: plain maximum likelihood)."""
    se: str = "auto"
    """auto (bootstrap for gcomp/ipw, influence for dr) | bootstrap | influence | none."""
    n_boot: int = 100
    """Bootstrap replicates."""
    truncate: float = 0.0
    """Cap the weights at this quantile (e.g. 0.99); 0: no truncation."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("estimator", self.estimator, ("gcomp", "ipw", "dr"))
        check_choice("se", self.se, ("auto", "bootstrap", "influence", "none"))
        check_range("n_boot", self.n_boot, low=2)
        check_range("penalty", self.penalty, low=0)
        check_range("horizon", self.horizon, low=0)
        if self.truncate != 0:
            check_range("truncate", self.truncate, low=0.5, high=1, low_inclusive=False, high_inclusive=False)
        _widths(self.grid)
        from iclr25_fl_causal._regimes import Regime

        Regime.parse(self.regime)


def _load(cfg: EstimateConfig):
    import pandas as pd

    from iclr25_fl_causal._data import LongitudinalData
    from iclr25_fl_causal._datasets import hiv_art

    if cfg.data is None:
        return hiv_art(cfg.horizon or 45.0), "zEpid HIV/ART cohort"
    if not cfg.data.is_file():
        raise UsageError(f"--data: file {str(cfg.data)!r} does not exist")
    try:
        frame = pd.read_csv(cfg.data)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as exc:
        raise UsageError(f"--data: {cfg.data} is not a readable CSV ({exc})") from None
    covs = _split(cfg.covariates)
    horizon = cfg.horizon or None
    kw = dict(
        id=cfg.id,
        time=cfg.time,
        treatment=cfg.treatment,
        covariates=covs,
        outcome=cfg.outcome or None,
        death=cfg.death or None,
        censor=cfg.censor or None,
    )
    if horizon is not None and cfg.time in frame.columns and (frame[cfg.time] > horizon).any():
        return LongitudinalData(frame, **kw).truncate(horizon), str(cfg.data)
    return LongitudinalData(frame, horizon=horizon, **kw), str(cfg.data)


def estimate(cfg: EstimateConfig) -> int:
    from iclr25_fl_causal._estimators import doubly_robust, g_computation, ipw
    from iclr25_fl_causal._glm import Model

    data, source = _load(cfg)
    covs = " + ".join(data.covariates) or "1"
    a = data.treatment
    om = Model(cfg.outcome_model or f"{a} + {covs}", penalty=cfg.penalty)
    tm = Model(
        cfg.treatment_model or (covs if cfg.absorbing else f"{a}_lag + {covs}"), absorbing=cfg.absorbing
    )
    cm = cfg.censoring_model or f"{a} + {covs}"
    se = cfg.se if cfg.se != "auto" else ("influence" if cfg.estimator == "dr" else "bootstrap")
    fn = {"gcomp": g_computation, "ipw": ipw, "dr": doubly_robust}[cfg.estimator]
    kw: dict = {"se": se, "n_boot": cfg.n_boot, "seed": cfg.seed, "quiet": cfg.quiet}
    if cfg.estimator in ("gcomp", "dr"):
        kw["outcome_model"] = om
    if cfg.estimator == "gcomp" and cfg.regime.strip().startswith("incremental:"):
        kw["treatment_model"] = tm
    if cfg.estimator in ("ipw", "dr"):
        kw.update(treatment_model=tm, censoring_model=cm, truncate=cfg.truncate or None)
    rows, notes = [], []
    t0 = time.perf_counter()
    for w in _widths(cfg.grid):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = fn(data, cfg.regime, grid=w, **kw)
        notes += [f"width {w:g}: {c.message}" for c in caught]
        row = {"width": w, **{k: v for k, v in res.to_dict().items() if k not in ("diagnostics", "width")}}
        row["max_weight"] = res.diagnostics.get("max_weight")
        row["ess"] = res.diagnostics.get("effective_sample_size")
        rows.append(row)
    cols = [
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
    ]
    print(f"{source}: {data!r}")
    print(markdown_table(rows, cols))
    for n in notes:
        print(f"warning: {n}")
    if cfg.out is not None:
        RunRecord(
            command=f"{_PROG} estimate",
            config=cfg,
            metrics={"source": source},
            tables={"estimates": rows},
            timings={"total": time.perf_counter() - t0},
            notes=notes,
            versions=package_versions(_VERSIONS),
        ).save(cfg.out)
    return 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimulateConfig(CommonOptions):
    """Write a simulated long-format CSV (brief §3.3(b)) and print its closed-form truths."""

    n: int = 1000
    """Subjects."""
    n_fine: int = 40
    """Euler steps on [0, horizon]."""
    horizon: float = 1.0
    """τ."""
    death: bool = False
    """Add a death hazard exp(-1 + 0.5 L)."""
    csv: Path = Path("simulated.csv")
    """Where to write the rows (written atomically)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("n", self.n, low=1)
        check_range("n_fine", self.n_fine, low=1)
        check_range("horizon", self.horizon, low=0, low_inclusive=False)


def simulate_cmd(cfg: SimulateConfig) -> int:
    from iclr25_fl_causal._simulate import SimulationParams, simulate, true_value
    from iclr25_shared.results import atomic_write_text

    params = SimulationParams(eta0=-1.0) if cfg.death else SimulationParams()
    data = simulate(cfg.n, params, horizon=cfg.horizon, n_fine=cfg.n_fine, seed=cfg.seed)
    atomic_write_text(cfg.csv, data.frame.to_csv(index=False))
    print(f"wrote {cfg.csv}: {data!r}")
    if not cfg.death:
        for a in (1, 0):
            print(
                f"E[Y^{a}] = {true_value(a, params, horizon=cfg.horizon, n_fine=cfg.n_fine):.6f} (closed form)"
            )
    return 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """Simulation (bias/SE/coverage by grid and n, double robustness) and the HIV and BMT cohorts."""

    reps: int = 40
    """Monte Carlo replicates per simulation cell."""
    n_boot: int = 20
    """Bootstrap replicates for g-computation SEs in the simulation (real data: 2.5x this)."""
    parts: str = "simulation,dr,hiv,gvhd"
    """Comma-separated parts to run."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("reps", self.reps, low=2)
        check_range("n_boot", self.n_boot, low=2)
        for p in _split(self.parts):
            check_choice("parts", p, ("simulation", "dr", "hiv", "gvhd"))


def reproduce(cfg: ReproduceConfig) -> int:
    from iclr25_fl_causal import _experiment as ex

    parts = _split(cfg.parts)
    rec = RunRecord(command=f"{_PROG} reproduce", config=cfg, versions=package_versions(_VERSIONS))
    curves: dict = {}
    if "simulation" in parts:
        t0 = time.perf_counter()
        rec.tables["simulation: E[Y^1], bias / SD / mean SE / coverage by grid and n"] = ex.simulation_study(
            reps=cfg.reps, n_boot=cfg.n_boot, seed=cfg.seed, quiet=cfg.quiet
        )
        rec.timings["simulation"] = time.perf_counter() - t0
    if "dr" in parts:
        t0 = time.perf_counter()
        rec.tables["double robustness (n=2000, finest grid): bias and bias / Monte Carlo SE"] = ex.dr_table(
            reps=cfg.reps, seed=cfg.seed + 1, quiet=cfg.quiet
        )
        rec.timings["dr"] = time.perf_counter() - t0
    for part, fn, title in (
        ("hiv", ex.hiv_study, "HIV/ART: 45-week risk of death, always vs never ART"),
        ("gvhd", ex.gvhd_study, "BMT: 5-year risk of death, no GvHD vs natural course"),
    ):
        if part not in parts:
            continue
        t0 = time.perf_counter()
        rows, cv, notes = fn(n_boot=int(2.5 * cfg.n_boot), seed=cfg.seed, quiet=cfg.quiet)
        rec.tables[title] = rows
        rec.notes += notes
        curves.update(cv)
        rec.timings[part] = time.perf_counter() - t0
        for r in rows:
            rec.metrics[f"{part}:{r['regime']}:{r['estimator']}:w{r['width']:g}"] = round(r["risk"], 4)
    for name, rows in rec.tables.items():
        print(f"## {name}\n\n{markdown_table(rows)}\n")
    if cfg.out is not None:
        if "hiv" in parts:
            keys = [k for k in curves if k.startswith("hiv|1|")]
            ex.plot_curves(curves, keys, cfg.out / "hiv_risk_curves.png", "HIV/ART, weekly grid", "week")
        if "gvhd" in parts:
            finest = min(float(k.split("|")[1]) for k in curves if k.startswith("gvhd|"))
            keys = [k for k in curves if k.startswith(f"gvhd|{finest:g}|")]
            ex.plot_curves(curves, keys, cfg.out / "gvhd_risk_curves.png", f"BMT, {finest:g}-day grid", "day")
        rec.save(cfg.out)
    return 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions):
    """Time and peak memory vs n and grid size (ratios to the smallest cell; linear means ratio/size ≈ 1)."""

    ns: str = "500,1000,2000,4000"
    """Comma-separated numbers of subjects."""
    intervals: str = "10,20,40"
    """Comma-separated numbers of grid intervals (must divide 40)."""
    repeats: int = 3
    """Timing repeats (median)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("repeats", self.repeats, low=1)
        for name, text in (("ns", self.ns), ("intervals", self.intervals)):
            try:
                vals = [int(s) for s in _split(text)]
            except ValueError:
                raise ValueError(f"{name} must be comma-separated integers, got {text!r}") from None
            if not vals or min(vals) < 1:
                raise ValueError(f"{name} must be comma-separated positive integers, got {text!r}")
        for k in _split(self.intervals):
            if 40 % int(k):
                raise ValueError(f"intervals must divide 40 (the simulation's fine steps); got {k}")


def bench(cfg: BenchConfig) -> int:
    from iclr25_fl_causal._experiment import bench_rows

    rows = bench_rows(
        ns=[int(s) for s in _split(cfg.ns)],
        intervals=[int(s) for s in _split(cfg.intervals)],
        repeats=cfg.repeats,
        seed=cfg.seed,
        quiet=cfg.quiet,
    )
    print(markdown_table(rows))
    if cfg.out is not None:
        RunRecord(
            command=f"{_PROG} bench",
            config=cfg,
            tables={"scaling": rows},
            versions=package_versions(_VERSIONS),
        ).save(cfg.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    from iclr25_fl_causal import __version__

    return run(
        _PROG,
        {
            "estimate": (EstimateConfig, estimate),
            "simulate": (SimulateConfig, simulate_cmd),
            "reproduce": (ReproduceConfig, reproduce),
            "bench": (BenchConfig, bench),
        },
        argv,
        default="estimate",
        description=(
            "Causal effects of time-varying treatment regimes on functional longitudinal data (Ying, ICLR 2025): "
            "g-computation, IPW and doubly robust estimators on refining time grids, with death and censoring."
        ),
        version=__version__,
    )
