"""Pose utilities of SiMHand (arXiv:2502.15251): similar-hand mining, 3-D errors, PeCLR-style equivariance.

* :func:`mine_similar_hands` — Section 3.2: 2-D keypoints are normalised, reduced with PCA, and each sample's
  positive is its nearest neighbour *from a different image / group*.
* :func:`mpjpe`, :func:`pa_mpjpe` — the 3-D evaluation (mean per-joint position error, before and after a
  similarity (Procrustes) alignment).
* :func:`undo_latent_transform` — PeCLR (Spurr et al., ICCV 2021, arXiv:2106.05953, Section 3) equivariant latent:
  the projection is read as 2-D points, normalised, and the view's translation and rotation are undone.
* :func:`similarity_views` — keypoint-consistent random rotation / scale / translation of an image batch.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from iclr25_shared.checks import check_finite, check_float, check_int, check_shape

if TYPE_CHECKING:
    import torch

__all__ = [
    "mine_similar_hands",
    "mpjpe",
    "normalise_keypoints",
    "pa_mpjpe",
    "procrustes_align",
    "similarity_views",
    "undo_latent_transform",
]


def normalise_keypoints(keypoints: np.ndarray, *, root: int = 0, ref: int = 9) -> np.ndarray:
    """Translate the root joint to the origin and scale so that ``|root -> ref|`` is 1 (per pose).

    Args:
        keypoints: ``(n, joints, c)`` float keypoints (pixels). ``root`` = wrist (0), ``ref`` = middle MCP (9) in
            the 21-joint convention.

    Returns:
        ``(n, joints, c)`` float64; a pose whose root and reference coincide is only centred (scale 1).

    Raises:
        ValueError: wrong shape, NaN/inf, joint indices out of range.
    """
    sizes = check_shape("keypoints", keypoints, ("n", "joints", "c"))
    check_finite("keypoints", keypoints)
    check_int("root", root, low=0, high=sizes["joints"] - 1)
    check_int("ref", ref, low=0, high=sizes["joints"] - 1)
    k = np.asarray(keypoints, dtype=np.float64)
    k = k - k[:, root : root + 1]
    scale = np.linalg.norm(k[:, ref], axis=-1)
    scale = np.where(scale > 1e-12, scale, 1.0)
    return k / scale[:, None, None]


def mine_similar_hands(
    keypoints: np.ndarray,
    groups: np.ndarray | None = None,
    *,
    n_components: int = 14,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """For every sample, the most similar hand pose from a *different* image (or group).

    The 2-D keypoints are normalised (:func:`normalise_keypoints`), flattened, reduced with PCA to
    ``n_components`` dimensions, and the nearest neighbour (Euclidean, in PCA space) is searched among the samples
    whose group differs (the sample itself is always excluded). Ties go to the lower index.

    Args:
        keypoints: ``(n, joints, 2)`` float 2-D keypoints (pixels), ``n >= 2``.
        groups: ``(n,)`` int image / video ids; ``None`` = every sample its own group.
        n_components: PCA dimensions (clipped to ``min(n, joints * 2)``).
        seed: PCA solver seed (the result is deterministic for a given seed).

    Returns:
        ``(index, distance)``: ``(n,)`` int64 positive index per sample and ``(n,)`` float64 PCA-space distance.

    Raises:
        ValueError: wrong shape or NaN keypoints, ``n < 2``, groups of the wrong length, or a group that holds
            every sample (no other group to mine from).

    References:
        arXiv:2502.15251, Section 3.2 ("mining similar hands").
    """
    from sklearn.decomposition import PCA
    from sklearn.neighbors import NearestNeighbors

    sizes = check_shape("keypoints", keypoints, ("n", "joints", 2))
    check_finite("keypoints", keypoints)
    n = sizes["n"]
    if n < 2:
        raise ValueError(f"keypoints must hold at least 2 poses to mine a positive, got n={n}")
    g = np.arange(n) if groups is None else np.asarray(groups)
    if g.shape != (n,):
        raise ValueError(f"groups must have shape ({n},), got {g.shape}")
    if np.unique(g).size < 2:
        raise ValueError("groups must contain at least 2 distinct ids (positives come from another group)")
    check_int("n_components", n_components, low=1)
    x = normalise_keypoints(keypoints).reshape(n, -1)
    k = min(n_components, x.shape[1], n)
    emb = PCA(n_components=k, random_state=seed, svd_solver="full").fit_transform(x)
    index = np.full(n, -1, dtype=np.int64)
    dist = np.full(n, np.inf)
    nn = NearestNeighbors().fit(emb)
    todo = np.arange(n)
    want = min(n, 16)
    while todo.size:
        d, j = nn.kneighbors(emb[todo], n_neighbors=want)
        ok = g[j] != g[todo][:, None]
        found = ok.any(axis=1)
        for r in np.nonzero(found)[0]:
            cand = np.nonzero(ok[r])[0]
            best = cand[np.lexsort((j[r, cand], d[r, cand]))[0]]  # nearest; ties -> lower index
            index[todo[r]] = j[r, best]
            dist[todo[r]] = d[r, best]
        todo = todo[~found]
        if want == n:
            break
        want = min(n, want * 4)
    return index, dist


def procrustes_align(pred: np.ndarray, gt: np.ndarray) -> np.ndarray:
    """Best similarity transform (scale, rotation, translation) of each ``pred`` onto its ``gt`` (Umeyama 1991).

    Args:
        pred, gt: ``(n, joints, 3)`` float (any length unit).

    Returns:
        ``(n, joints, 3)`` aligned predictions (reflections excluded).
    """
    sizes = check_shape("pred", pred, ("n", "joints", 3))
    check_shape("gt", gt, ("n", "joints", 3), bind=sizes)
    check_finite("pred", pred)
    check_finite("gt", gt)
    p = np.asarray(pred, dtype=np.float64)
    t = np.asarray(gt, dtype=np.float64)
    mp, mt = p.mean(axis=1, keepdims=True), t.mean(axis=1, keepdims=True)
    p0, t0 = p - mp, t - mt
    cov = np.einsum("nji,njk->nik", t0, p0)  # (n, 3, 3) = T0^T P0
    u, s, vt = np.linalg.svd(cov)
    d = np.sign(np.linalg.det(u @ vt))
    e = np.ones_like(s)
    e[:, -1] = d
    rot = u @ (e[:, :, None] * vt)  # maps p0 -> t0 via rot @ p
    var = (p0**2).sum(axis=(1, 2))
    scale = np.where(var > 0, (s * e).sum(axis=1) / np.where(var > 0, var, 1.0), 1.0)
    return scale[:, None, None] * np.einsum("nik,njk->nji", rot, p0) + mt


def mpjpe(pred: np.ndarray, gt: np.ndarray) -> float:
    """Mean per-joint position error: mean over samples and joints of ``||pred - gt||`` (units of the input).

    Args:
        pred, gt: ``(n, joints, 3)`` float.

    Raises:
        ValueError: shapes differ or non-finite values.
    """
    sizes = check_shape("pred", pred, ("n", "joints", 3))
    check_shape("gt", gt, ("n", "joints", 3), bind=sizes)
    check_finite("pred", pred)
    check_finite("gt", gt)
    return float(np.linalg.norm(np.asarray(pred, float) - np.asarray(gt, float), axis=-1).mean())


def pa_mpjpe(pred: np.ndarray, gt: np.ndarray) -> float:
    """MPJPE after Procrustes alignment (:func:`procrustes_align`): invariant to a similarity transform of ``pred``."""
    return mpjpe(procrustes_align(pred, gt), gt)


def undo_latent_transform(z: torch.Tensor, angle: torch.Tensor, translation: torch.Tensor) -> torch.Tensor:
    """PeCLR's equivariant latent: undo a view's translation and rotation on the projection read as 2-D points.

    ``z`` is reshaped to ``(n, d/2, 2)`` points, L2-normalised (per sample), translated by
    ``-translation * range`` (``range`` = per-axis max - min of the points) and rotated by ``-angle`` about the
    points' mean, then normalised again. Scale needs no undoing: the normalisation removes it.

    Args:
        z: ``(n, d)`` float projections, ``d`` even.
        angle: ``(n,)`` radians, the rotation applied to the view (counter-clockwise in image x/y).
        translation: ``(n, 2)`` the view's shift as a fraction of the image side.

    Returns:
        ``(n, d)`` float, L2-normalised rows.

    Raises:
        ValueError: odd ``d`` or mismatched shapes.

    References:
        Spurr et al., PeCLR, arXiv:2106.05953, Section 3.2; used by arXiv:2502.15251, Section 3.
    """
    import torch
    import torch.nn.functional as F

    sizes = check_shape("z", z, ("n", "d"))
    check_shape("angle", angle, ("n",), bind=sizes)
    check_shape("translation", translation, ("n", 2), bind=sizes)
    if sizes["d"] % 2:
        raise ValueError(f"z must have an even feature size (read as 2-D points), got d={sizes['d']}")
    n = sizes["n"]
    pts = F.normalize(z, dim=1).reshape(n, -1, 2)
    rng = pts.amax(dim=1) - pts.amin(dim=1)  # (n, 2)
    pts = pts - (translation.to(pts) * rng)[:, None, :]
    mean = pts.mean(dim=1, keepdim=True)
    c, s = torch.cos(-angle.to(pts)), torch.sin(-angle.to(pts))
    rot = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)  # (n, 2, 2)
    pts = torch.einsum("nij,npj->npi", rot, pts - mean) + mean
    return F.normalize(pts.reshape(n, -1), dim=1)


def similarity_views(
    images: torch.Tensor,
    keypoints: torch.Tensor,
    *,
    generator: torch.Generator | None = None,
    max_angle: float = math.pi / 4,
    scale_range: tuple[float, float] = (0.9, 1.1),
    max_shift: float = 0.1,
    jitter: float = 0.3,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random keypoint-consistent view: rotate, scale, translate (about the image centre) and colour-jitter.

    Args:
        images: ``(n, c, h, w)`` float in ``[0, 1]``.
        keypoints: ``(n, joints, 2)`` float pixel coordinates ``(x, y)`` of the same images.
        generator: torch RNG (seeded by the caller).
        max_angle: rotation drawn from ``U(-max_angle, max_angle)`` radians.
        scale_range: zoom factor range.
        max_shift: shift drawn from ``U(-max_shift, max_shift)`` of the image side, per axis.
        jitter: brightness / contrast jitter amplitude.

    Returns:
        ``(views, keypoints, angle, shift)``: ``(n, c, h, w)``, ``(n, joints, 2)`` pixels (the exact image of the
        input keypoints under the same transform), ``(n,)`` radians, ``(n, 2)`` fractions.
    """
    import torch
    import torch.nn.functional as F

    sizes = check_shape("images", images, ("n", "c", "h", "w"))
    check_shape("keypoints", keypoints, ("n", "joints", 2), bind=sizes)
    check_float("max_angle", max_angle, low=0.0)
    n, _, h, w = images.shape
    dev = images.device
    u = torch.rand(n, 6, generator=generator).to(dev)
    angle = (2 * u[:, 0] - 1) * max_angle
    scale = scale_range[0] + (scale_range[1] - scale_range[0]) * u[:, 1]
    shift = (2 * u[:, 2:4] - 1) * max_shift
    c, s = torch.cos(angle), torch.sin(angle)
    # forward map in normalised coords q = A p + b, with p in [-1, 1]; A = scale * R(angle), b = 2 * shift
    a = scale[:, None, None] * torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)
    b = 2 * shift
    # grid_sample needs the inverse map p = A^-1 (q - b)
    ainv = torch.linalg.inv(a)
    theta = torch.cat([ainv, (-ainv @ b[:, :, None])], dim=2)
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    views = F.grid_sample(images, grid, padding_mode="reflection", align_corners=False)
    bright = (2 * u[:, 4] - 1) * jitter * 0.5
    contrast = 1 + (2 * u[:, 5] - 1) * jitter
    mu = views.mean(dim=(1, 2, 3), keepdim=True)
    views = ((views - mu) * contrast[:, None, None, None] + mu + bright[:, None, None, None]).clamp(0, 1)
    size = torch.tensor([w, h], dtype=keypoints.dtype, device=dev)
    p = (2 * keypoints.to(dev) + 1) / size - 1  # pixel centres -> normalised (align_corners=False)
    q = torch.einsum("nij,nkj->nki", a.to(p), p) + b[:, None, :].to(p)
    kp = ((q + 1) * size - 1) / 2
    return views, kp, angle, shift
