"""Adaptive pacing: when to move from curriculum stage n to n+1 (paper §4.2)."""

from __future__ import annotations

import itertools
import math
import warnings
from typing import Any

from iclr25_shared.checks import check_float, check_int

__all__ = ["FixedPacer", "PatiencePacer"]


def _as_float_loss(loss: Any) -> float:
    if hasattr(loss, "detach") and hasattr(loss, "numel"):
        if loss.numel() != 1:
            raise TypeError(
                f"loss must be a scalar (a float or a 1-element tensor), got shape {tuple(loss.shape)}"
            )
        return float(loss.detach().reshape(()).item())
    if isinstance(loss, bool) or (not isinstance(loss, (int, float)) and not hasattr(loss, "__float__")):
        raise TypeError(f"loss must be a real number, got {type(loss).__name__}")
    return float(loss)


class PatiencePacer:
    """Patience-based adaptive pacing of the curriculum stages.

    Each :meth:`update` feeds one training loss. The pacer keeps an exponential moving average of the loss
    (``ema`` = 0 uses the raw loss) and the best smoothed value seen in the current stage. An update *improves*
    when the smoothed loss is below ``best − min_delta``; otherwise the patience counter grows. The stage advances
    when the counter reaches ``patience`` (``patience`` consecutive non-improving updates) or when the stage has
    had ``max_steps_per_stage`` updates. On advance, the counter, the best loss, the step count of the stage and
    the moving average are all reset (the loss distribution changes when harder clusters join). The stage never
    decreases and stops at ``num_stages``; updates after that only count.

    Consequences (tested): a constant loss advances every ``patience + 1`` updates (the first update of a stage
    always improves on ``best = inf``); a strictly decreasing loss advances only at the cap.

    A non-finite loss (NaN, ±inf) is skipped with a ``RuntimeWarning``: no counter moves and the stage stays.

    Args:
        patience: ``τ``, consecutive non-improving updates before advancing (int ≥ 1).
        max_steps_per_stage: cap on updates per stage (int ≥ 1), or ``None`` for no cap.
        ema: smoothing factor in ``[0, 1)`` of the loss moving average.
        min_delta: how much the smoothed loss must drop below the best to count as an improvement (≥ 0).
        num_stages: ``N``; normally set by :class:`CurriculumSampler` from its clusters.

    Raises:
        ValueError: any argument outside its range.

    References:
        Kim et al., ICLR 2025, arXiv:2403.10348, §4.2 (adaptive pacing: move on when the training loss has
        converged within a maximum patience, with a maximum number of iterations per stage).
    """

    def __init__(
        self,
        patience: int = 200,
        max_steps_per_stage: int | None = None,
        ema: float = 0.99,
        *,
        min_delta: float = 0.0,
        num_stages: int | None = None,
    ) -> None:
        check_int("patience", patience, low=1)
        if max_steps_per_stage is not None:
            check_int("max_steps_per_stage", max_steps_per_stage, low=1)
        check_float("ema", ema, low=0.0, high=1.0, high_inclusive=False)
        check_float("min_delta", min_delta, low=0.0)
        self.patience = patience
        self.max_steps_per_stage = max_steps_per_stage
        self.ema = float(ema)
        self.min_delta = float(min_delta)
        self.num_stages: int | None = None
        if num_stages is not None:
            self.bind(num_stages)
        self.reset()

    def bind(self, num_stages: int) -> None:
        """Set ``N``, the number of stages (done by :class:`CurriculumSampler`).

        Raises:
            ValueError: ``num_stages < 1``, or the pacer is already bound to a different ``N``.
        """
        check_int("num_stages", num_stages, low=1)
        if self.num_stages is not None and self.num_stages != num_stages:
            raise ValueError(f"this pacer is bound to num_stages={self.num_stages}, not {num_stages}")
        self.num_stages = num_stages

    def reset(self) -> None:
        """Back to stage 1 with empty history."""
        self.stage = 1
        self.best = math.inf
        self.counter = 0
        self.steps_in_stage = 0
        self.smoothed: float | None = None
        self.num_updates = 0
        self.num_skipped = 0
        self.history: list[tuple[int, int]] = []  # (update index at which the stage began, stage)

    @property
    def finished(self) -> bool:
        """True once the last stage (all clusters) is reached."""
        return self.num_stages is not None and self.stage >= self.num_stages

    def update(self, loss: Any) -> int:
        """Feed one training loss (float or 1-element tensor); return the stage (1-based) to use next.

        Raises:
            RuntimeError: the pacer has no ``num_stages`` yet.
            TypeError: ``loss`` is not a scalar.
        """
        if self.num_stages is None:
            raise RuntimeError(
                "PatiencePacer.update needs num_stages: pass it, or wrap the pacer in a CurriculumSampler"
            )
        value = _as_float_loss(loss)
        if not math.isfinite(value):
            self.num_skipped += 1
            warnings.warn(
                f"PatiencePacer: non-finite loss {value} skipped (stage {self.stage} and patience unchanged)",
                RuntimeWarning,
                stacklevel=2,
            )
            return self.stage
        self.num_updates += 1
        if self.finished:
            return self.stage
        self.steps_in_stage += 1
        self.smoothed = (
            value if self.smoothed is None else self.ema * self.smoothed + (1.0 - self.ema) * value
        )
        if self.smoothed < self.best - self.min_delta:
            self.best = self.smoothed
            self.counter = 0
        else:
            self.counter += 1
        capped = self.max_steps_per_stage is not None and self.steps_in_stage >= self.max_steps_per_stage
        if self.counter >= self.patience or capped:
            self._advance()
        return self.stage

    def _advance(self) -> None:
        self.stage += 1
        self.best = math.inf
        self.counter = 0
        self.steps_in_stage = 0
        self.smoothed = None
        self.history.append((self.num_updates, self.stage))

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly (plain Python values, JSON-serialisable)."""
        return {
            "kind": "PatiencePacer",
            "patience": self.patience,
            "max_steps_per_stage": self.max_steps_per_stage,
            "ema": self.ema,
            "min_delta": self.min_delta,
            "num_stages": self.num_stages,
            "stage": self.stage,
            "best": self.best,
            "counter": self.counter,
            "steps_in_stage": self.steps_in_stage,
            "smoothed": self.smoothed,
            "num_updates": self.num_updates,
            "num_skipped": self.num_skipped,
            "history": [list(h) for h in self.history],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`.

        Raises:
            ValueError: the state is from another pacer kind or has different hyperparameters.
        """
        if state.get("kind") != "PatiencePacer":
            raise ValueError(f"state_dict is for {state.get('kind')!r}, not PatiencePacer")
        for key in ("patience", "max_steps_per_stage", "ema", "min_delta"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"state_dict has {key}={state[key]!r} but this pacer has {getattr(self, key)!r}"
                )
        if state["num_stages"] is not None:
            self.num_stages = None
            self.bind(int(state["num_stages"]))
        self.stage = int(state["stage"])
        self.best = float(state["best"])
        self.counter = int(state["counter"])
        self.steps_in_stage = int(state["steps_in_stage"])
        self.smoothed = None if state["smoothed"] is None else float(state["smoothed"])
        self.num_updates = int(state["num_updates"])
        self.num_skipped = int(state["num_skipped"])
        self.history = [(int(a), int(b)) for a, b in state["history"]]

    def __repr__(self) -> str:
        return (
            f"PatiencePacer(patience={self.patience}, max_steps_per_stage={self.max_steps_per_stage}, ema={self.ema}, "
            f"min_delta={self.min_delta}; stage {self.stage}/{self.num_stages})"
        )


