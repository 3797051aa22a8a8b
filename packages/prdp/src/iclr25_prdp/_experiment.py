"""What ``run`` and ``reproduce`` share: the JAX device ``--device`` names, the one-row summary of an arm and the
plots. The commands live in ``_run.py``, ``_reproduce.py`` and ``_bench.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# numpy first, from Python: imported first from a C extension's init instead (jaxlib._jax, torch._C), a Ctrl-C
# landing in that import is printed with a traceback (numpy's import_array) or swallowed (torch), not raised.
import numpy as np

from iclr25_prdp._problems import ArmResult
from iclr25_shared.cli import RunContext, check_interrupted
from iclr25_shared.inputs import validating

__all__ = ["device_of", "nothing", "save_plots", "summary_row"]


def nothing() -> None:
    """The default ``tick``: the CLI passes :func:`iclr25_shared.cli.check_interrupted` instead, so that a Ctrl-C
    a library swallowed stops a long loop at its next step."""


def device_of(ctx: RunContext) -> Any:
    """The first JAX device ``--device`` names; one that is not there (``cuda`` without a GPU) is bad input.

    Importing JAX takes seconds: a Ctrl-C during it that JAX swallowed stops the run here, before any work.
    """
    with validating("--device"):
        device = ctx.jax_devices()[0]
    check_interrupted()
    return device


def summary_row(experiment: str, arm: str, result: ArmResult, baseline: ArmResult | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "experiment": experiment,
        "arm": arm,
        "final K": "direct"
        if result.final_iterations is None and arm == "direct"
        else result.final_iterations,
        "final metric": result.final_metric,
        "solver iterations": result.total_iterations,
        "wall time (s)": round(result.wall_time, 2),
    }
    if baseline is not None and baseline.total_iterations:
        row["iterations saved vs converged"] = (
            f"{100 * (1 - result.total_iterations / baseline.total_iterations):.1f}%"
            if arm != "direct"
            else ""
        )
        row["metric / converged metric"] = result.final_metric / baseline.final_metric
    return row


def save_plots(ctx: RunContext, name: str, arms: dict[str, ArmResult], metric_name: str) -> list[Path]:
    """K over epochs and metric over cumulative solver iterations, one PNG each (nothing without ``--out``)."""
    if not ctx.writes:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for label, result in arms.items():
        if label == "direct":
            continue
        ks = result.log.iterations[1:]
        ax.step(range(1, len(ks) + 1), ks, where="post", label=label)
    ax.set_xlabel("epoch")
    ax.set_ylabel("solver iterations K")
    ax.set_yscale("log")
    ax.set_title(f"{name}: K per epoch")
    ax.legend(fontsize=8)
    written.append(ctx.save_figure(f"{name}_iterations.png", fig, bbox_inches="tight"))

    fig, ax = plt.subplots(figsize=(5, 3.2))
    for label, result in arms.items():
        if label == "direct":
            continue
        ax.plot(np.maximum(result.log.cumulative_iterations, 1), result.log.metric, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("cumulative solver iterations")
    ax.set_ylabel(metric_name)
    ax.set_title(f"{name}: error vs cost")
    ax.legend(fontsize=8)
    written.append(ctx.save_figure(f"{name}_error_vs_iterations.png", fig, bbox_inches="tight"))
    return written
