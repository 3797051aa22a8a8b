"""Global-batch data parallelism on ``torch.distributed`` for losses that couple the rows of a batch (contrastive
negatives, batch statistics, self-distillation targets): every rank computes the loss of the *whole* global batch,
so the 2-rank loss is the one-process loss on the concatenated batch (docs/design.md, "Scaling out").

The pattern (used by semiclip, simhand, debgcd)::

    rows, sizes = local_rows(len(batch))                  # this rank's contiguous block of the global batch
    model = global_batchnorm(model)                       # BatchNorm statistics over every rank's rows
    dp = DataParallel([model])                            # DDP when a group of > 1 rank is initialised
    loss = dp(lambda: loss_fn(gather_rows(model(batch[rows]), sizes)))
    loss.backward()

The global batch is drawn alike on every rank (the same generator); ``gather_rows`` all-gathers the outputs *with
gradient* (``torch.distributed.nn.functional.all_gather``), so each rank's backward gives ``world ×`` its rows'
share of the gradient (the gather's backward sums the identical losses of all ranks) and DDP's mean over ranks
leaves the one-process gradient. Differences to one process are summation order only. In one process every
function here is the identity (``gather_rows``), plain BatchNorm (``GlobalBatchNorm``) or a plain call
(``DataParallel``). Launch with ``torchrun`` / ``accelerate launch``; test with
``iclr25_shared.testing.run_ranks`` (gloo, CPU).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from inspect import signature
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

__all__ = [
    "SENT",
    "DataParallel",
    "GlobalBatchNorm",
    "gather_rows",
    "global_batchnorm",
    "local_rows",
    "rank_world",
]


def rank_world() -> tuple[int, int]:
    """``(rank, world_size)`` of the initialised default process group, else ``(0, 1)``."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def local_rows(n: int) -> tuple[slice, list[int]]:
    """This rank's contiguous block of ``n`` global rows and every rank's row count (rank order).

    The first ``n % world`` ranks get one row more; the blocks concatenated in rank order are ``range(n)``.
    """
    rank, world = rank_world()
    sizes = [n // world + (r < n % world) for r in range(world)]
    start = sum(sizes[:rank])
    return slice(start, start + sizes[rank]), sizes


SENT = {"bytes": 0}
"""Payload bytes this rank sent in the differentiable collectives below since the last reset (forward and
backward: an all-gather sends its rows once forward and ``world`` blocks of their size in the backward all-to-all;
an all-reduce sends its tensor once each way). DDP's gradient all-reduce is counted by ``ByteCounter``."""


def _autograd(name: str, x: torch.Tensor) -> Any:
    """``torch.distributed.nn.functional.<name>(x)``: the differentiable collective (its FutureWarning, which
    points to a private module, silenced), its payload added to :data:`SENT`."""
    import warnings

    world = rank_world()[1]
    SENT["bytes"] += x.numel() * x.element_size() * ((1 + world) if name == "all_gather" else 2)

    from torch.distributed.nn import functional

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return getattr(functional, name)(x)


def gather_rows(x: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """All ranks' rows of ``x`` concatenated in rank order, differentiable (identity in one process).

    Args:
        x: ``(sizes[rank], ...)`` this rank's rows.
        sizes: every rank's row count, from :func:`local_rows` (uneven blocks are padded for the gather).
    """
    if len(sizes) == 1:
        return x
    most = max(sizes)
    if x.shape[0] < most:
        x = torch.cat([x, x.new_zeros((most - x.shape[0], *x.shape[1:]))])
    return torch.cat([part[:n] for part, n in zip(_autograd("all_gather", x), sizes)])


class _Closure(nn.Module):
    """Holds the trained modules so DDP sees their parameters; ``forward(fn)`` runs ``fn()`` (the local pass)."""

    def __init__(self, modules: Iterable[nn.Module]) -> None:
        super().__init__()
        self.parts = nn.ModuleList(modules)

    def forward(self, fn: Callable[[], Any]) -> Any:
        return fn()


class DataParallel:
    """Runs a step's local forward pass under DDP when a process group of more than one rank is initialised.

    ``run(fn)`` calls ``fn()`` inside DDP's forward (so the gradients of every parameter of ``modules`` are
    averaged over the ranks in the backward pass), or plainly in one process. ``comm_hook`` (e.g.
    ``iclr25_shared.distributed.ByteCounter().hook``) is registered on the DDP model.
    """

    def __init__(
        self, modules: Iterable[nn.Module], *, find_unused: bool = False, comm_hook: Callable | None = None
    ) -> None:
        self.rank, self.world = rank_world()
        self.ddp = None
        if self.world > 1:
            ddp = nn.parallel.DistributedDataParallel
            # buffers (BatchNorm's running statistics) are computed alike on every rank: no per-step broadcast
            sync = (
                "forward_sync_buffers"
                if "forward_sync_buffers" in signature(ddp).parameters
                else "broadcast_buffers"
            )
            self.ddp = ddp(_Closure(modules), find_unused_parameters=find_unused, **{sync: False})
            if comm_hook is not None:
                self.ddp.register_comm_hook(None, comm_hook)

    def __call__(self, fn: Callable[[], Any]) -> Any:
        return fn() if self.ddp is None else self.ddp(fn)


class GlobalBatchNorm(nn.modules.batchnorm._BatchNorm):
    """BatchNorm over the rows of every rank (training mode, several ranks): mean and variance of the global
    batch through differentiable all-reduces (gloo or NCCL; torch's ``SyncBatchNorm`` refuses CPU tensors).

    In one process, and in eval mode, it is ``torch.nn.BatchNorm*d`` exactly. Running statistics get the global
    batch's mean and unbiased variance, as one process would record them.
    """

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2-D input (N, C, ...), got {input.dim()}-D")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or rank_world()[1] == 1:
            return super().forward(x)
        dims = [0, *range(2, x.dim())]
        shape = [1, -1] + [1] * (x.dim() - 2)
        total = _autograd("all_reduce", torch.cat([x.sum(dims), x.new_full((1,), x.numel() / x.shape[1])]))
        count = total[-1].detach()
        mean = total[:-1] / count
        centred = x - mean.view(shape)
        var = _autograd("all_reduce", (centred * centred).sum(dims)) / count
        y = centred * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                m = self.momentum if self.momentum is not None else 1.0 / self.num_batches_tracked.item()
                self.running_mean.lerp_(mean.detach(), m)
                self.running_var.lerp_(var.detach() * count / (count - 1).clamp_min(1), m)
        return y


def global_batchnorm(module: nn.Module) -> nn.Module:
    """``module`` with every ``BatchNorm1d/2d/3d`` replaced by :class:`GlobalBatchNorm` (same parameters and
    running statistics, shared not copied); other layers untouched."""
    if isinstance(module, nn.modules.batchnorm._BatchNorm) and not isinstance(module, GlobalBatchNorm):
        new = GlobalBatchNorm(
            module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats
        )
        if module.affine:
            new.weight, new.bias = module.weight, module.bias
        if module.track_running_stats:
            new.running_mean, new.running_var = module.running_mean, module.running_var
            new.num_batches_tracked = module.num_batches_tracked
        new.train(module.training)
        return new
    for name, child in module.named_children():
        setattr(module, name, global_batchnorm(child))
    return module
