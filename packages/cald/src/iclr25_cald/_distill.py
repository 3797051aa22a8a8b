"""Layerwise distillation and the guidance strategies of CALD (He & Garner, ICLR 2025, arXiv:2410.06846, Section 3.2).

Loss (Section 3.2, Eq. (1)-(2)): ``L = L_task(student) + α_layer · Σ_l MSE(h_l^S, h_l^T) + α_logits · T² · KL(p_T ‖ p_S)``
over the hidden states ``h_0 … h_L`` (embedding output and every layer) of student S and teacher T.

Guidance strategies (Section 3.2 and Fig. 1):

- ``unguided``: ``α = 0``; the converted model is fine-tuned on the task alone.
- ``target``: the teacher is the transformer already fine-tuned on the task, frozen.
- ``trajectory``: the teacher starts from the same pretrained transformer and is fine-tuned on the task *jointly*;
  at every step the student matches the teacher's current hidden states (teacher updated every
  ``teacher_update_cycle`` steps, with its own learning rate).
- ``waypoint``: the teacher is swapped through checkpoints of a standard fine-tuning run (``waypoint_every``
  student steps per checkpoint).
- ``hybrid``: target-guided for the first ``max_distill_steps`` steps, then ``α = 0``.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from iclr25_shared.checks import check_choice, check_float, check_int

__all__ = ["STRATEGIES", "DistillResult", "Guidance", "distill", "layerwise_loss", "logits_kl"]

STRATEGIES = ("unguided", "target", "trajectory", "waypoint", "hybrid")


def layerwise_loss(
    student_hidden: Sequence[torch.Tensor],
    teacher_hidden: Sequence[torch.Tensor],
    mask: torch.Tensor | None = None,
    *,
    layers: Sequence[int] | None = None,
    reduction: str = "sum",
) -> torch.Tensor:
    """``Σ_l MSE(h_l^S, h_l^T)`` over the hidden states (CALD Eq. (2)); the teacher's states are detached.

    Args:
        student_hidden, teacher_hidden: sequences of ``(batch, seq, hidden)`` tensors of equal length and shapes
            (HF ``output_hidden_states``: ``L + 1`` states for ``L`` layers).
        mask: ``(batch, seq)`` 1 for real tokens, 0 for pads (pads do not count), or ``None``.
        layers: indices into the sequences to use (default: all of them, for any depth).
        reduction: ``"sum"`` over layers (the CALD NLP code) or ``"mean"`` (its LM code).

    Returns:
        A scalar tensor; 0 exactly when the student's states equal the teacher's.

    Raises:
        ValueError: different numbers of states, mismatched shapes, an out-of-range layer, unknown reduction.
    """
    check_choice("reduction", reduction, ("sum", "mean"))
    if len(student_hidden) != len(teacher_hidden):
        raise ValueError(
            f"student has {len(student_hidden)} hidden states and teacher {len(teacher_hidden)}; "
            "layerwise distillation needs the same depth"
        )
    n = len(student_hidden)
    index = list(range(n)) if layers is None else list(layers)
    for i in index:
        if not -n <= i < n:
            raise ValueError(f"layers must index the {n} hidden states, got {i}")
    if not index:
        raise ValueError("layers must not be empty")
    total = student_hidden[0].new_zeros(())
    for i in index:
        s, t = student_hidden[i], teacher_hidden[i].detach()
        if s.shape != t.shape:
            raise ValueError(
                f"hidden state {i}: student shape {tuple(s.shape)} != teacher shape {tuple(t.shape)}"
            )
        sq = (s - t).pow(2)
        if mask is None:
            total = total + sq.mean()
        else:
            m = mask.to(sq.dtype)[..., None]
            total = total + (sq * m).sum() / (m.sum().clamp_min(1) * sq.shape[-1])
    return total / len(index) if reduction == "mean" else total


def logits_kl(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    temperature: float = 2.0,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``T² · KL(softmax(z_T / T) ‖ softmax(z_S / T))`` averaged over examples (or real tokens for ``(b, n, V)``).

    Args:
        student_logits, teacher_logits: ``(batch, classes)`` or ``(batch, seq, vocab)``, same shape.
        temperature: ``T > 0`` (2 in the CALD code).
        mask: ``(batch, seq)`` real-token mask for 3-D logits, or ``None``.
    """
    check_float("temperature", temperature, low=0.0, low_inclusive=False)
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(
            f"student logits {tuple(student_logits.shape)} and teacher logits {tuple(teacher_logits.shape)} differ"
        )
    s = F.log_softmax(student_logits.float() / temperature, dim=-1)
    t = F.log_softmax(teacher_logits.detach().float() / temperature, dim=-1)
    kl = (t.exp() * (t - s)).sum(-1)
    if kl.dim() == 2 and mask is not None:
        m = mask.to(kl.dtype)
        kl = (kl * m).sum() / m.sum().clamp_min(1)
    else:
        kl = kl.mean()
    return kl * temperature**2


