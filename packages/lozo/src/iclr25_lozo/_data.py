"""Binary movie-review sentiment from the human-rated sentences in the vaderSentiment 3.3.2 source distribution.

The sdist's ``additional_resources/hutto_ICWSM_2014.tar.gz`` holds ``movieReviewSnippets_GroundTruth.txt``: 10 605
Rotten-Tomatoes review sentences (the Pang & Lee sentences that SST-2 is built from), each with the mean of about
20 human ratings on a -4 ... +4 scale (Hutto & Gilbert, ICWSM 2014; MIT licence). The file is read straight from
the sdist tarball; nothing is unpacked to disk. It is not in the wheel: on first use the sdist is fetched from PyPI
into the user cache (its SHA-256 pinned below), unless ``ICLR25_NO_FETCH`` is set; then the error gives the
``pip download`` command.
"""

from __future__ import annotations

import math
import tarfile
from pathlib import Path

import numpy as np

from iclr25_shared.data import TextClassification
from iclr25_shared.errors import DatasetUnavailable, InputError
from iclr25_shared.inputs import check_file

__all__ = [
    "SENTIMENT_CLASSES",
    "VADER_FETCH",
    "VADER_SDIST",
    "VADER_SDIST_SHA256",
    "VADER_SDIST_URL",
    "check_sentiment_file",
    "default_sentiment_path",
    "fetch_sentiment_sdist",
    "movie_review_sentiment",
    "require_task_data",
]

VADER_SDIST = "vaderSentiment-3.3.2.tar.gz"
VADER_SDIST_URL = (
    "https://files.pythonhosted.org/packages/77/8c/4a48c10a50f750ae565e341e697d74a38075a3e43ff0df6f1ab72e186902/"
    "vaderSentiment-3.3.2.tar.gz"
)
"""PyPI's file URL of the sdist (https://pypi.org/pypi/vaderSentiment/3.3.2/json)."""
VADER_SDIST_SHA256 = "5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9"
"""SHA-256 of the sdist, as PyPI lists it and as ``pip download`` fetched it (2 466 783 bytes)."""
VADER_FETCH = "pip download --no-deps --no-binary :all: vadersentiment==3.3.2 -d {folder}"
_INNER_ARCHIVE = "vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz"
_MOVIE_FILE = "hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"
SENTIMENT_CLASSES = ["negative", "positive"]


def default_sentiment_path() -> Path:
    """Where the sdist is looked for by default: ``<iclr25 cache>/vader-sentiment/vaderSentiment-3.3.2.tar.gz``
    (the cache is ``$ICLR25_CACHE`` or the platform cache folder, e.g. ``~/.cache/iclr25``)."""
    from iclr25_shared._paths import cache_dir

    return cache_dir("vader-sentiment") / VADER_SDIST


def _missing(path: Path, label: str | None = None, why: str = "") -> DatasetUnavailable:
    where = f"{label}: " if label else ""
    return DatasetUnavailable(
        f"{where}movie-review sentences not found: {path} does not exist{why}; fetch the vaderSentiment source "
        f"distribution with `{VADER_FETCH.format(folder=path.parent)}` (or pass the path of {VADER_SDIST})"
    )


def fetch_sentiment_sdist() -> Path:
    """The sdist at :func:`default_sentiment_path`, fetched there from PyPI first if it is missing.

    The download goes to a scratch file, is checked against :data:`VADER_SDIST_SHA256` and installed atomically
    under a file lock (:func:`iclr25_shared.fetch.verified_download`), so the cache holds the verified sdist or
    nothing.

    Raises:
        DatasetUnavailable: the file is missing and fetching is off (``ICLR25_NO_FETCH``), the download failed, or
            its checksum differs (nothing is installed then); the message gives the ``pip download`` command.
    """
    from iclr25_shared.fetch import FetchError, fetching_disabled, verified_download

    target = default_sentiment_path()
    if target.is_file():
        return target
    if fetching_disabled():
        raise _missing(target, why=" and fetching is off (ICLR25_NO_FETCH)")
    try:
        # module globals read at call time (the tests point them at a local file)
        return verified_download(
            VADER_SDIST_URL,
            VADER_SDIST_SHA256,
            target,
            what=f"the vaderSentiment 3.3.2 sdist ({VADER_SDIST})",
        )
    except FetchError as exc:
        raise _missing(target, why=f" and fetching it failed ({exc})") from None


def check_sentiment_path(path: str | Path | None, *, label: str | None = None) -> Path:
    """The sdist's path (``None`` or ``""`` = :func:`default_sentiment_path`, fetched there on first use), checked
    to exist. A given ``path`` is never fetched.

    Args:
        path: the sdist, or ``None``/``""`` for the default place.
        label: the option that named ``path`` (e.g. ``"--data-path"``), for messages.

    Raises:
        DatasetUnavailable: the file does not exist and (for the default place) could not be fetched (the message
            gives the ``pip download`` command).
        InputError: a given ``path`` is empty or a folder (the message names it).
    """
    if path in (None, ""):
        return fetch_sentiment_sdist()
    given = Path(path).expanduser()
    if not given.exists():
        raise _missing(given, label)
    return check_file(path, label=label, expected=f"the vaderSentiment source distribution ({VADER_SDIST})")


