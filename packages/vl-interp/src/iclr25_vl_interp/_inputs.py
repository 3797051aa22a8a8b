"""The user's files: a ``--data-root`` folder of Fashion-MNIST and cached tensors read back from ``--cache``.

Problems with the user's files raise :class:`~iclr25_shared.errors.InputError` naming the option and the file
(exit 2 in the CLI); the CLI runs the same checks before the command is imported (``INPUTS`` in cli.py).
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from iclr25_shared.errors import InputError
from iclr25_shared.inputs import check_file, check_folder

FASHION_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


def _where(path: Any, label: str | None) -> str:
    return f"{label}: {str(path)!r}" if label else repr(str(path))


def _brief(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def check_fashion_folder(
    path: str | Path, label: str | None, splits: Sequence[str] = ("train", "test")
) -> Path:
    """A folder holding the Fashion-MNIST IDX ``.gz`` files of ``splits`` (or in ``FashionMNIST/raw`` below it),
    each a gzip stream that starts with a uint8 IDX header; returns the folder that holds them.

    Raises:
        InputError: missing, a file, a file absent, or a file that is not a gzip-compressed uint8 IDX file.
    """
    expected = "a folder holding the Fashion-MNIST IDX .gz files"
    root = check_folder(path, label=label, expected=expected)
    names = [n for s in splits for n in FASHION_FILES[s]]
    found = next(
        (d for d in (root, root / "FashionMNIST" / "raw") if all((d / n).is_file() for n in names)), None
    )
    if found is None:
        absent = [n for n in names if not (root / n).is_file()]
        raise InputError(f"{_where(root, label)} has no {', '.join(absent)}; expected {expected}")
    for name in names:
        file = check_file(found / name, label=label, expected="a gzip-compressed IDX file")
        try:
            with gzip.open(file, "rb") as fh:
                head = fh.read(4)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(
                f"{_where(file, label)} is not a gzip-compressed IDX file ({_brief(exc)})"
            ) from None
        if len(head) < 4 or head[:3] != b"\x00\x00\x08":
            raise InputError(
                f"{_where(file, label)} is not a uint8 IDX file inside its gzip (header {head!r})"
            )
    return found


def fashion_images(split: str, data_root: Any, *, label: str = "--data-root") -> tuple[Any, Any]:
    """``iclr25_shared.data.fashion_mnist(split, root=data_root)``; a user's folder without the files, or whose
    files are truncated or hold the wrong number of examples, raises :class:`InputError` naming ``label``."""
    from iclr25_shared.data import fashion_mnist

    if data_root is None:
        return fashion_mnist(split)
    root = check_fashion_folder(data_root, label, (split,))
    try:
        return fashion_mnist(split, root=root)
    except (ValueError, OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{_where(data_root, label)}: {_brief(exc)}") from None


def load_hf_folder(model_dir: Any, *, label: str | None = "--model") -> tuple[Any, Any]:
    """``(processor, model)`` of a local Hugging Face image-text-to-text folder (``local_files_only``).

    Raises:
        InputError: not a folder with config.json and weights, or a processor / model that does not load
            (no processor files, a corrupt weights file, an architecture transformers does not know).
    """
    import transformers

    from iclr25_shared.inputs import check_hf_model_folder

    root = check_hf_model_folder(model_dir, label=label)
    where = _where(model_dir, label)
    try:
        processor = transformers.AutoProcessor.from_pretrained(str(root), local_files_only=True)
    except MemoryError:
        raise
    except Exception as exc:  # OSError, ValueError, KeyError, TypeError of missing or foreign processor files
        raise InputError(
            f"{where} has no processor transformers can load ({type(exc).__name__}: {_brief(exc)})"
        ) from None
    if not hasattr(processor, "tokenizer") or not hasattr(processor, "image_processor"):
        raise InputError(f"{where} has a {type(processor).__name__}; expected an image-text processor")
    try:
        model = transformers.AutoModelForImageTextToText.from_pretrained(str(root), local_files_only=True)
    except MemoryError:
        raise
    except Exception as exc:  # safetensors / pickle / OS errors of a corrupt or foreign weights file
        raise InputError(
            f"{where} holds a model that does not load ({type(exc).__name__}: {_brief(exc)})"
        ) from None
    return processor, model
