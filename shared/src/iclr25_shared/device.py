"""Devices, seeds and measurement: resolve ``--device``, seed every RNG, measure peak memory and time."""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "PeakMemory",
    "Timer",
    "count_memcpy",
    "cpu_count",
    "current_rss_bytes",
    "jax_enable_x64",
    "no_host_sync",
    "require_cuda",
    "resolve_device",
    "resolve_jax_devices",
    "seed_everything",
    "torch_threads",
]

_DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?|mps)$")


def resolve_device(spec: str = "auto") -> Any:
    """Turn a ``--device`` string into a ``torch.device``.

    ``auto`` picks CUDA when available, else CPU. Accepted: ``auto``, ``cpu``, ``cuda``, ``cuda:<i>``, ``mps``.

    Raises:
        ValueError: the string is not one of the accepted forms, or names a device that is not available.
    """
    import torch

    if not isinstance(spec, str) or not _DEVICE_RE.match(spec):
        raise ValueError(f"device must be one of auto, cpu, cuda, cuda:<index>, mps; got {spec!r}")
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device {spec!r} requested but CUDA is not available; use --device cpu")
        index = int(spec.split(":")[1]) if ":" in spec else 0
        if index >= torch.cuda.device_count():
            raise ValueError(f"device {spec!r}: only {torch.cuda.device_count()} CUDA device(s) visible")
    if spec == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ValueError("device 'mps' requested but MPS is not available; use --device cpu")
    return torch.device(spec)


def resolve_jax_devices(spec: str = "auto") -> list[Any]:
    """Turn a ``--device`` string into a list of JAX devices (the same strings as :func:`resolve_device`).

    - ``auto``: every GPU JAX sees, else every CPU device (several when
      ``XLA_FLAGS=--xla_force_host_platform_device_count=N``); the same rule as ``resolve_device``'s "CUDA when
      available, else CPU", extended to several devices.
    - ``cpu``: every CPU device. ``cuda``: every GPU. ``cuda:<i>``: GPU ``i`` alone.

    Raises:
        ValueError: an unknown form, ``mps`` (JAX has no MPS backend), a GPU requested where JAX sees none (the
            message names the ``[cuda]`` extra), or an index out of range.
    """
    import jax

    if not isinstance(spec, str) or not _DEVICE_RE.match(spec) or spec == "mps":
        raise ValueError(f"device must be one of auto, cpu, cuda, cuda:<index>; got {spec!r}")

    def gpus() -> list[Any]:
        try:
            return list(jax.devices("gpu"))
        except RuntimeError:
            return []

    if spec == "auto":
        return gpus() or list(jax.devices("cpu"))
    if spec == "cpu":
        return list(jax.devices("cpu"))
    found = gpus()
    if not found:
        raise ValueError(
            f"device {spec!r} requested but JAX sees no GPU; install the package's [cuda] extra "
            "(jax[cuda13]) or use --device cpu"
        )
    if spec == "cuda":
        return found
    index = int(spec.split(":", 1)[1])
    if index >= len(found):
        raise ValueError(f"device {spec!r}: only {len(found)} GPU(s) visible")
    return [found[index]]


