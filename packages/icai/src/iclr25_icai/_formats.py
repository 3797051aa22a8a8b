"""Readers that turn preference files into ICAI's pairs table (``input``, ``text_a``, ``text_b``,
``preferred_text``).

- :func:`read_pairs`: the package's own format (CSV, JSON lines, JSON records or Parquet with those columns).
- :func:`read_alpacaeval`: AlpacaEval / AlpacaFarm annotation records (``instruction``, ``output_1``,
  ``output_2``, ``preference`` 1 or 2; 1.5 and 0 are ties).
- :func:`read_arena`: Chatbot Arena conversation records (``conversation_a``/``conversation_b`` message lists,
  ``winner`` = ``model_a``/``model_b``/``tie``/``tie (bothbad)``); single-turn conversations only.

Each returns a validated table (ties dropped) or raises :class:`~iclr25_shared.errors.InputError` (a
``ValueError``) naming the file (and ``label``, the option that named it) and the problem.
:func:`check_preferences` is the CLI's check of ``--data`` before anything loads: the file parses and has the
columns of one of the three layouts (which one ``--format`` says is checked when the command reads it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iclr25_icai._icai import validate_pairs
from iclr25_shared.errors import InputError, SourceUnavailable
from iclr25_shared.inputs import check_file

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["LAYOUTS", "check_preferences", "read_alpacaeval", "read_arena", "read_pairs"]

SUFFIXES = (".csv", ".json", ".jsonl", ".parquet")
LAYOUTS = {
    "pairs": ("text_a", "text_b", "preferred_text"),
    "alpacaeval": ("instruction", "output_1", "output_2", "preference"),
    "arena": ("conversation_a", "conversation_b", "winner"),
}
"""``--format`` → the fields every record of that layout needs."""


def _where(path: str | os.PathLike[str], label: str | None) -> str:
    return f"{label}: {str(path)!r}" if label else repr(str(path))


def _path(
    path: str | os.PathLike[str], label: str | None, suffixes: tuple[str, ...] | None = SUFFIXES
) -> Path:
    p = check_file(path, label=label, expected=f"a preferences file ({', '.join(SUFFIXES)})")
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise InputError(
            f"{_where(path, label)}: data file suffix must be {', '.join(suffixes[:-1])} or {suffixes[-1]}, "
            f"got {p.suffix.lower()!r}"
        )
    return p


def _records(p: Path, label: str | None = None) -> list[dict[str, Any]]:
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{_where(p, label)} is not UTF-8 text; expected JSON or JSON lines") from None
    try:
        data = json.loads(text)
    except ValueError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as exc:
            raise InputError(f"{_where(p, label)} is neither JSON nor JSON lines: {exc}") from None
    if isinstance(data, dict):
        data = data.get("data", data.get("rows", [data]))
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise InputError(f"{_where(p, label)} must hold a list of JSON objects")
    if not data:
        raise InputError(f"{_where(p, label)} holds no records")
    return data


def _table(p: Path, label: str | None) -> pd.DataFrame:
    """The file as a table (CSV, Parquet, or JSON records)."""
    import pandas as pd

    suffix = p.suffix.lower()
    try:
        if suffix == ".csv":
            return pd.read_csv(p, keep_default_na=False, na_values=[""])
        if suffix == ".parquet":
            return pd.read_parquet(p)
        return pd.DataFrame(_records(p, label))
    except InputError:
        raise
    except ImportError:  # pandas' Parquet engine is optional
        raise SourceUnavailable(
            f"reading {_where(p, label)} (Parquet) needs pyarrow: pip install pyarrow"
        ) from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise InputError(f"could not read {_where(p, label)}: {exc}") from None
    except (
        OSError,
        ValueError,
    ) as exc:  # pyarrow's errors on a file that is not Parquet are OSError/ValueError
        raise InputError(f"could not read {_where(p, label)} as Parquet ({type(exc).__name__})") from None


def check_preferences(path: str | os.PathLike[str], label: str | None = "--data") -> None:
    """Check a preferences file before anything loads: a supported suffix, parses, and holds the columns of one
    of :data:`LAYOUTS` (the reader of the chosen ``--format`` checks the values).

    Raises:
        InputError: missing, empty, a folder, an unknown suffix, unparsable, or no known layout's columns.
        SourceUnavailable: a ``.parquet`` file and no pyarrow.
    """
    p = _path(path, label, None)
    columns = set(map(str, _table(p, label).columns))
    if not any(set(need) <= columns for need in LAYOUTS.values()):
        best = max(LAYOUTS, key=lambda name: len(set(LAYOUTS[name]) & columns))  # the first on a tie: pairs
        missing = [c for c in LAYOUTS[best] if c not in columns]
        others = "; ".join(f"{name}: {', '.join(need)}" for name, need in LAYOUTS.items() if name != best)
        raise InputError(
            f"{_where(path, label)} lacks column(s) {missing} of the {best} layout "
            f"({', '.join(LAYOUTS[best])}); it has {sorted(columns)} (other layouts: {others})"
        )


def read_pairs(path: str | os.PathLike[str], *, label: str | None = None) -> pd.DataFrame:
    """Read a pairs file by its suffix: ``.csv``, ``.jsonl``/``.json``, ``.parquet``.

    Args:
        path: the file.
        label: the option that named it (e.g. ``"--data"``), for messages.

    Raises:
        InputError: missing file, unknown suffix, unreadable file, or a table :func:`validate_pairs` refuses.
    """
    p = _path(path, label)
    df = _table(p, label)
    try:
        return validate_pairs(df)
    except ValueError as exc:
        raise InputError(f"{_where(p, label)}: {exc}") from None


def read_alpacaeval(path: str | os.PathLike[str], *, label: str | None = None) -> pd.DataFrame:
    """AlpacaEval / AlpacaFarm annotations (JSON list or JSON lines) as a pairs table.

    ``preference`` 1 → ``text_a`` (``output_1``), 2 → ``text_b`` (``output_2``); 1.5 or 0 (ties) are dropped.

    Raises:
        InputError: missing fields (named), a preference outside {0, 1, 1.5, 2}, or no non-tie record.
    """

    p = _path(path, label, None)
    rows = []
    for i, r in enumerate(_records(p, label)):
        missing = [k for k in LAYOUTS["alpacaeval"] if k not in r]
        if missing:
            raise InputError(
                f"{_where(p, label)} record {i} lacks {missing} (AlpacaEval annotations need them)"
            )
        pref = r["preference"]
        if pref not in (0, 1, 1.5, 2) or isinstance(pref, bool):
            raise InputError(
                f"{_where(p, label)} record {i}: preference must be 1, 2 (or 1.5/0 for a tie), got {pref!r}"
            )
        choice = {1: "text_a", 2: "text_b"}.get(pref, "tie")
        rows.append(
            {
                "input": r["instruction"],
                "text_a": r["output_1"],
                "text_b": r["output_2"],
                "preferred_text": choice,
            }
        )
    return _validated(rows, p, label)


def _validated(rows: list[dict[str, Any]], p: Path, label: str | None) -> pd.DataFrame:
    import pandas as pd

    try:
        return validate_pairs(pd.DataFrame(rows, columns=["input", "text_a", "text_b", "preferred_text"]))
    except ValueError as exc:
        raise InputError(f"{_where(p, label)}: {exc}") from None


def _content(message: Any) -> str:
    return str(message.get("content", "")) if isinstance(message, dict) else ""


def read_arena(path: str | os.PathLike[str], *, label: str | None = None) -> pd.DataFrame:
    """Chatbot Arena conversations (JSON list or JSON lines) as a pairs table.

    Keeps single-turn conversations (one user message and one assistant reply per side); ``input`` is the user
    message, ``text_a``/``text_b`` the replies of ``model_a``/``model_b``; ``winner`` ties are dropped.

    Raises:
        InputError: missing fields (named), an unknown ``winner``, or nothing left.
    """
    p = _path(path, label, None)
    rows = []
    for i, r in enumerate(_records(p, label)):
        missing = [k for k in LAYOUTS["arena"] if k not in r]
        if missing:
            raise InputError(
                f"{_where(p, label)} record {i} lacks {missing} (Chatbot Arena records need them)"
            )
        winner = r["winner"]
        if winner not in ("model_a", "model_b", "tie", "tie (bothbad)"):
            raise InputError(
                f"{_where(p, label)} record {i}: winner must be model_a, model_b, tie or 'tie (bothbad)', "
                f"got {winner!r}"
            )
        ca, cb = r["conversation_a"], r["conversation_b"]
        if not (isinstance(ca, list) and isinstance(cb, list) and len(ca) == 2 and len(cb) == 2):
            continue  # multi-turn
        rows.append(
            {
                "input": _content(ca[0]),
                "text_a": _content(ca[1]),
                "text_b": _content(cb[1]),
                "preferred_text": {"model_a": "text_a", "model_b": "text_b"}.get(winner, "tie"),
            }
        )
    if not rows:
        raise InputError(f"{_where(p, label)} holds no single-turn conversation")
    return _validated(rows, p, label)
