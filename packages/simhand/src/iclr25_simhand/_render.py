"""A kinematic 21-joint hand renderer over real background photos, and a FreiHAND loader.

No hand images are available offline, so the reproduction renders them: a right hand with anatomical joint-angle
limits (flexion / abduction per joint), a random global rotation, a pinhole camera, drawn as shaded bones and
joints over a random crop of a real photo (``skimage.data`` and scikit-learn's sample images). The returned 2-D
joints are exactly the pinhole projection of the returned 3-D joints (camera coordinates, millimetres).

Joint order (FreiHAND / the paper's 21-joint convention): 0 wrist; thumb 1-4 (CMC, MCP, IP, tip); index 5-8,
middle 9-12, ring 13-16, little 17-20 (MCP, PIP, DIP, tip).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from iclr25_shared.checks import check_choice, check_finite, check_float, check_int, check_shape

__all__ = [
    "BACKGROUNDS",
    "JOINT_LIMITS_DEG",
    "PARENTS",
    "HandBatch",
    "forward_kinematics",
    "load_backgrounds",
    "load_freihand",
    "project",
    "render_hands",
    "sample_joint_angles",
]

PARENTS = (-1, 0, 1, 2, 3, 0, 5, 6, 7, 0, 9, 10, 11, 0, 13, 14, 15, 0, 17, 18, 19)
"""Parent joint of each of the 21 joints (-1 for the wrist)."""

# Base joint (thumb CMC / finger MCP) in the hand frame (mm): x toward the thumb, y along the fingers, z palm normal.
_BASES = np.array(
    [[20.0, 22.0, 0.0], [22.0, 85.0, 0.0], [0.0, 90.0, 0.0], [-20.0, 85.0, 0.0], [-38.0, 75.0, 0.0]]
)
_LENGTHS = np.array(
    [[35.0, 30.0, 25.0], [40.0, 25.0, 20.0], [45.0, 28.0, 22.0], [42.0, 27.0, 21.0], [32.0, 20.0, 18.0]]
)
_REST_DIR = np.array([[0.8, 0.6, 0.0], [0.1, 1.0, 0.0], [0.0, 1.0, 0.0], [-0.1, 1.0, 0.0], [-0.25, 1.0, 0.0]])

JOINT_LIMITS_DEG = np.array(
    [
        # abduction, flexion 1, flexion 2, flexion 3 (degrees) -- low, high
        [[-20.0, 40.0], [-10.0, 60.0], [0.0, 70.0], [0.0, 80.0]],  # thumb (CMC abd, CMC, MCP, IP)
        [[-15.0, 15.0], [-10.0, 90.0], [0.0, 110.0], [0.0, 80.0]],  # index (MCP abd, MCP, PIP, DIP)
        [[-10.0, 10.0], [-10.0, 90.0], [0.0, 110.0], [0.0, 80.0]],  # middle
        [[-10.0, 10.0], [-10.0, 90.0], [0.0, 110.0], [0.0, 80.0]],  # ring
        [[-15.0, 15.0], [-10.0, 90.0], [0.0, 110.0], [0.0, 80.0]],  # little
    ]
)
"""Anatomical limits ``(finger, [abduction, flexion1, flexion2, flexion3], [low, high])`` in degrees."""

BACKGROUNDS = (
    "astronaut", "coffee", "chelsea", "rocket", "brick", "grass", "gravel", "camera", "coins", "moon", "page",
    "hubble_deep_field", "immunohistochemistry", "cat", "sklearn:china.jpg", "sklearn:flower.jpg",
)  # fmt: skip
"""Real photos used as backgrounds: ``skimage.data.<name>()`` and scikit-learn's ``load_sample_images``."""


