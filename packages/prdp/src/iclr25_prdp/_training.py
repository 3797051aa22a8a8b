"""Run a user's training loop under the PRDP controller (or a fixed iteration count) and account for its cost."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, TypeVar

from iclr25_prdp._controller import RefinementController
from iclr25_shared.checks import check_float, check_int

__all__ = ["TrainingLog", "train_with_prdp"]

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
        wall_time: seconds since the start of the run, after each epoch (training and validation).
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
        callback: called as ``callback(epoch, log)`` after every epoch (epoch 0 = initial validation).

    Returns:
        ``(final_state, log)`` with a :class:`TrainingLog`.

    Raises:
        ValueError: neither or both of ``controller`` and ``iterations``; bad ``epochs``/``solves_per_epoch``;
            a non-finite or non-positive metric (from the controller).

    References:
        arXiv:2502.19611, Sec. 3 (PR savings from coarse early epochs, IC savings from stopping below ``K_eps``).
    """
    if (controller is None) == (iterations is None):
        raise ValueError("give exactly one of controller (PRDP) or iterations (fixed K)")
    check_int("epochs", epochs, low=1)
    check_int("solves_per_epoch", solves_per_epoch, low=1)
    if iterations is not None:
        check_int("iterations", iterations, low=0)

    log = TrainingLog()
    start = time.perf_counter()

    def record(k: int | None, loss: Any, metric: Any, refined: bool) -> None:
        spent = 0 if k is None else k * solves_per_epoch
        log.iterations.append(k)
        log.solver_iterations.append(spent)
        log.cumulative_iterations.append(
            (log.cumulative_iterations[-1] if log.cumulative_iterations else 0) + spent
        )
        log.metric.append(float(metric))
        log.train_loss.append(None if loss is None else float(loss))
        log.wall_time.append(time.perf_counter() - start)
        log.refined.append(refined)

    def current() -> int:
        return controller.iterations if controller is not None else int(iterations)  # type: ignore[arg-type]

    metric = validate(state)
    refined = False
    if controller is not None:
        controller.reset()
        refined = controller.update(metric).refined
    else:
        check_float("initial validation metric", float(metric), finite=True)
    record(None, None, metric, refined)
    if callback is not None:
        callback(0, log)
    for epoch in range(1, epochs + 1):
        k = current()
        state, loss = train_epoch(state, k)
        metric = validate(state)
        if controller is not None:
            refined = controller.update(metric).refined
        else:
            check_float(f"validation metric after epoch {epoch}", float(metric), finite=True)
        record(k, loss, metric, refined)
        if callback is not None:
            callback(epoch, log)
    return state, log
