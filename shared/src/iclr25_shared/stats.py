"""Paired comparisons for reproductions: one primary comparison declared before the run, secondary ones
Holm-adjusted, exploratory ones labelled as such, and the verdict read from the primary alone
(docs/package-contract.md, "Statistics in reproductions").

    from iclr25_shared.stats import compare, verdict

    rows = compare(
        primary=("LOZO - MeZO accuracy", lozo_acc, mezo_acc),          # per-seed values, same seeds
        secondary={"LOZO-M - MeZO": (lozom_acc, mezo_acc), "LOZO - Adam": (lozo_acc, adam_acc)},
    )
    verdict(rows[0], paper_effect=0.02)  # "reproduced" / "not reproduced ..." / "inconclusive at this scale"
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from iclr25_shared.metrics import Estimate, paired_t_interval

__all__ = ["Comparison", "compare", "holm", "paired_difference", "verdict"]

Role = Literal["primary", "secondary", "exploratory"]


@dataclass(frozen=True)
class Comparison:
    """One paired comparison: ``estimate`` is the mean of method − baseline over seeds with its t-interval;
    ``p_value`` the two-sided paired t-test; ``p_adjusted`` Holm's adjustment among the secondary comparisons
    (the primary is tested alone, exploratory ones are not adjusted: ``None``)."""

    name: str
    role: Role
    estimate: Estimate
    p_value: float
    p_adjusted: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """For ``results.json``: non-finite numbers become ``None`` (JSON null)."""

        def finite(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else float(x)

        return {
            "name": self.name,
            "role": self.role,
            "mean_difference": finite(self.estimate.value),
            "low": finite(self.estimate.low),
            "high": finite(self.estimate.high),
            "n": self.estimate.n,
            "level": self.estimate.level,
            "p_value": finite(self.p_value),
            "p_adjusted": finite(self.p_adjusted),
        }


def paired_difference(
    method: Sequence[float], baseline: Sequence[float], level: float = 0.95
) -> tuple[Estimate, float]:
    """Mean paired difference method − baseline with its Student-t interval, and the two-sided p-value.

    Args:
        method, baseline: ``(n,)`` per-seed values, aligned (the same seed at the same index).

    Returns:
        ``(estimate, p_value)``; with one pair the interval is infinite and the p-value NaN; with ``n`` identical
        differences the interval is that value and the p-value 0 (or 1 when they are all 0).

    Raises:
        ValueError: different lengths, empty or non-finite values, ``level`` outside ``(0, 1)``.
    """
    a, b = np.asarray(method, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"method {a.shape} and baseline {b.shape} must be 1-D with one value per seed each")
    d = a - b
    estimate = paired_t_interval(d, level)
    if d.size < 2:
        return estimate, math.nan
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        return estimate, 1.0 if estimate.value == 0.0 else 0.0
    from scipy.stats import t as student_t

    statistic = estimate.value / (sd / math.sqrt(d.size))
    return estimate, float(2 * student_t.sf(abs(statistic), d.size - 1))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment (Holm 1979): the k-th smallest of m p-values becomes
    ``max_{j <= k} min(1, (m - j + 1) p_(j))``, in the input's order. NaN stays NaN and does not count in ``m``."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    finite = np.flatnonzero(~np.isnan(p))
    m = finite.size
    running = 0.0
    for rank, index in enumerate(finite[np.argsort(p[finite], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * float(p[index])))
        out[index] = running
    return out.tolist()


def compare(
    primary: tuple[str, Sequence[float], Sequence[float]],
    secondary: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None = None,
    exploratory: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None = None,
    *,
    level: float = 0.95,
) -> list[Comparison]:
    """The primary comparison first, then the secondary ones (Holm-adjusted among themselves), then exploratory.

    Args:
        primary: ``(name, method values, baseline values)`` — the comparison the README declares before the run.
        secondary, exploratory: name → ``(method values, baseline values)``.
    """
    name, a, b = primary
    est, p = paired_difference(a, b, level)
    rows = [Comparison(name, "primary", est, p)]
    sec = [(n, *paired_difference(x, y, level)) for n, (x, y) in (secondary or {}).items()]
    for (n, e, pv), adj in zip(sec, holm([pv for _, _, pv in sec]), strict=True):
        rows.append(Comparison(n, "secondary", e, pv, adj))
    for n, (x, y) in (exploratory or {}).items():
        rows.append(Comparison(n, "exploratory", *paired_difference(x, y, level)))
    return rows


def verdict(primary: Comparison, paper_effect: float) -> str:
    """Read the primary comparison against the paper's effect (same sign convention: method − baseline).

    - the interval excludes the paper's effect → ``"not reproduced: ..."`` (with whether the direction agrees);
    - the interval excludes 0 on the paper's side and contains its effect → ``"reproduced"``;
    - otherwise → ``"inconclusive at this scale"`` (the interval holds both 0 and the paper's effect).

    Raises:
        ValueError: ``primary`` is not the primary comparison, or ``paper_effect`` is 0 or not finite.
    """
    if primary.role != "primary":
        raise ValueError(f"a verdict is read from the primary comparison only, got a {primary.role} one")
    if not math.isfinite(paper_effect) or paper_effect == 0:
        raise ValueError(f"paper_effect must be a finite non-zero difference, got {paper_effect}")
    low, high = primary.estimate.low, primary.estimate.high
    sign = 1.0 if paper_effect > 0 else -1.0
    lo, hi = sorted((sign * low, sign * high))  # the paper's direction made positive
    effect = abs(paper_effect)
    if lo <= effect <= hi:
        return "reproduced" if lo > 0 else "inconclusive at this scale"
    if hi < 0:
        how = "the opposite direction"
    elif lo > effect:
        how = "the same direction, larger"
    elif lo > 0:
        how = "the same direction, smaller"
    else:
        how = "smaller; no effect is not excluded"
    return f"not reproduced: the interval [{low:.4g}, {high:.4g}] excludes the paper's {paper_effect:+.4g} ({how})"
