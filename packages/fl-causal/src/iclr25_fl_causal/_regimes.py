"""Treatment regimes G: the (possibly stochastic, history-dependent) law of the binary treatment at each t_k."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_shared.checks import check_choice, check_float, check_int

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Regime"]

_THRESHOLD = re.compile(r"^threshold:\s*([A-Za-z_][\w.]*)\s*(<=|>=|<|>)\s*([-+0-9.eE]+)$")
_OPS = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal}


@dataclasses.dataclass(frozen=True)
class Regime:
    """A treatment regime: ``dG(a | H_k)`` for a binary treatment, evaluated on the person-interval frame.

    Build one with :meth:`static`, :meth:`always`, :meth:`never`, :meth:`threshold`, :meth:`stochastic` or
    :meth:`parse`. ``probability(frame)`` returns ``P_G(A_k = 1 | H_k)`` per row; a regime is deterministic when
    every probability is 0 or 1 by construction (then the g-computation predicts with the whole treatment
    history set to the regime, the convention of R ``ltmle`` and zEpid).

    References:
        Ying, arXiv:2206.12525, §2 (user-specified regimes G, absolutely continuous w.r.t. the observed law).
    """

    name: str
    fn: Callable[[pd.DataFrame], Any]
    deterministic: bool
    natural: bool = False
    incremental: float | None = None

    @classmethod
    def static(cls, value: int) -> Regime:
        """Treat (1) or do not treat (0) at every time."""
        check_choice("static regime value", check_int("static regime value", value, low=0, high=1), (0, 1))
        return cls("always" if value == 1 else "never", lambda f: np.full(len(f), float(value)), True)

    @classmethod
    def always(cls) -> Regime:
        return cls.static(1)

    @classmethod
    def never(cls) -> Regime:
        return cls.static(0)

    @classmethod
    def threshold(cls, variable: str, cut: float, op: str = "<") -> Regime:
        """Dynamic rule: treat while ``variable op cut`` holds at t_k (e.g. ``cd4 < 200``)."""
        check_choice("threshold op", op, _OPS)
        cut = check_float("threshold cut", cut)

        def rule(frame: pd.DataFrame) -> np.ndarray:
            if variable not in frame.columns:
                raise ValueError(
                    f"threshold regime variable {variable!r} is not a column of the data "
                    f"(available: {', '.join(c for c in frame.columns if not c.startswith('_'))})"
                )
            return _OPS[op](frame[variable].to_numpy(dtype=float), cut).astype(float)

        return cls(f"threshold:{variable}{op}{cut:g}", rule, True)

    @classmethod
    def stochastic(cls, fn: Callable[[pd.DataFrame], Any], name: str = "stochastic") -> Regime:
        """A stochastic regime: ``fn(frame)`` returns ``P_G(A_k = 1 | H_k)`` in [0, 1] for each row."""
        if not callable(fn):
            raise TypeError(f"stochastic regime needs a callable, got {type(fn).__name__}")
        return cls(name, fn, False)

    @classmethod
    def incremental_shift(cls, delta: float) -> Regime:
        """Incremental propensity-score shift (Kennedy 2019): multiply the odds of treatment by ``delta``.

        ``P_G(A_k = 1 | H_k) = δ p / (δ p + 1 − p)`` with p the fitted propensity, so every estimator needs a
        treatment model; the weights ``dG/dP`` are bounded (by max(δ, 1/δ)), and positivity always holds.
        """
        check_float("incremental shift delta", delta, low=0.0, low_inclusive=False)
        return cls(
            f"incremental:{delta:g}", lambda f: np.full(len(f), np.nan), False, incremental=float(delta)
        )

    @classmethod
    def natural_course(cls) -> Regime:
        """The natural course: G is the observed treatment law (no intervention; weights are 1)."""
        return cls("natural", lambda f: np.full(len(f), np.nan), False, natural=True)

    @classmethod
    def parse(cls, text: str) -> Regime:
        """``always`` | ``never`` | ``natural`` | ``threshold:VAR<CUT`` (also ``<=``, ``>``, ``>=``) | ``random:P`` |
        ``incremental:DELTA``."""
        if not isinstance(text, str):
            raise TypeError(f"regime must be a string, got {type(text).__name__}")
        s = text.strip()
        if s in ("always", "never"):
            return cls.static(1 if s == "always" else 0)
        if s == "natural":
            return cls.natural_course()
        if s.startswith("incremental:"):
            try:
                delta = float(s.split(":", 1)[1])
            except ValueError:
                raise ValueError(
                    f"regime {text!r}: incremental:DELTA needs a positive number DELTA"
                ) from None
            return cls.incremental_shift(delta)
        m = _THRESHOLD.match(s)
        if m:
            return cls.threshold(m.group(1), float(m.group(3)), m.group(2))
        if s.startswith("random:"):
            try:
                p = float(s.split(":", 1)[1])
            except ValueError:
                p = -1.0
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"regime {text!r}: random:P needs P in [0, 1]")
            return cls.stochastic(lambda f: np.full(len(f), p), name=s)
        raise ValueError(
            f"regime must be always, never, natural, threshold:VAR<CUT, random:P or incremental:DELTA; got {text!r}"
        )

    def probability(self, frame: pd.DataFrame) -> np.ndarray:
        """``P_G(A_k = 1 | H_k)`` per row of ``frame``.

        Raises:
            ValueError: the regime returns the wrong shape, NaN, or values outside [0, 1].
        """
        p = np.asarray(self.fn(frame), dtype=float)
        if self.natural or self.incremental is not None:
            return p
        if p.shape != (len(frame),):
            raise ValueError(f"regime {self.name!r} returned shape {p.shape}, expected ({len(frame)},)")
        bad = ~np.isfinite(p) | (p < 0) | (p > 1)
        if bad.any():
            raise ValueError(
                f"regime {self.name!r} must return probabilities in [0, 1]; got {p[bad][:5].tolist()} "
                f"(missing values in the rule's variable?)"
            )
        if self.deterministic and not np.isin(p, [0.0, 1.0]).all():
            raise ValueError(f"deterministic regime {self.name!r} returned probabilities other than 0/1")
        return p
