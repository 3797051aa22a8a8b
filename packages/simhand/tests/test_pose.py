"""Mining, 3-D errors and PeCLR-style equivariance (arXiv:2502.15251 Sections 3.2, 4; PeCLR arXiv:2106.05953)."""

import math

import numpy as np
import pytest
import torch
from scipy.linalg import orthogonal_procrustes
from scipy.spatial.transform import Rotation

from iclr25_simhand import (
    mine_similar_hands,
    mpjpe,
    normalise_keypoints,
    pa_mpjpe,
    similarity_views,
    undo_latent_transform,
)


def test_mined_neighbour_matches_brute_force_and_is_never_self():
    rng = np.random.default_rng(0)
    kp = rng.random((60, 21, 2)) * 32
    idx, dist = mine_similar_hands(kp, n_components=42)  # full-rank PCA = rotation: distances preserved
    x = normalise_keypoints(kp).reshape(60, -1)
    d = np.linalg.norm(x[:, None] - x[None], axis=-1)
    np.fill_diagonal(d, np.inf)
    np.testing.assert_array_equal(idx, d.argmin(axis=1))
    np.testing.assert_allclose(dist, d.min(axis=1), rtol=1e-8)
    assert not np.any(idx == np.arange(60))


def test_mined_neighbour_never_from_same_group():
    rng = np.random.default_rng(1)
    base = rng.random((10, 21, 2)) * 32
    kp = np.concatenate([base, base + 0.01 * rng.standard_normal(base.shape)])  # near-duplicates ...
    groups = np.concatenate([np.arange(10), np.arange(10)])  # ... from the same image: not allowed
    idx, _ = mine_similar_hands(kp, groups)
    assert not np.any(groups[idx] == groups)
    # without groups the duplicate (other image) is the nearest
    idx2, _ = mine_similar_hands(kp)
    np.testing.assert_array_equal(idx2, np.concatenate([np.arange(10, 20), np.arange(10)]))


def test_mining_ignores_translation_and_scale_of_the_2d_pose():
    rng = np.random.default_rng(2)
    kp = rng.random((30, 21, 2)) * 32
    moved = kp[7] * 0.5 + np.array([100.0, -40.0])
    kp2 = np.concatenate([kp, moved[None]])
    idx, dist = mine_similar_hands(kp2)
    assert idx[30] == 7 and dist[30] == pytest.approx(0.0, abs=1e-9)


def test_mining_is_deterministic():
    kp = np.random.default_rng(3).random((50, 21, 2))
    a = mine_similar_hands(kp, seed=4)
    b = mine_similar_hands(kp, seed=4)
    np.testing.assert_array_equal(a[0], b[0])


@pytest.mark.parametrize(
    ("kp", "groups", "match"),
    [
        (np.zeros((1, 21, 2)), None, "at least 2 poses"),
        (np.zeros((4, 21, 3)), None, "keypoints must have shape"),
        (np.full((4, 21, 2), np.nan), None, "keypoints must be finite"),
        (np.zeros((4, 21, 2)), np.zeros(4), "at least 2 distinct"),
        (np.zeros((4, 21, 2)), np.zeros(3), "groups must have shape"),
    ],
)
def test_mining_bad_inputs(kp, groups, match):
    with pytest.raises(ValueError, match=match):
        mine_similar_hands(kp, groups)


def random_similarity(rng):
    r = Rotation.random(random_state=rng.integers(1 << 30)).as_matrix()
    return rng.uniform(0.5, 2.0), r, rng.standard_normal(3) * 50


def test_pa_mpjpe_zero_on_ground_truth_and_invariant_to_similarity():
    rng = np.random.default_rng(4)
    gt = rng.standard_normal((5, 21, 3)) * 40
    assert pa_mpjpe(gt, gt) == pytest.approx(0.0, abs=1e-9)
    pred = gt + rng.standard_normal(gt.shape) * 5
    base = pa_mpjpe(pred, gt)
    s, r, t = random_similarity(rng)
    assert pa_mpjpe(s * pred @ r.T + t, gt) == pytest.approx(base, rel=1e-9)
    assert base <= mpjpe(pred, gt)


