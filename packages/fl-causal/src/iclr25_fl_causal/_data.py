"""Long-format functional longitudinal data and its discretisation onto a partition of [0, τ].

Conventions (Ying, arXiv:2206.12525, §2; the discretisation of §3):

* A row ``(id, time, covariates, treatment[, outcome])`` is a measurement at ``time``; between rows a process
  holds its last value (last observation carried forward). Every subject starts at time 0 (no late entry).
* Follow-up ends at the subject's last row. ``death = 1`` on that row: death at that time. ``censor = 1`` on that
  row, or a last row before the horizon with no flag: censored (last seen alive) at that time.
* On a grid ``0 = t_0 < ... < t_K = τ`` interval ``k`` is ``[t_k, t_{k+1})``. The history at ``t_k`` is the
  covariates and treatment at ``t_k`` (their last values at or before ``t_k``), lags, baseline values and
  integrals ``∫_0^{t_k} L(s) ds`` of the covariate paths. Death in interval ``k`` means ``t_k < T_D <= t_{k+1}``;
  censoring in interval ``k`` means ``t_k <= C < t_{k+1}`` (an observed death is never censored). The order
  within an interval is (L_k, A_k, C_{k+1}, D_{k+1}).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pandas as pd

from iclr25_shared.checks import check_float

__all__ = ["DiscreteData", "LongitudinalData"]

_TOL = 1e-9


def _rows(mask: np.ndarray | pd.Series, frame: pd.DataFrame, limit: int = 5) -> str:
    """The first few row labels where ``mask`` holds, for error messages."""
    labels = list(frame.index[np.asarray(mask, dtype=bool)][:limit])
    more = int(np.asarray(mask, dtype=bool).sum()) - len(labels)
    return f"{labels}" + (f" and {more} more" if more > 0 else "")


class LongitudinalData:
    """Validated long-format data: one row per (subject, measurement time).

    Args:
        frame: the rows. Must be grouped by id with strictly increasing times within an id.
        id, time, treatment: column names. The treatment must be binary 0/1.
        covariates: names of the (time-varying or baseline) confounder columns L.
        outcome: optional column with the outcome process Y(t); the estimand uses its value at the horizon.
        death, censor: optional 0/1 event columns; a 1 may appear only on a subject's last row.
        horizon: τ, the end of the study window (default: the largest time). Rows after it are an error
            (drop them with :meth:`truncate`).

    Raises:
        ValueError: a missing column; infinite values in any used column; missing values in a required column (only a subject's last row may have
            missing covariates/treatment, which are then carried forward); duplicated or unsorted (id, time)
            rows; negative times or times after the horizon; late entry (a subject's first time is not 0,
            zEpid #108); a non-binary treatment or event flag; an event flag before the last row; no subject
            observed to the horizon or to death (all censored). Messages name the column and the first rows.

    References:
        Ying, A. "Causal Identification for Complex Functional Longitudinal Studies", arXiv:2206.12525 (ICLR 2025).
    """

    def __init__(
        self,
        frame: pd.DataFrame,
        *,
        id: str = "id",
        time: str = "time",
        treatment: str = "A",
        covariates: Sequence[str] = (),
        outcome: str | None = None,
        death: str | None = None,
        censor: str | None = None,
        horizon: float | None = None,
    ) -> None:
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"frame must be a pandas DataFrame, got {type(frame).__name__}")
        if isinstance(covariates, str):
            covariates = [covariates]
        self.id, self.time, self.treatment = id, time, treatment
        self.covariates = tuple(covariates)
        self.outcome, self.death, self.censor = outcome, death, censor
        named = [id, time, treatment, *self.covariates] + [
            c for c in (outcome, death, censor) if c is not None
        ]
        missing = [c for c in named if c not in frame.columns]
        if missing:
            raise ValueError(
                f"column(s) {missing} not in the data; available columns: {', '.join(map(str, frame.columns))}"
            )
        if len(set(named)) != len(named):
            raise ValueError(f"a column is given two roles: {named}")
        reserved = {"k", "t", "width", "first"}
        clash = sorted(reserved & set(self.covariates) | ({treatment} & reserved))
        if clash:
            raise ValueError(f"column name(s) {clash} are reserved for grid columns; rename them")
        if frame.empty:
            raise ValueError("the data has no rows")
        df = frame[named].copy()
        self._validate(df, horizon)
        self.frame = df

    # ------------------------------------------------------------------ validation
    def _validate(self, df: pd.DataFrame, horizon: float | None) -> None:
        id_, time = self.id, self.time
        for col in (id_, time):
            bad = df[col].isna()
            if bad.any():
                raise ValueError(f"column {col!r} has missing values in rows {_rows(bad, df)}")
        if not pd.api.types.is_numeric_dtype(df[time]):
            raise ValueError(f"column {time!r} must be numeric, got dtype {df[time].dtype}")
        dup = df.duplicated([id_, time], keep=False)
        if dup.any():
            raise ValueError(
                f"duplicated ({id_}, {time}) rows: {_rows(dup, df)}; each subject needs one row per time"
            )
        ids = df[id_].to_numpy()
        t = df[time].to_numpy(dtype=float)
        new_block = np.r_[True, ids[1:] != ids[:-1]]
        block = np.cumsum(new_block) - 1
        if block[-1] + 1 != df[id_].nunique():
            seen = pd.Series(ids[new_block]).duplicated(keep=False)
            bad_ids = pd.Series(ids[new_block])[seen].unique()[:5].tolist()
            raise ValueError(
                f"rows are not grouped by {id_!r} (ids {bad_ids} appear in separate blocks); "
                f"sort with frame.sort_values([{id_!r}, {time!r}])"
            )
        back = ~new_block & (np.r_[np.inf, np.diff(t)] <= 0)
        if back.any():
            raise ValueError(
                f"rows are not sorted by ({id_}, {time}): rows {_rows(back, df)} go back in time; "
                f"sort with frame.sort_values([{id_!r}, {time!r}])"
            )
        for col in (time, self.treatment, *self.covariates, self.outcome):
            if col is None or not pd.api.types.is_numeric_dtype(df[col]):
                continue
            inf = np.isinf(df[col].to_numpy(dtype=float))
            if inf.any():
                raise ValueError(
                    f"column {col!r} has infinite values in rows {_rows(inf, df)}; values must be finite"
                )
        if (t < 0).any():
            raise ValueError(
                f"column {time!r} has negative times in rows {_rows(t < 0, df)}; time starts at 0"
            )
        late = new_block & (t > 0)
        if late.any():
            raise ValueError(
                f"late entry: subjects first observed after time 0 (rows {_rows(late, df)}); left truncation is "
                "not supported, since the treatment and censoring weights need the history from time 0"
            )
        last = np.r_[new_block[1:], True]
        self.horizon = float(t.max()) if horizon is None else float(horizon)
        if not np.isfinite(self.horizon) or self.horizon <= 0:
            raise ValueError(f"horizon must be a positive finite time, got {horizon!r}")
        after = t > self.horizon + _TOL
        if after.any():
            raise ValueError(
                f"times outside the grid [0, {self.horizon:g}]: rows {_rows(after, df)}; "
                "drop them with data.truncate(horizon)"
            )
        for col in (self.death, self.censor):
            if col is None:
                continue
            v = df[col]
            bad = v.isna() | ~v.isin([0, 1])
            if bad.any():
                raise ValueError(
                    f"event column {col!r} must be 0/1 with no missing values; rows {_rows(bad, df)}"
                )
            early = (v.to_numpy() == 1) & ~last
            if early.any():
                raise ValueError(
                    f"event column {col!r} is 1 before a subject's last row (rows {_rows(early, df)}); "
                    "an event ends follow-up, so it can only be on the last row"
                )
        if self.death is not None and self.censor is not None:
            both = (df[self.death] == 1) & (df[self.censor] == 1)
            if both.any():
                raise ValueError(f"rows {_rows(both, df)} have both {self.death!r} and {self.censor!r} = 1")
        if self.death is not None:
            at0 = (df[self.death].to_numpy() == 1) & (t <= 0)
            if at0.any():
                raise ValueError(
                    f"deaths at time 0 (rows {_rows(at0, df)}); death must come after the first row"
                )
        # Missing covariates/treatment: allowed on a last row only (carried forward from the row before).
        for col in (self.treatment, *self.covariates):
            na = df[col].isna().to_numpy()
            bad = na & (~last | new_block)
            if bad.any():
                raise ValueError(f"column {col!r} has missing values in rows {_rows(bad, df)}")
            if na.any():
                df[col] = df[col].ffill()
            if not pd.api.types.is_numeric_dtype(df[col]):
                raise ValueError(f"column {col!r} must be numeric, got dtype {df[col].dtype}")
        a = df[self.treatment].to_numpy(dtype=float)
        nonbin = ~np.isin(a, [0.0, 1.0])
        if nonbin.any():
            raise ValueError(
                f"treatment column {self.treatment!r} must be binary 0/1 (the regimes here act on a binary "
                f"treatment); rows {_rows(nonbin, df)} have values {sorted(set(a[nonbin].tolist()))[:5]}"
            )
        # End of follow-up per subject.
        self._block = block
        self._first = np.flatnonzero(new_block)
        self._last = np.flatnonzero(last)
        end = t[self._last]
        dead = df[self.death].to_numpy()[self._last] == 1 if self.death else np.zeros(len(end), bool)
        self._end, self._dead = end, dead
        self._censored = ~dead & (end < self.horizon - _TOL)
        if self._censored.all():
            raise ValueError(
                "all subjects are censored before the horizon (none is followed to death or to "
                f"τ={self.horizon:g}); nothing can be estimated"
            )
        if self.outcome is not None:
            y = df[self.outcome].to_numpy(dtype=float)
            obs = ~dead & ~self._censored
            y_last = y[self._last]
            bad = obs & np.isnan(y_last)
            if bad.any():
                bad_rows = np.zeros(len(df), bool)
                bad_rows[self._last[bad]] = True
                raise ValueError(
                    f"column {self.outcome!r} is missing at the horizon for subjects followed to it "
                    f"(rows {_rows(bad_rows, df)})"
                )

    # ------------------------------------------------------------------ accessors
    @property
    def n(self) -> int:
        """Number of subjects."""
        return len(self._first)

    @property
    def ids(self) -> np.ndarray:
        return self.frame[self.id].to_numpy()[self._first]

    def __repr__(self) -> str:
        return (
            f"LongitudinalData(n={self.n}, rows={len(self.frame)}, horizon={self.horizon:g}, "
            f"deaths={int(self._dead.sum())}, censored={int(self._censored.sum())}, treatment={self.treatment!r}, "
            f"covariates={list(self.covariates)}, outcome={self.outcome!r})"
        )

    def truncate(self, horizon: float) -> LongitudinalData:
        """The data restricted to [0, horizon]: later rows dropped, survivors past it followed to it exactly.

        Events after ``horizon`` are dropped; a subject still alive after it gets a last row at ``horizon``
        (values carried forward), so it counts as observed to the horizon, not censored.
        """
        horizon = check_float("horizon", horizon, low=0.0, low_inclusive=False)
        df = self.frame
        t = df[self.time].to_numpy(dtype=float)
        keep = t <= horizon + _TOL
        beyond = (self._end > horizon + _TOL)[
            self._block
        ]  # per row: its subject is followed past the horizon
        is_last = np.zeros(len(t), bool)
        is_last[self._last] = True
        nxt_kept = np.r_[keep[1:], False] & ~is_last  # the subject's next row is kept too
        last_kept = keep & beyond & ~nxt_kept  # each such subject's last row at or before the horizon
        on_horizon = last_kept & (np.abs(t - horizon) <= _TOL)
        events = [c for c in (self.death, self.censor) if c is not None]
        out = df.copy()
        for col in events:
            out.loc[on_horizon, col] = 0  # events after the horizon are dropped
        extra = out[last_kept & ~on_horizon].copy()
        extra[self.time] = horizon  # followed to the horizon: values carried forward, no event
        for col in events:
            extra[col] = 0
        order_key = np.r_[self._block[keep], self._block[last_kept & ~on_horizon]]
        out = pd.concat([out[keep], extra])
        out = out.iloc[np.lexsort((out[self.time].to_numpy(dtype=float), order_key))].reset_index(drop=True)
        return LongitudinalData(
            out,
            id=self.id,
            time=self.time,
            treatment=self.treatment,
            covariates=self.covariates,
            outcome=self.outcome,
            death=self.death,
            censor=self.censor,
            horizon=horizon,
        )

    def grid(self, grid: float | Sequence[float]) -> np.ndarray:
        """Grid points ``t_0 = 0 < ... < t_K = τ`` from a width or from explicit points.

        Raises:
            ValueError: the width does not divide the horizon (no partial last interval is made: pass explicit
                points instead), or the points are not increasing from 0 to the horizon.
        """
        tau = self.horizon
        if np.ndim(grid) == 0:
            width = float(grid)  # type: ignore[arg-type]
            if not np.isfinite(width) or width <= 0:
                raise ValueError(f"grid width must be positive, got {grid!r}")
            k = round(tau / width)
            if k < 1 or abs(k * width - tau) > 1e-6 * max(tau, 1.0):
                raise ValueError(
                    f"grid width {width:g} does not divide the horizon {tau:g} (τ/width = {tau / width:.4g}); "
                    "use a width that divides it, or pass explicit grid points ending at the horizon"
                )
            return np.linspace(0.0, tau, k + 1)
        pts = np.asarray(grid, dtype=float)
        if pts.ndim != 1 or len(pts) < 2 or abs(pts[0]) > _TOL or abs(pts[-1] - tau) > _TOL:
            raise ValueError(f"grid points must run from 0 to the horizon {tau:g}; got {pts.tolist()[:6]}...")
        if (np.diff(pts) <= 0).any():
            raise ValueError("grid points must be strictly increasing")
        return pts

    def discretise(self, grid: float | Sequence[float]) -> DiscreteData:
        """The data on a partition of [0, τ] (see the module docstring for the conventions).

        Args:
            grid: a width that divides the horizon (``4`` → 0, 4, 8, ..., τ) or explicit points from 0 to τ.

        Returns:
            :class:`DiscreteData` with (subjects, intervals) arrays.
        """
        pts = self.grid(grid)
        K = len(pts) - 1
        n = self.n
        df = self.frame
        t = df[self.time].to_numpy(dtype=float)
        tk = pts[:-1]
        # Row index holding each subject's value at t_k: last row with time <= t_k (LOCF).
        span = self.horizon * 2.0 + 2.0
        key = self._block * span + t
        query = (np.arange(n)[:, None] * span + tk[None, :]).ravel()
        idx = (np.searchsorted(key, query + _TOL, side="right") - 1).reshape(n, K)
        end, dead, cens = self._end, self._dead, self._censored
        at_risk = np.where(
            dead[:, None], tk[None, :] < end[:, None] - _TOL, tk[None, :] <= end[:, None] + _TOL
        )
        at_risk &= np.where(cens[:, None], True, tk[None, :] < self.horizon - _TOL)
        nxt = pts[1:]
        death_k = at_risk & dead[:, None] & (end[:, None] <= nxt[None, :] + _TOL)
        cens_k = at_risk & cens[:, None] & (end[:, None] < nxt[None, :] - _TOL)
        # Covariate paths: value at t_k and integral over [0, t_k] of the piecewise-constant path.
        nxt_t = np.r_[t[1:], np.inf]
        nxt_t[self._last] = t[self._last]
        seg = nxt_t - t
        covs: dict[str, np.ndarray] = {}
        cums: dict[str, np.ndarray] = {}
        for c in self.covariates:
            v = df[c].to_numpy(dtype=float)
            before = np.cumsum(v * seg) - v * seg  # integral up to the row's own time (within the block)
            before -= (np.cumsum(v * seg) - v * seg)[self._first][self._block]
            val = v[idx]
            covs[c] = np.where(at_risk, val, np.nan)
            cums[c] = np.where(at_risk, before[idx] + val * (tk[None, :] - t[idx]), np.nan)
        a = np.where(at_risk, df[self.treatment].to_numpy(dtype=float)[idx], np.nan)
        y_end = np.full(n, np.nan)
        if self.outcome is not None:
            obs = ~dead & ~cens
            y_end[obs] = df[self.outcome].to_numpy(dtype=float)[self._last[obs]]
        return DiscreteData(
            grid=pts,
            ids=self.ids,
            treatment_name=self.treatment,
            covariates=covs,
            integrals=cums,
            treatment=a,
            at_risk=at_risk,
            death=death_k,
            censored=cens_k,
            outcome=y_end,
            has_censoring=bool(cens.any()),
        )


@dataclasses.dataclass(frozen=True, eq=False)
class DiscreteData:
    """Data on a partition ``0 = t_0 < ... < t_K = τ``; every array is (subjects n, intervals K).

    Attributes:
        grid: (K+1,) grid points. ids: (n,) subject ids.
        covariates: name → (n, K) value at ``t_k`` (NaN when not at risk). integrals: name → ∫_0^{t_k} L ds.
        treatment: (n, K) 0/1 treatment at ``t_k`` (NaN when not at risk).
        at_risk: alive and uncensored at ``t_k``. death: died in ``(t_k, t_{k+1}]``. censored: censored in
            ``[t_k, t_{k+1})`` without an observed death.
        outcome: (n,) outcome at τ for subjects observed alive to τ (NaN otherwise).
        has_censoring: whether any subject is censored (if not, the censoring weights are exactly 1).
    """

    grid: np.ndarray
    ids: np.ndarray
    treatment_name: str
    covariates: dict[str, np.ndarray]
    integrals: dict[str, np.ndarray]
    treatment: np.ndarray
    at_risk: np.ndarray
    death: np.ndarray
    censored: np.ndarray
    outcome: np.ndarray
    has_censoring: bool

    @property
    def n(self) -> int:
        return self.at_risk.shape[0]

    @property
    def num_intervals(self) -> int:
        return self.at_risk.shape[1]

    @property
    def widths(self) -> np.ndarray:
        return np.diff(self.grid)

    def frame(self, past: np.ndarray | None = None, current: np.ndarray | None = None) -> pd.DataFrame:
        """All at-risk person-intervals as a frame for the nuisance formulas (rows ordered by interval, then id).

        Columns: ``k`` (interval index), ``t`` (its start), ``width``, ``first`` (1 on interval 0); for each
        covariate ``L``: ``L`` (value at t_k), ``L_lag`` (at t_{k-1}; its own value at k=0), ``L_base`` (at 0),
        ``cum_L`` (∫_0^{t_k} L ds); for the treatment ``A``: ``A`` (at t_k), ``A_lag`` (at t_{k-1}; 0 at k=0),
        ``cum_A`` (Σ_{j<k} A_j·width_j). Also ``_i`` (subject position).

        Args:
            past: (n, K) treatment path used for ``A_lag``/``cum_A`` (default: observed).
            current: (n, K) treatment used for ``A`` (default: ``past``).
        """
        past = self.treatment if past is None else past
        current = past if current is None else current
        rows_i, rows_k = self.rows
        K = self.num_intervals
        data: dict[str, np.ndarray] = {
            "_i": rows_i,
            "k": rows_k,
            "t": self.grid[rows_k],
            "width": self.widths[rows_k],
            "first": (rows_k == 0).astype(float),
        }
        for c, v in self.covariates.items():
            lag = np.concatenate([v[:, :1], v[:, :-1]], axis=1)
            data[c] = v[rows_i, rows_k]
            data[f"{c}_lag"] = lag[rows_i, rows_k]
            data[f"{c}_base"] = v[rows_i, 0]
            data[f"cum_{c}"] = self.integrals[c][rows_i, rows_k]
        a = self.treatment_name
        p = np.nan_to_num(past, nan=0.0)
        lag_a = np.concatenate([np.zeros((self.n, 1)), p[:, : K - 1]], axis=1)
        cum_a = np.concatenate(
            [np.zeros((self.n, 1)), np.cumsum(p * self.widths[None, :], axis=1)[:, : K - 1]], axis=1
        )
        data[a] = np.asarray(current, dtype=float)[rows_i, rows_k]
        data[f"{a}_lag"] = lag_a[rows_i, rows_k]
        data[f"cum_{a}"] = cum_a[rows_i, rows_k]
        return pd.DataFrame(data)

    @property
    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(subject, interval) positions of the at-risk person-intervals, ordered by interval then subject."""
        k, i = np.nonzero(self.at_risk.T)
        return i, k
