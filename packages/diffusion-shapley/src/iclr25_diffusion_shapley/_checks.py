"""Light constants and checks the CLI configs validate against (no heavy import)."""

from __future__ import annotations

import os
from pathlib import Path

from iclr25_shared import inputs
from iclr25_shared.errors import InputError

__all__ = [
    "FASHION_MNIST_FILES",
    "FIVE_PAIRS",
    "PROPERTIES",
    "check_contributors",
    "check_fashion_mnist_folder",
]

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


FASHION_MNIST_FILES = {
    "train-images-idx3-ubyte.gz": (3, 60_000),
    "train-labels-idx1-ubyte.gz": (1, 60_000),
    "t10k-images-idx3-ubyte.gz": (3, 10_000),
    "t10k-labels-idx1-ubyte.gz": (1, 10_000),
}
"""The four IDX files a ``--data-root`` folder holds (both splits are used): name -> (axes, examples)."""
_EXPECTED = f"a folder with Fashion-MNIST's {', '.join(FASHION_MNIST_FILES)}"


def check_fashion_mnist_folder(path: str | os.PathLike[str], label: str = "--data-root") -> Path:
    """The folder (or its ``FashionMNIST/raw``, torchvision's layout) that holds the four Fashion-MNIST IDX files,
    each a complete gzip-compressed IDX file with the right number of examples.

    Without this check a folder that lacks the files would silently fall back to the system's or the cache's copy.

    Raises:
        InputError: the folder is missing or a file, lacks a file (named), or a file is empty, not gzip, not IDX,
            truncated or of the wrong size (named).
    """
    from iclr25_shared.data import read_idx

    folder = inputs.check_folder(path, label=label, expected=_EXPECTED)
    found = next(
        (
            d
            for d in (folder, folder / "FashionMNIST" / "raw")
            if all((d / n).is_file() for n in FASHION_MNIST_FILES)
        ),
        None,
    )
    if found is None:
        missing = [n for n in FASHION_MNIST_FILES if not (folder / n).is_file()]
        raise InputError(f"{label}: {str(path)!r} lacks {', '.join(missing)}; expected {_EXPECTED}")
    for name, (ndim, count) in FASHION_MNIST_FILES.items():
        f = inputs.check_file(found / name, label=label, expected="a gzip-compressed IDX file")
        try:
            array = read_idx(f)
        except ValueError as exc:  # read_idx names the file
            raise InputError(f"{label}: {exc}") from None
        except (OSError, EOFError) as exc:  # not gzip, truncated
            raise InputError(
                f"{label}: {str(f)!r} is not a readable gzip-compressed IDX file ({type(exc).__name__})"
            ) from None
        if array.ndim != ndim or len(array) != count:
            raise InputError(
                f"{label}: {str(f)!r} holds shape {array.shape}; expected {count} examples with {ndim} axes"
            )
    return found
