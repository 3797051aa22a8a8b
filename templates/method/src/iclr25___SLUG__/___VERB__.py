"""``__VERB__``: the method on an embedded real default (or the user's input).

The command takes ``(cfg, ctx)`` and returns an :class:`iclr25_shared.cli.Result`; the runner writes results.json /
results.md into ``--out`` (atomically, as one folder) and prints the tables. Files of its own a command writes
through ``ctx.save_array`` / ``ctx.save_figure`` / ``ctx.save_text``. Helpers several commands share go in a module
named for what it holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25___SLUG__.cli import __VERB_CLASS__Config


def __VERB__(cfg: __VERB_CLASS__Config, ctx: RunContext) -> Result:
    """Run the method on the embedded real default (or the user's input).

    User files are read with :mod:`iclr25_shared.inputs` (``read_npz(cfg.data, label="--data", keys=("x",))``):
    their problems raise ``InputError`` (exit 2). Anything else that fails here is a failure (exit 1).
    """
    ctx.log.info("loading ...")
    raise NotImplementedError
