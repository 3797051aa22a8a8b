"""A backbone checkpoint's two files read and checked without building the model.

``<stem>.pt`` holds the plain ``state_dict`` (read with ``weights_only=True``, every tensor finite) and
``<stem>.json`` the architecture (``{"backbone": {"conv": ..., "in_channels": ..., ...}}``). The CLI checks
``--backbone`` with :func:`read_checkpoint` before torch_geometric loads; :func:`~iclr25_edgeprompt.load_backbone`
reads through it too, so both give the same errors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from iclr25_shared import inputs
from iclr25_shared.errors import InputError

__all__ = ["checkpoint_paths", "read_checkpoint"]

_STATE = "a PyTorch state dict (<stem>.pt, written by save_backbone or 'iclr25-edgeprompt pretrain')"
_ARCH = "the backbone's architecture (<stem>.json, written beside the .pt)"


def checkpoint_paths(path: str | Path) -> tuple[Path, Path]:
    """``(<stem>.pt, <stem>.json)`` for a checkpoint named by either file (or its stem)."""
    pt = Path(path).with_suffix(".pt")
    return pt, pt.with_suffix(".json")


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_checkpoint(
    path: str | Path, *, label: str | None = "backbone", map_location: Any = "cpu"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The architecture (the ``"backbone"`` object of the .json) and the state dict (the .pt) of a checkpoint.

    Args:
        path: the .pt or the .json (or their stem).
        label: the option or argument that named it, for the messages.
        map_location: passed to ``torch.load``.

    Raises:
        InputError: either file missing, empty or unreadable; the .pt not a state dict of finite tensors, or only
            loadable by unpickling code; the .json not valid JSON or without ``conv`` and ``in_channels``.
    """
    import numpy  # noqa: F401  (first, from Python: torch._C imports it from C, where a Ctrl-C is swallowed)
    from torch import Tensor

    pt, meta_path = checkpoint_paths(path)
    where = f"{label}: " if label else ""
    state = inputs.read_torch(pt, label=label, map_location=map_location, expected=_STATE)
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise InputError(
            f"{where}{str(pt)!r} does not hold a state dict of tensors (got {type(state).__name__}); "
            f"expected {_STATE}"
        )
    meta = inputs.read_json(meta_path, label=label, expected=_ARCH)
    arch = meta.get("backbone") if isinstance(meta, dict) else None
    if not isinstance(arch, dict) or not {"conv", "in_channels"} <= arch.keys():
        raise InputError(
            f"{where}{str(meta_path)!r} does not describe an architecture: expected "
            f'{{"backbone": {{"conv": ..., "in_channels": ..., ...}}}}, got {_short(meta)}'
        )
    return arch, state
