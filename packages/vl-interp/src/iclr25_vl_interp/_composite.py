"""Multi-object composites of Fashion-MNIST items with list captions, for the offline reproduction.

Each composite is a ``rows x cols`` grid of ``cell x cell`` pixel cells; 2-4 distinct Fashion-MNIST classes are placed
in distinct random cells (the rest stay black). The caption lists the classes present in class order, e.g.
``" dress, bag, boot"``. A *co-occurrence bias* (used for the training split only) adds the partner of a trigger
class (e.g. a boot whenever a bag is drawn) with probability ``bias``, so that a model trained on it learns to
mention the partner when it sees the trigger: the hallucinations that ProjectAway (arXiv:2410.02762, Sec. 5) is meant
to remove. Held-out composites are drawn without the bias, so triggers often appear without their partners.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from iclr25_shared.checks import check_float, check_int

__all__ = ["CLASS_WORDS", "COOCCURRENCE", "Composites", "caption_of", "make_composites"]

CLASS_WORDS: tuple[str, ...] = (
    "top",
    "trousers",
    "sweater",
    "dress",
    "coat",
    "sandal",
    "shirt",
    "sneaker",
    "bag",
    "boot",
)
"""Caption word of each Fashion-MNIST class 0..9 (T-shirt/top, Trouser, Pullover, Dress, Coat, Sandal, Shirt,
Sneaker, Bag, Ankle boot); "sweater", "sandal" and "sneaker" are two tokens in SmolLM2's vocabulary."""

COOCCURRENCE: dict[int, int] = {8: 9, 3: 5, 4: 1}
"""Training-time co-occurrence bias, trigger class -> partner class: bag -> boot, dress -> sandal, coat -> trousers."""


@dataclass(frozen=True)
class Composites:
    """A set of composites.

    Attributes:
        images: ``(n, rows * cell, cols * cell)`` uint8.
        classes: ``(n, rows * cols)`` int64: the class in each cell (raster order), ``-1`` for an empty cell.
        captions: ``(n,)`` caption strings (class words in class order, comma separated, leading space).
    """

    images: np.ndarray
    classes: np.ndarray
    captions: list[str]

    def present(self, k: int) -> set[int]:
        """Classes present in composite ``k``."""
        return {int(c) for c in self.classes[k] if c >= 0}

    def __len__(self) -> int:
        return len(self.captions)


def caption_of(classes: Sequence[int] | set[int], words: Sequence[str] = CLASS_WORDS) -> str:
    """Caption of a set of classes: their words in class order, ``", "``-separated, with a leading space.

    Raises:
        ValueError: no class, or a class outside ``[0, len(words))``.
    """
    cls = sorted({int(c) for c in classes})
    if not cls:
        raise ValueError("a caption needs at least one class")
    for c in cls:
        check_int("class", c, low=0, high=len(words) - 1)
    return " " + ", ".join(words[c] for c in cls)


def make_composites(
    items: np.ndarray,
    labels: np.ndarray,
    n: int,
    *,
    seed: int,
    grid: tuple[int, int] = (3, 3),
    min_items: int = 2,
    max_items: int = 4,
    bias: float = 0.0,
    cooccurrence: Mapping[int, int] = COOCCURRENCE,
    cell: int = 32,
) -> Composites:
    """Draw ``n`` composites from ``items`` (e.g. Fashion-MNIST ``(N, 28, 28)`` uint8 with ``labels`` ``(N,)``).

    Per composite: draw ``k`` uniform in ``[min_items, max_items]`` and ``k`` distinct classes uniformly; then, with
    probability ``bias`` for each drawn trigger class whose partner is absent, replace a non-trigger drawn class by the
    partner (so ``k`` stays the same; a trigger keeps no partner when every other drawn class is a trigger or a
    partner already needed). Each class gets a random item of that class and a distinct random cell; the
    item is centred in its ``cell x cell`` cell.

    Raises:
        ValueError: bad sizes (``min_items > max_items``, more items than cells, items larger than a cell), ``bias``
            outside ``[0, 1]``, labels not matching items, a class with no item.
    """
    rows, cols = (check_int("grid rows", grid[0], low=1), check_int("grid cols", grid[1], low=1))
    check_int("n", n, low=1)
    check_int("min_items", min_items, low=1)
    check_int("max_items", max_items, low=min_items, high=min(rows * cols, 10))
    bias = check_float("bias", bias, low=0.0, high=1.0)
    if items.ndim != 3 or len(items) != len(labels):
        raise ValueError(f"items must be (N, h, w) with N = len(labels), got {items.shape} and {len(labels)}")
    h, w = items.shape[1:]
    check_int("cell", cell, low=max(h, w))
    by_class = {c: np.flatnonzero(labels == c) for c in range(10)}
    for c, idx in by_class.items():
        if len(idx) == 0:
            raise ValueError(f"no item of class {c} in labels")
    rng = np.random.default_rng(seed)
    images = np.zeros((n, rows * cell, cols * cell), np.uint8)
    classes = np.full((n, rows * cols), -1, np.int64)
    captions = []
    oy, ox = (cell - h) // 2, (cell - w) // 2
    for k in range(n):
        m = int(rng.integers(min_items, max_items + 1))
        drawn = [int(c) for c in rng.choice(10, size=m, replace=False)]
        for trig, partner in cooccurrence.items():
            if trig in drawn and partner not in drawn and rng.random() < bias:
                keep = set(cooccurrence) | {cooccurrence[t] for t in drawn if t in cooccurrence}
                swappable = [j for j, c in enumerate(drawn) if c not in keep]
                if swappable:
                    drawn[swappable[int(rng.integers(len(swappable)))]] = partner
        cells = rng.choice(rows * cols, size=m, replace=False)
        for c, pos in zip(drawn, cells, strict=True):
            item = items[by_class[c][int(rng.integers(len(by_class[c])))]]
            r, q = divmod(int(pos), cols)
            images[k, r * cell + oy : r * cell + oy + h, q * cell + ox : q * cell + ox + w] = item
            classes[k, pos] = c
        captions.append(caption_of(drawn))
    return Composites(images=images, classes=classes, captions=captions)
