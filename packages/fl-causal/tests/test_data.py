"""LongitudinalData validation (every bad input of the issue) and the discretisation conventions."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from iclr25_fl_causal import LongitudinalData


def frame(**overrides) -> pd.DataFrame:
    """Three subjects: id 1 alive to τ=4, id 2 dies at 2.5, id 3 censored at 1.5."""
    df = pd.DataFrame(
        {
            "id": [1, 1, 1, 2, 2, 2, 3, 3],
            "time": [0.0, 1.0, 4.0, 0.0, 2.0, 2.5, 0.0, 1.5],
            "L": [1.0, 3.0, 5.0, 2.0, 4.0, np.nan, 0.0, 1.0],
            "A": [0, 1, 1, 1, 1, np.nan, 0, 0],
            "dead": [0, 0, 0, 0, 0, 1, 0, 0],
            "cens": [0, 0, 0, 0, 0, 0, 0, 1],
        }
    )
    for k, v in overrides.items():
        df[k] = v
    return df


def make(df=None, **kw):
    kw = {"treatment": "A", "covariates": ["L"], "death": "dead", "censor": "cens", **kw}
    return LongitudinalData(frame() if df is None else df, **kw)


def test_discretise_conventions_by_hand():
    dd = make().discretise(1.0)  # grid 0,1,2,3,4
    np.testing.assert_array_equal(dd.grid, [0, 1, 2, 3, 4])
    # at risk at t_k: id1 always; id2 at 0,1,2 (dies at 2.5); id3 at 0,1 (censored at 1.5)
    np.testing.assert_array_equal(dd.at_risk, [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]])
    np.testing.assert_array_equal(dd.death, [[0, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]])
    np.testing.assert_array_equal(dd.censored, [[0, 0, 0, 0], [0, 0, 0, 0], [0, 1, 0, 0]])
    # last observation carried forward
    np.testing.assert_array_equal(dd.covariates["L"][0], [1, 3, 3, 3])
    np.testing.assert_array_equal(dd.covariates["L"][1, :3], [2, 2, 4])
    np.testing.assert_array_equal(dd.treatment[1, :3], [1, 1, 1])
    # integral of the piecewise-constant path: id1 L = 1 on [0,1), 3 on [1,4)
    np.testing.assert_allclose(dd.integrals["L"][0], [0, 1, 4, 7])
    np.testing.assert_allclose(dd.integrals["L"][1, :3], [0, 2, 4])
    f = dd.frame()
    row = f[(f._i == 0) & (f.k == 2)].iloc[0]
    assert (row.L, row.L_lag, row.L_base, row.A, row.A_lag, row.cum_A) == (3, 3, 1, 1, 1, 1)


def test_explicit_grid_points_and_horizon():
    dd = make().discretise([0, 0.5, 2, 4])
    assert dd.num_intervals == 3
    np.testing.assert_array_equal(dd.censored[2], [0, 1, 0])  # censored at 1.5 in [0.5, 2)


def test_grid_width_must_divide_horizon():
    with pytest.raises(ValueError, match=r"grid width 3 does not divide the horizon 4"):
        make().discretise(3)
    with pytest.raises(ValueError, match="grid points must run from 0 to the horizon"):
        make().discretise([0, 1, 3])
    with pytest.raises(ValueError, match="strictly increasing"):
        make().discretise([0, 2, 2, 4])


def test_duplicated_rows_named():
    df = frame()
    df.loc[1, "time"] = 0.0
    with pytest.raises(ValueError, match=r"duplicated \(id, time\) rows: \[0, 1\]"):
        make(df)


def test_unsorted_rows_named():
    df = frame()
    df.loc[[1, 2], "time"] = [4.0, 1.0]
    with pytest.raises(ValueError, match=r"not sorted by \(id, time\): rows \[2\]"):
        make(df)


def test_ids_not_grouped():
    df = frame().iloc[[0, 1, 3, 2, 4, 5, 6, 7]].reset_index(drop=True)
    with pytest.raises(ValueError, match=r"not grouped by 'id' \(ids \[1, 2\]"):
        make(df)


def test_late_entry_detected():
    # zEpid PR #108: IPCW pooled-logistic weights were wrong with late entry; it must be refused.
    df = frame()
    df.loc[6, "time"] = 0.5
    with pytest.raises(ValueError, match=r"late entry: .*rows \[6\]"):
        make(df)


def test_times_outside_grid_and_truncate():
    with pytest.raises(ValueError, match=r"times outside the grid \[0, 3\]: rows \[2\].*truncate"):
        make(horizon=3.0)
    with pytest.raises(ValueError, match="negative times"):
        make(frame(time=[-1.0, 1.0, 4.0, 0.0, 2.0, 2.5, 0.0, 1.5]))
    short = make().truncate(2.0)
    assert short.horizon == 2.0
    dd = short.discretise(1.0)
    # id1 and id2 are alive past 2, so they are followed to the horizon, not censored; id3 censored at 1.5
    np.testing.assert_array_equal(dd.at_risk, [[1, 1], [1, 1], [1, 1]])
    assert not dd.death.any()
    np.testing.assert_array_equal(dd.censored, [[0, 0], [0, 0], [0, 1]])


def test_missing_values_named():
    df = frame()
    df.loc[1, "L"] = np.nan
    with pytest.raises(ValueError, match=r"column 'L' has missing values in rows \[1\]"):
        make(df)
    df = frame()
    df.loc[0, "id"] = np.nan
    with pytest.raises(ValueError, match=r"column 'id' has missing values in rows \[0\]"):
        make(df)
    make()  # the missing values on id 2's death row are allowed (carried forward)


def test_missing_column_and_types():
    with pytest.raises(ValueError, match=r"column\(s\) \['Z'\] not in the data; available columns: id, time"):
        make(covariates=["Z"])
    with pytest.raises(TypeError, match="must be a pandas DataFrame"):
        LongitudinalData([1, 2])


def test_non_binary_treatment_named():
    df = frame()
    df.loc[4, "A"] = 2
    with pytest.raises(
        ValueError, match=r"treatment column 'A' must be binary 0/1.*rows \[4, 5\] have values \[2.0\]"
    ):
        make(df)


def test_event_flags():
    df = frame()
    df.loc[0, "dead"] = 1
    with pytest.raises(ValueError, match=r"'dead' is 1 before a subject's last row \(rows \[0\]\)"):
        make(df)
    df = frame()
    df.loc[7, "dead"] = 1
    with pytest.raises(ValueError, match=r"both 'dead' and 'cens' = 1"):
        make(df)
    df = frame()
    df.loc[2, "dead"] = 3
    with pytest.raises(ValueError, match="must be 0/1"):
        make(df)


def test_all_censored_refused():
    df = frame()
    df.loc[[2], "cens"] = 1
    df.loc[[2], "time"] = 3.0
    df.loc[[5], ["dead", "cens"]] = [0, 1]
    with pytest.raises(ValueError, match="all subjects are censored before the horizon"):
        make(df, horizon=4.0)


def test_outcome_needed_at_horizon():
    df = frame(Y=[np.nan, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan])
    with pytest.raises(ValueError, match=r"column 'Y' is missing at the horizon .*rows \[2\]"):
        make(df, outcome="Y")


def _truncate_by_loop(df: pd.DataFrame, horizon: float) -> pd.DataFrame:
    """One subject at a time: rows after the horizon dropped; a subject followed past it gets a row at it."""
    out = []
    for _, g in df.groupby("id", sort=False):
        kept = g[g.time <= horizon].copy()
        if g.time.iloc[-1] > horizon:  # followed past the horizon: no event by then
            if kept.time.iloc[-1] < horizon:
                row = kept.iloc[[-1]].copy()
                row["time"] = horizon
                kept = pd.concat([kept, row])
            kept.loc[kept.index[-1], ["dead", "drop"]] = 0
        out.append(kept)
    return pd.concat(out).reset_index(drop=True)


@pytest.mark.parametrize("horizon", [0.5, 1.0, 1.3, 2.0])
def test_truncate_matches_a_per_subject_loop(horizon):
    """The vectorised truncate (issue 20: the per-subject loop took 7 s for 4 000 people) against the loop."""
    rng = np.random.default_rng(int(horizon * 10))
    rows = []
    for i in rng.permutation(300):  # ids grouped but not sorted
        times = np.r_[0.0, np.sort(rng.choice(np.arange(1, 21) / 10, size=rng.integers(1, 6), replace=False))]
        event = rng.choice(["dead", "drop", "none"])
        for j, t in enumerate(times):
            last = j == len(times) - 1
            rows.append({"id": i, "time": t, "L": rng.standard_normal(), "A": float(rng.integers(2)),
                         "dead": int(last and event == "dead"), "drop": int(last and event == "drop")})  # fmt: skip
    df = pd.DataFrame(rows)
    data = LongitudinalData(df, treatment="A", covariates=["L"], death="dead", censor="drop", horizon=2.0)
    got = data.truncate(horizon).frame
    pd.testing.assert_frame_equal(got, _truncate_by_loop(df, horizon)[list(got.columns)], check_dtype=False)


def test_gvhd_treatment_is_every_recorded_onset_not_acute_gvhd_only():
    """Issue 20: the BMT cohort's treatment was called acute GvHD, but most recorded onsets are after day 100."""
    from iclr25_fl_causal import gvhd
    from iclr25_fl_causal._datasets import zepid_file
    from iclr25_shared.testing import require

    data = require(gvhd)
    raw = pd.read_csv(require(zepid_file, "gvhd.dat"), sep=r"\s+", index_col=False)
    onsets = raw.loc[raw.d_gvhd == 1, "t_gvhd"]
    assert (len(onsets), int((onsets > 100).sum())) == (73, 39)  # the counts the gvhd() docstring states
    treated = data.frame[data.frame.gvhd == 1].groupby("id").time.min()
    assert len(treated) == len(onsets)
    assert int((treated > 100).sum()) == 39
    assert "not acute GvHD alone" in gvhd.__doc__
