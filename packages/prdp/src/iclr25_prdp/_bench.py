"""``iclr25-prdp bench``: seconds per training step and XLA temporary memory at each K, unrolled vs implicit, and
the public ``solve`` call against the same solve inside the caller's ``jax.jit``."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

# numpy first, from Python (see _experiment.py)
import numpy as np

# isort: split
import jax
import jax.numpy as jnp

from iclr25_prdp._experiment import device_of, nothing
from iclr25_prdp._problems import HeatEmulator
from iclr25_prdp._solvers import solve
from iclr25_shared.cli import Result, RunContext, check_interrupted

if TYPE_CHECKING:
    from iclr25_prdp.cli import BenchConfig

__all__ = ["bench", "bench_rows", "solve_call_rows"]


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Per (method, K): ms per training step and XLA temporary memory, unrolled vs implicit, in one run."""
    from iclr25_prdp._problems import make_experiment

    device = device_of(ctx)
    problem = make_experiment(cfg.experiment, diff="implicit")
    with jax.default_device(device):
        rows = bench_rows(
            problem, cfg.iterations, cfg.repeats, ctx.log.info, cfg.methods, tick=check_interrupted
        )
        calls = solve_call_rows(cfg.solve_grid, cfg.iterations, cfg.repeats, tick=check_interrupted)
    return Result(
        metrics={"device_kind": device.device_kind},
        tables={"step time and memory": rows, "public solve vs a solve inside the caller's jit": calls},
        notes=[
            "ms/step: minimum wall time over the repeats of one jitted value_and_grad of the 2-step emulator loss "
            "(batch 25)",
            "temp MiB: XLA's temporary buffer size of the compiled step (compiled.memory_analysis())",
            "public solve: validation in Python, then one cached compiled call (traced K in implicit mode)",
        ],
    )


def _train_step(problem: HeatEmulator, k: int, diff: str, method: str):
    """A jitted value-and-grad of the 2-step emulator loss on one batch (static ``k``), plus its inputs."""
    from flax import nnx

    from iclr25_prdp._problems import _mlp

    op = problem.operator()
    train, _ = problem.data()
    batch = train[: problem.batch_size]
    model = _mlp(problem.n**problem.dim, problem.width, problem.depth, jax.random.key(0))
    graphdef, params = nnx.split(model)

    def loss(params, batch):
        net = nnx.merge(graphdef, params)
        pred1 = jax.vmap(net)(batch[:, 0])
        pred2 = jax.vmap(lambda u: solve(op, u, method=method, iterations=k, diff=diff))(pred1)
        return jnp.mean((pred2 - batch[:, 2]) ** 2)

    return jax.jit(jax.value_and_grad(loss)), (params, batch)


def bench_rows(
    problem: HeatEmulator,
    iterations: Sequence[int],
    repeats: int,
    say: Callable[[str], None],
    methods: Sequence[str] = ("jacobi", "conjugate_gradient"),
    tick: Callable[[], None] = nothing,
) -> list[dict[str, Any]]:
    """Per (method, K): seconds per training step and XLA temporary memory, unrolled vs implicit, in one run.

    Time is the minimum over ``repeats`` calls of the compiled step (the least disturbed by other load on the
    machine); memory is the compiled executable's temporary buffer size (``memory_analysis().temp_size_in_bytes``).
    """
    rows = []
    for method in methods:
        for k in iterations:
            row: dict[str, Any] = {"method": method, "K": k}
            for diff in ("unrolled", "implicit"):
                tick()
                step, args = _train_step(problem, k, diff, method)
                compiled = step.lower(*args).compile()
                memory = compiled.memory_analysis()
                temp = getattr(memory, "temp_size_in_bytes", math.nan) if memory is not None else math.nan
                jax.block_until_ready(compiled(*args))  # warm-up
                times = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    jax.block_until_ready(compiled(*args))
                    times.append(time.perf_counter() - start)
                row[f"{diff} ms/step"] = 1e3 * float(np.min(times))
                row[f"{diff} temp MiB"] = temp / 2**20
            row["time implicit/unrolled"] = row["implicit ms/step"] / row["unrolled ms/step"]
            row["memory implicit/unrolled"] = (
                row["implicit temp MiB"] / row["unrolled temp MiB"] if row["unrolled temp MiB"] else math.nan
            )
            rows.append(row)
            say(
                f"  {method} K={k:4d}  unrolled {row['unrolled ms/step']:.2f} ms {row['unrolled temp MiB']:.2f} MiB   "
                f"implicit {row['implicit ms/step']:.2f} ms {row['implicit temp MiB']:.2f} MiB"
            )
        largest = [r for r in rows if r["method"] == method][-1]
        for row in rows:
            if row["method"] == method:
                row["implicit time / at largest K"] = row["implicit ms/step"] / largest["implicit ms/step"]
    return rows


def solve_call_rows(
    grid: int, iterations: Sequence[int], repeats: int, tick: Callable[[], None] = nothing
) -> list[dict[str, Any]]:
    """ms per call of the public :func:`solve` (compiled internally) against the same solve inside the caller's
    ``jax.jit``, and the number of compilations, for Jacobi on the 2-D heat operator ``grid x grid``.

    Time is the minimum over ``repeats`` calls after one warm-up call per ``K``.
    """
    from iclr25_prdp._operators import heat

    op = heat((grid, grid), nu=0.001)
    b = jnp.sin(jnp.arange(grid * grid, dtype=op.dtype))
    rows = []
    for diff in ("implicit", "unrolled"):
        user = jax.jit(
            lambda b, k, diff=diff: solve(op, b, method="jacobi", iterations=k, diff=diff), static_argnums=1
        )
        for k in iterations:
            row: dict[str, Any] = {"diff": diff, "grid": f"{grid}x{grid}", "K": k}
            calls = (
                ("solve", lambda k=k, diff=diff: solve(op, b, method="jacobi", iterations=k, diff=diff)),
                ("user jit", lambda k=k, user=user: user(b, k)),
            )
            for name, call in calls:
                tick()
                jax.block_until_ready(call())
                times = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    jax.block_until_ready(call())
                    times.append(time.perf_counter() - start)
                row[f"{name} ms"] = 1e3 * float(np.min(times))
            row["solve / user jit"] = row["solve ms"] / row["user jit ms"]
            rows.append(row)
    return rows
