"""Does a fresh run reproduce the committed results? (issue 41; the ``verify(<slug>)`` nox session).

A package declares in its ``pyproject.toml``::

    [tool.iclr25.verify]
    reproduce = ["reproduce", "--size", "quick"]     # argv after iclr25-<slug>
    committed = "results/reproduce-quick"            # the committed folder that command wrote
    deterministic = false                            # true: every metric must match bit for bit on this machine

The comparison rows come from ``iclr25_shared.stats.compare`` (``role``, ``mean_difference``, ``low``, ``high``) in
any table of ``results.json``. A fresh run passes when its primary comparison's mean difference lies inside the
committed primary interval (and, when ``deterministic``, when every metric and table is identical).

    python tools/verify_results.py COMMITTED/results.json FRESH/results.json [--deterministic]
    python tools/verify_results.py --sessions     # the verify(<slug>) sessions, as JSON (CI's weekly matrix)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def primary_row(results: dict[str, Any], where: str) -> dict[str, Any]:
    """The one row with ``role == "primary"`` among the tables of a results.json.

    Raises:
        ValueError: none, or more than one.
    """
    rows = [
        row
        for table in results.get("tables", {}).values()
        if isinstance(table, list)
        for row in table
        if isinstance(row, dict) and row.get("role") == "primary"
    ]
    if len(rows) != 1:
        raise ValueError(
            f"{where}: expected one primary comparison (a row with role 'primary'), found {len(rows)}"
        )
    return rows[0]


def verify(committed: dict[str, Any], fresh: dict[str, Any], *, deterministic: bool) -> list[str]:
    """The reasons the fresh run does not reproduce the committed one (empty: it does)."""
    problems = []
    if deterministic:
        for key in ("metrics", "tables"):
            if committed.get(key) != fresh.get(key):
                problems.append(
                    f"{key} differ from the committed run (the package promises bit-identical reruns)"
                )
    old, new = primary_row(committed, "committed"), primary_row(fresh, "fresh")
    if old.get("name") != new.get("name"):
        problems.append(f"the primary comparison changed: {old.get('name')!r} -> {new.get('name')!r}")
    low, high, value = old.get("low"), old.get("high"), new.get("mean_difference")
    if low is None or high is None or value is None:
        problems.append(
            f"the primary comparison has no finite interval or value (committed [{low}, {high}], fresh {value})"
        )
    elif not low <= value <= high:
        problems.append(
            f"primary {new.get('name')!r}: fresh mean difference {value:.6g} is outside the committed interval "
            f"[{low:.6g}, {high:.6g}]"
        )
    return problems


ROOT = Path(__file__).resolve().parent.parent


def sessions(root: Path = ROOT) -> list[str]:
    """``verify(<slug>)`` for every package whose pyproject.toml declares ``[tool.iclr25.verify]``."""
    import tomllib

    return [
        f"verify({path.parent.name})"
        for path in sorted(root.glob("packages/*/pyproject.toml"))
        if "verify" in tomllib.loads(path.read_text()).get("tool", {}).get("iclr25", {})
    ]


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv == ["--sessions"]:
        print(json.dumps(sessions()))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("committed", type=Path)
    parser.add_argument("fresh", type=Path)
    parser.add_argument("--deterministic", action="store_true")
    args = parser.parse_args(argv)
    try:
        committed = json.loads(args.committed.read_text())
        fresh = json.loads(args.fresh.read_text())
        problems = verify(committed, fresh, deterministic=args.deterministic)
    except (OSError, ValueError) as exc:
        print(f"verify_results: {exc}", file=sys.stderr)
        return 2
    for line in problems:
        print(f"verify_results: {line}", file=sys.stderr)
    if not problems:
        print(f"verify_results: the fresh run reproduces {args.committed}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
