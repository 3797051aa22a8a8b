"""What ``reproduce`` (``_reproduce.py``) and ``bench`` (``_bench.py``) share, and ``solve`` (``_solve.py``) uses too:
the JAX devices ``--device`` names, the Ctrl-C check after every chunk, G-set instances named on the command
line."""

from __future__ import annotations

from typing import Any

from iclr25_shared.cli import RunContext, check_interrupted
from iclr25_shared.errors import InputError
from iclr25_shared.inputs import validating


def _device_label(devices: list[Any]) -> str:
    return f"{len(devices)}x {devices[0].platform}" if devices else "none"


def _devices(ctx: RunContext) -> list[Any]:
    """The JAX devices ``--device`` names; one that is not there (``cuda`` without a GPU) is bad input.

    Importing JAX takes seconds: a Ctrl-C during it that JAX swallowed stops the run here, before any work.
    """
    with validating("--device"):
        devices = ctx.jax_devices()
    check_interrupted()
    return devices


def _check(done: int, total: int) -> None:
    """:func:`anneal`'s callback in ``reproduce`` and ``bench``: the runner's Ctrl-C check after every chunk."""
    check_interrupted()


def _load_instance(option: str, name: str, gset_dir: Any, layout: str = "auto") -> Any:
    """:func:`iclr25_qqa._gset.load_instance` of an instance the user named with ``option``: an unknown spec, a
    malformed file or a G-set name whose file is not in the folder is bad input (exit 2) naming the option."""
    from iclr25_qqa import _gset

    try:
        with validating(option):  # an unknown spec, a malformed file
            return _gset.load_instance(name, gset_dir, layout)
    except FileNotFoundError as exc:  # a G-set name whose file is not in the folder
        hint = f"--gset-dir is {str(gset_dir)!r}" if gset_dir is not None else "pass --gset-dir FOLDER"
        raise InputError(f"{option}: {exc} ({hint})") from None