class FixedPacer:
    """A fixed, user-written schedule: stage ``n+1`` begins after ``stage_starts[n-1]`` updates.

    The same as kohya sd-scripts' ``--dynamic_timestep_schedule [(step, min, max), …]`` idea, expressed as the
    update counts at which stages 2, 3, … begin. Replaying a :class:`PatiencePacer`'s ``history`` through a
    FixedPacer reproduces its stages exactly (tested). Losses are ignored, except that non-finite ones are
    skipped with a warning like :class:`PatiencePacer` does, so both count updates the same way.

    Args:
        stage_starts: strictly increasing update counts (ints ≥ 1) at which stages 2, 3, … begin.

    Raises:
        ValueError: not strictly increasing, or a value < 1.
    """

    def __init__(self, stage_starts: list[int] | tuple[int, ...], *, num_stages: int | None = None) -> None:
        starts = list(stage_starts)
        for i, s in enumerate(starts):
            check_int(f"stage_starts[{i}]", s, low=1)
        if any(b <= a for a, b in itertools.pairwise(starts)):
            raise ValueError(f"stage_starts must be strictly increasing, got {starts!r}")
        self.stage_starts = starts
        self.num_stages: int | None = None
        if num_stages is not None:
            self.bind(num_stages)
        self.reset()

    def bind(self, num_stages: int) -> None:
        """Set ``N``; the schedule may name at most ``N − 1`` stage starts."""
        check_int("num_stages", num_stages, low=1)
        if len(self.stage_starts) > num_stages - 1:
            raise ValueError(
                f"{len(self.stage_starts)} stage starts given but only {num_stages - 1} advances exist"
            )
        self.num_stages = num_stages

    def reset(self) -> None:
        self.stage = 1
        self.num_updates = 0
        self.num_skipped = 0
        self.history: list[tuple[int, int]] = []

    @property
    def finished(self) -> bool:
        return self.num_stages is not None and self.stage >= self.num_stages

    def update(self, loss: Any = 0.0) -> int:
        """Count one update and return the stage to use next."""
        value = _as_float_loss(loss)
        if not math.isfinite(value):
            self.num_skipped += 1
            warnings.warn(f"FixedPacer: non-finite loss {value} skipped", RuntimeWarning, stacklevel=2)
            return self.stage
        self.num_updates += 1
        while (
            self.stage - 1 < len(self.stage_starts) and self.num_updates >= self.stage_starts[self.stage - 1]
        ):
            self.stage += 1
            self.history.append((self.num_updates, self.stage))
        return self.stage

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": "FixedPacer",
            "stage_starts": list(self.stage_starts),
            "num_stages": self.num_stages,
            "stage": self.stage,
            "num_updates": self.num_updates,
            "num_skipped": self.num_skipped,
            "history": [list(h) for h in self.history],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("kind") != "FixedPacer" or list(state["stage_starts"]) != self.stage_starts:
            raise ValueError("state_dict is not from a FixedPacer with the same stage_starts")
        self.stage = int(state["stage"])
        self.num_updates = int(state["num_updates"])
        self.num_skipped = int(state["num_skipped"])
        self.history = [(int(a), int(b)) for a, b in state["history"]]