def jax_enable_x64(enabled: bool = True) -> Any:
    """Context manager that turns JAX's 64-bit mode on (or off) inside its block, on every supported JAX.

    ``jax.enable_x64`` where it exists (jax >= 0.8), ``jax.experimental.enable_x64`` before (deprecated after).
    """
    import jax

    manager = getattr(jax, "enable_x64", None)
    if manager is None:
        from jax.experimental import enable_x64 as manager
    return manager(enabled)


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and (if imported) torch's global RNGs.

    Library code in iclr25 takes explicit generators; this is for scripts and CLIs that call third-party code.
    """
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - seeding the global RNG is the point
    import sys

    if "torch" in sys.modules:
        import torch

        torch.manual_seed(seed)


def current_rss_bytes() -> int:
    """Resident set size of this process in bytes (psutil: Linux, macOS, Windows)."""
    import psutil

    return int(psutil.Process().memory_info().rss)


def _peak_rss_bytes() -> int | None:
    """Peak RSS of this process in bytes where the OS reports it, else ``None``.

    Linux: ``VmHWM`` (resettable, see :func:`_reset_peak_rss`). macOS / BSD: ``ru_maxrss`` (bytes there, KiB on
    Linux). Windows: psutil's ``peak_wset``.
    """
    import sys

    if sys.platform.startswith("linux"):
        try:
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None
    import psutil

    info = psutil.Process().memory_info()
    if hasattr(info, "peak_wset"):
        return int(info.peak_wset)
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # bytes on macOS
    except (ImportError, OSError):
        return None


def _reset_peak_rss() -> bool:
    """Reset the peak RSS (Linux >= 4.0: write 5 to clear_refs); False where the OS cannot."""
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


class _RssSampler:
    """Samples RSS every ``interval`` seconds on a thread: the peak where the OS peak cannot be reset."""

    def __init__(self, interval: float = 0.01) -> None:
        import threading

        self.interval = interval
        self.peak = current_rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, current_rss_bytes())

    def __enter__(self) -> _RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, current_rss_bytes())


@dataclass
class PeakMemory:
    """Peak memory of a code section, in bytes.

    On CUDA devices it is ``torch.cuda.max_memory_allocated`` above the allocation at entry; on CPU it is the
    process's peak RSS minus the RSS at entry. The CPU peak is the kernel's high-water mark where it can be reset
    (Linux: VmHWM); elsewhere (macOS, Windows) an RSS sampler thread (every 10 ms, via psutil) gives it, and
    ``exact`` is False. Use as a context manager::

        with PeakMemory(device) as mem:
            model(batch)
        print(mem.peak_bytes)

    ``peak_bytes`` is the extra memory the section needed on top of what was already allocated;
    ``absolute_peak_bytes`` includes it. On CPU the resolution is the page and the allocator may reuse memory it
    already holds, so small sections can read 0: measure whole steps, or use ``tracemalloc`` for Python objects.
    """

    device: Any = "cpu"
    peak_bytes: int = 0
    absolute_peak_bytes: int = 0
    exact: bool = field(default=True)
    _base: int = 0
    _sampler: Any = None

    def __enter__(self) -> PeakMemory:
        import gc

        gc.collect()
        if self._is_cuda():
            import torch

            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
        else:
            self.exact = _reset_peak_rss()
            self._base = current_rss_bytes()
            if not self.exact:
                self._sampler = _RssSampler().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._is_cuda():
            import torch

            torch.cuda.synchronize(self.device)
            self.absolute_peak_bytes = torch.cuda.max_memory_allocated(self.device)
        elif self._sampler is not None:
            self._sampler.__exit__()
            self.absolute_peak_bytes = self._sampler.peak
            self._sampler = None
        else:
            self.absolute_peak_bytes = _peak_rss_bytes() or current_rss_bytes()
        self.peak_bytes = max(0, self.absolute_peak_bytes - self._base)

    def _is_cuda(self) -> bool:
        return str(self.device).startswith("cuda")


@dataclass
class Timer:
    """Wall-clock timer (``time.perf_counter``) that synchronises CUDA before reading, in seconds."""

    device: Any = "cpu"
    seconds: float = 0.0

    def __enter__(self) -> Timer:
        self._sync()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self._sync()
        self.seconds = time.perf_counter() - self._start

    def _sync(self) -> None:
        if str(self.device).startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.device)


@contextmanager
def torch_threads(num_threads: int | None) -> Iterator[None]:
    """Temporarily set torch's intra-op thread count (``None`` leaves it)."""
    import torch

    old = torch.get_num_threads()
    if num_threads:
        torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def require_cuda(index: int = 0) -> Any:
    """``torch.device("cuda", index)``, for GPU tests and benches that must not fall back to the CPU.

    Raises:
        RuntimeError: no CUDA device is visible (the message says what was looked for), or ``index`` is out of
            range.
    """
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(
            f"no CUDA device is visible (torch {torch.__version__}, built for CUDA {torch.version.cuda}); "
            "this check needs a GPU"
        )
    if not 0 <= index < torch.cuda.device_count():
        raise RuntimeError(f"CUDA device {index} requested; {torch.cuda.device_count()} visible")
    return torch.device("cuda", index)


@contextmanager
def no_host_sync() -> Iterator[None]:
    """Inside the block, any operation that makes the host wait for the GPU raises (``.item()``, ``.cpu()``,
    ``.tolist()``, a data-dependent shape such as ``nonzero``, a blocking copy): a hot loop that must stay on the
    device is checked with it. Uses ``torch.cuda.set_sync_debug_mode("error")``; the previous mode is restored.

    Raises:
        RuntimeError: no CUDA device (from :func:`require_cuda`); inside the block, torch's own RuntimeError at
            the synchronising call.
    """
    import torch

    require_cuda()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


def count_memcpy(fn: Any, *args: Any, **kwargs: Any) -> dict[str, int]:
    """How many host-to-device, device-to-host and device-to-device copies ``fn(*args, **kwargs)`` launches.

    Counted from the CUDA activity of ``torch.profiler`` (events named ``Memcpy HtoD`` / ``DtoH`` / ``DtoD``); a
    hot loop's count should not grow with its number of iterations. ``fn`` runs once. ``DtoD`` counts ordinary
    on-device work too (``.clone()``, ``torch.cat`` on some paths, ``.contiguous()``): a host-traffic check asserts
    on ``HtoD`` and ``DtoH`` only.

    Returns:
        ``{"HtoD": n, "DtoH": n, "DtoD": n}``.

    Raises:
        RuntimeError: no CUDA device is visible.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    require_cuda()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn(*args, **kwargs)
        torch.cuda.synchronize()
    counts = {"HtoD": 0, "DtoH": 0, "DtoD": 0}
    for event in prof.events():
        name = event.name
        if name.startswith("Memcpy"):
            for kind in counts:
                if kind in name:
                    counts[kind] += 1
    return counts
