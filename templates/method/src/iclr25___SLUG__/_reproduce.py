"""``reproduce``: the paper's headline comparison at small scale on real data.

The command takes ``(cfg, ctx)`` and returns an :class:`iclr25_shared.cli.Result`; the runner writes results.json /
results.md into ``--out`` (atomically, as one folder) and prints the tables. Files of its own a command writes
through ``ctx.save_array`` / ``ctx.save_figure`` / ``ctx.save_text``. Helpers several commands share go in a module
named for what it holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25___SLUG__.cli import ReproduceConfig


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """Method beside its baseline at equal budget, >= 5 seeds where the quick size allows; one primary comparison
    (``iclr25_shared.stats``), declared in the README before the run; one function per phase (data, runs, tables)."""
    raise NotImplementedError
