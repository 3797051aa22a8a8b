"""``leaderboard``: the leaderboard and its breakdowns from a label file (default: the packaged example labels)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from iclr25_shared.cli import Result, RunContext
from iclr25_shared.inputs import validating
from iclr25_videophy._checks import read_labels_input
from iclr25_videophy._common import _example_labels, _round

if TYPE_CHECKING:
    from iclr25_videophy.cli import LeaderboardConfig


def leaderboard(cfg: LeaderboardConfig, ctx: RunContext) -> Result:
    """Leaderboard and breakdowns from a label file."""
    from iclr25_videophy._aggregate import aggregate, dedupe
    from iclr25_videophy._aggregate import leaderboard as rank

    path = cfg.labels if cfg.labels is not None else _example_labels()
    rows = read_labels_input(path)
    # the label file's rows checked against --mode: conflicting duplicates, missing or out-of-range scores
    with validating(f"--labels {str(path)!r}"):
        unique, dropped = dedupe(rows)
        board = rank(unique, mode=cfg.mode, threshold=cfg.threshold)
    tables = {"leaderboard": _round(board)}
    if cfg.breakdown:
        for key in ("states_of_matter", "complexity"):
            if any(getattr(j, key) not in ("", None) for j in unique):
                tables[f"by_{key}"] = _round(
                    aggregate(
                        unique,
                        mode=cfg.mode,
                        threshold=cfg.threshold,
                        by=("source", key),
                        warn_constant=False,
                    )
                )
    notes = [f"{dropped} duplicated rows dropped"] if dropped else []
    if cfg.labels is None:
        notes.append("default input: the 7 human-labelled example rows of the authors' repository (MIT)")
    return Result(metrics={"videos": len(unique), "labels": str(path)}, tables=tables, notes=notes)