@dataclass(frozen=True)
class Guidance:
    """A guidance strategy and its weights (CALD Section 3.2).

    Attributes:
        strategy: one of ``unguided, target, trajectory, waypoint, hybrid``.
        alpha_layer: weight of the layerwise MSE (>= 0; float). Ignored (0) for ``unguided``.
        alpha_logits: weight of the logits KL (>= 0).
        temperature: KL temperature (> 0).
        teacher_lr: trajectory: the teacher's learning rate (>= 0; 0 freezes it).
        teacher_update_cycle: trajectory: update the teacher every this many steps (>= 1).
        max_distill_steps: hybrid: steps with distillation before α drops to 0 (>= 0).
        waypoint_every: waypoint: student steps per teacher checkpoint (>= 1).
        layers: hidden-state indices to match (default all).
        reduction: ``"sum"`` or ``"mean"`` over layers.
        teacher_mode: target/hybrid/waypoint: the teacher's mode while it guides, ``"eval"`` (no dropout; default)
            or ``"train"`` (the official target/hybrid script leaves the teacher in ``train()``). The caller's
            teacher gets its own modes back afterwards.
    """

    strategy: str = "target"
    alpha_layer: float = 1.0
    alpha_logits: float = 0.0
    temperature: float = 2.0
    teacher_lr: float = 1e-4
    teacher_update_cycle: int = 1
    max_distill_steps: int = 0
    waypoint_every: int = 1
    layers: tuple[int, ...] | None = None
    reduction: str = "sum"
    teacher_mode: str = "eval"

    def __post_init__(self) -> None:
        check_choice("strategy", self.strategy, STRATEGIES)
        check_float("alpha_layer", self.alpha_layer, low=0.0)
        check_float("alpha_logits", self.alpha_logits, low=0.0)
        check_float("temperature", self.temperature, low=0.0, low_inclusive=False)
        check_float("teacher_lr", self.teacher_lr, low=0.0)
        check_int("teacher_update_cycle", self.teacher_update_cycle, low=1)
        check_int("max_distill_steps", self.max_distill_steps, low=0)
        check_int("waypoint_every", self.waypoint_every, low=1)
        check_choice("reduction", self.reduction, ("sum", "mean"))
        check_choice("teacher_mode", self.teacher_mode, ("eval", "train"))

    def alphas(self, step: int) -> tuple[float, float]:
        """``(alpha_layer, alpha_logits)`` in force at 0-based ``step``."""
        if self.strategy == "unguided":
            return 0.0, 0.0
        if self.strategy == "hybrid" and step >= self.max_distill_steps:
            return 0.0, 0.0
        return self.alpha_layer, self.alpha_logits


@dataclass
class DistillResult:
    """What :func:`distill` returns.

    Attributes:
        student: the fine-tuned student (same object as passed in).
        teacher: the teacher at the end (co-trained for ``trajectory``; ``None`` for ``unguided``).
        history: one dict per step: ``task``, ``layer``, ``logits``, ``loss``, ``alpha_layer``, ``teacher_task``.
    """

    student: nn.Module
    teacher: nn.Module | None
    history: list[dict[str, float]] = field(default_factory=list)


