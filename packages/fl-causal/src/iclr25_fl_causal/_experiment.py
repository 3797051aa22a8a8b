"""What ``reproduce`` (:mod:`iclr25_fl_causal._reproduce`) and ``bench`` (:mod:`iclr25_fl_causal._bench`) share:
the simulation's correct and wrong models, the real-cohort studies (HIV/ART, GvHD) with their models, the risk-curve
plot, and a warnings-silencing call helper. The commands themselves are in ``_estimate.py``, ``_simulate_cmd.py``,
``_reproduce.py`` and ``_bench.py``.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from iclr25_fl_causal._data import LongitudinalData
from iclr25_fl_causal._datasets import gvhd, hiv_art
from iclr25_fl_causal._estimators import doubly_robust, g_computation, ipw
from iclr25_fl_causal._glm import Model

__all__ = [
    "SIM_MODELS",
    "gvhd_study",
    "hiv_study",
    "plot_curves",
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
