"""README tables rendered from committed results files (issue 41: "numbers are files").

A table in a Markdown file is tied to its source by two comments; the rows between them are generated::

    <!-- results: results/bench/results.json tables.bench columns=arm,median_s,speedup_vs_sd,interval -->
    | arm | median_s | ... |
    |---|---|---|
    | ... |
    <!-- /results -->

The path is relative to the Markdown file. The selector is ``tables.<name>`` (a list of rows) or ``metrics`` (one
row per key: ``key | value``); ``columns=`` picks and orders columns (default: the first row's keys); ``where=col:value``
keeps the rows whose column equals the value (repeatable). The spec is split like a shell line, so a table name with
spaces is quoted: ``tables."G-set at equal time"``. Floats are written with 4 significant digits, JSON null (or a
non-finite number stored as a string) as ``n/a``.

A single number in a sentence (a headline) is tied to its file the same way, inline::

    LOZO beats MeZO by <!-- value: results/reproduce-quick/results.json tables.comparisons[name=LOZO - MeZO].mean_difference fmt=+.2f -->+1.18<!-- /value --> points

The path is ``wall_s``, ``metrics.<key>[.<sub>...]`` (nested records) or ``tables.<name>[<i> | <col>=<value>].<column>``; ``fmt=`` is a Python format spec
(default ``.4g``).

A table outside a results block whose rows hold numbers (decimals, percentages, ratios, numbers of three or more
digits; code in backticks and ``value`` spans excepted) fails the check unless the line above its header says why it is not a result::

    <!-- static table: test tolerances -->
    | test | tolerance |

(for tolerances, presets, API references, a paper's reported numbers).

    python tools/results_tables.py --write [FILE ...]   # re-render the tables from their files
    python tools/results_tables.py --check [FILE ...]   # exit 1 naming every table that differs or has no source

Default files: README.md, docs/*.md and packages/*/README.md. ``nox -s lint`` runs ``--check``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(<!-- results: (?P<spec>[^>]*?) -->\n)(?P<body>.*?)(<!-- /results -->)", re.DOTALL)
VALUE = re.compile(r"(<!-- value: (?P<spec>[^>]*?) -->)(?P<body>[^<\n]*)(<!-- /value -->)")
INDEX = re.compile(r"^tables\.(?P<name>.+?)\[(?P<key>[^\]]+)\]\.(?P<column>[^.\[\]]+)$")


def default_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(ROOT.glob("docs/*.md")), *sorted(ROOT.glob("packages/*/README.md"))]


def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return "n/a" if not math.isfinite(value) else f"{value:.4g}"
    if isinstance(value, str) and value.lower() in ("nan", "inf", "-inf"):
        return "n/a"
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True)
    return str(value).replace("|", "\\|")


def render(spec: str, base: Path) -> str:
    """The Markdown table the block's ``spec`` names, read from its file.

    Raises:
        ValueError: a malformed spec, a missing file or key, or rows without the named columns.
    """
    words = shlex.split(spec)
    if len(words) < 2:
        raise ValueError(f"results block {spec!r}: need '<file> <selector> [columns=a,b] [where=col:value]'")
    path, selector = base / words[0], words[1]
    options = dict(w.split("=", 1) for w in words[2:] if "=" in w and not w.startswith("where="))
    wheres = [w.removeprefix("where=").split(":", 1) for w in words[2:] if w.startswith("where=")]
    if any(len(w) != 2 for w in wheres):
        raise ValueError(f"results block {spec!r}: where= needs 'column:value'")
    data = _load(path, spec)
    if selector == "metrics":
        rows = [{"metric": k, "value": v} for k, v in data.get("metrics", {}).items()]
    elif selector.startswith("tables."):
        rows = data.get("tables", {}).get(selector.removeprefix("tables."))
        if not isinstance(rows, list) or not rows:
            raise ValueError(f"results block {spec!r}: {path} has no non-empty table {selector!r}")
    else:
        raise ValueError(f"results block {spec!r}: selector must be 'metrics' or 'tables.<name>'")
    for column, value in wheres:
        rows = [row for row in rows if _cell(row.get(column)) == value]
    if not rows:
        raise ValueError(f"results block {spec!r}: no row of {path} matches {wheres}")
    # a comma inside a column name is written "\," in a double-quoted word (shlex keeps the backslash there)
    columns = (
        [c.replace("\\,", ",") for c in re.split(r"(?<!\\),", options["columns"])]
        if "columns" in options
        else list(rows[0])
    )
    missing = sorted({c for row in rows for c in columns if c not in row})
    if missing:
        raise ValueError(f"results block {spec!r}: rows of {path} lack column(s) {', '.join(missing)}")
    lines = ["| " + " | ".join(_cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row[c]) for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _load(path: Path, spec: str) -> dict[str, Any]:
    if not path.is_file():
        raise ValueError(f"results block {spec!r}: no file {path}")
    return json.loads(path.read_text())


def lookup(data: dict[str, Any], selector: str, spec: str) -> Any:
    """The one value ``metrics.<key>`` or ``tables.<name>[<i> | <col>=<value>].<column>`` names.

    Raises:
        ValueError: a malformed selector, or nothing (or more than one row) where it points.
    """
    if selector == "wall_s":
        if "wall_s" not in data:
            raise ValueError(f"value {spec!r}: the file records no wall_s")
        return data["wall_s"]
    if selector.startswith("metrics."):
        key = selector.removeprefix("metrics.")
        metrics = data.get("metrics", {})
        if key in metrics:
            return metrics[key]
        node: Any = metrics
        for part in key.split("."):  # a nested record: metrics.<key>.<sub>...
            if not isinstance(node, dict) or part not in node:
                raise ValueError(f"value {spec!r}: no metric {key!r}")
            node = node[part]
        return node
    match = INDEX.match(selector)
    if match is None:
        raise ValueError(
            f"value {spec!r}: selector must be 'metrics.<key>' or 'tables.<name>[i|col=value].<column>'"
        )
    rows = data.get("tables", {}).get(match["name"])
    if not isinstance(rows, list):
        raise ValueError(f"value {spec!r}: no table {match['name']!r}")
    key = match["key"]
    if key.lstrip("-").isdigit():
        picked = rows[int(key) : int(key) + 1] if int(key) >= 0 else rows[int(key) :][:1]
    else:
        column, _, value = key.partition("=")
        picked = [row for row in rows if _cell(row.get(column)) == value]
    if len(picked) != 1 or match["column"] not in picked[0]:
        raise ValueError(
            f"value {spec!r}: {len(picked)} rows match [{key}] (need one, with {match['column']!r})"
        )
    return picked[0][match["column"]]


def render_value(spec: str, base: Path) -> str:
    """The inline number a ``<!-- value: FILE PATH [fmt=SPEC] -->`` block names, formatted."""
    words = shlex.split(spec)
    if len(words) < 2:
        raise ValueError(f"value {spec!r}: need '<file> <path> [fmt=SPEC]'")
    options = dict(w.split("=", 1) for w in words[2:] if "=" in w)
    value = lookup(_load(base / words[0], spec), words[1], spec)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "n/a" if not math.isfinite(value) else format(value, options.get("fmt", ".4g"))
    return _cell(value)


NUMBER = re.compile(r"\d+\.\d+|\d+\s?%|\d\s?×|\d{3}")
STATIC = re.compile(r"^<!-- static table: \S.*-->$")


def unsourced_tables(text: str) -> list[tuple[int, str]]:
    """(line number, row) of the first numeric row of each table outside a results block with no static marker."""
    lines = text.splitlines()
    found: list[tuple[int, str]] = []
    inside = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("<!-- results:"):
            inside = True
        elif line.startswith("<!-- /results"):
            inside = False
        is_header = line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|\s*:?-", lines[i + 1])
        if inside or not is_header:
            i += 1
            continue
        marked = i > 0 and STATIC.match(lines[i - 1].strip()) is not None
        j = i + 2
        while j < len(lines) and lines[j].startswith("|"):
            row = re.sub(r"`[^`]*`", "", VALUE.sub("", lines[j]))  # code and rendered values are not at issue
            cells = row.split("|")[2:]  # the first column names the row
            if not marked and any(NUMBER.search(c) for c in cells) and all(f[0] != i + 1 for f in found):
                found.append((i + 1, lines[j]))
            j += 1
        i = j
    return found


def process(path: Path, *, write: bool) -> list[str]:
    """Re-render (``write``) or check every results block of one Markdown file; returns the problems found."""
    text = path.read_text()
    problems: list[str] = []

    def replace(match: re.Match[str]) -> str:
        try:
            table = render(match["spec"].strip(), path.parent)
        except (ValueError, json.JSONDecodeError) as exc:
            problems.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {exc}")
            return match.group(0)
        if table != match["body"] and not write:
            where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            problems.append(
                f"{where}: the table of '{match['spec'].strip()}' differs from its file (run --write)"
            )
        return match.group(1) + table + match.group(4)

    def replace_value(match: re.Match[str]) -> str:
        try:
            value = render_value(match["spec"].strip(), path.parent)
        except (ValueError, json.JSONDecodeError) as exc:
            problems.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {exc}")
            return match.group(0)
        if value != match["body"] and not write:
            where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            problems.append(
                f"{where}: the value of '{match['spec'].strip()}' is {value}, the text says {match['body']}"
            )
        return match.group(1) + value + match.group(4)

    new = VALUE.sub(replace_value, BLOCK.sub(replace, text))
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    for line, row in unsourced_tables(new):
        problems.append(
            f"{where}:{line}: a table with numbers and no source ({row[:60].strip()}...): render it from a "
            "results file, or mark it '<!-- static table: <why> -->' above its header"
        )
    if write and new != text:
        path.write_text(new)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    parser.add_argument("files", nargs="*", type=Path)
    args = parser.parse_args(argv)
    problems = []
    for path in [p.resolve() for p in args.files] or default_files():
        problems += process(path, write=args.write)
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
