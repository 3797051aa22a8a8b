"""What the commands share: reading ``--data`` (named sets or an ``.npz``), the training configuration of SimGCD /
DebGCD and joining the launcher's process group. The commands are in ``_discover.py``, ``_reproduce.py`` and
``_bench.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_shared.errors import InputError

if TYPE_CHECKING:
    pass

__all__ = ["NAMED_DATA", "check_data", "load_npz"]


NAMED_DATA = ("fashion-mnist", "digits")
_NPZ_KEYS = ("images", "labels")


def load_npz(path: str | Path, *, label: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Images and labels from a ``.npz`` with ``images`` ``(n, H, W)`` / ``(n, C, H, W)`` (uint8 or floats in
    [0, 1]) and ``labels`` ``(n,)`` non-negative ints. Returns ``(n, C, H, W)`` float32 and ``(n,)`` int64.

    Read with ``allow_pickle=False`` through :func:`iclr25_shared.inputs.read_npz`.

    Args:
        path: the file.
        label: the option that named it, for the messages (e.g. ``"--data"``).

    Raises:
        InputError: the file is missing, empty or not an ``.npz`` archive; a key is missing; shapes disagree;
            values are out of range or not finite (each message names the file).
    """
    from iclr25_shared.inputs import check_file, read_npz

    where = f"{label}: {str(path)!r}" if label else repr(str(path))
    expected = "an .npz archive with arrays images, labels"
    p = check_file(path, label=label, expected=expected)
    with p.open("rb") as fh:
        if (
            fh.read(2) != b"PK"
        ):  # every .npz is a zip; numpy's own error for text or pickles advises allow_pickle
            raise InputError(f"{where} is not {expected} (not a zip archive)")
    z = read_npz(p, label=label, keys=_NPZ_KEYS)
    x, y = z["images"], z["labels"]
    if x.ndim == 3:
        x = x[:, None]
    if x.ndim != 4 or y.ndim != 1 or x.shape[0] != y.shape[0] or y.size == 0:
        raise InputError(
            f"{where}: images must be (n, H, W) or (n, C, H, W) and labels (n,) with n >= 1, got "
            f"{z['images'].shape}, {y.shape}"
        )
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
        raise InputError(f"{where}: labels must be non-negative integers, got dtype {y.dtype}")
    if x.dtype == np.uint8:
        x = x.astype(np.float32) / 255.0
    elif x.dtype.kind not in "fiub":
        raise InputError(f"{where}: images must be uint8 or floats in [0, 1], got dtype {x.dtype}")
    x = x.astype(np.float32)
    if x.min() < 0 or x.max() > 1:
        raise InputError(f"{where}: float images must lie in [0, 1], got [{x.min()}, {x.max()}]")
    return x, y.astype(np.int64)


def check_data(value: str | Path, label: str) -> None:
    """The CLI's check of ``--data``: a named data set passes; anything else must be a readable ``.npz``."""
    if str(value) in NAMED_DATA:
        return
    load_npz(value, label=label)


def _load(name: str, root: Path | None, per_class: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from iclr25_debgcd._data import load_images

    if name in NAMED_DATA:  # --root's files are the user's: their problems are InputErrors naming --root
        return load_images(name, root=root, per_class=per_class or None, seed=seed, label="--root")
    x, y = load_npz(name, label="--data")
    if per_class:
        rng = np.random.default_rng(seed)
        keep = np.sort(
            np.concatenate([rng.permutation(np.flatnonzero(y == c))[:per_class] for c in np.unique(y)])
        )
        x, y = x[keep], y[keep]
    return x, y


def _train_config(
    method: str,
    *,
    backbone: str,
    epochs: int,
    batch_size: int,
    lr: float,
    hidden: int,
    data: str,
    threshold: float,
    adl_weight: float,
    sdl_weight: float,
) -> Any:
    from iclr25_debgcd._losses import GCDLossConfig
    from iclr25_debgcd._train import TrainConfig

    # teacher warm-up: 30 of 200 epochs in the paper, kept as the same share of the schedule
    warmup = max(1, round(0.15 * epochs))
    loss = GCDLossConfig(
        memax_weight=1.0,  # official CIFAR-10 script (a 10-class set like ours)
        warmup_teacher_epochs=warmup,
        threshold=threshold,
        adl_weight=adl_weight,
        sdl_weight=sdl_weight,
    )
    return TrainConfig(
        method=method,
        backbone=backbone,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        hidden=hidden,
        flip=data == "fashion-mnist",
        shift=2 if data != "digits" else 1,
        loss=loss,
    )
