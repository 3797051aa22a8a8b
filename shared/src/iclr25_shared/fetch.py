"""Fetching a missing data source into the user cache: Debian packages without root, pinned URLs, atomic installs.

Used by :mod:`iclr25_shared.data`, and public for packages that fetch a source of their own (e.g. a Debian package
of sample videos). Every helper raises :class:`FetchError` (a plain message, no traceback needed)
which the loaders turn into :class:`~iclr25_shared.errors.DatasetUnavailable` naming the install commands.

- :func:`apt_download` runs ``apt-get download PKG`` (no root needed). When the package is not in the system's
  apt lists (a fresh container ships none, and stale lists point at files the mirror no longer has) it refreshes a
  *private* copy of the lists in a temporary folder (``apt-get update -o Dir::State::Lists=...``), which a
  non-root user may do, and downloads again with those lists. apt checks the ``.deb`` against the signed
  archive index.
- :func:`url_download` fetches a URL into a temporary file.
- :func:`install_file` copies a file into the cache through a temporary file and a rename, after a check, so a
  cache file is either absent or complete.
- :func:`cache_lock` serialises fetches of the same source between processes (an advisory file lock).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = [
    "FetchError",
    "apt_download",
    "cache_lock",
    "deb_extract",
    "digest",
    "fetching_disabled",
    "install_file",
    "log",
    "url_download",
    "verified_download",
]

APT_TIMEOUT_S = 900
URL_TIMEOUT_S = 60


class FetchError(RuntimeError):
    """A source could not be fetched; the message says which step failed and why."""


def fetching_disabled() -> bool:
    """True when ``$ICLR25_NO_FETCH`` is set to anything but empty, ``0``, ``false`` or ``no``."""
    return os.environ.get("ICLR25_NO_FETCH", "").strip().lower() not in ("", "0", "false", "no")


def log(message: str) -> None:
    """One progress line on stderr (fetches are rare and slow; the user should know what is happening)."""
    print(f"iclr25: {message}", file=sys.stderr, flush=True)


def digest(path: str | os.PathLike[str], algorithm: str = "md5", *, gunzip: bool = False) -> str:
    """Hex digest of a file's bytes (of its decompressed bytes with ``gunzip``)."""
    h = hashlib.new(algorithm, usedforsecurity=False)
    opener = gzip.open if gunzip else open
    with opener(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def cache_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``folder/.fetch.lock`` (blocks until the other holder is done)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".fetch.lock", "a+b") as fh:
        if os.name == "nt":  # pragma: no cover - exercised on Windows only
            import msvcrt

            fh.seek(0)
            while True:
                try:
                    msvcrt.locking(fh.fileno(), msvcrt.LK_LOCK, 1)
                    break
                except OSError:
                    continue
            try:
                yield
            finally:
                fh.seek(0)
                msvcrt.locking(fh.fileno(), msvcrt.LK_UNLCK, 1)
        else:
            import fcntl

            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def install_file(source: Path, target: Path, check: Callable[[Path], None] | None = None) -> Path:
    """Copy ``source`` to ``target`` atomically: a temporary file beside ``target``, ``check`` on it, a rename.

    ``check`` raises (e.g. :class:`FetchError` on a checksum mismatch) to reject the file; then nothing is left
    behind and an existing ``target`` is untouched. The file gets ``0o666`` less the umask.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out, open(source, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)
        if check is not None:
            check(Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return target


def url_download(url: str, dest: Path) -> Path:
    """Download ``url`` to the file ``dest`` (a scratch path; verify before installing it)."""
    try:
        with urllib.request.urlopen(url, timeout=URL_TIMEOUT_S) as response, open(dest, "wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except (OSError, ValueError) as exc:  # URLError, HTTPError, timeouts and bad URLs
        raise FetchError(f"downloading {url} failed: {exc}") from exc
    return dest


def verified_download(url: str, sha256: str, target: Path, *, what: str) -> Path:
    """Fetch ``url`` into the cache file ``target`` once: under the folder's lock, downloaded to a scratch file,
    checked against ``sha256``, installed atomically (``0o666`` less the umask). A ``target`` already there is
    returned as it is (another process may have fetched it while this one waited for the lock).

    Raises:
        FetchError: fetching is off (``ICLR25_NO_FETCH``), the download failed, or the checksum differs (nothing is
            installed then).
    """
    if target.is_file():
        return target
    if fetching_disabled():
        raise FetchError(f"{what} is not in {target.parent} and fetching is off (ICLR25_NO_FETCH)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with cache_lock(target.parent):
        if target.is_file():
            return target
        log(f"fetching {what} from {url} into {target.parent}")
        with tempfile.TemporaryDirectory(prefix="iclr25-fetch-") as tmp:
            scratch = url_download(url, Path(tmp) / target.name)

            def check(path: Path) -> None:
                got = digest(path, "sha256")
                if got != sha256:
                    raise FetchError(f"{what} has SHA-256 {got}, expected {sha256}; not used")

            return install_file(scratch, target, check)


def _tail(text: str, lines: int = 3) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "no output"


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, timeout=APT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FetchError(f"`{' '.join(argv[:2])} ...` could not run: {exc}") from exc


def _debs(folder: Path, package: str) -> list[Path]:
    return sorted(folder.glob(f"{package}_*.deb"))


def apt_download(package: str, workdir: Path) -> Path:
    """Download the Debian package ``package`` into ``workdir`` with ``apt-get download``; return the ``.deb``.

    Works without root. When the system apt lists do not have the package, retries with private lists refreshed
    into ``workdir`` (about 20 MB for Debian bookworm main).

    Raises:
        FetchError: ``apt-get`` is not on ``PATH``, or both attempts failed (the message quotes apt's errors).
    """
    apt = shutil.which("apt-get")
    if apt is None:
        raise FetchError("apt-get is not available (not a Debian/Ubuntu system)")
    first = _run([apt, "download", package], workdir)
    if first.returncode == 0 and _debs(workdir, package):
        return _debs(workdir, package)[-1]
    lists, cache = workdir / "apt-lists", workdir / "apt-cache"
    (lists / "partial").mkdir(parents=True, exist_ok=True)
    (cache / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    private = [
        "-o",
        f"Dir::State::Lists={lists}",
        "-o",
        f"Dir::Cache={cache}",
        "-o",
        "Debug::NoLocking=1",
    ]
    # The update's exit status is not decisive: one broken third-party source makes it fail while the Debian
    # lists were refreshed fine. The download below says whether it worked.
    update = _run([apt, "update", *private], workdir)
    second = _run([apt, *private, "download", package], workdir)
    if second.returncode == 0 and _debs(workdir, package):
        return _debs(workdir, package)[-1]
    raise FetchError(
        f"`apt-get download {package}` failed with the system lists ({_tail(first.stderr)}) and with private "
        f"lists (update: {_tail(update.stderr or update.stdout)}; download: {_tail(second.stderr)})"
    )


def deb_extract(deb: Path, dest: Path) -> Path:
    """Unpack the files of ``deb`` under ``dest`` with ``dpkg-deb -x`` (no root needed); return ``dest``."""
    dpkg_deb = shutil.which("dpkg-deb")
    if dpkg_deb is None:
        raise FetchError("dpkg-deb is not available to unpack the .deb")
    dest.mkdir(parents=True, exist_ok=True)
    done = _run([dpkg_deb, "-x", str(deb), str(dest)], dest)
    if done.returncode != 0:
        raise FetchError(f"`dpkg-deb -x {deb.name}` failed: {_tail(done.stderr)}")
    return dest
