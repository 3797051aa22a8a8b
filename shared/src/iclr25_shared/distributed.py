"""Scale-out on ``torch.distributed``: rank detection, process groups, per-rank and per-job seeds, job farms,
metric reduction and byte counting (docs/design.md, "Scaling out").

Nothing here is a new engine. Launch with the standard launchers, which set ``RANK``, ``WORLD_SIZE`` and
``LOCAL_RANK`` (and ``MASTER_ADDR`` / ``MASTER_PORT``) for every process::

    torchrun --nproc-per-node 2 -m iclr25_x.cli train ...
    accelerate launch --num_processes 2 -m iclr25_x.cli train ...

In one process (no launcher) every function here reduces to its single-process meaning: ``world()`` is rank 0 of
1, ``farm`` is a loop, the reductions are the identity. Training loops use
``torch.nn.parallel.DistributedDataParallel`` and ``torch.utils.data.DistributedSampler`` directly; job farms use
:func:`farm`.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "ByteCounter",
    "World",
    "all_reduce_mean",
    "all_reduce_sum",
    "broadcast_object",
    "check_same",
    "derive_seed",
    "destroy_process_group",
    "farm",
    "gather_objects",
    "init_process_group",
    "process_group",
    "shard",
    "world",
]

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class World:
    """Where this process stands: ``rank`` in ``[0, world_size)``, ``local_rank`` on its machine."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes results and prints them."""
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, got {raw!r}") from None


def _initialized() -> bool:
    import sys

    if "torch" not in sys.modules:  # no torch imported yet: no group can exist (and cli stays numpy-free)
        return False
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


def world() -> World:
    """This process's :class:`World`: from the initialised process group, else from the launcher's environment
    (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` as ``torchrun`` and ``accelerate launch`` set them), else rank 0 of 1.

    Raises:
        ValueError: the environment variables are not integers, or the rank is outside ``[0, WORLD_SIZE)``.
    """
    if _initialized():
        import torch.distributed as dist

        return World(dist.get_rank(), dist.get_world_size(), _env_int("LOCAL_RANK", dist.get_rank()))
    size = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"RANK={rank} and WORLD_SIZE={size} are inconsistent (need 0 <= RANK < WORLD_SIZE)")
    return World(rank, size, _env_int("LOCAL_RANK", rank))


def _timeout(timeout_s: float | None) -> _dt.timedelta:
    if timeout_s is None:
        raw = os.environ.get("ICLR25_DIST_TIMEOUT")
        timeout_s = float(raw) if raw else DEFAULT_TIMEOUT_S
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s}")
    return _dt.timedelta(seconds=timeout_s)


def init_process_group(device: Any = "cpu", *, timeout_s: float | None = None) -> World:
    """Join the launcher's process group, once: gloo for CPU, NCCL for CUDA (this process's GPU = ``LOCAL_RANK``).

    A no-op in one process (``WORLD_SIZE`` unset or 1) and when a group is already initialised (by the user's own
    code, or by ``accelerate``). A collective that waits longer than ``timeout_s`` (default 300 s, or
    ``ICLR25_DIST_TIMEOUT``) fails instead of hanging: a rank that died takes the others down with an error.

    Args:
        device: ``"cpu"``, ``"cuda"``, ``"cuda:<i>"`` or a ``torch.device``; picks the backend.
        timeout_s: the collectives' timeout in seconds.

    Returns:
        The :class:`World` after joining.
    """
    here = world()
    timeout = _timeout(timeout_s)
    if not here.is_distributed or _initialized():
        return here
    import torch
    import torch.distributed as dist

    cuda = str(device).startswith("cuda")
    if cuda:
        torch.cuda.set_device(here.local_rank)
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timeout)
    return world()


def destroy_process_group() -> None:
    """Leave the process group if one is initialised (a no-op otherwise)."""
    if _initialized():
        import torch.distributed as dist

        dist.destroy_process_group()


@contextmanager
def process_group(device: Any = "cpu", *, timeout_s: float | None = None) -> Iterator[World]:
    """:func:`init_process_group` for the block; the group is destroyed at its end if this call created it."""
    created = world().is_distributed and not _initialized()
    here = init_process_group(device, timeout_s=timeout_s)
    try:
        yield here
    finally:
        if created:
            destroy_process_group()


