"""Reading ``encoder.pt`` / ``model.pt`` (written by ``pretrain`` / ``finetune``) safely.

A checkpoint is ``{"state_dict": HandEncoder state, "meta": {"width": int, "size": int, ...}}``, loaded with
``weights_only=True`` through :func:`iclr25_shared.inputs.read_torch`. Every problem with the file (missing, empty,
not a checkpoint, not a SiMHand encoder, garbage metadata, a ``--size`` other than the one it was trained at) is an
:class:`~iclr25_shared.errors.InputError` naming the option and the file, found before any hand is rendered.
This module imports nothing heavy at import time (the CLI's input check uses it).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from iclr25_shared.errors import InputError
from iclr25_shared.inputs import read_torch

__all__ = ["check_checkpoint", "check_size", "load_checkpoint"]

_EXPECTED = "a SiMHand checkpoint (encoder.pt from `pretrain` or model.pt from `finetune`)"
_FIRST_CONV = "backbone.body.0.weight"


def _where(path: Path | str, label: str | None) -> str:
    return f"{label}: {str(path)!r}" if label else repr(str(path))


def _meta_int(meta: Mapping[str, Any], key: str, low: int, where: str) -> int | None:
    value = meta.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InputError(f"{where} records {key}={value!r}; expected an integer >= {low} ({_EXPECTED})")
    return value


def load_checkpoint(
    path: Path | str, *, label: str | None = None, device: Any = "cpu"
) -> tuple[Any, dict[str, Any]]:
    """The :class:`~iclr25_simhand.HandEncoder` stored in ``path`` and its metadata.

    The backbone width is read from the weights themselves (and must agree with ``meta["width"]`` when recorded).

    Raises:
        InputError: the file is missing, empty, not a safe torch checkpoint, not a SiMHand checkpoint, holds
            non-finite weights, or records metadata that does not fit its weights.
    """
    import torch

    from iclr25_simhand._model import HandEncoder, SmallConvNet

    where = _where(path, label)
    blob = read_torch(path, label=label, map_location=device, expected=_EXPECTED)
    state = blob.get("state_dict") if isinstance(blob, Mapping) else None
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        what = (
            f"a {type(blob).__name__}" if not isinstance(blob, Mapping) else f"keys {sorted(map(str, blob))}"
        )
        raise InputError(f"{where} holds {what}; expected {_EXPECTED} with a 'state_dict'")
    meta = blob.get("meta", {})
    if not isinstance(meta, Mapping):
        raise InputError(
            f"{where} has 'meta' of type {type(meta).__name__}; expected a mapping ({_EXPECTED})"
        )
    width = _meta_int(meta, "width", 1, where)
    _meta_int(meta, "size", 8, where)
    first = state.get(_FIRST_CONV)
    if first is None or first.ndim != 4:
        raise InputError(f"{where} holds no {_FIRST_CONV!r} of shape (width, 3, 3, 3); expected {_EXPECTED}")
    if width is not None and width != first.shape[0]:
        raise InputError(f"{where} records width={width} but its first conv has {first.shape[0]} channels")
    model = HandEncoder(SmallConvNet(int(first.shape[0])))
    own = model.state_dict()
    missing = len(set(own) - set(state))
    unexpected = len(set(state) - set(own))
    reshaped = sum(1 for k, v in state.items() if k in own and tuple(v.shape) != tuple(own[k].shape))
    if missing or unexpected or reshaped:
        raise InputError(
            f"{where} does not fit a SiMHand HandEncoder of width {first.shape[0]} ({missing} missing, "
            f"{unexpected} unexpected and {reshaped} reshaped weights); expected {_EXPECTED}"
        )
    model.load_state_dict(state)
    return model.to(device), dict(meta)


def check_checkpoint(path: Path, label: str) -> None:
    """The CLI's input check (``inputs.custom``): the checkpoint loads into a SiMHand encoder on the CPU."""
    load_checkpoint(path, label=label)


def check_size(meta: Mapping[str, Any], size: int, path: Path | str, label: str) -> None:
    """Refuse a ``--size`` other than the image side the checkpoint records (when it records one).

    Raises:
        InputError: naming ``--size``, both values and the file.
    """
    recorded = meta.get("size")
    if recorded is not None and recorded != size:
        raise InputError(
            f"--size {size} does not match {_where(path, label)}, which was trained on {recorded} px images; "
            f"pass --size {recorded}"
        )
