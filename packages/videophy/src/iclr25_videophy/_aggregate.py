"""SA, PC and joint scores per model: the VideoPhy leaderboard metric (arXiv:2406.03520, human-evaluation leaderboard).

Each (caption, video) pair carries a semantic-adherence score SA and a physical-commonsense score PC. A video
counts for the joint metric when it is both: ``joint = SA ∧ PC``. Scores are aggregated **per prompt first** (a
caption with several videos counts once), then averaged over the prompts of each model (``source``); the
leaderboard reports the three rates in percent.

Modes:

- ``mean`` (the default; the authors' aggregation of judge scores: their official code averages the continuous
  VideoCon-Physics scores, and the maintainers give the same advice in Hritikbansal/videophy#5): average the scores
  themselves; the joint score of a video is ``min(SA, PC)`` (our choice: the authors report SA and PC only for
  continuous scores; ``min`` equals ``SA ∧ PC`` on 0/1 labels and keeps ``joint <= min(SA, PC)`` per model). On
  human labels (0/1) it gives exactly the paper's leaderboard metric, the share of prompts with SA = PC = 1.
- ``threshold`` (an option, for binarised judge scores): each score passes when ``score >= threshold`` (0.5 by
  default), so **a score of exactly the threshold passes** (0.5 counts as SA = 1 / PC = 1);
  ``joint = 1[SA >= t] · 1[PC >= t]``. On 0/1 labels it equals ``mean`` for any ``0 < t <= 1``.
- ``videophy2`` (VideoPhy-2, arXiv:2503.06800): scores are integers 1..5 and ``joint = 1[SA >= 4] · 1[PC >= 4]``.
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from iclr25_shared.checks import check_choice, check_float
from iclr25_videophy._io import Judgement

__all__ = [
    "AGGREGATION_MODES",
    "GROUP_KEYS",
    "ConstantScoresWarning",
    "aggregate",
    "dedupe",
    "leaderboard",
    "rule_summary",
    "warn_if_constant",
]

AGGREGATION_MODES = ("mean", "threshold", "videophy2")
GROUP_KEYS = ("source", "states_of_matter", "complexity")


class ConstantScoresWarning(UserWarning):
    """Every item got the same score: the judge is probably broken (cf. Hritikbansal/videophy#20)."""


def warn_if_constant(scores: Sequence[float], name: str) -> bool:
    """Warn with :class:`ConstantScoresWarning` when ``scores`` (>= 2 finite values) are all equal; return whether
    it warned."""
    x = np.asarray([s for s in scores if not math.isnan(s)], dtype=np.float64)
    if x.size >= 2 and np.all(x == x[0]):
        warnings.warn(
            f"all {x.size} {name} scores equal {x[0]:g}: the evaluator gives one answer to everything, so the "
            "aggregate says nothing about the videos",
            ConstantScoresWarning,
            stacklevel=2,
        )
        return True
    return False


def dedupe(judgements: Iterable[Judgement]) -> tuple[list[Judgement], int]:
    """Drop repeated rows of the same video (the judge script appends, so re-runs duplicate rows).

    Rows are the same video when ``(source, videopath)`` agree. Exact repeats are dropped; repeats whose scores
    or caption disagree are an error, since either could be right.

    Returns:
        ``(unique rows in first-seen order, number dropped)``.

    Raises:
        ValueError: two rows for one video with different caption or scores (the video is named).
    """
    seen: dict[tuple[str, str], Judgement] = {}
    dropped = 0
    for j in judgements:
        key = (j.source, j.videopath)
        old = seen.get(key)
        if old is None:
            seen[key] = j
            continue
        same = old.caption == j.caption and all(
            (math.isnan(a) and math.isnan(b)) or a == b for a, b in ((old.sa, j.sa), (old.pc, j.pc))
        )
        if not same:
            raise ValueError(
                f"video {j.videopath!r} (source {j.source!r}) appears twice with different caption or scores "
                f"(sa {old.sa} vs {j.sa}, pc {old.pc} vs {j.pc}); remove the stale rows"
            )
        dropped += 1
    return list(seen.values()), dropped


def _one(v: float, name: str, j: Judgement, mode: str, threshold: float) -> float:
    if math.isnan(v):
        return math.nan
    if mode == "videophy2":
        if not (v == int(v) and 1 <= v <= 5):
            raise ValueError(
                f"videophy2 mode needs integer scores in 1..5; video {j.videopath!r} has {name}={v:g}"
            )
        return float(v >= 4)
    if not 0.0 <= v <= 1.0:
        raise ValueError(
            f"{mode} mode needs scores in [0, 1]; video {j.videopath!r} has {name}={v:g} "
            "(1..5 scores: use mode='videophy2')"
        )
    return float(v >= threshold) if mode == "threshold" else float(v)


def _per_video(j: Judgement, mode: str, threshold: float) -> tuple[float, float, float]:
    sa = _one(j.sa, "sa", j, mode, threshold)
    pc = _one(j.pc, "pc", j, mode, threshold)
    if math.isnan(sa) or math.isnan(pc):
        return sa, pc, math.nan
    return sa, pc, (min(sa, pc) if mode == "mean" else sa * pc)


@dataclass(frozen=True)
class _Acc:
    sa: float
    pc: float
    joint: float


def aggregate(
    judgements: Iterable[Judgement],
    *,
    mode: str = "mean",
    threshold: float = 0.5,
    by: Sequence[str] = ("source",),
    warn_constant: bool = True,
) -> list[dict[str, Any]]:
    """SA, PC and joint rates (percent) per group, averaged per prompt first.

    Args:
        judgements: per-video scores. A task that is nan in every row (not scored) gives nan for its rate and for
            joint; a task scored for some videos but not others is an error.
        mode: ``mean`` (default: the authors' average of the scores; on 0/1 human labels the paper's metric),
            ``threshold`` (binarise first) or ``videophy2`` (module doc).
        threshold: binarisation threshold of ``threshold`` mode, in ``[0, 1]``; a score equal to it passes
            (``score >= threshold``). Ignored by the other modes.
        by: grouping keys, a subset of ``("source", "states_of_matter", "complexity")``; ``()`` = one overall row.
        warn_constant: warn (:class:`ConstantScoresWarning`) when all SA or all PC scores are equal.

    Returns:
        One dict per group, sorted by the group keys: the keys' values, ``joint``, ``sa``, ``pc`` (percent),
        ``n_prompts``, ``n_videos``. Per group ``joint <= min(sa, pc)``.

    Raises:
        ValueError: unknown mode/key; threshold outside [0, 1]; no rows; a missing score; scores out of range for
            the mode; duplicate videos with conflicting scores (:func:`dedupe`).
    """
    check_choice("mode", mode, AGGREGATION_MODES)
    check_float("threshold", threshold, low=0.0, high=1.0)
    for key in by:
        check_choice("by", key, GROUP_KEYS)
    rows, _ = dedupe(judgements)
    if not rows:
        raise ValueError("no judgements to aggregate (empty input)")
    # a task may be absent altogether (e.g. no SA evaluator): its rate and the joint rate are then nan
    absent = {t: all(math.isnan(getattr(j, t)) for j in rows) for t in ("sa", "pc")}
    for j in rows:
        for t in ("sa", "pc"):
            if math.isnan(getattr(j, t)) and not absent[t]:
                raise ValueError(f"video {j.videopath!r} lacks a {t.upper()} score (other videos have one)")
    if warn_constant:
        for t in ("sa", "pc"):
            if not absent[t]:
                warn_if_constant([getattr(j, t) for j in rows], t.upper())
    # per (group, prompt): mean over that prompt's videos
    per_prompt: dict[tuple[Any, ...], dict[str, list[_Acc]]] = defaultdict(lambda: defaultdict(list))
    for j in rows:
        group = tuple(getattr(j, k) for k in by)
        per_prompt[group][j.caption].append(_Acc(*_per_video(j, mode, threshold)))
    out = []
    for group in sorted(per_prompt, key=lambda g: tuple((v is None, "" if v is None else v) for v in g)):
        prompts = per_prompt[group]
        means = np.array(
            [
                [np.mean([getattr(a, f) for a in accs]) for f in ("joint", "sa", "pc")]
                for accs in prompts.values()
            ]
        )
        avg = means.mean(axis=0) * 100.0
        row: dict[str, Any] = dict(zip(by, group))
        row.update(
            joint=float(avg[0]),
            sa=float(avg[1]),
            pc=float(avg[2]),
            n_prompts=len(prompts),
            n_videos=sum(len(a) for a in prompts.values()),
        )
        out.append(row)
    return out


def leaderboard(judgements: Iterable[Judgement], **kwargs: Any) -> list[dict[str, Any]]:
    """:func:`aggregate` by ``source``, ranked by joint (then SA, then PC, descending; ties by name), with a
    ``rank`` column (1 = best). Keyword arguments go to :func:`aggregate` (``by`` is fixed)."""
    if "by" in kwargs:
        raise TypeError("leaderboard() groups by source; use aggregate(by=...) for other groupings")
    rows = aggregate(judgements, by=("source",), **kwargs)

    def desc(v: float) -> float:  # descending, nan (task not scored) last
        return math.inf if math.isnan(v) else -v

    rows.sort(key=lambda r: (desc(r["joint"]), desc(r["sa"]), desc(r["pc"]), r["source"]))
    return [{"rank": i + 1, **r} for i, r in enumerate(rows)]


RULE_LABELS = (0, 1, 2)
"""VideoPhy-2's per-rule labels (the semantics of each value are VideoPhy-2's, arXiv:2503.06800)."""


def rule_summary(rows: Iterable[tuple[str, str, float]]) -> dict[str, Any]:
    """Per-rule label counts of VideoPhy-2's physical-rule grounding, kept apart from the joint score.

    Each video carries a list of rules, each with a label in ``{0, 1, 2}``; they are counted per label, both per rule
    occurrence and per video (a video contributes the fraction of its rules with each label, so a video with many
    rules does not outweigh one with few). The joint SA/PC score never reads these (Hritikbansal/videophy#10).

    Args:
        rows: ``(videopath, rule, label)``; exact repeats (append-mode outputs) are dropped.

    Returns:
        ``{"n_rules", "n_videos", "per_rule": {label: fraction}, "per_video": {label: mean fraction}}``.

    Raises:
        ValueError: no rows; a label outside ``{0, 1, 2}``; one (video, rule) with two different labels.
    """
    seen: dict[tuple[str, str], int] = {}
    for video, rule, label in rows:
        if label not in RULE_LABELS or int(label) != label:
            raise ValueError(f"rule labels must be 0, 1 or 2; video {video!r} rule {rule!r} has {label!r}")
        key = (video, rule)
        if key in seen and seen[key] != int(label):
            raise ValueError(f"video {video!r} rule {rule!r} has two labels ({seen[key]} and {int(label)})")
        seen[key] = int(label)
    if not seen:
        raise ValueError("no rule labels to summarise (empty input)")
    by_video: dict[str, list[int]] = defaultdict(list)
    for (video, _), label in seen.items():
        by_video[video].append(label)
    labels = np.array(list(seen.values()))
    return {
        "n_rules": len(seen),
        "n_videos": len(by_video),
        "per_rule": {k: float((labels == k).mean()) for k in RULE_LABELS},
        "per_video": {
            k: float(np.mean([np.mean(np.array(v) == k) for v in by_video.values()])) for k in RULE_LABELS
        },
    }
