"""Run a user's training loop under the PRDP controller (or a fixed iteration count) and account for its cost."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, TypeVar

from iclr25_prdp._controller import RefinementController
from iclr25_shared.checks import check_float, check_int

__all__ = ["PRDPRun", "TrainingLog", "train_with_prdp"]

State = TypeVar("State")


@dataclasses.dataclass
class TrainingLog:
    """Per-epoch record of a run. Index 0 is the initial validation (before any training).

    Attributes:
        iterations: ``K`` used in each epoch (``iterations[0]`` is ``None``: no training yet).
        solver_iterations: linear-solver iterations spent in each epoch, ``K x solves_per_epoch``.
        cumulative_iterations: running sum of ``solver_iterations``.
        metric: validation metric after each epoch.
        train_loss: value returned by ``train_epoch`` (``None`` if it returned none).
        wall_time: seconds the run itself has spent (initial validation, then each epoch's training and
            validation), after each epoch; time spent outside the run (callbacks, other runs interleaved with it
            through :class:`PRDPRun`) is not counted.
        refined: whether the controller refined after each epoch.
    """

    iterations: list[int | None] = dataclasses.field(default_factory=list)
    solver_iterations: list[int] = dataclasses.field(default_factory=list)
    cumulative_iterations: list[int] = dataclasses.field(default_factory=list)
    metric: list[float] = dataclasses.field(default_factory=list)
    train_loss: list[float | None] = dataclasses.field(default_factory=list)
    wall_time: list[float] = dataclasses.field(default_factory=list)
    refined: list[bool] = dataclasses.field(default_factory=list)

    @property
    def total_iterations(self) -> int:
        """Total solver iterations of the run."""
        return self.cumulative_iterations[-1] if self.cumulative_iterations else 0

    @property
    def final_metric(self) -> float:
        return self.metric[-1]

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class PRDPRun:
    """One training run under the PRDP controller (or a fixed ``K``), advanced one epoch at a time.

    :func:`train_with_prdp` drives one run to the end; stepping two runs in turn (``a.step(); b.step()``) interleaves
    them epoch by epoch in one process, so slow drifts of the machine's load hit both alike. Each run's
    ``log.wall_time`` counts only its own work (see :class:`TrainingLog`).

    Args: as :func:`train_with_prdp` (without ``callback``).

    Attributes:
        state: the current training state.
        log: the :class:`TrainingLog` so far (empty before the first :meth:`step`).
        epoch: the number of finished epochs (``-1`` before the initial validation).
        epochs: the number of epochs to run.

    Raises:
        ValueError: as :func:`train_with_prdp`, at construction (arguments) or in :meth:`step` (metrics).
    """

    def __init__(
        self,
        train_epoch: Callable[[State, int], tuple[State, Any]],
        validate: Callable[[State], Any],
        state: State,
        *,
        epochs: int,
        controller: RefinementController | None = None,
        iterations: int | None = None,
        solves_per_epoch: int = 1,
    ) -> None:
        if (controller is None) == (iterations is None):
            raise ValueError("give exactly one of controller (PRDP) or iterations (fixed K)")
        check_int("epochs", epochs, low=1)
        check_int("solves_per_epoch", solves_per_epoch, low=1)
        if iterations is not None:
            check_int("iterations", iterations, low=0)
        self.train_epoch, self.validate = train_epoch, validate
        self.state = state
        self.epochs = epochs
        self.controller = controller
        self.iterations = iterations
        self.solves_per_epoch = solves_per_epoch
        self.log = TrainingLog()
        self.epoch = -1
        self._spent = 0.0

    @property
    def done(self) -> bool:
        """Whether all ``epochs`` epochs have run."""
        return self.epoch >= self.epochs

    @property
    def current_iterations(self) -> int:
        """``K`` for the next epoch."""
        if self.controller is not None:
            return self.controller.iterations
        return int(self.iterations)  # type: ignore[arg-type]

    def step(self) -> TrainingLog:
        """Run the initial validation (first call) or the next epoch; returns the log.

        Raises:
            RuntimeError: the run is already done.
            ValueError: a non-finite or non-positive validation metric.
        """
        if self.done:
            raise RuntimeError(f"the run has finished its {self.epochs} epochs")
        start = time.perf_counter()
        if self.epoch < 0:
            k, loss = None, None
            metric = self.validate(self.state)
            if self.controller is not None:
                self.controller.reset()
        else:
            k = self.current_iterations
            self.state, loss = self.train_epoch(self.state, k)
            metric = self.validate(self.state)
        self.epoch += 1
        if self.controller is not None:
            refined = self.controller.update(metric).refined
        else:
            name = "initial validation metric" if k is None else f"validation metric after epoch {self.epoch}"
            check_float(name, float(metric), finite=True)
            refined = False
        self._spent += time.perf_counter() - start
        self._record(k, loss, metric, refined)
        return self.log

    def _record(self, k: int | None, loss: Any, metric: Any, refined: bool) -> None:
        log = self.log
        spent = 0 if k is None else k * self.solves_per_epoch
        log.iterations.append(k)
        log.solver_iterations.append(spent)
        log.cumulative_iterations.append(
            (log.cumulative_iterations[-1] if log.cumulative_iterations else 0) + spent
        )
        log.metric.append(float(metric))
        log.train_loss.append(None if loss is None else float(loss))
        log.wall_time.append(self._spent)
        log.refined.append(refined)


def train_with_prdp(
    train_epoch: Callable[[State, int], tuple[State, Any]],
    validate: Callable[[State], Any],
    state: State,
    *,
    epochs: int,
    controller: RefinementController | None = None,
    iterations: int | None = None,
    solves_per_epoch: int = 1,
    callback: Callable[[int, TrainingLog], None] | None = None,
) -> tuple[State, TrainingLog]:
    """Train for ``epochs`` epochs, choosing the solver's iteration count ``K`` per epoch.

    The protocol of the PRDP experiments: validate once before training (the controller sees this metric
    first), then for each epoch train with the current ``K``, validate, and let the controller decide the next
    ``K``. With ``iterations`` instead of a controller, ``K`` stays fixed (the baselines).

    Args:
        train_epoch: ``(state, K) -> (state, train_loss)``: one epoch of the user's training with a ``K``-iteration
            physics solver (``train_loss`` may be ``None``).
        validate: ``state -> metric``: a positive scalar, lower is better (e.g. validation nMSE).
        state: the initial training state (parameters, optimiser state, keys...), any Python object.
        epochs: number of epochs (>= 1).
        controller: a :class:`RefinementController`; it is :meth:`~RefinementController.reset` first.
        iterations: fixed ``K`` (>= 0) when no controller is given.
        solves_per_epoch: linear solves per epoch, each costing ``K`` iterations (e.g. batches per epoch, x2 when
            the backward pass runs its own adjoint solve); used only for cost accounting.
        callback: called as ``callback(epoch, log)`` after every epoch (epoch 0 = initial validation); its time is
            not counted in ``log.wall_time``.

    Returns:
        ``(final_state, log)`` with a :class:`TrainingLog`.

    Raises:
        ValueError: neither or both of ``controller`` and ``iterations``; bad ``epochs``/``solves_per_epoch``;
            a non-finite or non-positive metric (from the controller).

    References:
        arXiv:2502.19611, Sec. 3 (PR savings from coarse early epochs, IC savings from stopping below ``K_eps``).
    """
    run = PRDPRun(
        train_epoch,
        validate,
        state,
        epochs=epochs,
        controller=controller,
        iterations=iterations,
        solves_per_epoch=solves_per_epoch,
    )
    while not run.done:
        log = run.step()
        if callback is not None:
            callback(run.epoch, log)
    return run.state, run.log
