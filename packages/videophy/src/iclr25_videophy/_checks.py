"""The user's files, read for the command line: each reader raises :class:`~iclr25_shared.errors.InputError` naming
the option and the file (exit 2), and the same functions check the files declared in ``cli.py`` before any command
runs.

The library readers (:func:`~iclr25_videophy.read_prompts`, :func:`~iclr25_videophy.read_labels`,
:func:`~iclr25_videophy.read_mapping`) keep raising ``ValueError``; these wrappers are the CLI's boundary. Light to
import: the parsers and PyAV load inside the functions.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from iclr25_shared import inputs
from iclr25_shared.errors import InputError

__all__ = [
    "PIPELINE_NAMES",
    "check_opencv_folder",
    "check_pipeline",
    "mapping_input",
    "pipeline_input",
    "read_labels_input",
    "read_mapping_input",
    "read_prompts_input",
]

PIPELINE_NAMES = ("tiny-random",)
"""Values of ``--pipeline`` that are names, not folders."""


@contextlib.contextmanager
def _reading(path: str | os.PathLike[str], label: str, expected: str) -> Iterator[None]:
    """Turn a parser's ``ValueError``/``TypeError``/``csv.Error`` on a user file into one InputError naming it."""
    import csv

    where = f"{label}: {str(path)!r}"
    try:
        yield
    except InputError:
        raise
    except UnicodeDecodeError:
        raise InputError(f"{where} is not UTF-8 text; expected {expected}") from None
    except csv.Error as exc:
        raise InputError(f"{where} is not a readable CSV file ({exc}); expected {expected}") from None
    except (ValueError, TypeError) as exc:
        message = str(exc)
        if str(path) not in message:
            message = f"{str(path)!r}: {message}"
        raise InputError(f"{label}: {message}") from None


def read_prompts_input(path: str | os.PathLike[str], label: str = "--prompts") -> list[Any]:
    """:func:`~iclr25_videophy.read_prompts`, raising InputError (missing, empty, no caption column, no prompt)."""
    from iclr25_videophy._io import read_prompts

    expected = "a prompt CSV with a caption column"
    inputs.check_file(path, label=label, expected=expected)
    with _reading(path, label, expected):
        return read_prompts(path)


def read_labels_input(path: str | os.PathLike[str], label: str = "--labels") -> list[Any]:
    """:func:`~iclr25_videophy.read_labels`, raising InputError (missing, empty, unknown format, bad score)."""
    from iclr25_videophy._io import read_labels

    expected = "a VideoPhy label CSV"
    inputs.check_file(path, label=label, expected=expected)
    with _reading(path, label, expected):
        rows = read_labels(path)
    if not rows:
        raise InputError(f"{label}: {str(path)!r} holds no labelled video")
    return rows


def read_mapping_input(
    path: str | os.PathLike[str], label: str = "--mapping", *, complete: bool = True
) -> list[Any]:
    """:func:`~iclr25_videophy.read_mapping`, raising InputError. With ``complete`` (a mapping to evaluate) it also
    refuses an empty mapping and one that names a local video that does not exist (URLs are not checked); without
    (a generation run to resume, which redoes missing videos) only the file itself is checked."""
    from iclr25_videophy._io import read_mapping

    expected = "a prompt->video mapping (the CSV generate writes, or JSON {caption: path})"
    inputs.check_file(path, label=label, expected=expected)
    with _reading(path, label, expected):
        entries = read_mapping(path)
    if not complete:
        return entries
    if not entries:
        raise InputError(f"{label}: {str(path)!r} maps no video; expected {expected}")
    for video, _, _ in entries:
        if "://" not in video and not Path(video).is_file():
            raise InputError(f"{label}: {str(path)!r} names the video {video!r}, which does not exist")
    return entries


def mapping_input() -> inputs.Input:
    """``--mapping`` as a declared input."""
    return inputs.custom(lambda p, label: read_mapping_input(p, label), kind="table")


def check_pipeline(value: str | os.PathLike[str], label: str = "--pipeline") -> None:
    """``tiny-random``, or a local diffusers pipeline folder: ``model_index.json`` (a JSON object) and the
    subfolder of every component it lists.

    Raises:
        InputError: anything else (a missing path, a file, a folder without model_index.json or a component).
    """
    text = str(value)
    if text in PIPELINE_NAMES:
        return
    expected = (
        f"{' or '.join(map(repr, PIPELINE_NAMES))} or a local diffusers pipeline folder (model_index.json)"
    )
    p = Path(text).expanduser()
    if not p.exists():
        raise InputError(f"{label}: {text!r} does not exist; expected {expected}")
    inputs.check_folder(p, label=label, expected=expected)
    index = p / "model_index.json"
    if not index.is_file():
        raise InputError(f"{label}: {text!r} has no model_index.json; expected {expected}")
    data = inputs.read_json(index, label=label, expected="a diffusers model_index.json")
    if not isinstance(data, dict):
        raise InputError(f"{label}: {str(index)!r} holds a JSON {type(data).__name__}; expected an object")
    for name, spec in data.items():
        listed = isinstance(spec, list) and len(spec) == 2 and all(isinstance(s, str) for s in spec)
        if listed and not (p / name).is_dir():
            raise InputError(f"{label}: {text!r} lacks the subfolder {name!r} that model_index.json lists")


def pipeline_input() -> inputs.Input:
    """``--pipeline`` as a declared input: a name or a folder (only a folder is checked)."""
    return inputs.Input(
        "diffusers_pipeline", True, lambda p, label: check_pipeline(p, label), may_be_name=True
    )


def check_opencv_folder(path: str | os.PathLike[str], label: str = "--opencv-data") -> None:
    """A folder holding opencv-doc's ``vtest.avi`` and ``tree.avi``, both decodable."""
    from iclr25_videophy._clips import OPENCV

    for name in OPENCV:
        inputs.check_video(Path(path) / name, label=label)
