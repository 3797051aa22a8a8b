"""The one bench protocol every package's ``bench`` uses (docs/testing.md, "Benchmarks").

Arms are zero-argument callables timed in one process: warm-up calls of each arm, then ``repeats`` rounds in which
every arm runs once, the order rotated each round (AB, BA, AB, ... for two arms), so slow drifts of the machine
(another job starting, thermal limits, a cache warming) fall on every arm alike. A ratio is the median of the
per-round ratios with a percentile-bootstrap interval over rounds: a paired comparison, robust to one slow round.
The machine's state (load average before and after, CPUs, threads, versions) goes into the record, so a reader can
tell a quiet measurement from a loaded one::

    from iclr25_shared.bench import interleaved

    run = interleaved({"lantern": lambda: decode(k=8), "sd": lambda: decode(k=1)}, repeats=9, threads=1)
    run.speedup("lantern", "sd")           # Estimate: > 1 means lantern is faster
    Result(tables={"bench": run.rows("sd", units={"lantern": 256, "sd": 256}, held_equal="tokens, prompts")})
"""

from __future__ import annotations

import math
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from iclr25_shared.metrics import Estimate

__all__ = ["BenchRun", "interleaved", "machine_state", "rotation"]


def machine_state() -> dict[str, Any]:
    """What a timing depends on besides the code: load average, CPUs, thread settings, versions, accelerator."""
    from iclr25_shared.device import cpu_count

    state: dict[str, Any] = {
        "load_average_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "cpus": cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "thread_env": {
            k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
        },
    }
    versions = {}
    for name in ("numpy", "torch", "jax"):
        module = sys.modules.get(name)
        if module is not None:
            versions[name] = getattr(module, "__version__", "?")
    state["versions"] = versions
    torch = sys.modules.get("torch")
    if torch is not None:
        state["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            state["cuda_device"] = torch.cuda.get_device_name()
    return state


def rotation(arms: list[str], round_index: int) -> list[str]:
    """The order of the arms in round ``round_index``: the list rotated by the round number (AB, BA, AB, ...)."""
    shift = round_index % len(arms)
    return arms[shift:] + arms[:shift]


def _synchronize(device: Any) -> None:
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


@dataclass
class BenchRun:
    """The timings of one :func:`interleaved` run.

    Attributes:
        times: arm → seconds per round (``repeats`` values, in round order).
        order: the arms in the order they ran, one list per round.
        env: :func:`machine_state` before the run, plus ``load_average_1m_after``, ``device``, ``warmup`` and
            ``repeats``.
    """

    times: dict[str, list[float]]
    order: list[list[str]]
    env: dict[str, Any] = field(default_factory=dict)

    def _times(self, arm: str) -> np.ndarray:
        if arm not in self.times:
            raise KeyError(f"no arm {arm!r}; arms: {', '.join(self.times)}")
        return np.asarray(self.times[arm], dtype=np.float64)

    def median(self, arm: str) -> float:
        """Median seconds of one call of ``arm``."""
        return float(np.median(self._times(arm)))

    def ratio(
        self, arm: str, baseline: str, *, level: float = 0.95, num_resamples: int = 2000, seed: int = 0
    ) -> Estimate:
        """Time of ``arm`` over time of ``baseline``: the median of the per-round ratios, with a percentile
        bootstrap interval over rounds (rounds resampled with replacement, ``seed`` fixed). < 1: ``arm`` is faster.

        With one round the interval is that round's ratio alone (no spread can be estimated: read it as such).
        """
        per_round = self._times(arm) / self._times(baseline)
        return _median_interval(per_round, level=level, num_resamples=num_resamples, seed=seed)

    def speedup(
        self, arm: str, baseline: str, *, level: float = 0.95, num_resamples: int = 2000, seed: int = 0
    ) -> Estimate:
        """Time of ``baseline`` over time of ``arm`` (> 1: ``arm`` is faster), interval as in :meth:`ratio`."""
        per_round = self._times(baseline) / self._times(arm)
        return _median_interval(per_round, level=level, num_resamples=num_resamples, seed=seed)

    def rows(
        self,
        baseline: str,
        *,
        units: Mapping[str, float] | None = None,
        unit: str = "items",
        held_equal: str = "",
    ) -> list[dict[str, Any]]:
        """One table row per arm: median seconds, throughput (``units[arm]`` per second, when given) and the
        speed-up over ``baseline`` with its interval; ``held_equal`` says what the arms share (steps, tokens, ...)."""
        rows = []
        for arm in self.times:
            est = self.speedup(arm, baseline)
            row: dict[str, Any] = {"arm": arm, "median_s": self.median(arm)}
            if units is not None and arm in units:
                row[f"{unit}_per_s"] = units[arm] / self.median(arm)
            row[f"speedup_vs_{baseline}"] = est.value
            row["interval"] = f"[{est.low:.3g}, {est.high:.3g}]"
            row["rounds"] = len(self.times[arm])
            if held_equal:
                row["held_equal"] = held_equal
            rows.append(row)
        return rows

    def as_dict(self) -> dict[str, Any]:
        """Everything, for ``results.json``: raw times, order, medians and the machine state."""
        return {
            "times_s": {k: list(v) for k, v in self.times.items()},
            "median_s": {k: self.median(k) for k in self.times},
            "order": self.order,
            "env": self.env,
        }


def _median_interval(values: np.ndarray, *, level: float, num_resamples: int, seed: int) -> Estimate:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if values.size == 0:
        raise ValueError("no rounds to compare")
    if not np.isfinite(values).all():
        raise ValueError("a round's time ratio is not finite (a zero or non-finite time)")
    median = float(np.median(values))
    rng = np.random.default_rng(seed)
    resampled = np.median(values[rng.integers(0, values.size, size=(num_resamples, values.size))], axis=1)
    alpha = (1.0 - level) / 2.0
    return Estimate(
        median,
        float(np.quantile(resampled, alpha)),
        float(np.quantile(resampled, 1 - alpha)),
        values.size,
        level,
    )


def interleaved(
    arms: Mapping[str, Callable[[], Any]],
    *,
    repeats: int = 7,
    warmup: int = 1,
    device: Any = "cpu",
    threads: int | None = None,
    setup: Mapping[str, Callable[[], Any]] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    progress: Callable[[Any], Any] | None = None,
) -> BenchRun:
    """Time every arm in one process, interleaved round by round (see the module docstring).

    Args:
        arms: name → zero-argument callable doing one unit of work (a step, a decode, a solve).
        repeats: timed rounds (>= 1); every arm runs once per round.
        warmup: untimed calls of each arm before the first round (compilation, caches, allocator).
        device: CUDA devices are synchronised before and after each timed call.
        threads: torch's intra-op threads for the run (restored afterwards); ``None`` leaves them.
        setup: name → untimed callable run right before each call of that arm (fresh inputs or optimizer state).
        clock: the clock (tests inject a fake one).
        progress: wraps the round iterator (e.g. ``ctx.progress``).

    Returns:
        :class:`BenchRun` with the times in seconds.

    Raises:
        ValueError: no arms, ``repeats < 1`` or ``warmup < 0``.
    """
    names = list(arms)
    if not names:
        raise ValueError("interleaved needs at least one arm")
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    setup = setup or {}
    unknown = set(setup) - set(names)
    if unknown:
        raise ValueError(f"setup names arms that do not exist: {sorted(unknown)}")
    env = machine_state()
    saved_threads = None
    if threads is not None:
        import torch

        saved_threads = torch.get_num_threads()
        torch.set_num_threads(int(threads))
    times: dict[str, list[float]] = {name: [] for name in names}
    order: list[list[str]] = []
    try:
        for _ in range(warmup):
            for name in names:
                if name in setup:
                    setup[name]()
                arms[name]()
        _synchronize(device)
        rounds: Any = range(repeats) if progress is None else progress(range(repeats))
        for index in rounds:
            this_round = rotation(names, index)
            order.append(this_round)
            for name in this_round:
                if name in setup:
                    setup[name]()
                _synchronize(device)
                start = clock()
                arms[name]()
                _synchronize(device)
                times[name].append(clock() - start)
    finally:
        if saved_threads is not None:
            import torch

            torch.set_num_threads(saved_threads)
    env.update(
        load_average_1m_after=os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        device=str(device),
        warmup=warmup,
        repeats=repeats,
        threads=threads,
    )
    for name, values in times.items():
        if any(not math.isfinite(v) or v <= 0 for v in values):
            raise ValueError(f"arm {name!r}: the clock gave a non-positive or non-finite time")
    return BenchRun(times, order, env)
