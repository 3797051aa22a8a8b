"""Safe readers for every kind of file a user hands a package, and the check that runs them before any model loads.

Each reader raises :class:`~iclr25_shared.errors.InputError` (exit 2 in the CLI) with one message that names the
option or file, what was found and what was expected — never a library's traceback or its advice. Torch
checkpoints are always loaded with ``weights_only=True``; ``.npz``/``.npy`` with ``allow_pickle=False``.

A config declares which of its fields name user files, and what each must be::

    from iclr25_shared import inputs

    @dataclass(frozen=True, kw_only=True)
    class EvaluateConfig(CommonOptions):
        INPUTS: ClassVar[Mapping[str, inputs.Input]] = {
            "checkpoint": inputs.torch_checkpoint(),
            "data": inputs.npz(keys=("x", "y")),
        }
        NOT_INPUTS: ClassVar[Mapping[str, str]] = {"cache": "a folder the run writes its call cache to"}
        checkpoint: Path | None = None
        ...

The CLI runner calls :func:`check_inputs` on the parsed config before the command function is imported, so a bad
file exits 2 in well under a second instead of after a model has loaded; the package's own loading code calls the
same readers (``inputs.read_torch(path, label="--checkpoint")``), so library users get the same errors. Folders a command
writes besides ``--out`` (a cache) are declared in ``OUTPUTS`` with :func:`output_folder`. Every field typed as a
path must be in ``INPUTS``, ``OUTPUTS`` or ``NOT_INPUTS`` (with the reason); the contract tests
(:class:`iclr25_shared.testing.ContractTests`) feed every declared input a missing path, an empty file, a junk
file, a folder where a file is expected and a file where a folder is expected.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import os
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from iclr25_shared.errors import InputError

__all__ = [
    "Input",
    "check_fashion_mnist_folder",
    "check_file",
    "check_folder",
    "check_hf_model_folder",
    "check_inputs",
    "check_model_ref",
    "check_video",
    "check_video_folder",
    "custom",
    "declared_inputs",
    "declared_outputs",
    "fashion_mnist_folder",
    "folder",
    "hf_model",
    "image",
    "image_folder",
    "json_file",
    "model_ref",
    "npy",
    "npz",
    "option",
    "output_folder",
    "path_fields",
    "read_image",
    "read_json",
    "read_npy",
    "read_npz",
    "read_table",
    "read_torch",
    "table",
    "text_file",
    "torch_checkpoint",
    "validating",
    "video",
    "video_folder",
    "wiki_summaries_file",
]

PathLike = str | os.PathLike[str]

_WEIGHT_PATTERNS = (
    "*.safetensors",
    "pytorch_model*.bin",
    "*.safetensors.index.json",
    "pytorch_model.bin.index.json",
    "*.gguf",
)
_VIDEO_SUFFIXES = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".gif")
_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")


def _name(path: PathLike, label: str | None) -> str:
    text = repr(str(path))
    return f"{label}: {text}" if label else text


# ------------------------------------------------------------------------------------------------------------------
# Files and folders
# ------------------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def validating(label: str) -> Any:
    """Turn a ``ValueError``/``TypeError`` raised inside the block into :class:`InputError` prefixed by ``label``.

    Wrap only the validation of values that came from the user (a library's argument checks on arrays read from
    the user's files, a value that must fit the data), never the computation: a ``ValueError`` from a diverging run
    must stay a failure (exit 1)::

        with inputs.validating("--q/--k"):
            K = as_matrix("K", K)
            Q = as_matrix("Q", Q, d=K.shape[1])
    """
    try:
        yield
    except InputError:
        raise
    except (ValueError, TypeError) as exc:
        raise InputError(f"{label}: {exc}") from None


def check_file(path: PathLike, *, label: str | None = None, expected: str = "a file") -> Path:
    """``path`` as a ``Path`` that exists, is a regular file, is readable and is not empty.

    Raises:
        InputError: missing, a folder, unreadable or empty (0 bytes); the message names ``label`` and ``path``.
    """
    p = Path(path).expanduser()
    where = _name(path, label)
    if not p.exists():
        raise InputError(f"{where} does not exist; expected {expected}")
    if p.is_dir():
        raise InputError(f"{where} is a folder; expected {expected}")
    if not os.access(p, os.R_OK):
        raise InputError(f"{where} cannot be read (permission denied); expected {expected}")
    if p.stat().st_size == 0:
        raise InputError(f"{where} is empty (0 bytes); expected {expected}")
    return p


def check_folder(path: PathLike, *, label: str | None = None, expected: str = "a folder") -> Path:
    """``path`` as a ``Path`` that exists and is a readable folder.

    Raises:
        InputError: missing, a file, or unreadable.
    """
    p = Path(path).expanduser()
    where = _name(path, label)
    if not p.exists():
        raise InputError(f"{where} does not exist; expected {expected}")
    if not p.is_dir():
        raise InputError(f"{where} is a file; expected {expected}")
    if not os.access(p, os.R_OK | os.X_OK):
        raise InputError(f"{where} cannot be read (permission denied); expected {expected}")
    return p


def _count_bad(array: Any) -> tuple[int, int]:
    import numpy as np

    a = np.asarray(array)
    if a.dtype.kind not in "fc":
        return 0, a.size
    return int(a.size - np.isfinite(a).sum()), a.size


# ------------------------------------------------------------------------------------------------------------------
# Arrays and checkpoints
# ------------------------------------------------------------------------------------------------------------------


def _tensors(obj: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    import torch

    if isinstance(obj, torch.Tensor):
        yield prefix or "<tensor>", obj
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            yield from _tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{prefix}[{i}]")


def read_torch(
    path: PathLike,
    *,
    label: str | None = None,
    map_location: Any = "cpu",
    finite: bool = True,
    expected: str = "a PyTorch checkpoint (torch.save)",
) -> Any:
    """Load a ``torch.save`` file safely (``weights_only=True``) and check its tensors are finite.

    Args:
        path: the file.
        label: the option or argument that named it, for the message (e.g. ``"--checkpoint"``).
        map_location: passed to ``torch.load``.
        finite: refuse floating-point tensors with NaN or inf entries.
        expected: what the file should be, for the message.

    Returns:
        What ``torch.load`` returned (tensors, dicts, lists, numbers, strings).

    Raises:
        InputError: missing, empty, not a checkpoint, holds objects that cannot be loaded without unpickling code
            (never advises ``weights_only=False``), or holds non-finite values (names the tensor and the count).
    """
    import torch

    p = check_file(path, label=label, expected=expected)
    magic = _magic(p)
    if not (
        magic.startswith(_ZIP_MAGIC) or magic[:1] == b"\x80"
    ):  # torch.save writes a zip (or, legacy, a pickle)
        raise InputError(f"{_name(path, label)} is not {expected} (no zip or pickle header)")
    try:
        obj = torch.load(p, map_location=map_location, weights_only=True)
    except Exception as exc:  # pickle, zip, EOF and runtime errors: none is the user's bug to debug
        text = str(exc)
        unsafe = "Unsupported global" in text or "GLOBAL" in text
        why = "it holds Python objects that only unsafe unpickling can load" if unsafe else type(exc).__name__
        raise InputError(f"{_name(path, label)} is not {expected} that loads safely ({why})") from None
    if finite:
        for key, tensor in _tensors(obj):
            if tensor.is_floating_point() or tensor.is_complex():
                bad = int((~torch.isfinite(tensor)).sum())
                if bad:
                    raise InputError(
                        f"{_name(path, label)} holds non-finite values: {bad} of {tensor.numel()} entries of "
                        f"{key!r} are NaN or inf"
                    )
    return obj


def read_npz(
    path: PathLike,
    *,
    label: str | None = None,
    keys: Sequence[str] = (),
    finite: bool = True,
) -> dict[str, Any]:
    """Read an ``.npz`` archive (``allow_pickle=False``) into a dict of arrays.

    Raises:
        InputError: missing, empty, not an ``.npz`` archive (a single ``.npy``, text, a truncated zip), arrays of
            Python objects, a required key missing (the message lists the keys present), or NaN/inf in a float array.
    """
    import numpy as np

    expected = "an .npz archive" + (f" with arrays {', '.join(keys)}" if keys else "")
    p = check_file(path, label=label, expected=expected)
    magic = _magic(p)
    if magic.startswith(_NPY_MAGIC):
        raise InputError(f"{_name(path, label)} holds a single array (.npy); expected {expected}")
    if not magic.startswith(_ZIP_MAGIC):
        raise InputError(f"{_name(path, label)} is not {expected} (no zip header: not a NumPy file)")
    try:
        loaded = np.load(p, allow_pickle=False)
    except Exception as exc:
        raise InputError(f"{_name(path, label)} is not {expected} ({_numpy_reason(exc)})") from None
    try:
        with loaded:  # the zip header above makes this an NpzFile
            arrays = {k: loaded[k] for k in loaded.files}
    except Exception as exc:  # a member that is truncated or holds objects
        raise InputError(f"{_name(path, label)} is not {expected} ({_numpy_reason(exc)})") from None
    missing = [k for k in keys if k not in arrays]
    if missing:
        raise InputError(
            f"{_name(path, label)} has no array {', '.join(map(repr, missing))}; it holds "
            f"{', '.join(map(repr, arrays)) or 'nothing'}"
        )
    if finite:
        for key, value in arrays.items():
            bad, total = _count_bad(value)
            if bad:
                raise InputError(
                    f"{_name(path, label)} holds non-finite values: {bad} of {total} entries of {key!r} are NaN or inf"
                )
    return arrays


_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"


def _magic(path: Path) -> bytes:
    with path.open("rb") as fh:
        return fh.read(6)


def _numpy_reason(exc: Exception) -> str:
    text = str(exc)
    if "allow_pickle" in text or "Object arrays" in text:
        return "it holds Python objects, which are never unpickled"
    return type(exc).__name__


def read_npy(
    path: PathLike, *, label: str | None = None, finite: bool = True, ndim: int | None = None
) -> Any:
    """Read one ``.npy`` array (``allow_pickle=False``).

    Raises:
        InputError: missing, empty, not a ``.npy`` file, Python objects, wrong number of axes, or NaN/inf.
    """
    import numpy as np

    expected = "a .npy array" + (f" with {ndim} axes" if ndim is not None else "")
    p = check_file(path, label=label, expected=expected)
    magic = _magic(p)
    if magic.startswith(_ZIP_MAGIC):
        raise InputError(f"{_name(path, label)} is an .npz archive; expected {expected}")
    if not magic.startswith(_NPY_MAGIC):
        raise InputError(f"{_name(path, label)} is not {expected} (no NPY header: not a NumPy file)")
    try:
        array = np.load(p, allow_pickle=False)
    except Exception as exc:
        raise InputError(f"{_name(path, label)} is not {expected} ({_numpy_reason(exc)})") from None
    if ndim is not None and array.ndim != ndim:
        raise InputError(f"{_name(path, label)} has shape {array.shape}; expected {expected}")
    if finite:
        bad, total = _count_bad(array)
        if bad:
            raise InputError(
                f"{_name(path, label)} holds non-finite values: {bad} of {total} entries are NaN or inf"
            )
    return array


# ------------------------------------------------------------------------------------------------------------------
# Images and videos
# ------------------------------------------------------------------------------------------------------------------


def read_image(path: PathLike, *, label: str | None = None, mode: str | None = "RGB") -> Any:
    """Open and decode an image with Pillow (converted to ``mode`` unless ``None``).

    Raises:
        InputError: missing, empty, or not an image Pillow can decode (e.g. a text file named ``.png``).
    """
    from PIL import Image

    p = check_file(path, label=label, expected="an image (PNG, JPEG, ...)")
    try:
        with Image.open(p) as img:
            img.load()
            return img.convert(mode) if mode else img.copy()
    except Exception as exc:
        raise InputError(
            f"{_name(path, label)} is not an image Pillow can decode ({type(exc).__name__})"
        ) from None


def check_video(path: PathLike, *, label: str | None = None) -> Path:
    """Check that ``path`` is a video PyAV can open and decode a first frame of.

    Raises:
        InputError: missing, empty, no video stream, or undecodable.
    """
    import av

    p = check_file(path, label=label, expected="a video file (e.g. .mp4)")
    try:
        with av.open(str(p)) as container:
            if not container.streams.video:
                raise InputError(f"{_name(path, label)} has no video stream")
            next(container.decode(video=0))
    except InputError:
        raise
    except StopIteration:
        raise InputError(f"{_name(path, label)} has no decodable video frame") from None
    except Exception as exc:
        raise InputError(
            f"{_name(path, label)} is not a video PyAV can decode ({type(exc).__name__})"
        ) from None
    return p


def check_video_folder(
    path: PathLike, *, label: str | None = None, suffixes: Sequence[str] = _VIDEO_SUFFIXES
) -> list[Path]:
    """A folder holding at least one video; every video in it must decode.

    Returns:
        The video files, sorted by name.

    Raises:
        InputError: missing, a file, no video with one of ``suffixes``, or an undecodable video (named).
    """
    p = check_folder(path, label=label, expected="a folder of videos")
    videos = sorted(f for f in p.iterdir() if f.is_file() and f.suffix.lower() in suffixes)
    if not videos:
        raise InputError(f"{_name(path, label)} holds no video ({', '.join(suffixes)})")
    for v in videos:
        check_video(v, label=label)
    return videos


def _check_image_folder(path: PathLike, *, label: str | None = None) -> list[Path]:
    p = check_folder(path, label=label, expected="a folder of images")
    images = sorted(f for f in p.iterdir() if f.is_file() and f.suffix.lower() in _IMAGE_SUFFIXES)
    if not images:
        raise InputError(f"{_name(path, label)} holds no image ({', '.join(_IMAGE_SUFFIXES)})")
    for f in images:
        read_image(f, label=label, mode=None)
    return images


# ------------------------------------------------------------------------------------------------------------------
# JSON and tables
# ------------------------------------------------------------------------------------------------------------------


def read_json(path: PathLike, *, label: str | None = None, expected: str = "a JSON file") -> Any:
    """Parse a JSON file.

    Raises:
        InputError: missing, empty, not UTF-8, or not valid JSON (with the line of the error).
    """
    p = check_file(path, label=label, expected=expected)
    try:
        return json.loads(p.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError:
        raise InputError(f"{_name(path, label)} is not UTF-8 text; expected {expected}") from None
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{_name(path, label)} is not valid JSON ({exc.msg} at line {exc.lineno}); expected {expected}"
        ) from None


def _has(row: Mapping[str, Any], key: str | Sequence[str]) -> bool:
    keys = (key,) if isinstance(key, str) else tuple(key)
    return any(k in row and row[k] is not None for k in keys)


def _alternatives(key: str | Sequence[str]) -> str:
    return repr(key) if isinstance(key, str) else " or ".join(map(repr, key))


def read_table(
    path: PathLike,
    *,
    label: str | None = None,
    required: Sequence[str | Sequence[str]] = (),
    numeric: Sequence[str] = (),
    layout: str = "auto",
) -> list[dict[str, Any]]:
    """Read a table of records from JSON, JSONL, CSV or TSV (by suffix; JSON for anything else).

    Args:
        path: the file.
        label: the option that named it.
        required: keys (columns) every record must have; a tuple entry means "one of these" (e.g.
            ``("caption", "prompt")``).
        numeric: keys whose values must be finite numbers (CSV text is converted to ``float``).
        layout: for JSON files, ``"list"`` (a list of objects), ``"mapping"`` (an object whose values are the
            records, e.g. ``{id: {...}}``) or ``"auto"`` (either).

    Returns:
        The records, in file order, as dicts.

    Raises:
        InputError: missing, empty, unparsable, the wrong JSON layout, no records, a record that is not an object,
            a missing required key or a non-numeric / non-finite numeric value (names the record and the key).
    """
    import math

    suffix = Path(path).suffix.lower()
    what = f"a table of records{' with ' + ', '.join(map(_alternatives, required)) if required else ''}"
    if suffix in (".csv", ".tsv"):
        p = check_file(path, label=label, expected=what)
        try:
            with p.open(newline="", encoding="utf-8-sig") as fh:  # a leading byte-order mark is not a column
                rows: list[Any] = list(csv.DictReader(fh, delimiter="\t" if suffix == ".tsv" else ","))
        except (UnicodeDecodeError, csv.Error) as exc:
            raise InputError(
                f"{_name(path, label)} is not a readable {suffix[1:].upper()} file ({exc})"
            ) from None
    elif suffix == ".jsonl":
        p = check_file(path, label=label, expected=what)
        rows = []
        try:
            for n, line in enumerate(p.read_text(encoding="utf-8-sig").splitlines(), 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise InputError(
                            f"{_name(path, label)} line {n} is not valid JSON ({exc.msg})"
                        ) from None
        except UnicodeDecodeError:
            raise InputError(f"{_name(path, label)} is not UTF-8 text") from None
    else:
        data = read_json(path, label=label, expected=what)
        if isinstance(data, list) and layout in ("auto", "list"):
            rows = data
        elif isinstance(data, dict) and layout in ("auto", "mapping"):
            rows = list(data.values())
        else:
            want = {"list": "a list of objects", "mapping": "an object of records"}.get(layout, "records")
            raise InputError(f"{_name(path, label)} holds a JSON {type(data).__name__}; expected {want}")
    if not rows:
        raise InputError(f"{_name(path, label)} holds no records; expected {what}")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise InputError(f"{_name(path, label)} record {i} is a {type(row).__name__}; expected an object")
        missing = [_alternatives(k) for k in required if not _has(row, k)]
        if missing:
            raise InputError(
                f"{_name(path, label)} record {i} has no {', '.join(missing)}; every record needs "
                f"{', '.join(_alternatives(k) for k in required)}"
            )
        for key in numeric:
            value = row.get(key)
            try:
                number = float(value)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise InputError(
                    f"{_name(path, label)} record {i}: {key!r} is {value!r}; expected a number"
                ) from None
            if not math.isfinite(number):
                raise InputError(
                    f"{_name(path, label)} record {i}: {key!r} is {value!r}; expected a finite number"
                )
            row[key] = number
    return rows


# ------------------------------------------------------------------------------------------------------------------
# Data set folders
# ------------------------------------------------------------------------------------------------------------------

FASHION_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 60_000),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 10_000),
}
"""split → (images file, labels file, number of examples) of Fashion-MNIST's IDX ``.gz`` files."""


def check_fashion_mnist_folder(
    path: PathLike, *, label: str | None = None, splits: Sequence[str] = ("train", "test")
) -> Path:
    """A folder holding the Fashion-MNIST IDX ``.gz`` files of ``splits`` (directly, or in torchvision's
    ``FashionMNIST/raw`` below it), each a gzip stream of a uint8 IDX file with the split's number of examples.
    Reads the files' headers only (a few bytes each).

    Returns:
        The folder that holds the files.

    Raises:
        InputError: missing, a file, a file absent (named), not gzip, not a uint8 IDX file, or the wrong count.
    """
    import gzip
    import zlib

    expected = "a folder holding the Fashion-MNIST IDX .gz files"
    root = check_folder(path, label=label, expected=expected)
    names = [(s, n) for s in splits for n in FASHION_MNIST_FILES[s][:2]]
    found = next(
        (d for d in (root, root / "FashionMNIST" / "raw") if all((d / n).is_file() for _, n in names)), None
    )
    if found is None:
        absent = [n for _, n in names if not (root / n).is_file()]
        raise InputError(f"{_name(path, label)} has no {', '.join(absent)}; expected {expected}")
    for split, name in names:
        file = check_file(found / name, label=label, expected="a gzip-compressed IDX file")
        try:
            with gzip.open(file, "rb") as fh:
                head = fh.read(8)
        except (OSError, EOFError, zlib.error):
            raise InputError(f"{_name(file, label)} is not a gzip-compressed IDX file") from None
        if len(head) < 8 or head[:3] != b"\x00\x00\x08":
            raise InputError(f"{_name(file, label)} is not a uint8 IDX file inside its gzip")
        count = int.from_bytes(head[4:8], "big")
        if count != FASHION_MNIST_FILES[split][2]:
            raise InputError(
                f"{_name(file, label)} holds {count} examples; Fashion-MNIST {split} has {FASHION_MNIST_FILES[split][2]}"
            )
    return found


def fashion_mnist_folder(*, splits: Sequence[str] = ("train", "test")) -> Input:
    """A folder of Fashion-MNIST's IDX ``.gz`` files (see :func:`check_fashion_mnist_folder`)."""
    return Input("folder", True, lambda p, label: check_fashion_mnist_folder(p, label=label, splits=splits))


# ------------------------------------------------------------------------------------------------------------------
# Models
# ------------------------------------------------------------------------------------------------------------------


def check_hf_model_folder(path: PathLike, *, label: str | None = None) -> Path:
    """A Hugging Face model folder that can be loaded: ``config.json`` (a JSON object) plus weights.

    Raises:
        InputError: missing, a file, no or broken ``config.json``, or no weights (``*.safetensors``,
            ``pytorch_model*.bin`` or an index) — a config-only folder would otherwise load random weights or fail
            deep inside transformers.
    """
    p = check_folder(path, label=label, expected="a Hugging Face model folder (config.json and weights)")
    config = p / "config.json"
    if not config.is_file():
        raise InputError(f"{_name(path, label)} has no config.json; expected a Hugging Face model folder")
    data = read_json(config, label=label, expected="a model config")
    if not isinstance(data, dict):
        raise InputError(f"{_name(config, label)} holds a JSON {type(data).__name__}; expected an object")
    if not any(any(p.glob(pattern)) for pattern in _WEIGHT_PATTERNS):
        raise InputError(
            f"{_name(path, label)} has config.json but no weights (model.safetensors or pytorch_model.bin)"
        )
    return p


def check_model_ref(
    value: PathLike, *, label: str | None = None, file_suffixes: Sequence[str] = (".gguf",)
) -> None:
    """A model given as a name (packaged, Hub id, ``tiny``) or a local path; only a path is checked.

    A value is a path when it exists or starts with ``.``, ``/`` or ``~``. An existing folder must be a loadable
    Hugging Face folder; an existing file must be non-empty and end in one of ``file_suffixes`` (a ``.gguf`` must
    start with the GGUF magic).

    Raises:
        InputError: a path that does not exist, an empty or unsupported file, or a folder that is not a loadable
            model.
    """
    text = str(value)
    p = Path(text).expanduser()
    looks_like_path = text.startswith((".", "/", "~")) or isinstance(value, os.PathLike)
    if not p.exists():
        if looks_like_path:
            raise InputError(f"{_name(value, label)} does not exist; expected a model folder or file")
        return
    if p.is_dir():
        check_hf_model_folder(p, label=label)
    else:
        expected = "a model folder" + (f" or a {' / '.join(file_suffixes)} file" if file_suffixes else "")
        check_file(p, label=label, expected=expected)
        if p.suffix.lower() not in file_suffixes:
            raise InputError(f"{_name(value, label)} is a file; expected {expected}")
        if p.suffix == ".gguf":
            with p.open("rb") as fh:
                if fh.read(4) != b"GGUF":
                    raise InputError(f"{_name(value, label)} is not a GGUF file (bad magic)")


# ------------------------------------------------------------------------------------------------------------------
# Declaring a config's inputs
# ------------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Input:
    """What a config field that names a user file or folder must be.

    Build one with the constructors :func:`torch_checkpoint`, :func:`npz`, :func:`npy`, :func:`image`,
    :func:`video`, :func:`video_folder`, :func:`image_folder`, :func:`table`, :func:`json_file`, :func:`text_file`,
    :func:`folder`, :func:`hf_model`, :func:`model_ref`, or :func:`custom`.

    Attributes:
        kind: the constructor's name.
        is_folder: the field names a folder (``False``: a file).
        check: ``check(path, label)`` raising :class:`InputError`.
        may_be_name: the field also takes names that are not paths (a model name); the contract tests then only
            feed it values that look like paths.
    """

    kind: str
    is_folder: bool
    check: Callable[[Path, str], Any]
    may_be_name: bool = False


def torch_checkpoint(*, finite: bool = True) -> Input:
    """A ``torch.save`` file, loaded with ``weights_only=True``; its float tensors finite."""
    return Input("torch_checkpoint", False, lambda p, label: read_torch(p, label=label, finite=finite))


def npz(*, keys: Sequence[str] = (), finite: bool = True) -> Input:
    """An ``.npz`` archive holding ``keys``."""
    return Input("npz", False, lambda p, label: read_npz(p, label=label, keys=keys, finite=finite))


def npy(*, ndim: int | None = None, finite: bool = True) -> Input:
    """One ``.npy`` array."""
    return Input("npy", False, lambda p, label: read_npy(p, label=label, ndim=ndim, finite=finite))


def image() -> Input:
    """An image Pillow decodes."""
    return Input("image", False, lambda p, label: read_image(p, label=label, mode=None))


def video() -> Input:
    """A video PyAV decodes."""
    return Input("video", False, lambda p, label: check_video(p, label=label))


def video_folder(*, suffixes: Sequence[str] = _VIDEO_SUFFIXES) -> Input:
    """A folder of decodable videos."""
    return Input("video_folder", True, lambda p, label: check_video_folder(p, label=label, suffixes=suffixes))


def image_folder() -> Input:
    """A folder of decodable images."""
    return Input("image_folder", True, lambda p, label: _check_image_folder(p, label=label))


def table(
    *, required: Sequence[str | Sequence[str]] = (), numeric: Sequence[str] = (), layout: str = "auto"
) -> Input:
    """A JSON / JSONL / CSV / TSV table (see :func:`read_table`)."""
    return Input(
        "table",
        False,
        lambda p, label: read_table(p, label=label, required=required, numeric=numeric, layout=layout),
    )


WIKI_FIELDS = ("extract", "topic")
"""Keys every record of a Wikipedia summaries file needs (``title`` and ``description`` are optional)."""


def wiki_summaries_file() -> Input:
    """A Wikipedia summaries file as :func:`iclr25_shared.data.wiki_summaries` reads it: a JSON object of records,
    each with ``extract`` and ``topic``."""
    return Input(
        "table", False, lambda p, label: read_table(p, label=label, required=WIKI_FIELDS, layout="mapping")
    )


def json_file() -> Input:
    """Any valid JSON file."""
    return Input("json", False, lambda p, label: read_json(p, label=label))


def text_file(*, suffixes: Sequence[str] = ()) -> Input:
    """A non-empty UTF-8 text file (optionally with one of ``suffixes``)."""

    def check(p: Path, label: str) -> None:
        p = check_file(p, label=label, expected="a text file")
        if suffixes and p.suffix.lower() not in suffixes:
            raise InputError(f"{_name(p, label)} should end in {' or '.join(suffixes)}")
        try:
            p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{_name(p, label)} is not UTF-8 text") from None

    return Input("text", False, check)


def folder(*, expected: str = "a folder", check: Callable[[Path, str], Any] | None = None) -> Input:
    """An existing folder; ``check(path, label)`` may look inside it (raising :class:`InputError`)."""

    def run(p: Path, label: str) -> None:
        p = check_folder(p, label=label, expected=expected)
        if check is not None:
            check(p, label)

    return Input("folder", True, run)


def hf_model() -> Input:
    """A Hugging Face model folder with ``config.json`` and weights."""
    return Input("hf_model", True, lambda p, label: check_hf_model_folder(p, label=label))


def model_ref(*, file_suffixes: Sequence[str] = (".gguf",)) -> Input:
    """A model name or a local path (only a path is checked; see :func:`check_model_ref`)."""
    return Input(
        "model_ref",
        True,
        lambda p, label: check_model_ref(p, label=label, file_suffixes=file_suffixes),
        may_be_name=True,
    )


def custom(
    check: Callable[[Any, str], Any],
    *,
    is_folder: bool = False,
    kind: str = "custom",
    may_be_name: bool = False,
) -> Input:
    """A file (or folder) checked by ``check(path, label)``, which must first call :func:`check_file` (or
    :func:`check_folder`) so that missing, empty and wrong-kind paths get the standard messages.

    With ``may_be_name`` the field also takes names (``check`` then receives the value as given and decides what
    is a path, as :func:`check_model_ref` does)."""
    return Input(kind, is_folder, check, may_be_name=may_be_name)


# ------------------------------------------------------------------------------------------------------------------
# The runner's check
# ------------------------------------------------------------------------------------------------------------------

_CORE_PATHS = frozenset({"out", "config"})


def _mentions_path(hint: Any) -> bool:
    if hint is None:
        return False
    if isinstance(hint, type) and issubclass(hint, os.PathLike):
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType, tuple, list, typing.Annotated):
        return any(_mentions_path(a) for a in typing.get_args(hint) if a is not Ellipsis)
    return False


