"""``bench``: time and memory of the method as ratios against its baseline, measured in one run.

The command takes ``(cfg, ctx)`` and returns an :class:`iclr25_shared.cli.Result`; the runner writes results.json /
results.md into ``--out`` (atomically, as one folder) and prints the tables. Files of its own a command writes
through ``ctx.save_array`` / ``ctx.save_figure`` / ``ctx.save_text``. Helpers several commands share go in a module
named for what it holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25___SLUG__.cli import BenchConfig


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Time / memory as interleaved ratios against the baseline (``iclr25_shared.bench.interleaved``)."""
    raise NotImplementedError
