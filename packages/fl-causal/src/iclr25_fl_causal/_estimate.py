"""``estimate``: the chosen estimator under one regime on each grid width of ``--grid``, on a long-format CSV
(``--data``) or zEpid's HIV/ART cohort."""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from iclr25_fl_causal._data import LongitudinalData
from iclr25_fl_causal._datasets import hiv_art
from iclr25_fl_causal._estimators import doubly_robust, g_computation, inputs_named, ipw
from iclr25_fl_causal._glm import Model
from iclr25_shared.cli import Result, RunContext
from iclr25_shared.errors import InputError
from iclr25_shared.inputs import validating

if TYPE_CHECKING:
    from iclr25_fl_causal.cli import EstimateConfig

__all__ = ["estimate", "read_long_csv"]


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