def _movie_file(source: Path, label: str | None) -> bytes:
    """The ratings file's bytes, read from inside the sdist (raises InputError naming the file)."""
    where = f"{label}: {str(source)!r}" if label else repr(str(source))
    member_name = _INNER_ARCHIVE
    try:
        with tarfile.open(source) as outer:
            inner_file = outer.extractfile(_INNER_ARCHIVE)
            if inner_file is None:
                raise KeyError(_INNER_ARCHIVE)
            member_name = _MOVIE_FILE
            with tarfile.open(fileobj=inner_file) as inner:
                member = inner.extractfile(_MOVIE_FILE)
                if member is None:
                    raise KeyError(_MOVIE_FILE)
                return member.read()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise InputError(
            f"{where} is not the vaderSentiment 3.3.2 sdist (not a tar archive: {type(exc).__name__})"
        ) from None
    except KeyError:
        raise InputError(f"{where} is not the vaderSentiment 3.3.2 sdist: it has no {member_name}") from None


def check_sentiment_file(path: str | Path, label: str | None = None) -> Path:
    """The check of ``--data-path`` before any model loads: the file is the sdist and holds the ratings file.

    Raises:
        DatasetUnavailable: missing (the message gives the ``pip download`` command).
        InputError: empty, a folder, not a tar archive, or without the ratings file.
    """
    source = check_sentiment_path(path, label=label)
    _movie_file(source, label)
    return source


def movie_review_sentiment(
    path: str | Path | None = None, *, neutral_margin: float = 0.5, label: str | None = None
) -> TextClassification:
    """The movie-review sentences with binary labels: 1 (positive) if the mean rating > ``neutral_margin``,
    0 (negative) if it is < ``-neutral_margin``; sentences rated in ``[-neutral_margin, neutral_margin]`` are
    dropped (like SST-2, which drops the neutral phrases; a rating of exactly 0 is dropped even at margin 0).
    A sentence that occurs twice is kept once (its first occurrence).

    Args:
        path: ``vaderSentiment-3.3.2.tar.gz`` (the PyPI sdist); ``None`` = :func:`default_sentiment_path`,
            fetched from PyPI on first use (:func:`fetch_sentiment_sdist`).
        label: the option that named ``path`` (e.g. ``"--data-path"``), for messages.
        neutral_margin: half-width of the dropped band around 0, in rating units (the scale is -4 ... +4).
            Of the 10 605 sentences 37 are rated exactly 0 and 2 repeat an earlier one; at margin 0 that leaves
            10 566 (5 325 negative, 5 241 positive), at the default 0.5 10 041 (5 060 / 4 981), at 1.0 9 021.

    Returns:
        :class:`~iclr25_shared.data.TextClassification`: ``texts`` (n,) sentences, ``labels`` (n,) int64 in
        {0, 1}, ``classes`` ``["negative", "positive"]``, ``titles`` the file's sentence ids, ``descriptions``
        the mean ratings as strings.

    Raises:
        DatasetUnavailable: the file does not exist and could not be fetched (the message gives the fetch command).
        InputError: the file is empty, a folder, not the sdist (not a tar archive, or the ratings file is missing),
            a line is not ``id<TAB>rating<TAB>sentence`` with a finite rating, or no sentence is left.
        ValueError: ``neutral_margin`` negative or not finite.
    """
    if (
        not isinstance(neutral_margin, (int, float))
        or not math.isfinite(neutral_margin)
        or neutral_margin < 0
    ):
        raise ValueError(f"neutral_margin must be a finite number >= 0, got {neutral_margin!r}")
    source = check_sentiment_path(path, label=label)
    where = f"{label}: {str(source)!r}" if label else str(source)
    raw = _movie_file(source, label)
    text = raw.decode("utf-8", errors="replace")
    texts: list[str] = []
    labels: list[int] = []
    ids: list[str] = []
    ratings: list[str] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        try:
            if len(fields) != 3:
                raise ValueError
            rating = float(fields[1])
            if not math.isfinite(rating):
                raise ValueError
        except ValueError:
            raise InputError(
                f"{where}: {_MOVIE_FILE} line {number} is not 'id<TAB>mean rating<TAB>sentence': {line[:80]!r}"
            ) from None
        sentence = fields[2].strip()
        if rating == 0 or abs(rating) <= neutral_margin or not sentence or sentence in seen:
            continue
        seen.add(sentence)
        texts.append(sentence)
        labels.append(1 if rating > 0 else 0)
        ids.append(fields[0])
        ratings.append(fields[1])
    if not texts:
        raise InputError(f"{where}: no sentence is rated outside [-{neutral_margin}, {neutral_margin}]")
    return TextClassification(
        texts=texts,
        labels=np.asarray(labels, dtype=np.int64),
        classes=list(SENTIMENT_CLASSES),
        titles=ids,
        descriptions=ratings,
    )


def check_task_data(task: str, data_path: str, neutral_margin: float) -> None:
    """Validate the data options of a command (no file is touched: the runner checks ``--data-path`` before the
    command, and :func:`require_task_data` the default source at its start).

    Raises:
        ValueError: ``neutral_margin`` < 0 or not finite, or ``data_path`` given for a task that does not read it.
    """
    from iclr25_shared.checks import check_float

    check_float("neutral_margin", neutral_margin, low=0.0)
    if data_path and task != "sentiment":
        raise ValueError(f"data_path is read by the sentiment task only; the task is {task!r}")


def require_task_data(task: str, data_path: str) -> None:
    """At the start of a command, before any model loads: the sentiment task's source is there (the default sdist
    is fetched into the user cache on first use).

    Raises:
        DatasetUnavailable: the default sdist is missing and could not be fetched (the message gives the
            ``pip download`` command).
        InputError: the given ``data_path`` is not the sdist.
    """
    if task == "sentiment":
        if data_path:
            check_sentiment_file(data_path, "--data-path")
        else:
            check_sentiment_path(None)
