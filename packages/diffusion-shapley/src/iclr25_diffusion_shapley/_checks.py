"""Light constants and checks the CLI configs validate against (no heavy import)."""

from __future__ import annotations

__all__ = ["FIVE_PAIRS", "PROPERTIES", "check_contributors"]

FIVE_PAIRS = ("0,1", "2,3", "4,5", "6,7", "8,9")
PROPERTIES = ("entropy", "fid", "diversity", *(f"share:{c}" for c in range(10)))


def check_contributors(groups: tuple[str, ...]) -> None:
    """Refuse fewer than 2 contributors, an empty group (a contributor with no data), bad or repeated classes."""
    if len(groups) < 2:
        raise ValueError(
            f"contributors must name at least 2 groups of classes, got {len(groups)}: {list(groups)}"
        )
    seen: dict[int, int] = {}
    for j, spec in enumerate(groups):
        parts = [p.strip() for p in str(spec).split(",") if p.strip()]
        if not parts:
            raise ValueError(f"contributors: contributor {j} ({spec!r}) has no classes, so no data")
        for p in parts:
            if not p.isdigit() or not 0 <= int(p) <= 9:
                raise ValueError(f"contributors: class {p!r} of contributor {j} must be an integer in [0, 9]")
            if int(p) in seen:
                raise ValueError(
                    f"contributors: class {p} is in contributor {seen[int(p)]} and contributor {j}"
                )
            seen[int(p)] = j
