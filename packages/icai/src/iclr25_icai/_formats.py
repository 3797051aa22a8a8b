"""Readers that turn preference files into ICAI's pairs table (``input``, ``text_a``, ``text_b``,
``preferred_text``).

- :func:`read_pairs`: the package's own format (CSV, JSON lines, JSON records or Parquet with those columns).
- :func:`read_alpacaeval`: AlpacaEval / AlpacaFarm annotation records (``instruction``, ``output_1``,
  ``output_2``, ``preference`` 1 or 2; 1.5 and 0 are ties).
- :func:`read_arena`: Chatbot Arena conversation records (``conversation_a``/``conversation_b`` message lists,
  ``winner`` = ``model_a``/``model_b``/``tie``/``tie (bothbad)``); single-turn conversations only.

Each returns a validated table (ties dropped) or raises ``ValueError`` naming the file and the problem.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iclr25_icai._icai import validate_pairs

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["read_alpacaeval", "read_arena", "read_pairs"]


def _path(path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"data file {str(p)!r} does not exist or is not a file")
    return p


def _records(p: Path) -> list[dict[str, Any]]:
    text = p.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except ValueError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as exc:
            raise ValueError(f"{str(p)!r} is neither JSON nor JSON lines: {exc}") from exc
    if isinstance(data, dict):
        data = data.get("data", data.get("rows", [data]))
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise ValueError(f"{str(p)!r} must hold a list of JSON objects")
    return data


def read_pairs(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a pairs file by its suffix: ``.csv``, ``.jsonl``/``.json``, ``.parquet``.

    Raises:
        ValueError: missing file, unknown suffix, unreadable file, or a table :func:`validate_pairs` refuses.
    """
    import pandas as pd

    p = _path(path)
    suffix = p.suffix.lower()
    try:
        if suffix == ".csv":
            df = pd.read_csv(p, keep_default_na=False, na_values=[""])
        elif suffix in (".jsonl", ".json"):
            df = pd.DataFrame(_records(p))
        elif suffix == ".parquet":
            df = pd.read_parquet(p)
        else:
            raise ValueError(f"data file suffix must be .csv, .json, .jsonl or .parquet, got {suffix!r}")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ValueError(f"could not read {str(p)!r}: {exc}") from exc
    try:
        return validate_pairs(df)
    except ValueError as exc:
        raise ValueError(f"{str(p)!r}: {exc}") from exc


def read_alpacaeval(path: str | os.PathLike[str]) -> pd.DataFrame:
    """AlpacaEval / AlpacaFarm annotations (JSON list or JSON lines) as a pairs table.

    ``preference`` 1 → ``text_a`` (``output_1``), 2 → ``text_b`` (``output_2``); 1.5 or 0 (ties) are dropped.

    Raises:
        ValueError: missing fields (named), a preference outside {0, 1, 1.5, 2}, or no non-tie record.
    """
    import pandas as pd

    p = _path(path)
    rows = []
    for i, r in enumerate(_records(p)):
        missing = [k for k in ("instruction", "output_1", "output_2", "preference") if k not in r]
        if missing:
            raise ValueError(f"{str(p)!r} record {i} lacks {missing} (AlpacaEval annotations need them)")
        pref = r["preference"]
        if pref not in (0, 1, 1.5, 2) or isinstance(pref, bool):
            raise ValueError(
                f"{str(p)!r} record {i}: preference must be 1, 2 (or 1.5/0 for a tie), got {pref!r}"
            )
        label = {1: "text_a", 2: "text_b"}.get(pref, "tie")
        rows.append(
            {
                "input": r["instruction"],
                "text_a": r["output_1"],
                "text_b": r["output_2"],
                "preferred_text": label,
            }
        )
    return validate_pairs(pd.DataFrame(rows, columns=["input", "text_a", "text_b", "preferred_text"]))


def _content(message: Any) -> str:
    return str(message.get("content", "")) if isinstance(message, dict) else ""


def read_arena(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Chatbot Arena conversations (JSON list or JSON lines) as a pairs table.

    Keeps single-turn conversations (one user message and one assistant reply per side); ``input`` is the user
    message, ``text_a``/``text_b`` the replies of ``model_a``/``model_b``; ``winner`` ties are dropped.

    Raises:
        ValueError: missing fields (named), an unknown ``winner``, or nothing left.
    """
    import pandas as pd

    p = _path(path)
    rows = []
    for i, r in enumerate(_records(p)):
        missing = [k for k in ("conversation_a", "conversation_b", "winner") if k not in r]
        if missing:
            raise ValueError(f"{str(p)!r} record {i} lacks {missing} (Chatbot Arena records need them)")
        winner = r["winner"]
        if winner not in ("model_a", "model_b", "tie", "tie (bothbad)"):
            raise ValueError(
                f"{str(p)!r} record {i}: winner must be model_a, model_b, tie or 'tie (bothbad)', got {winner!r}"
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
        raise ValueError(f"{str(p)!r} holds no single-turn conversation")
    return validate_pairs(pd.DataFrame(rows, columns=["input", "text_a", "text_b", "preferred_text"]))
