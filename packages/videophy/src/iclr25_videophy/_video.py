"""Video decoding, frame sampling and writing with PyAV.

The judge sees a fixed number of frames per video (32 in the VideoCon-Physics inference code of arXiv:2406.03520). The
sampler is mPLUG-Owl-Video's segment-centre rule used by the authors' code: split ``[0, T-1]`` into ``N`` segments
of length ``(T-1)/N`` and take ``floor(len/2) + round(len * i)`` for ``i = 0..N-1``. It always returns exactly ``N``
sorted indices in ``[0, T)``; for videos with fewer than ``N`` frames indices repeat.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from iclr25_shared.checks import check_float, check_int
from iclr25_shared.errors import InputError

__all__ = ["VideoDecodeError", "count_frames", "read_video", "sample_frame_indices", "write_video"]


class VideoDecodeError(InputError):
    """A file that is not a decodable video (the message names the file and the decoder's reason).

    A ``ValueError`` (through :class:`~iclr25_shared.errors.InputError`): the command line exits 2 naming the file,
    whenever the video turns out to be undecodable."""


def sample_frame_indices(num_total: int, num_frames: int = 32) -> np.ndarray:
    """``num_frames`` uniformly spaced frame indices of a ``num_total``-frame video (segment centres).

    Args:
        num_total: frames in the video, ``>= 1``.
        num_frames: frames wanted, ``>= 1``.

    Returns:
        ``(num_frames,)`` int64, non-decreasing, each in ``[0, num_total)``; repeated when ``num_total < num_frames``.
        Deterministic (no randomness).

    Raises:
        ValueError / TypeError: either count not an integer ``>= 1``.
    """
    num_total = check_int("num_total", num_total, low=1)
    num_frames = check_int("num_frames", num_frames, low=1)
    seg = float(num_total - 1) / num_frames
    start = int(seg / 2)
    idx = start + np.round(seg * np.arange(num_frames)).astype(np.int64)
    return np.minimum(idx, num_total - 1)


def _open(path: str | os.PathLike[str]) -> Any:
    import av

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"video {str(p)!r} does not exist or is not a file")
    try:
        container = av.open(str(p))
    except (av.FFmpegError, OSError, UnicodeDecodeError) as exc:
        raise VideoDecodeError(f"video {str(p)!r} could not be opened: {exc}") from exc
    if not container.streams.video:
        container.close()
        raise VideoDecodeError(f"video {str(p)!r} has no video stream")
    return container


def count_frames(path: str | os.PathLike[str]) -> int:
    """Number of decodable frames of the first video stream (decodes the file once; exact, not the header's guess).

    Raises:
        FileNotFoundError: no such file.
        VideoDecodeError: not a video, or no frame decodes.
    """
    import av

    container = _open(path)
    n = 0
    try:
        for _ in container.decode(video=0):
            n += 1
    except av.FFmpegError as exc:
        raise VideoDecodeError(f"video {str(path)!r} failed to decode after {n} frames: {exc}") from exc
    finally:
        container.close()
    if n == 0:
        raise VideoDecodeError(f"video {str(path)!r} contains no decodable frame")
    return n


def _frames_hint(container: Any) -> int:
    """The container's frame count (0 when unknown). Only a hint: :func:`read_video` checks it while decoding."""
    return int(container.streams.video[0].frames or 0)


def _decode(
    path: str | os.PathLike[str], keep: set[int], stop: int | None, kw: dict[str, Any]
) -> tuple[dict, int]:
    """Decode, converting the frames in ``keep`` to RGB; stop after frame ``stop`` (``None``: decode to the end and
    count). Returns the kept frames and the number of frames decoded."""
    import av

    got: dict[int, np.ndarray] = {}
    n = 0
    container = _open(path)
    try:
        for i, frame in enumerate(container.decode(video=0)):
            n = i + 1
            if i in keep:
                got[i] = frame.to_ndarray(**kw)
            if stop is not None and i >= stop:
                break
    except av.FFmpegError as exc:
        raise VideoDecodeError(f"video {str(path)!r} failed to decode after {n} frames: {exc}") from exc
    finally:
        container.close()
    return got, n


def read_video(
    path: str | os.PathLike[str], num_frames: int | None = 32, *, size: tuple[int, int] | None = None
) -> np.ndarray:
    """Decode ``num_frames`` uniformly sampled RGB frames (:func:`sample_frame_indices`), or all with ``None``.

    One pass when the container's frame count is right: frames are converted only at the sampled indices, and the
    pass runs to the end to count the frames; if the count differs from the container's, a second pass uses the
    exact count. Memory is ``num_frames`` RGB frames, not the whole video.

    Args:
        path: a video file any FFmpeg build reads (mp4, avi, webm, gif, ...).
        num_frames: frames to return (``>= 1``), or ``None`` for every frame.
        size: ``(height, width)`` to resize to (bilinear, FFmpeg's swscale), or ``None`` for the native size.

    Returns:
        ``(num_frames, height, width, 3)`` uint8 RGB.

    Raises:
        FileNotFoundError: no such file.
        VideoDecodeError: not a decodable video.
        ValueError: ``num_frames`` or ``size`` invalid.
    """
    if num_frames is not None:
        num_frames = check_int("num_frames", num_frames, low=1)
    if size is not None:
        if len(size) != 2:
            raise ValueError(f"size must be (height, width), got {size!r}")
        check_int("size[0] (height)", size[0], low=1)
        check_int("size[1] (width)", size[1], low=1)
    kw: dict[str, Any] = {"format": "rgb24"}
    if size is not None:
        kw.update(height=int(size[0]), width=int(size[1]))
    container = _open(path)
    hint = _frames_hint(container)
    container.close()
    if num_frames is None:
        got, total = _decode(path, _AllFrames(), None, kw)
        if total == 0:
            raise VideoDecodeError(f"video {str(path)!r} contains no decodable frame")
        return np.stack([got[i] for i in range(total)])
    if hint > 0:
        wanted = sample_frame_indices(hint, num_frames)
        got, total = _decode(path, set(int(i) for i in wanted), None, kw)
        if total == hint:
            return np.stack([got[int(i)] for i in wanted])
    else:
        total = count_frames(path)
    if total == 0:
        raise VideoDecodeError(f"video {str(path)!r} contains no decodable frame")
    wanted = sample_frame_indices(total, num_frames)
    got, _ = _decode(path, set(int(i) for i in wanted), int(wanted[-1]), kw)
    missing = set(int(i) for i in wanted).difference(got)
    if missing:
        raise VideoDecodeError(f"video {str(path)!r}: frame {min(missing)} did not decode on the second pass")
    return np.stack([got[int(i)] for i in wanted])


class _AllFrames(set):
    """A set that contains every index (keep every frame)."""

    def __contains__(self, item: object) -> bool:
        return True


def write_video(
    path: str | os.PathLike[str], frames: Any, *, fps: float = 8.0, codec: str = "libx264"
) -> Path:
    """Write RGB frames to a video file atomically (temporary file beside ``path``, then a rename).

    Args:
        path: destination (the container follows the suffix, e.g. ``.mp4``). An existing file is replaced only when
            the new one is complete.
        frames: ``(T, H, W, 3)`` uint8, or float in ``[0, 1]`` (scaled by 255 and rounded). Odd ``H``/``W`` are
            padded by one replicated row/column (yuv420p needs even sizes).
        fps: frames per second, ``> 0``.
        codec: an FFmpeg encoder name (``libx264``, ``mpeg4``, ...).

    Returns:
        The path written.

    Raises:
        ValueError: wrong shape, empty, non-finite or out-of-range values; ``fps <= 0``.
    """
    import av

    arr = _as_uint8_frames(frames)
    check_float("fps", fps, low=0.0, low_inclusive=False)
    if arr.shape[1] % 2 or arr.shape[2] % 2:
        arr = np.pad(arr, ((0, 0), (0, arr.shape[1] % 2), (0, arr.shape[2] % 2), (0, 0)), mode="edge")
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.stem[:40]}.", suffix=dest.suffix or ".mp4", dir=dest.parent)
    os.close(fd)
    try:
        from fractions import Fraction

        with av.open(tmp, mode="w") as container:
            stream = container.add_stream(codec, rate=Fraction(fps).limit_denominator(1000))
            stream.width, stream.height = int(arr.shape[2]), int(arr.shape[1])
            stream.pix_fmt = "yuv420p"
            for img in arr:
                for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp made it 0600; a video is an ordinary file
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _as_uint8_frames(frames: Any) -> np.ndarray:
    if hasattr(frames, "detach"):
        frames = frames.detach().float().cpu().numpy()
    if isinstance(frames, (list, tuple)):
        frames = np.stack([np.asarray(f) for f in frames]) if len(frames) else np.zeros((0,))
    arr = np.asarray(frames)
    if arr.ndim != 4 or arr.shape[-1] != 3 or arr.shape[0] == 0:
        raise ValueError(f"frames must have shape (T, H, W, 3) with T >= 1, got shape {arr.shape}")
    if arr.dtype == np.uint8:
        return arr
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"frames must be uint8 or float in [0, 1], got dtype {arr.dtype}")
    if not np.isfinite(arr).all():
        raise ValueError("frames hold NaN or inf")
    if arr.min() < -1e-6 or arr.max() > 1 + 1e-6:
        raise ValueError(f"float frames must lie in [0, 1], got range [{arr.min():.3g}, {arr.max():.3g}]")
    return np.clip(np.round(arr * 255.0), 0, 255).astype(np.uint8)
