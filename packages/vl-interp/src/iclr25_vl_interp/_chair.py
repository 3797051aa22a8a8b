"""CHAIR-style hallucination metrics on captions (Rohrbach et al., 2018; used in arXiv:2410.02762, Table 2).

Object mentions are found by whole-word, case-insensitive matching of each object's synonyms (multi-word synonyms
as phrases, longest first, each text span counted once; a trailing ``s``/``es`` plural is accepted). Deviation from
the original CHAIR script: no lemmatiser (``pattern``/``nltk``), so irregular plurals must be listed as synonyms.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["ChairScores", "chair", "mentioned_objects"]


@dataclass(frozen=True)
class ChairScores:
    chair_i: float
    """Hallucinated object mentions / all object mentions (0 when nothing is mentioned)."""
    chair_s: float
    """Captions with at least one hallucinated object / captions."""
    recall: float
    """Ground-truth objects mentioned / ground-truth objects (0 when there are none)."""
    mentions: int
    hallucinated: int


def _patterns(synonyms: Mapping[str, Sequence[str]]) -> list[tuple[re.Pattern[str], str]]:
    pairs = []
    for obj, words in synonyms.items():
        if not isinstance(obj, str) or not obj:
            raise ValueError(f"object names must be non-empty strings, got {obj!r}")
        for w in {obj, *words}:
            w = w.strip().lower()
            if not w:
                raise ValueError(f"object {obj!r} has an empty synonym")
            pairs.append((w, obj))
    pairs.sort(key=lambda p: -len(p[0]))
    return [(re.compile(r"\b" + re.escape(w) + r"(?:e?s)?\b"), obj) for w, obj in pairs]


def mentioned_objects(caption: str, synonyms: Mapping[str, Sequence[str]]) -> list[str]:
    """Canonical objects mentioned in ``caption``, one entry per mention, in text order.

    Args:
        caption: free text.
        synonyms: canonical object -> its other names (the canonical name itself always counts).

    Raises:
        ValueError: an empty object name or synonym; ``caption`` not a string.
    """
    if not isinstance(caption, str):
        raise ValueError(f"caption must be a string, got {type(caption).__name__}")
    text = caption.lower()
    taken = [False] * len(text)
    found: list[tuple[int, str]] = []
    for pat, obj in _patterns(synonyms):
        for m in pat.finditer(text):
            if any(taken[m.start() : m.end()]):
                continue
            taken[m.start() : m.end()] = [True] * (m.end() - m.start())
            found.append((m.start(), obj))
    return [obj for _, obj in sorted(found)]


def chair(
    captions: Sequence[str],
    ground_truth: Sequence[Iterable[str]],
    synonyms: Mapping[str, Sequence[str]],
) -> ChairScores:
    """CHAIR_i, CHAIR_s and recall of captions against ground-truth object sets.

    Mentions are counted once per distinct object per caption (as CHAIR does).

    Args:
        captions: ``(n,)`` captions.
        ground_truth: ``(n,)`` sets of canonical object names present in each image (each a key of ``synonyms``).
        synonyms: canonical object -> other names.

    Raises:
        ValueError: lengths differ, no captions, or a ground-truth object that is not a key of ``synonyms``.
    """
    if len(captions) != len(ground_truth):
        raise ValueError(
            f"captions ({len(captions)}) and ground_truth ({len(ground_truth)}) differ in length"
        )
    if len(captions) == 0:
        raise ValueError("captions is empty")
    mentions = halluc = bad_caps = gt_total = gt_hit = 0
    for k, (cap, gt) in enumerate(zip(captions, ground_truth, strict=True)):
        gt = set(gt)
        unknown = gt - set(synonyms)
        if unknown:
            raise ValueError(f"ground_truth[{k}] names objects not in synonyms: {sorted(unknown)}")
        said = set(mentioned_objects(cap, synonyms))
        wrong = said - gt
        mentions += len(said)
        halluc += len(wrong)
        bad_caps += bool(wrong)
        gt_total += len(gt)
        gt_hit += len(said & gt)
    return ChairScores(
        chair_i=halluc / mentions if mentions else 0.0,
        chair_s=bad_caps / len(captions),
        recall=gt_hit / gt_total if gt_total else 0.0,
        mentions=mentions,
        hallucinated=halluc,
    )
