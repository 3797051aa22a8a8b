"""The evaluation of generalized category discovery: All / Old / New accuracy under one Hungarian assignment.

GCD papers (Vaze et al. 2022, arXiv:2201.02609, Section 4; SimGCD arXiv:2211.11727; DebGCD arXiv:2504.04804,
Section 4.1) score the unlabelled training images transductively: the predicted cluster ids are matched to the
true classes by ONE optimal one-to-one assignment over all classes (the Hungarian algorithm), then the matched
accuracy is split into the images whose true class is an "Old" (labelled) class and those of a "New" class.
Old/New therefore can differ from matching each subset on its own; that is deliberate ("v2" in the GCD code).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from iclr25_shared.checks import check_shape

__all__ = ["GCDAccuracy", "gcd_accuracy", "known_vs_new_auroc"]


@dataclass(frozen=True)
class GCDAccuracy:
    """All / Old / New accuracy in [0, 1]. ``old`` (``new``) is NaN when no image of an Old (New) class exists."""

    all: float
    old: float
    new: float
    mapping: dict[int, int]
    """true class -> the predicted cluster id it is matched to (classes with no cluster left are absent)."""

    def as_dict(self) -> dict[str, float]:
        return {"all": self.all, "old": self.old, "new": self.new}


def _labels(name: str, values: object) -> np.ndarray:
    arr = np.asarray(values)
    check_shape(name, arr, ("n",))
    if (arr.size and not np.issubdtype(arr.dtype, np.integer)) and (
        not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr))
    ):
        raise ValueError(f"{name} must hold non-negative integer ids, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size and arr.min() < 0:
        raise ValueError(f"{name} must hold non-negative integer ids, got {int(arr.min())}")
    return arr


def gcd_accuracy(y_true: object, y_pred: object, old_classes: Iterable[int]) -> GCDAccuracy:
    """All / Old / New clustering accuracy with one Hungarian assignment over all classes.

    Builds the contingency matrix ``w[c, t]`` = number of images of true class ``t`` predicted as cluster ``c``
    (size ``D × D`` with ``D = max(y_pred, y_true) + 1``, so more clusters than classes is allowed), finds the
    one-to-one map ``t -> c`` maximising the matched total (``scipy.optimize.linear_sum_assignment``), and reports
    ``All = Σ_t w[map(t), t] / N``, ``Old = Σ_{t ∈ old} w[map(t), t] / N_old``, ``New`` likewise over the other
    classes.

    Args:
        y_true: ``(n,)`` non-negative integer true class ids.
        y_pred: ``(n,)`` non-negative integer cluster ids (any labelling; only the partition matters).
        old_classes: the true class ids that count as "Old" (labelled classes); ids absent from ``y_true`` are
            allowed (they contribute nothing).

    Returns:
        :class:`GCDAccuracy`; ``old`` / ``new`` are NaN when the subset is empty.

    Raises:
        ValueError: shapes differ, are not 1-D or are empty; ids negative or not integers.

    References:
        Vaze et al., "Generalized Category Discovery", CVPR 2022, arXiv:2201.02609, Section 4 (metric);
        Liu & Han, DebGCD, ICLR 2025, arXiv:2504.04804, Section 4.1 (the same protocol).
    """
    from scipy.optimize import linear_sum_assignment

    t = _labels("y_true", y_true)
    p = _labels("y_pred", y_pred)
    if t.shape != p.shape:
        raise ValueError(f"y_true and y_pred must have the same length, got {t.shape[0]} and {p.shape[0]}")
    if t.size == 0:
        raise ValueError("y_true must not be empty")
    old = np.asarray(sorted({int(c) for c in old_classes}), np.int64)
    size = int(max(t.max(), p.max())) + 1
    w = np.zeros((size, size), np.int64)
    np.add.at(w, (p, t), 1)
    rows, cols = linear_sum_assignment(w, maximize=True)
    mapping = {int(c): int(r) for r, c in zip(rows, cols, strict=True)}
    hit = np.zeros(size, np.int64)  # matched count per true class
    hit[cols] = w[rows, cols]
    count = np.bincount(t, minlength=size)
    is_old = np.zeros(size, bool)
    is_old[old[old < size]] = True
    n_old, n_new = count[is_old].sum(), count[~is_old].sum()
    return GCDAccuracy(
        all=float(hit.sum() / t.size),
        old=float(hit[is_old].sum() / n_old) if n_old else float("nan"),
        new=float(hit[~is_old].sum() / n_new) if n_new else float("nan"),
        mapping={c: mapping[c] for c in np.unique(t).tolist()},
    )


def known_vs_new_auroc(unknown_score: object, is_new: object) -> float:
    """AUROC of an unknown-class score for telling New-class images (positives) from Old-class ones.

    Args:
        unknown_score: ``(n,)`` finite floats; higher means "more likely New".
        is_new: ``(n,)`` bools, True for images of a New class.

    Returns:
        The area under the ROC curve (``sklearn.metrics.roc_auc_score``); NaN when only one group is present.

    Raises:
        ValueError: shapes differ or scores are not finite.
    """
    from sklearn.metrics import roc_auc_score

    from iclr25_shared.checks import check_finite

    s = np.asarray(unknown_score, np.float64)
    y = np.asarray(is_new, bool)
    check_shape("unknown_score", s, ("n",), bind={"n": y.shape[0]} if y.ndim == 1 else None)
    check_finite("unknown_score", s)
    if y.all() or not y.any():
        return float("nan")
    return float(roc_auc_score(y, s))