def _linear_schedule(
    optimizer: torch.optim.Optimizer, warmup: int, total: int
) -> torch.optim.lr_scheduler.LambdaLR:
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total - step) / max(1, total - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _forward(model: nn.Module, batch: Mapping[str, torch.Tensor]) -> Any:
    return model(**batch, output_hidden_states=True)


def distill(
    student: nn.Module,
    batches: Iterable[Mapping[str, torch.Tensor]],
    *,
    steps: int,
    guidance: Guidance,
    teacher: nn.Module | None = None,
    waypoints: Sequence[Mapping[str, torch.Tensor]] | None = None,
    lr: float = 1e-4,
    weight_decay: float = 0.0,
    warmup_steps: int = 0,
    grad_clip: float | None = 1.0,
    trainable: Callable[[str, nn.Parameter], bool] | None = None,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
    distributed: bool | None = None,
    comm_hook: Callable[..., Any] | None = None,
) -> DistillResult:
    """Fine-tune a converted student on a task with teacher guidance (CALD Algorithm / Section 3.2).

    Each batch is a dict for the HF model's ``forward`` holding ``labels`` (so ``output.loss`` is the task loss)
    and, optionally, ``attention_mask`` (1 = real token), which also masks the layerwise loss.

    Args:
        student: the converted model (trained in place).
        batches: an iterable of batches; cycled if shorter than ``steps``.
        steps: optimizer steps (>= 1).
        guidance: the :class:`Guidance` strategy.
        teacher: ``target``/``hybrid``: the fine-tuned teacher (read only: its forward runs without gradients, in
            ``guidance.teacher_mode``, and its modes are restored afterwards, also when a step fails; its
            ``requires_grad`` flags and weights are never touched); ``trajectory``: the *pretrained* teacher (it
            is copied and co-trained); ``waypoint``: the architecture the checkpoints load into (copied);
            ``unguided``: ignored.
        waypoints: ``waypoint``: teacher state dicts in training order (>= 1).
        lr, weight_decay, warmup_steps: AdamW with linear warm-up and linear decay to 0 (the CALD code's default).
        grad_clip: max gradient norm (``None`` = no clipping).
        trainable: ``(name, parameter) -> bool`` selects the student's trained parameters (default all).
        on_step: called with ``(step, record)`` after every step.
        distributed: data parallelism over an initialised ``torch.distributed`` process group (``torchrun`` /
            ``accelerate launch``, then ``iclr25_shared.distributed.init_process_group``). ``None`` (default): on
            when a group of more than one process is initialised. Every rank passes the same global batches; each
            rank trains on its round-robin share of every batch's rows (``DistributedSampler``-style: rows
            ``rank, rank + world, ...``; the batch size must be a multiple of the number of processes), the
            student's trainable parameters are wrapped in ``DistributedDataParallel`` (gradients all-reduced), a
            trajectory teacher too; a target/waypoint teacher is replicated and frozen on every rank. Every loss
            term is weighted so that the averaged gradient is the one-process gradient of the whole batch (a
            per-example mean: weight 1; a per-token mean, masked layerwise loss or token-level task loss: this
            rank's tokens × world / the batch's tokens), and the ``history`` records are the batch's values
            (averaged over ranks), so the run equals the one-process run up to floating-point reduction order.
            A non-finite loss is detected on the reduced value, so every rank raises together.
        comm_hook: a DDP communication hook (e.g. ``iclr25_shared.distributed.ByteCounter().hook``) registered on
            each ``DistributedDataParallel`` wrapper; ignored in one process.

    Returns:
        :class:`DistillResult` (``teacher`` is the caller's own for target/hybrid, a copy otherwise).

    Raises:
        ValueError: a guided strategy without a teacher, ``waypoint`` without checkpoints, bad step counts;
            ``distributed=True`` without an initialised process group; a batch that does not split evenly over
            the processes.
        FloatingPointError: a non-finite loss (the step is not applied; names the step).
    """
    _check_arguments(steps, lr, weight_decay, warmup_steps, grad_clip, guidance, teacher, waypoints)
    rank, world = _data_parallel(distributed)
    run = _Run(guidance=guidance, waypoints=waypoints, grad_clip=grad_clip, rank=rank, world=world)
    _student_side(run, student, trainable, lr, weight_decay, warmup_steps, steps, comm_hook)
    _teacher_side(run, teacher, trainable, weight_decay, warmup_steps, steps, comm_hook)
    t_model = run.t_model
    # the caller's own teacher (target/hybrid) is only read: its modules get their modes back whatever happens
    with _modes_restored(teacher if t_model is not None and t_model is teacher else None):
        history = _train(run, student, batches, steps, on_step)
    student.eval()
    if t_model is not None and t_model is not teacher:
        t_model.eval()
    return DistillResult(student=student, teacher=t_model, history=history)


@dataclass
class _Run:
    """One :func:`distill` run's parts: the guidance, the process share, the student's and the teacher's sides."""

    guidance: Guidance
    waypoints: Sequence[Mapping[str, torch.Tensor]] | None
    grad_clip: float | None
    rank: int
    world: int
    params: list[nn.Parameter] = field(default_factory=list)
    s_fwd: nn.Module | None = None
    opt: Any = None
    sched: Any = None
    t_model: nn.Module | None = None
    t_fwd: nn.Module | None = None
    t_opt: Any = None
    t_sched: Any = None
    current_waypoint: int = -1


def _check_arguments(
    steps: int,
    lr: float,
    weight_decay: float,
    warmup_steps: int,
    grad_clip: float | None,
    guidance: Guidance,
    teacher: nn.Module | None,
    waypoints: Sequence[Mapping[str, torch.Tensor]] | None,
) -> None:
    """:func:`distill`'s argument checks (``ValueError`` naming the argument)."""
    check_int("steps", steps, low=1)
    check_float("lr", lr, low=0.0, low_inclusive=False)
    check_float("weight_decay", weight_decay, low=0.0)
    check_int("warmup_steps", warmup_steps, low=0)
    if grad_clip is not None:
        check_float("grad_clip", grad_clip, low=0.0, low_inclusive=False)
    strategy = guidance.strategy
    if strategy != "unguided" and teacher is None:
        raise ValueError(f"strategy {strategy!r} needs a teacher model")
    if strategy == "waypoint" and not waypoints:
        raise ValueError("strategy 'waypoint' needs at least one teacher checkpoint in waypoints")


def _student_side(
    run: _Run,
    student: nn.Module,
    trainable: Callable[[str, nn.Parameter], bool] | None,
    lr: float,
    weight_decay: float,
    warmup_steps: int,
    steps: int,
    comm_hook: Callable[..., Any] | None,
) -> None:
    """The student's trained parameters, its (DDP) forward module, AdamW and the linear schedule, into ``run``."""
    params = [p for n, p in student.named_parameters() if trainable is None or trainable(n, p)]
    if trainable is not None:
        chosen = {id(p) for p in params}
        for p in student.parameters():
            p.requires_grad_(id(p) in chosen)
    # DDP broadcasts rank 0's parameters, then all-reduces (averages) the gradients of the trainable ones
    run.s_fwd = _ddp(student, comm_hook) if run.world > 1 else student
    run.opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    run.sched = _linear_schedule(run.opt, warmup_steps, steps)
    run.params = params


def _teacher_side(
    run: _Run,
    teacher: nn.Module | None,
    trainable: Callable[[str, nn.Parameter], bool] | None,
    weight_decay: float,
    warmup_steps: int,
    steps: int,
    comm_hook: Callable[..., Any] | None,
) -> None:
    """The guiding model into ``run``: a co-trained copy with its optimiser (trajectory), a copy the checkpoints
    load into (waypoint), the caller's teacher (target/hybrid) or none (unguided)."""
    strategy = run.guidance.strategy
    if strategy == "trajectory":
        t_model = copy.deepcopy(teacher)
        t_params = [p for n, p in t_model.named_parameters() if trainable is None or trainable(n, p)]
        chosen = {id(p) for p in t_params}
        for p in t_model.parameters():
            p.requires_grad_(id(p) in chosen)
        run.t_opt = torch.optim.AdamW(
            t_params, lr=max(run.guidance.teacher_lr, 1e-30), weight_decay=weight_decay
        )
        run.t_sched = _linear_schedule(run.t_opt, warmup_steps, steps)
        t_model.train()
        run.t_fwd = _ddp(t_model, comm_hook) if run.world > 1 and t_params else t_model
        run.t_model = t_model
    elif strategy != "unguided":
        run.t_model = copy.deepcopy(teacher) if strategy == "waypoint" else teacher


def _train(
    run: _Run,
    student: nn.Module,
    batches: Iterable[Mapping[str, torch.Tensor]],
    steps: int,
    on_step: Callable[[int, dict[str, float]], None] | None,
) -> list[dict[str, float]]:
    """The training loop: ``steps`` optimiser steps on (this rank's share of) the cycled batches; the history."""
    if run.t_model is not None and run.guidance.strategy != "trajectory":
        run.t_model.train(run.guidance.teacher_mode == "train")
    run.current_waypoint = -1
    student.train()
    history: list[dict[str, float]] = []
    it = _cycle(batches)
    for step in range(steps):
        batch = next(it)
        w_task = w_tok = None  # one process: the HF losses as they are (bit-identical to before)
        if run.world > 1:
            batch, w_task, w_tok = _local_share(batch, run.rank, run.world, student)
        record = _train_step(run, step, batch, w_task, w_tok)
        history.append(record)
        if on_step is not None:
            on_step(step, record)
    return history


def _train_step(
    run: _Run, step: int, batch: Mapping[str, torch.Tensor], w_task: float | None, w_tok: float | None
) -> dict[str, float]:
    """One step: the teacher's forward (and its update, trajectory), the student's loss and update; its record."""
    mask = batch.get("attention_mask")
    a_layer, a_logits = run.guidance.alphas(step)
    record: dict[str, float] = {"alpha_layer": a_layer}
    t_out = _teacher_forward(run, step, batch, w_task, record, active=a_layer > 0 or a_logits > 0)
    out = _forward(run.s_fwd, batch)
    loss, terms = _student_loss(run, out, t_out, mask, w_task, w_tok, a_layer, a_logits)
    values = {k: float(v.detach()) for k, v in terms.items()}
    if run.world > 1:  # the whole batch's values (each rank's share weighted as above), on every rank
        values = _all_reduce_mean({**values, "loss": float(loss.detach())})
        total = values.pop("loss")
    else:
        total = float(loss.detach())
    record.update(values)
    if not math.isfinite(total):
        raise FloatingPointError(f"non-finite student loss at step {step} ({record}); no update applied")
    run.opt.zero_grad(set_to_none=True)
    loss.backward()
    if run.grad_clip is not None:
        nn.utils.clip_grad_norm_(run.params, run.grad_clip)
    run.opt.step()
    run.sched.step()
    record["loss"] = total
    return record


def _teacher_forward(
    run: _Run,
    step: int,
    batch: Mapping[str, torch.Tensor],
    w_task: float | None,
    record: dict[str, float],
    *,
    active: bool,
) -> Any:
    """The teacher's output at ``step`` (``None`` when it does not guide): trajectory co-trains it (its task loss
    into ``record``), waypoint loads the step's checkpoint, a guided step runs it without gradients."""
    guidance = run.guidance
    if guidance.strategy == "trajectory":
        update = (step + 1) % guidance.teacher_update_cycle == 0 and guidance.teacher_lr > 0
        # DDP only when the teacher steps: a DDP forward expects its backward
        t_out = _forward(run.t_fwd if update else run.t_model, batch)
        t_loss = t_out.loss if w_task is None else t_out.loss * w_task
        t_rec = {"teacher_task": float(t_loss.detach())}
        if run.world > 1:
            t_rec = _all_reduce_mean(t_rec)
        record.update(t_rec)
        if update:
            _teacher_update(run, step, t_loss, record["teacher_task"])
        return t_out
    if not active:
        return None
    if guidance.strategy == "waypoint":
        idx = min(step // guidance.waypoint_every, len(run.waypoints) - 1)
        if idx != run.current_waypoint:
            run.t_model.load_state_dict(run.waypoints[idx])
            run.current_waypoint = idx
    with torch.no_grad():
        return _forward(run.t_model, batch)


def _teacher_update(run: _Run, step: int, t_loss: torch.Tensor, value: float) -> None:
    """One optimiser step of the co-trained (trajectory) teacher on its task loss."""
    if not math.isfinite(value):
        raise FloatingPointError(f"non-finite teacher loss at step {step}; no update applied")
    run.t_opt.zero_grad(set_to_none=True)
    t_loss.backward()
    if run.grad_clip is not None:
        nn.utils.clip_grad_norm_([p for p in run.t_model.parameters() if p.requires_grad], run.grad_clip)
    run.t_opt.step()
    run.t_sched.step()


def _student_loss(
    run: _Run,
    out: Any,
    t_out: Any,
    mask: torch.Tensor | None,
    w_task: float | None,
    w_tok: float | None,
    a_layer: float,
    a_logits: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The student's loss (task + α_layer · layerwise + α_logits · KL, weighted for this rank's share) and its
    terms."""
    guidance = run.guidance
    loss = out.loss if w_task is None else out.loss * w_task
    terms = {"task": loss}
    if t_out is not None and a_layer > 0:
        lay = layerwise_loss(
            out.hidden_states,
            t_out.hidden_states,
            mask,
            layers=guidance.layers,
            reduction=guidance.reduction,
        )
        if w_tok is not None and mask is not None:
            lay = lay * w_tok
        loss = loss + a_layer * lay
        terms["layer"] = lay
    if t_out is not None and a_logits > 0:
        token_level = out.logits.dim() == 3
        kl = logits_kl(out.logits, t_out.logits, guidance.temperature, mask if token_level else None)
        if w_tok is not None and token_level and mask is not None:
            kl = kl * w_tok
        loss = loss + a_logits * kl
        terms["logits"] = kl
    return loss, terms


@contextlib.contextmanager
def _modes_restored(model: nn.Module | None) -> Iterator[None]:
    """Restore every module's training mode of ``model`` (``None``: nothing) on exit, also on an exception."""
    modes = [(m, m.training) for m in model.modules()] if model is not None else []
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


def _cycle(batches: Iterable[Mapping[str, torch.Tensor]]) -> Iterator[Mapping[str, torch.Tensor]]:
    cache: list[Mapping[str, torch.Tensor]] = []
    for b in batches:
        cache.append(b)
        yield b
    if not cache:
        raise ValueError("batches is empty")
    while True:
        yield from cache


def _data_parallel(distributed: bool | None) -> tuple[int, int]:
    """``(rank, world_size)`` of the data-parallel run (``(0, 1)`` in one process)."""
    import torch.distributed as dist

    initialised = dist.is_available() and dist.is_initialized()
    if distributed is None:
        distributed = initialised and dist.get_world_size() > 1
    if not distributed:
        return 0, 1
    if not initialised:
        raise ValueError(
            "distributed=True needs an initialised torch.distributed process group (launch with torchrun or "
            "accelerate launch and call iclr25_shared.distributed.init_process_group first)"
        )
    return dist.get_rank(), dist.get_world_size()


def _ddp(model: nn.Module, comm_hook: Callable[..., Any] | None) -> nn.Module:
    """``model`` wrapped in ``DistributedDataParallel`` (its trainable parameters; buffers are not trained and
    identical on every rank, so they are not re-broadcast every step)."""
    from torch.nn.parallel import DistributedDataParallel

    p = next(model.parameters())
    ids = [p.device] if p.device.type == "cuda" else None
    import inspect

    # newer torch: forward_sync_buffers (broadcast_buffers is deprecated there); both sync the buffers at init only
    sync = (
        "forward_sync_buffers"
        if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
        else "broadcast_buffers"
    )
    ddp = DistributedDataParallel(model, device_ids=ids, **{sync: False})
    if comm_hook is not None:
        ddp.register_comm_hook(None, comm_hook)
    return ddp


def _all_reduce_mean(values: dict[str, float]) -> dict[str, float]:
    from iclr25_shared.distributed import all_reduce_mean

    return {k: float(v) for k, v in all_reduce_mean(values).items()}


def _rows(batch: Mapping[str, torch.Tensor]) -> int:
    sizes = {v.shape[0] for v in batch.values() if isinstance(v, torch.Tensor) and v.dim() > 0}
    if len(sizes) != 1:
        raise ValueError(
            f"the batch's tensors must share their first (batch) dimension, got sizes {sorted(sizes)}"
        )
    return sizes.pop()


def _local_share(
    batch: Mapping[str, torch.Tensor], rank: int, world: int, model: nn.Module
) -> tuple[dict[str, Any], float, float | None]:
    """This rank's rows of the global ``batch`` (round robin, as ``DistributedSampler``) and the loss weights that
    make the ranks' averaged gradient the one-process gradient of the whole batch.

    Returns ``(local batch, task weight, token weight)``: a per-example mean (sequence classification) is already
    the batch's mean once averaged over equal shares (weight 1); a per-token mean (token-level labels, the masked
    layerwise loss) is weighted by ``local tokens × world / batch tokens`` (``None``: no attention mask).
    """
    n = _rows(batch)
    if n % world:
        raise ValueError(
            f"a batch of {n} rows does not split evenly over {world} processes; make the batch size a multiple "
            "of the number of processes"
        )
    local = {
        k: v[rank::world] if isinstance(v, torch.Tensor) and v.dim() > 0 else v for k, v in batch.items()
    }

    def share(full: torch.Tensor, part: torch.Tensor) -> float:
        return float(part.sum()) * world / max(1.0, float(full.sum()))

    mask = batch.get("attention_mask")
    w_tok = None if mask is None else share(mask, local["attention_mask"])
    labels = batch.get("labels")
    w_task = 1.0
    if isinstance(labels, torch.Tensor) and labels.dim() >= 2 and not labels.is_floating_point():
        from iclr25_cald._convert import predicts_next_token

        def items(
            lab: torch.Tensor,
        ) -> torch.Tensor:  # the label positions HF's token-level loss averages over
            return (lab[:, 1:] if predicts_next_token(model) else lab) != -100

        w_task = share(items(labels), items(local["labels"]))
    return local, w_task, w_tok
