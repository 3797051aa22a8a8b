"""What the CLI runs: the method's verb on an embedded real default, the reproduction and the benchmark.

Each command takes ``(cfg, ctx)`` and returns an :class:`iclr25_shared.cli.Result`; the runner writes
results.json / results.md into ``--out`` (atomically, as one folder) and prints the tables. Files of its own a
command writes through ``ctx.save_array`` / ``ctx.save_figure`` / ``ctx.save_text``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25___SLUG__.cli import BenchConfig, ReproduceConfig, __VERB_CLASS__Config


def __VERB__(cfg: __VERB_CLASS__Config, ctx: RunContext) -> Result:
    """Run the method on the embedded real default (or the user's input).

    User files are read with :mod:`iclr25_shared.inputs` (``read_npz(cfg.data, label="--data", keys=("x",))``):
    their problems raise ``InputError`` (exit 2). Anything else that fails here is a failure (exit 1).
    """
    ctx.log.info("loading ...")
    raise NotImplementedError


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """The paper's headline comparison at small scale on real data, method beside its baseline, >= 3 seeds."""
    raise NotImplementedError


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Time / memory of the method as ratios against the baseline, measured in this one run."""
    raise NotImplementedError
