"""Run a function on N fresh local processes joined in a gloo group: the 2-process CPU tests of issue 39.

Exposed as :func:`iclr25_shared.testing.run_ranks`; kept out of ``testing`` so that the child processes do not
import pytest.
"""

from __future__ import annotations

import importlib.util
import inspect
import multiprocessing
import os
import pickle
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["RankFailed", "run_ranks", "torchrun_argv"]


class RankFailed(RuntimeError):
    """One rank of :func:`run_ranks` raised or died; the others were stopped."""

    def __init__(self, rank: int, message: str) -> None:
        super().__init__(f"rank {rank} failed: {message}")
        self.rank = rank
        self.message = message


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _load(source: str, qualname: str) -> Callable[..., Any]:
    """The function ``qualname`` of the module file ``source`` (test modules are not importable by name)."""
    spec = importlib.util.spec_from_file_location(f"_iclr25_rank_module_{abs(hash(source))}", source)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {source}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    target: Any = module
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def _child(
    rank: int,
    world_size: int,
    port: int,
    timeout_s: float,
    source: str,
    qualname: str,
    args: tuple[Any, ...],
    folder: str,
) -> None:
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        ICLR25_DIST_TIMEOUT=str(timeout_s),
    )
    path = Path(folder) / f"rank{rank}.pkl"
    try:
        from iclr25_shared import distributed

        fn = _load(source, qualname)
        distributed.init_process_group("cpu", timeout_s=timeout_s)
        value = fn(*args)
        payload = ("ok", value)
    except BaseException as exc:  # reported to the parent, which stops the other ranks
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        path.write_bytes(pickle.dumps(("error", f"{text}\n{traceback.format_exc()}")))
        os._exit(1)
    path.write_bytes(pickle.dumps(payload))
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.barrier()  # every rank has its result before any tears the group down
            dist.destroy_process_group()
    finally:
        os._exit(0)


def run_ranks(fn: Callable[..., Any], *args: Any, world_size: int = 2, timeout_s: float = 120.0) -> list[Any]:
    """Call ``fn(*args)`` on ``world_size`` fresh processes that form a gloo group, as ``torchrun`` would.

    Each process gets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` / ``MASTER_PORT`` and
    ``ICLR25_DIST_TIMEOUT = timeout_s`` in its environment and an initialised default process group, then runs
    ``fn``. ``fn`` must be a module-level function of a file (a test module is fine: it is loaded by path) and
    ``args`` and the return value picklable.

    Returns:
        Each rank's return value, in rank order.

    Raises:
        RankFailed: a rank raised (the message holds its error and traceback) or died; the other ranks are killed,
            so a rank blocked in a collective never hangs the test.
        TimeoutError: the ranks did not all finish within ``timeout_s`` seconds (all are killed).
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    source = inspect.getsourcefile(fn)
    if source is None or "<" in fn.__qualname__:
        raise ValueError(f"run_ranks needs a module-level function of a source file, got {fn!r}")
    ctx = multiprocessing.get_context("spawn")
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="iclr25-ranks-") as folder:
        procs = [
            ctx.Process(
                target=_child,
                args=(rank, world_size, port, timeout_s, source, fn.__qualname__, args, folder),
                daemon=True,
            )
            for rank in range(world_size)
        ]
        for proc in procs:
            proc.start()
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                codes = [proc.exitcode for proc in procs]
                failed = [r for r, code in enumerate(codes) if code not in (None, 0)]
                if failed:
                    rank = failed[0]
                    report = Path(folder) / f"rank{rank}.pkl"
                    message = (
                        pickle.loads(report.read_bytes())[1]
                        if report.is_file()
                        else f"the process died with exit code {codes[rank]}"
                    )
                    raise RankFailed(rank, message)
                if all(code == 0 for code in codes):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the {world_size} ranks did not finish within {timeout_s} s")
                time.sleep(0.05)
        finally:
            for proc in procs:
                if proc.is_alive():
                    proc.kill()
                proc.join()
        return [pickle.loads((Path(folder) / f"rank{r}.pkl").read_bytes())[1] for r in range(world_size)]


def torchrun_argv(nproc: int, module: str, *args: str) -> list[str]:
    """The argv that launches ``python -m module *args`` on ``nproc`` local processes with ``torchrun``."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        "-m",
        module,
        *args,
    ]
