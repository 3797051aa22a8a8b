"""The per-seed records ``reproduce --out`` writes (``runs.json``), read back for ``reproduce --combine``.

Light to import (standard library and :mod:`iclr25_shared.inputs`): ``cli.py`` declares :func:`check_runs_folder`
as the check of ``--combine``, so a folder that is not a reproduce result exits 2 naming it before torch loads.
"""

from __future__ import annotations

import os
from typing import Any

from iclr25_shared import inputs
from iclr25_shared.errors import InputError

__all__ = ["META_KEYS", "RUNS_FILE", "RUN_KEYS", "check_runs_folder", "read_runs"]

RUNS_FILE = "runs.json"
"""The file of a reproduce results folder that holds the per-seed records."""
META_KEYS = ("config", "feature_net_test_accuracy", "fid_real_vs_real")
"""Keys of ``runs.json``'s ``meta``."""
RUN_KEYS = ("method", "seed", "steps", "fid", "heldout", "per_cluster_final", "fid_reeval", "heldout_reeval")
"""Keys every per-seed record has."""
METHODS = ("uniform", "curriculum", "reverse")
"""The timestep samplers a run may have used."""
_EXPECTED = "a results folder of `iclr25-diffusion-curriculum reproduce --out` (with runs.json)"


def read_runs(folder: str | os.PathLike[str], *, label: str = "--combine") -> dict[str, Any]:
    """``{"meta": ..., "runs": [...]}`` from ``folder/runs.json``.

    Raises:
        InputError: the folder is missing or a file, has no ``runs.json``, or its ``runs.json`` is not valid JSON
            or lacks the per-seed records (the message names the folder or the file).
    """
    p = inputs.check_folder(folder, label=label, expected=_EXPECTED)
    path = p / RUNS_FILE
    if not path.is_file():
        raise InputError(f"{label}: {str(folder)!r} has no {RUNS_FILE}; expected {_EXPECTED}")
    record = inputs.read_json(path, label=label, expected=f"the {RUNS_FILE} reproduce writes")
    where = f"{label}: {str(path)!r}"
    if not isinstance(record, dict) or not isinstance(record.get("meta"), dict):
        raise InputError(
            f"{where} holds no per-seed runs (no 'meta' object); expected the {RUNS_FILE} reproduce writes"
        )
    missing = [k for k in META_KEYS if k not in record["meta"]]
    if missing or not isinstance(record["meta"]["config"], dict):
        raise InputError(f"{where}: 'meta' lacks {', '.join(missing) or 'a config object'}")
    runs = record.get("runs")
    if not isinstance(runs, list) or not runs:
        raise InputError(f"{where} holds no per-seed runs")
    for i, run in enumerate(runs):
        if not isinstance(run, dict):
            raise InputError(f"{where}: run {i} is a {type(run).__name__}; expected an object")
        missing = [k for k in RUN_KEYS if k not in run]
        if missing:
            raise InputError(f"{where}: run {i} lacks {', '.join(missing)}")
        if run["method"] not in METHODS:
            raise InputError(
                f"{where}: run {i} has method {run['method']!r}; expected one of {', '.join(METHODS)}"
            )
    return record


def check_runs_folder(folder: Any, label: str) -> None:
    """The declared check of ``--combine`` (see :func:`read_runs`)."""
    read_runs(folder, label=label)