def path_fields(cls: type) -> list[str]:
    """Names of the config fields typed as a path (or a tuple of paths), besides the core's ``out`` and ``config``."""
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except (NameError, TypeError):
        hints = {}
    return [
        f.name
        for f in dataclasses.fields(cls)
        if f.name not in _CORE_PATHS and _mentions_path(hints.get(f.name))
    ]


def declared_inputs(cls: type) -> Mapping[str, Input]:
    """The config class's ``INPUTS`` (field name → :class:`Input`)."""
    return dict(getattr(cls, "INPUTS", {}) or {})


def option(name: str) -> str:
    """The CLI flag of a config field: ``data_root`` → ``--data-root``."""
    return "--" + name.replace("_", "-")


def output_folder() -> Input:
    """A folder the command writes into besides ``--out`` (a cache, generated videos): it may be missing (it is
    created), but not an existing file, and its nearest existing parent must be a writable folder."""

    def check(p: Path, label: str) -> None:
        p = Path(p).expanduser()
        if p.exists() and not p.is_dir():
            raise InputError(f"{_name(p, label)} is a file; expected a folder to write into")
        parent = p if p.exists() else p.parent
        while not parent.exists():
            parent = parent.parent
        if not parent.is_dir():
            raise InputError(f"{_name(p, label)} cannot be created: {str(parent)!r} is a file")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise InputError(f"{_name(p, label)} cannot be written (no permission in {str(parent)!r})")

    return Input("output_folder", True, check)


def declared_outputs(cls: type) -> Mapping[str, Input]:
    """The config class's ``OUTPUTS`` (field name → :func:`output_folder`)."""
    return dict(getattr(cls, "OUTPUTS", {}) or {})


def check_inputs(cfg: Any) -> None:
    """Run every declared input's (and output folder's) check on the value the user gave (``None``, ``""`` and
    ``()`` are skipped).

    Raises:
        InputError: the first bad file, naming the option and the path.
    """
    for name, spec in {**declared_inputs(type(cfg)), **declared_outputs(type(cfg))}.items():
        value = getattr(cfg, name)
        values = value if isinstance(value, (tuple, list)) else (value,)
        for v in values:
            if v is None or v == "":
                continue
            spec.check(v if spec.may_be_name else Path(v), option(name))