def derive_seed(seed: int, *keys: int) -> int:
    """An independent 32-bit seed for ``(seed, *keys)``: per rank ``derive_seed(seed, rank)``, per job
    ``derive_seed(seed, job_index)`` (so a job's seed never depends on how many ranks run the jobs).

    numpy's ``SeedSequence`` entropy mixing: distinct keys give statistically independent streams.

    Raises:
        ValueError: ``seed`` or a key is negative or not an int.
    """
    import numpy as np

    for value in (seed, *keys):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
            raise ValueError(f"seed and keys must be non-negative ints, got {value!r}")
    return int(np.random.SeedSequence([int(seed), *map(int, keys)]).generate_state(1, np.uint32)[0])


def shard(n: int, here: World | None = None) -> range:
    """The indices of ``n`` jobs this rank runs: ``rank, rank + world_size, ...`` (round robin).

    Raises:
        ValueError: ``n < 0``.
    """
    if n < 0:
        raise ValueError(f"the number of jobs must be >= 0, got {n}")
    here = here or world()
    return range(here.rank, n, here.world_size)


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order, on every rank; ``[obj]`` in one process."""
    if not _initialized():
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank (``obj`` itself in one process)."""
    if not _initialized():
        return obj
    import torch.distributed as dist

    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def farm(
    jobs: Sequence[T],
    fn: Callable[[T], R],
    *,
    progress: Callable[[Iterator[int]], Any] | None = None,
) -> list[R]:
    """Run independent jobs across ranks: rank ``r`` runs ``jobs[r::world_size]``, and every rank gets every
    result in job order. In one process it is ``[fn(job) for job in jobs]``, so the result is the same whatever
    the number of ranks as long as ``fn`` depends only on its job (give each job its own
    ``derive_seed(seed, index)``).

    Args:
        jobs: the jobs, identical on every rank.
        fn: runs one job; its result must be picklable.
        progress: wraps this rank's iterator of job indices (e.g. ``ctx.progress``).

    Raises:
        ValueError: the ranks were given different numbers of jobs.
    """
    indices = shard(len(jobs))
    check_same(len(jobs), "number of jobs")
    iterator: Any = iter(indices) if progress is None else progress(iter(indices))
    mine = {i: fn(jobs[i]) for i in iterator}
    if not _initialized():
        return [mine[i] for i in range(len(jobs))]
    merged: dict[int, R] = {}
    for part in gather_objects(mine):
        merged.update(part)
    return [merged[i] for i in range(len(jobs))]


def _reduce(values: Mapping[str, float], mean: bool) -> dict[str, float]:
    keys = sorted(values)
    if not _initialized():
        return {k: float(values[k]) for k in keys}
    import torch
    import torch.distributed as dist

    check_same(keys, "metric names")
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    buf = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(buf)
    if mean:
        buf /= dist.get_world_size()
    return dict(zip(keys, buf.tolist(), strict=True))


def all_reduce_sum(values: Mapping[str, float]) -> dict[str, float]:
    """Sum each named metric over ranks in float64 (the identity in one process). For a mean over examples,
    reduce sums and counts and divide: ranks may hold different numbers of examples.

    Raises:
        ValueError: ranks name different metrics.
    """
    return _reduce(values, mean=False)


def all_reduce_mean(values: Mapping[str, float]) -> dict[str, float]:
    """Average each named metric over ranks in float64 (equal weight per rank; the identity in one process)."""
    return _reduce(values, mean=True)


def check_same(value: Any, what: str) -> None:
    """Refuse to go on when the ranks disagree on ``value`` (a seed, a config, a dataset size).

    Raises:
        ValueError: naming ``what`` and each rank's value.
    """
    values = gather_objects(value)
    if any(v != values[0] for v in values[1:]):
        shown = ", ".join(f"rank {r}: {v!r}" for r, v in enumerate(values))
        raise ValueError(
            f"ranks disagree on the {what} ({shown}); every rank must be launched with the same one"
        )


class ByteCounter:
    """A DDP communication hook that all-reduces (mean) like DDP's default and counts what this rank sends.

    ::

        counter = ByteCounter()
        ddp_model.register_comm_hook(None, counter.hook)
        ...
        counter.bytes, counter.calls   # since the last reset()

    ``bytes`` is the size of the gradient buckets this rank all-reduced (the payload, not the wire traffic of
    the backend's algorithm, which for a ring all-reduce is about ``2 (N - 1) / N`` times the payload).
    """

    def __init__(self) -> None:
        self.bytes = 0
        self.calls = 0

    def reset(self) -> None:
        self.bytes = 0
        self.calls = 0

    def hook(self, state, bucket):
        """DDP's default all-reduce of the bucket, after counting its bytes."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        buffer = bucket.buffer()
        self.bytes += buffer.numel() * buffer.element_size()
        self.calls += 1
        return allreduce_hook(state, bucket)