def _rodrigues(axis: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """``(..., 3, 3)`` rotation matrices about unit ``axis`` ``(..., 3)`` by ``angle`` ``(...)`` radians."""
    k = axis / np.linalg.norm(axis, axis=-1, keepdims=True)
    kx = np.zeros((*k.shape[:-1], 3, 3))
    kx[..., 0, 1], kx[..., 0, 2] = -k[..., 2], k[..., 1]
    kx[..., 1, 0], kx[..., 1, 2] = k[..., 2], -k[..., 0]
    kx[..., 2, 0], kx[..., 2, 1] = -k[..., 1], k[..., 0]
    a = np.asarray(angle)[..., None, None]
    return np.eye(3) + np.sin(a) * kx + (1 - np.cos(a)) * (kx @ kx)


def sample_joint_angles(n: int, rng: np.random.Generator) -> np.ndarray:
    """``(n, 5, 4)`` joint angles (radians) drawn uniformly within :data:`JOINT_LIMITS_DEG`."""
    n = check_int("n", n, low=0)
    lo, hi = np.deg2rad(JOINT_LIMITS_DEG[..., 0]), np.deg2rad(JOINT_LIMITS_DEG[..., 1])
    return lo + (hi - lo) * rng.random((n, 5, 4))


def forward_kinematics(angles: np.ndarray) -> np.ndarray:
    """21 joints of a right hand in its own frame (mm) from joint angles.

    Args:
        angles: ``(n, 5, 4)`` radians per finger: abduction (about the palm normal) and three flexions (each about
            the axis perpendicular to the bone in the palm-normal plane; flexion bends toward the palm, ``+z``).

    Returns:
        ``(n, 21, 3)`` float64 joint positions, wrist at the origin. Bone lengths are fixed (``_LENGTHS``).

    Raises:
        ValueError: wrong shape or non-finite angles.
    """
    check_shape("angles", angles, ("n", 5, 4))
    check_finite("angles", angles)
    n = angles.shape[0]
    out = np.zeros((n, 21, 3))
    z = np.array([0.0, 0.0, 1.0])
    for f in range(5):
        base = 1 + 4 * f
        out[:, base] = _BASES[f]
        rest = _REST_DIR[f] / np.linalg.norm(_REST_DIR[f])
        d = np.einsum("nij,j->ni", _rodrigues(np.broadcast_to(z, (n, 3)), angles[:, f, 0]), rest)
        bend_axis = np.cross(d, z)  # rotating d about d x z turns it toward +z
        total = np.zeros(n)
        for b in range(3):
            total = total + angles[:, f, 1 + b]
            direction = np.einsum("nij,nj->ni", _rodrigues(bend_axis, total), d)
            out[:, base + 1 + b] = out[:, base + b] + _LENGTHS[f, b] * direction
    return out


def project(joints3d: np.ndarray, focal: float, center: tuple[float, float]) -> np.ndarray:
    """Pinhole projection ``u = f X / Z + cx``, ``v = f Y / Z + cy`` (pixels).

    Args:
        joints3d: ``(n, joints, 3)`` camera coordinates (any length unit), ``Z > 0``.
        focal: focal length in pixels; center: principal point ``(cx, cy)`` in pixels.

    Returns:
        ``(n, joints, 2)`` pixel coordinates ``(x, y)``.

    Raises:
        ValueError: bad shape, non-finite values, a point with ``Z <= 0``.
    """
    check_shape("joints3d", joints3d, ("n", "joints", 3))
    check_finite("joints3d", joints3d)
    focal = check_float("focal", focal, low=0.0, low_inclusive=False)
    if bool((joints3d[..., 2] <= 0).any()):
        raise ValueError("joints3d must lie in front of the camera (Z > 0)")
    return focal * joints3d[..., :2] / joints3d[..., 2:3] + np.asarray(center, dtype=np.float64)


@dataclass(frozen=True)
class HandBatch:
    """Rendered (or loaded) hands.

    Attributes:
        images: ``(n, 3, size, size)`` float32 in ``[0, 1]``.
        keypoints2d: ``(n, 21, 2)`` float32 pixel coordinates ``(x, y)`` (pixel centres at integers).
        keypoints3d: ``(n, 21, 3)`` float32 camera coordinates, millimetres.
        angles: ``(n, 5, 4)`` joint angles (radians) or an empty array for loaded data.
        background: ``(n,)`` int index into the background list (-1 for loaded data).
        focal: focal length in pixels.
    """

    images: np.ndarray
    keypoints2d: np.ndarray
    keypoints3d: np.ndarray
    angles: np.ndarray
    background: np.ndarray
    focal: float


def load_backgrounds(names: tuple[str, ...] = BACKGROUNDS, folder: Path | None = None) -> list[np.ndarray]:
    """Real photos as ``(h, w, 3)`` float arrays in ``[0, 1]``.

    Args:
        names: ``skimage.data`` function names, or ``"sklearn:<file>"`` for scikit-learn's sample images.
        folder: optional folder of ``.jpg`` / ``.png`` photos (e.g. opencv-doc's ``examples/data``); added after
            ``names``, sorted by file name.

    Raises:
        ValueError: an unknown name; no image at all.
    """
    import skimage.data
    from skimage.color import gray2rgb, rgba2rgb
    from skimage.util import img_as_float

    def rgb(img: np.ndarray) -> np.ndarray:
        img = img_as_float(img)
        if img.ndim == 2:
            img = gray2rgb(img)
        if img.shape[-1] == 4:
            img = rgba2rgb(img)
        return np.asarray(img, dtype=np.float32)

    out = []
    sk = None
    for name in names:
        if name.startswith("sklearn:"):
            if sk is None:
                from sklearn.datasets import load_sample_images

                bunch = load_sample_images()
                sk = {Path(f).name: im for f, im in zip(bunch.filenames, bunch.images)}
            check_choice("background", name[len("sklearn:") :], sk)
            out.append(rgb(sk[name[len("sklearn:") :]]))
        else:
            fn = getattr(skimage.data, name, None)
            if fn is None or not callable(fn):
                raise ValueError(f"background must be a skimage.data image or sklearn:<file>; got {name!r}")
            out.append(rgb(fn()))
    if folder is not None:
        from skimage.io import imread

        for path in sorted(Path(folder).glob("*")):
            if path.suffix.lower() in {".jpg", ".jpeg", ".png"}:
                out.append(rgb(imread(path)))
    if not out:
        raise ValueError("no background image (names is empty and folder has no .jpg/.png)")
    return out


def _draw_hand(canvas: np.ndarray, kp: np.ndarray, depth: np.ndarray, skin: np.ndarray, width: float) -> None:
    from skimage.draw import disk, polygon

    h, w, _ = canvas.shape
    bones = [(PARENTS[j], j) for j in range(1, 21)]
    palm = [0, 1, 5, 9, 13, 17]
    rr, cc = polygon(kp[palm, 1], kp[palm, 0], shape=(h, w))
    canvas[rr, cc] = skin * 0.85
    zmin, zmax = depth.min(), depth.max()
    shade = 1.0 - 0.35 * (depth - zmin) / max(zmax - zmin, 1e-9)  # nearer = brighter
    order = sorted(bones, key=lambda b: -(depth[b[0]] + depth[b[1]]))  # far first
    for a, b in order:
        p, q = kp[a], kp[b]
        d = q - p
        nrm = np.array([-d[1], d[0]]) / max(float(np.hypot(*d)), 1e-9) * width / 2
        quad = np.stack([p + nrm, q + nrm, q - nrm, p - nrm])
        rr, cc = polygon(quad[:, 1], quad[:, 0], shape=(h, w))
        canvas[rr, cc] = skin * shade[b]
        rr, cc = disk((q[1], q[0]), width / 2, shape=(h, w))
        canvas[rr, cc] = skin * shade[b] * 0.92


def render_hands(
    n: int,
    *,
    size: int = 32,
    seed: int = 0,
    backgrounds: list[np.ndarray] | None = None,
    background_ids: np.ndarray | None = None,
    supersample: int = 4,
) -> HandBatch:
    """Render ``n`` random right hands over random crops of real photos.

    Pose: joint angles uniform within :data:`JOINT_LIMITS_DEG`; global rotation = in-plane roll ``U(-pi, pi)``
    times yaw and pitch ``U(-60, 60)`` degrees; the hand is placed at a depth where it spans 45-80 % of the image,
    with a small random offset. Camera: focal = ``size`` pixels, principal point at the image centre.

    Args:
        n: number of images (``>= 1``).
        size: image side in pixels (``>= 8``).
        seed: every random choice derives from it.
        backgrounds: photos from :func:`load_backgrounds` (default: all of :data:`BACKGROUNDS`).
        background_ids: ``(k,)`` indices of the photos to draw from (e.g. disjoint train / test sets).
        supersample: drawing is done at ``supersample * size`` and downsampled with anti-aliasing.

    Returns:
        :class:`HandBatch`; ``keypoints2d == project(keypoints3d, focal, ((size-1)/2, (size-1)/2))`` exactly.
    """
    from skimage.transform import resize

    n = check_int("n", n, low=1)
    size = check_int("size", size, low=8)
    supersample = check_int("supersample", supersample, low=1, high=8)
    rng = np.random.default_rng(seed)
    bgs = load_backgrounds() if backgrounds is None else backgrounds
    ids = np.arange(len(bgs)) if background_ids is None else np.asarray(background_ids)
    if ids.size == 0 or ids.min() < 0 or ids.max() >= len(bgs):
        raise ValueError(f"background_ids must index the {len(bgs)} backgrounds, got {ids.tolist()}")
    angles = sample_joint_angles(n, rng)
    local = forward_kinematics(angles)
    local = local - local.mean(axis=1, keepdims=True)
    roll = rng.uniform(-math.pi, math.pi, n)
    yaw = np.deg2rad(rng.uniform(-60, 60, n))
    pitch = np.deg2rad(rng.uniform(-60, 60, n))
    e = np.eye(3)
    rot = (
        _rodrigues(np.broadcast_to(e[2], (n, 3)), roll)
        @ _rodrigues(np.broadcast_to(e[1], (n, 3)), yaw)
        @ _rodrigues(np.broadcast_to(e[0], (n, 3)), pitch)
    )
    cam = np.einsum("nij,nkj->nki", rot, local)
    radius = np.linalg.norm(cam[..., :2], axis=-1).max(axis=1)
    focal = float(size)
    span = rng.uniform(0.45, 0.8, n)  # fraction of the image the hand spans
    depth = 2 * focal * radius / (span * size) + np.abs(cam[..., 2]).max(axis=1)
    offset = rng.uniform(-0.1, 0.1, (n, 2)) * size / focal * depth[:, None]
    cam = cam + np.concatenate([offset, depth[:, None]], axis=1)[:, None, :]
    center = ((size - 1) / 2, (size - 1) / 2)
    kp2d = project(cam, focal, center)
    big = size * supersample
    images = np.empty((n, 3, size, size), dtype=np.float32)
    bg_index = rng.choice(ids, n)
    for i in range(n):
        photo = bgs[bg_index[i]]
        h, w, _ = photo.shape
        side = int(rng.integers(min(h, w) // 4, min(h, w) + 1))
        y0, x0 = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
        step = max(1, side // (2 * big))  # cheap decimation first; resize then anti-aliases the last factor
        crop = photo[y0 : y0 + side : step, x0 : x0 + side : step]
        canvas = resize(crop, (big, big), anti_aliasing=True).astype(np.float32)
        skin = np.array([0.95, 0.75, 0.6]) * rng.uniform(0.55, 1.0) + rng.uniform(-0.08, 0.08, 3)
        kp_big = (kp2d[i] + 0.5) * supersample - 0.5
        _draw_hand(canvas, kp_big, cam[i, :, 2], np.clip(skin, 0, 1), width=0.07 * big * (0.6 + span[i] / 2))
        small = resize(canvas, (size, size), anti_aliasing=supersample > 1)
        images[i] = np.clip(small, 0, 1).transpose(2, 0, 1)
    return HandBatch(
        images=images,
        keypoints2d=kp2d.astype(np.float32),
        keypoints3d=cam.astype(np.float32),
        angles=angles,
        background=bg_index.astype(np.int64),
        focal=focal,
    )


def load_freihand(root: Path, *, limit: int | None = None, size: int = 224) -> HandBatch:
    """FreiHAND (Zimmermann et al., ICCV 2019) training images with 3-D and projected 2-D joints, from disk.

    Expects ``root/training_xyz.json`` (metres), ``root/training_K.json`` (3x3 intrinsics) and
    ``root/training/rgb/%08d.jpg``. Images are resized to ``size`` and the 2-D joints scaled to match.

    Returns:
        :class:`HandBatch` with keypoints3d in millimetres; ``focal`` = NaN (per-image intrinsics differ).

    Raises:
        FileNotFoundError: a file is missing. ValueError: the JSON lists disagree in length or shape.
    """
    from skimage.io import imread
    from skimage.transform import resize

    root = Path(root)
    xyz = np.asarray(json.loads((root / "training_xyz.json").read_text()), dtype=np.float64)
    k = np.asarray(json.loads((root / "training_K.json").read_text()), dtype=np.float64)
    check_shape("training_xyz", xyz, ("n", 21, 3))
    check_shape("training_K", k, (xyz.shape[0], 3, 3))
    count = xyz.shape[0] if limit is None else min(check_int("limit", limit, low=1), xyz.shape[0])
    uvw = np.einsum("nij,nkj->nki", k[:count], xyz[:count])
    uv = uvw[..., :2] / uvw[..., 2:3]
    images = np.empty((count, 3, size, size), dtype=np.float32)
    kp2d = np.empty((count, 21, 2))
    for i in range(count):
        img = imread(root / "training" / "rgb" / f"{i:08d}.jpg")
        h, w = img.shape[:2]
        images[i] = resize(img, (size, size), anti_aliasing=True).astype(np.float32).transpose(2, 0, 1)
        kp2d[i] = (uv[i] + 0.5) * np.array([size / w, size / h]) - 0.5
    return HandBatch(
        images=images,
        keypoints2d=kp2d.astype(np.float32),
        keypoints3d=(xyz[:count] * 1000).astype(np.float32),
        angles=np.empty((0, 5, 4)),
        background=np.full(count, -1),
        focal=float("nan"),
    )
