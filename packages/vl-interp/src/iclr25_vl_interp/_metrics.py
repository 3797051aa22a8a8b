"""Evaluation functions of the offline reproduction: AUROC, localisation accuracy, word spans in generated tokens and
removal / retention counts of an edit. Plain numpy / Python, tested against brute force."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["auroc", "localisation_hits", "removal_counts", "word_first_token_prob"]


def auroc(positive: Sequence[float] | np.ndarray, negative: Sequence[float] | np.ndarray) -> float:
    """Area under the ROC curve of scores that should be higher for ``positive`` than for ``negative``.

    Equals ``P(s_pos > s_neg) + P(s_pos = s_neg) / 2`` over all pairs (the Mann-Whitney statistic), computed with
    average ranks (``scipy.stats.rankdata``) in ``O(n log n)``.

    Raises:
        ValueError: an empty group or a non-finite score.
    """
    pos = np.asarray(positive, np.float64).ravel()
    neg = np.asarray(negative, np.float64).ravel()
    if pos.size == 0 or neg.size == 0:
        raise ValueError(
            f"auroc needs both groups non-empty, got {pos.size} positive and {neg.size} negative"
        )
    if not (np.isfinite(pos).all() and np.isfinite(neg).all()):
        raise ValueError("auroc scores must be finite")
    from scipy.stats import rankdata

    ranks = rankdata(np.concatenate([pos, neg]), method="average")
    u = ranks[: pos.size].sum() - pos.size * (pos.size + 1) / 2
    return float(u / (pos.size * neg.size))


def localisation_hits(grid_maps: np.ndarray, cells: np.ndarray) -> tuple[int, int]:
    """How many objects have their map's argmax cell at their true cell.

    Args:
        grid_maps: ``(objects, rows * cols)`` map of each object (raster order).
        cells: ``(objects,)`` true cell index of each object in ``[0, rows * cols)``.

    Returns:
        ``(hits, objects)``.
    """
    grid_maps = np.asarray(grid_maps)
    cells = np.asarray(cells)
    if grid_maps.ndim != 2 or cells.shape != (grid_maps.shape[0],):
        raise ValueError(
            f"grid_maps must be (objects, cells) and cells (objects,), got {grid_maps.shape}, {cells.shape}"
        )
    return int((grid_maps.argmax(axis=1) == cells).sum()), int(cells.size)


def word_first_token_prob(
    tokens: Sequence[int], probs: Sequence[float], word_ids: Sequence[int]
) -> float | None:
    """Output probability of a word in a generated sequence: the probability of its first token at the first place
    where the word's full token sequence occurs; ``None`` if it does not occur."""
    w = list(word_ids)
    for i in range(len(tokens) - len(w) + 1):
        if list(tokens[i : i + len(w)]) == w:
            return float(probs[i])
    return None


def removal_counts(
    targets: Sequence[set[str]], keep: Sequence[set[str]], after: Sequence[set[str]]
) -> dict[str, int]:
    """Counts for an edit: targeted words removed, and words to keep that are still mentioned.

    Args:
        targets: per caption, the words the edit should remove (mentioned before the edit).
        keep: per caption, the words that should stay (correct mentions before the edit).
        after: per caption, the words mentioned after the edit.

    Returns:
        ``{"targets", "removed", "kept_total", "kept"}``.
    """
    if not len(targets) == len(keep) == len(after):
        raise ValueError(
            f"targets, keep and after differ in length: {len(targets)}, {len(keep)}, {len(after)}"
        )
    out = {"targets": 0, "removed": 0, "kept_total": 0, "kept": 0}
    for t, k, a in zip(targets, keep, after, strict=True):
        out["targets"] += len(t)
        out["removed"] += len(t - a)
        out["kept_total"] += len(k)
        out["kept"] += len(k & a)
    return out
