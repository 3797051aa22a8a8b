"""The PRDP progressive refinement controller (arXiv:2502.19611, Sec. 3, Algorithm 1).

Training starts with a coarse physics solver (``K = initial_iterations``). After every epoch the controller sees
the validation metric ``e_t`` (lower is better, e.g. a normalised MSE) and decides whether to refine
(``K <- min(K + step, max_iterations)``):

1. With at most ``plateau_window`` metrics observed, keep ``K``.
2. Smooth the history with an exponential moving average ``ebar_0 = e_0``,
   ``ebar_t = alpha e_t + (1 - alpha) ebar_{t-1}``, ``alpha = 2 / (ema_window + 1)``.
3. Plateau test: ``ebar[-1] / ebar[-plateau_window] > plateau_threshold`` means the metric stopped improving
   at this ``K``.
4. On a plateau compare with the checkpoint ``e_ckpt`` (the smoothed metric at the last refinement, initially
   ``initial_checkpoint``): if ``c = ebar[-1] / e_ckpt < stop_threshold`` (at least ``1 - stop_threshold``
   better than at the last refinement) or ``c > 1`` (worse: diverging), refine and set ``e_ckpt = ebar[-1]``;
   otherwise the last refinement did not pay off: ``K`` has reached the useful maximum ("N_max"), keep it.

This follows ``should_refine`` in the official code (``experiments/src/prdp.py``) exactly, with two repairs:
the checkpoint is per-instance state instead of a function attribute shared by every run, and all arguments
are keyword-only (the official heat-1-D call ``should_refine(h, 0.98, 0.9, 8)`` silently sets ``ema_window``).
As in the official code a "stop" is not final: if the metric later improves enough on a plateau, the controller
refines again (``stopped`` reports the latest plateau decision).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from iclr25_shared.checks import check_float, check_int

__all__ = ["Decision", "RefinementController", "ema"]


def ema(values: Sequence[float] | np.ndarray, window: int) -> np.ndarray:
    """Exponential moving average with span ``window``: ``alpha = 2 / (window + 1)``, seeded with ``values[0]``.

    Equals ``pandas.Series(values).ewm(span=window, adjust=False).mean()``. ``window = 1`` returns the values.

    Args:
        values: metric history, shape ``(t,)``, ``t >= 1``.
        window: span, an integer >= 1.

    Returns:
        float64 array of shape ``(t,)``.

    Raises:
        ValueError: empty ``values`` or ``window < 1``.

    References:
        arXiv:2502.19611, Sec. 3; official ``experiments/src/prdp.py::numpy_ewma``.
    """
    check_int("ema_window", window, low=1)
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size == 0:
        raise ValueError("ema needs at least one value")
    alpha = 2.0 / (window + 1.0)
    out = np.empty_like(x)
    out[0] = x[0]
    for t in range(1, x.size):
        out[t] = alpha * x[t] + (1.0 - alpha) * out[t - 1]
    return out


class Decision(NamedTuple):
    """What :meth:`RefinementController.update` decided.

    Attributes:
        iterations: ``K`` to use for the next epoch.
        refined: whether ``K`` was just raised (or would have been, when already at ``max_iterations``).
        stopped: whether the metric plateaued without enough improvement since the last refinement (N_max reached).
    """

    iterations: int
    refined: bool
    stopped: bool


@dataclasses.dataclass(init=False)
class RefinementController:
    """Stateful PRDP controller: feed it one validation metric per epoch, read back the iteration count.

    Args (keyword-only):
        initial_iterations: ``K_0 >= 0``, the coarse starting iteration count.
        step: ``Delta K >= 1`` added on each refinement.
        max_iterations: ``K_max >= initial_iterations``, a hard cap (e.g. the fully converged count).
        plateau_threshold: ``tau_step`` in (0, 1]; a smoothed improvement ratio above it is a plateau (0.98).
        stop_threshold: ``tau_stop`` in (0, 1]; refine only if the metric is below ``tau_stop`` x the metric at
            the last refinement (0.9, i.e. at least 10 % better).
        ema_window: EMA span (6); 1 disables smoothing.
        plateau_window: ``W`` >= 1; the plateau ratio compares the last smoothed value with the one
            ``W - 1`` epochs earlier (3).
        initial_checkpoint: ``e_ckpt`` before the first refinement (``inf``: the first plateau always refines;
            the official heat-2-D run uses the initial validation metric).

    State (serialisable with :meth:`state_dict` / :meth:`from_state_dict`): ``iterations``, ``history``
    (observed metrics), ``checkpoint``, ``refinements``, ``stopped``. Two controllers never share state; call
    :meth:`reset` to reuse one for a new run.

    Raises:
        ValueError: any argument outside its range (message names the field and the allowed range).

    References:
        arXiv:2502.19611, Sec. 3; official ``experiments/src/prdp.py::should_refine``.
    """

    initial_iterations: int
    step: int
    max_iterations: int
    plateau_threshold: float = 0.98
    stop_threshold: float = 0.9
    ema_window: int = 6
    plateau_window: int = 3
    initial_checkpoint: float = math.inf
    iterations: int = dataclasses.field(init=False)
    history: list[float] = dataclasses.field(init=False, default_factory=list)
    checkpoint: float = dataclasses.field(init=False)
    refinements: int = dataclasses.field(init=False, default=0)
    stopped: bool = dataclasses.field(init=False, default=False)

    def __init__(
        self,
        *,
        initial_iterations: int,
        step: int,
        max_iterations: int,
        plateau_threshold: float = 0.98,
        stop_threshold: float = 0.9,
        ema_window: int = 6,
        plateau_window: int = 3,
        initial_checkpoint: float = math.inf,
    ) -> None:
        for name, value, low in (
            ("initial_iterations", initial_iterations, 0),
            ("step", step, 1),
            ("ema_window", ema_window, 1),
            ("plateau_window", plateau_window, 1),
        ):
            check_int(name, value, low=low)
        check_int("max_iterations", max_iterations, low=initial_iterations)
        for name, value in (("plateau_threshold", plateau_threshold), ("stop_threshold", stop_threshold)):
            check_float(name, value, low=0.0, high=1.0, low_inclusive=False)
        check_float("initial_checkpoint", initial_checkpoint, low=0.0, low_inclusive=False, finite=False)
        self.initial_iterations = initial_iterations
        self.step = step
        self.max_iterations = max_iterations
        self.plateau_threshold = float(plateau_threshold)
        self.stop_threshold = float(stop_threshold)
        self.ema_window = ema_window
        self.plateau_window = plateau_window
        self.initial_checkpoint = float(initial_checkpoint)
        self.reset()

    def reset(self) -> None:
        """Forget the history: ``K = initial_iterations``, checkpoint = ``initial_checkpoint``."""
        self.iterations = self.initial_iterations
        self.history = []
        self.checkpoint = self.initial_checkpoint
        self.refinements = 0
        self.stopped = False

    def should_refine(self) -> tuple[bool, bool]:
        """Apply the rule to the current history without changing ``K``; returns ``(refine, stopped)``.

        Updates the checkpoint when it decides to refine (as the official ``should_refine`` does).
        """
        if len(self.history) <= self.plateau_window:
            return False, False
        smoothed = ema(self.history, self.ema_window)
        ratio = smoothed[-1] / smoothed[-self.plateau_window]
        if not ratio > self.plateau_threshold:
            return False, False
        progress = smoothed[-1] / self.checkpoint
        if progress < self.stop_threshold or progress > 1:
            self.checkpoint = float(smoothed[-1])
            return True, False
        return False, True

    def update(self, metric: float) -> Decision:
        """Record one epoch's validation metric and return the iteration count for the next epoch.

        Args:
            metric: a finite, positive scalar (lower is better); a numpy/JAX scalar is accepted.

        Returns:
            :class:`Decision` ``(iterations, refined, stopped)``.

        Raises:
            ValueError: ``metric`` is NaN, infinite, or not positive (the rule compares ratios).
            TypeError: ``metric`` is not a real scalar.
        """
        try:
            value = float(np.asarray(metric).reshape(()))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"metric must be a real scalar, got {metric!r}") from exc
        check_float("metric", value, low=0.0, low_inclusive=False)  # NaN/inf: the validation metric diverged
        self.history.append(value)
        refine, stopped = self.should_refine()
        if refine:
            self.iterations = min(self.iterations + self.step, self.max_iterations)
            self.refinements += 1
            self.stopped = False
        elif stopped:
            self.stopped = True
        return Decision(self.iterations, refine, stopped)

    # ------------------------------------------------------------------------------------------------------------
    # serialisation for resume

    _CONFIG = (
        "initial_iterations",
        "step",
        "max_iterations",
        "plateau_threshold",
        "stop_threshold",
        "ema_window",
        "plateau_window",
        "initial_checkpoint",
    )
    _STATE = ("iterations", "history", "checkpoint", "refinements", "stopped")

    def state_dict(self) -> dict[str, Any]:
        """Configuration and state as a JSON-serialisable dict (``inf`` is written as the string ``"inf"``)."""

        def enc(v: Any) -> Any:
            return "inf" if isinstance(v, float) and math.isinf(v) else v

        return {"config": {k: enc(getattr(self, k)) for k in self._CONFIG}} | {
            "state": {
                k: enc(list(getattr(self, k)) if k == "history" else getattr(self, k)) for k in self._STATE
            }
        }

    @classmethod
    def from_state_dict(cls, data: dict[str, Any]) -> RefinementController:
        """Rebuild a controller saved with :meth:`state_dict` (or its JSON)."""
        if isinstance(data, str):
            data = json.loads(data)

        def dec(v: Any) -> Any:
            return math.inf if v == "inf" else v

        ctl = cls(**{k: dec(v) for k, v in data["config"].items()})
        state = data["state"]
        ctl.iterations = int(state["iterations"])
        ctl.history = [float(v) for v in state["history"]]
        ctl.checkpoint = float(dec(state["checkpoint"]))
        ctl.refinements = int(state["refinements"])
        ctl.stopped = bool(state["stopped"])
        return ctl