def test_pa_mpjpe_matches_scipy_orthogonal_procrustes_reference():
    rng = np.random.default_rng(5)
    gt = rng.standard_normal((4, 21, 3))
    pred = gt @ Rotation.random(random_state=1).as_matrix().T * 1.7 + rng.standard_normal(gt.shape) * 0.3
    errs = []
    for p, g in zip(pred, gt):
        p0, g0 = p - p.mean(0), g - g.mean(0)
        r, sc = orthogonal_procrustes(p0, g0)  # argmin ||p0 r - g0||, sc = trace of singular values
        if np.linalg.det(r) > 0:  # reflections are not similarity transforms; random data here has none
            scale = sc / (p0**2).sum()
            errs.append(np.linalg.norm(scale * p0 @ r - g0, axis=-1).mean())
    assert len(errs) == 4
    assert pa_mpjpe(pred, gt) == pytest.approx(np.mean(errs), rel=1e-9)


def test_mpjpe_is_translation_sensitive():
    gt = np.zeros((2, 21, 3))
    assert mpjpe(gt + np.array([3.0, 4.0, 0.0]), gt) == pytest.approx(5.0)
    pose = np.random.default_rng(6).standard_normal((2, 21, 3))
    assert mpjpe(pose + np.array([3.0, 4.0, 0.0]), pose) == pytest.approx(5.0)
    assert pa_mpjpe(pose + np.array([3.0, 4.0, 0.0]), pose) == pytest.approx(0.0, abs=1e-9)


def test_mpjpe_bad_inputs():
    with pytest.raises(ValueError, match="gt must have shape"):
        mpjpe(np.zeros((2, 21, 3)), np.zeros((2, 20, 3)))
    with pytest.raises(ValueError, match="pred must be finite"):
        pa_mpjpe(np.full((2, 21, 3), np.nan), np.zeros((2, 21, 3)))


def forward_latent(z0, angle, shift):
    """The forward transform the inverse undoes: rotate the (normalised) points about their mean, then shift."""
    n = z0.shape[0]
    pts = torch.nn.functional.normalize(z0, dim=1).reshape(n, -1, 2)
    mean = pts.mean(1, keepdim=True)
    c, s = torch.cos(angle), torch.sin(angle)
    rot = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)
    pts = torch.einsum("nij,npj->npi", rot, pts - mean) + mean
    rng = pts.amax(1) - pts.amin(1)
    return (pts + (shift * rng)[:, None]).reshape(n, -1)


@pytest.mark.parametrize("scale", [1.0, 3.5, 0.2])
def test_equivariant_latent_undoes_rotation_and_translation_and_ignores_scale(scale):
    """PeCLR issue #3: scale needs no undoing, the normalisation removes it."""
    g = torch.Generator().manual_seed(0)
    z0 = torch.randn(5, 128, generator=g, dtype=torch.float64)
    angle = torch.rand(5, generator=g, dtype=torch.float64) * 2 - 1
    shift = torch.rand(5, 2, generator=g, dtype=torch.float64) * 0.2 - 0.1
    z = forward_latent(z0, angle, shift) * scale
    out = undo_latent_transform(z, angle, shift)
    ref = torch.nn.functional.normalize(z0, dim=1)
    # the inverse normalises z first; the un-rotated points equal ref up to that one positive factor
    torch.testing.assert_close(out, torch.nn.functional.normalize(ref, dim=1), atol=1e-10, rtol=0)


def test_similarity_views_move_keypoints_with_the_image():
    h = w = 48
    ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    kp = torch.tensor([[[30.0, 14.0]], [[20.0, 33.0]], [[24.0, 24.0]]])
    img = torch.stack([torch.exp(-((xs - p[0, 0]) ** 2 + (ys - p[0, 1]) ** 2) / 4.0) for p in kp])
    img = img[:, None].expand(3, 3, h, w).contiguous()
    views, kp2, angle, _shift = similarity_views(
        img, kp, generator=torch.Generator().manual_seed(3), jitter=0.0
    )
    for i in range(3):
        flat = int(views[i, 0].argmax())
        peak = torch.tensor([flat % w, flat // w], dtype=torch.float32)
        assert float((peak - kp2[i, 0]).norm()) < 1.0
    assert float(angle.abs().max()) <= math.pi / 4


def test_similarity_views_identity_when_no_transform():
    img = torch.rand(2, 3, 16, 16)
    kp = torch.rand(2, 21, 2) * 15
    views, kp2, _, _ = similarity_views(
        img, kp, max_angle=0.0, scale_range=(1.0, 1.0), max_shift=0.0, jitter=0.0
    )
    torch.testing.assert_close(views, img, atol=1e-5, rtol=0)
    torch.testing.assert_close(kp2, kp, atol=1e-5, rtol=0)
