"""Real cohorts shipped inside the ``zepid`` wheel (MIT), read directly (no ``import zepid``: it needs
``pkg_resources`` and a pandas option removed in pandas 3, see zEpid's loader and dRep #297/#299)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

from iclr25_fl_causal._data import LongitudinalData
from iclr25_shared import DatasetUnavailable

__all__ = ["gvhd", "hiv_art", "zepid_file", "zepid_longitudinal"]

_INSTALL = "pip install zepid  (or: uv sync --group test in the iclr25 workspace)"


def zepid_file(name: str) -> Path:
    """Path of ``zepid/datasets/<name>`` without importing zepid.

    Raises:
        DatasetUnavailable: zepid is not installed (the message has the install command).
    """
    spec = importlib.util.find_spec("zepid")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetUnavailable(f"the zEpid data files need the 'zepid' package: {_INSTALL}")
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / name
    if not path.is_file():
        raise DatasetUnavailable(f"{path} is missing from the installed zepid; reinstall it: {_INSTALL}")
    return path


def hiv_art(horizon: float = 45.0) -> LongitudinalData:
    """zEpid's simulated HIV/ART cohort (547 people, weekly rows, from Jessie Edwards) in long format.

    Columns: ``id``, ``time`` (weeks), baseline ``male``, ``age0``, ``cd40``, ``dvl0``; time-varying ``cd4``
    (cells/mm³, scaled as ``cd4_100`` = cd4/100), ``dvl`` (detectable viral load) and ``art`` (the treatment,
    absorbing: once started it stays on); ``dead`` and ``drop`` (censoring). Truncated at ``horizon`` weeks.
    """
    cols = [
        "id",
        "enter",
        "out",
        "male",
        "age0",
        "cd40",
        "dvl0",
        "cd4",
        "dvl",
        "art",
        "drop",
        "dead",
        "extra",
    ]
    df = pd.read_csv(zepid_file("data.dat"), sep=r"\s+", header=None, names=cols, index_col=False)
    df = df.sort_values(["id", "enter"], kind="stable").reset_index(drop=True)
    df["cd4_100"] = df["cd4"] / 100.0
    df["cd40_100"] = df["cd40"] / 100.0
    keep = ["id", "male", "age0", "cd40_100", "dvl0", "cd4_100", "dvl", "art"]
    body = df[keep].assign(time=df["enter"].astype(float), dead=0, drop=0)
    last = df.groupby("id", sort=False).tail(1)
    tail = last[keep].assign(time=last["out"].astype(float), dead=last["dead"], drop=last["drop"])
    long = pd.concat([body, tail]).sort_values(["id", "time"], kind="stable").reset_index(drop=True)
    data = LongitudinalData(
        long,
        treatment="art",
        covariates=["male", "age0", "cd40_100", "dvl0", "cd4_100", "dvl"],
        death="dead",
        censor="drop",
        horizon=float(long["time"].max()),
    )
    return data.truncate(horizon)


def gvhd(horizon: float = 1825.0) -> LongitudinalData:
    """The bone-marrow-transplant cohort (KMsurv::bmt, 137 patients) as prepared in zEpid's ``gvhd.dat``.

    Rows at day 0 and at each change of the time-varying states, in days. Treatment ``gvhd``: graft-versus-host
    disease has started (columns ``t_gvhd``/``d_gvhd`` of the file, absorbing). It is not acute GvHD alone: of the 73
    recorded onsets, 34 are by day 100 and 39 after it (days 10 to 307), past the usual acute/chronic boundary.
    Time-varying ``relapse`` and ``platnorm`` (platelets back to normal); baseline ``age``, ``male``, ``cmv``,
    ``wait`` (months on the waiting list), ``all`` (ALL diagnosis). ``dead``; a subject alive before ``horizon`` is
    censored at the end of follow-up. This is the set-up of the parametric
    g-formula example of Keil et al. (2014), Epidemiology 25(6):889.
    """
    gv = pd.read_csv(zepid_file("gvhd.dat"), sep=r"\s+", index_col=False)
    rows = []
    for r in gv.itertuples(index=False):
        end = float(min(r.t, horizon))
        dead = int(r.d_dea == 1 and r.t <= horizon)
        changes = {0.0}
        for t_ev, d_ev in ((r.t_gvhd, r.d_gvhd), (r.t_rel, r.d_rel), (r.t_pla, r.d_pla)):
            if d_ev == 1 and 0 < t_ev < end:
                changes.add(float(t_ev))
        for t in [*sorted(changes), end]:
            rows.append(
                {
                    "id": r.id,
                    "time": t,
                    "gvhd": int(r.d_gvhd == 1 and r.t_gvhd <= t),
                    "relapse": int(r.d_rel == 1 and r.t_rel <= t),
                    "platnorm": int(r.d_pla == 1 and r.t_pla <= t),
                    "age": float(r.age),
                    "male": int(r.male),
                    "cmv": int(r.cmv),
                    "wait": r.waitdays / 30.5,
                    "all": int(r.all),
                    "dead": dead if t == end else 0,
                }
            )
    long = pd.DataFrame(rows)
    # A death on the day of a state change: keep one row (the death) at that time.
    long = long.drop_duplicates(["id", "time"], keep="last").reset_index(drop=True)
    return LongitudinalData(
        long,
        treatment="gvhd",
        covariates=["relapse", "platnorm", "age", "male", "cmv", "wait", "all"],
        death="dead",
        horizon=horizon,
    )


def zepid_longitudinal() -> tuple[pd.DataFrame, LongitudinalData]:
    """zEpid's simulated wide file ``longitudinal.dat`` (1 000 people, 3 visits) and the same data long.

    Wide columns W, L1..3, A1..3, Y1..3 (Y_j = death by visit j; later visits missing after death). Long format:
    rows at times 0, 1, 2 (L, A) and a last row at the death time j (``dead = 1``) or at 3.
    """
    wide = pd.read_csv(zepid_file("longitudinal.dat"))
    rows = []
    for r in wide.itertuples(index=False):
        for j in range(3):
            rows.append(
                {
                    "id": r.id,
                    "time": float(j),
                    "L": getattr(r, f"L{j + 1}"),
                    "A": getattr(r, f"A{j + 1}"),
                    "dead": 0,
                }
            )
            if getattr(r, f"Y{j + 1}") == 1:
                rows.append({"id": r.id, "time": float(j + 1), "L": np.nan, "A": np.nan, "dead": 1})
                break
        else:
            rows.append({"id": r.id, "time": 3.0, "L": np.nan, "A": np.nan, "dead": 0})
    long = pd.DataFrame(rows)
    return wide, LongitudinalData(long, treatment="A", covariates=["L"], death="dead", horizon=3.0)
