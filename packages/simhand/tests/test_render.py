"""The kinematic hand renderer: exact 2-D/3-D joints, anatomical limits, real backgrounds; the FreiHAND loader."""

import json

import numpy as np
import pytest

from iclr25_simhand import forward_kinematics, load_backgrounds, load_freihand, project, render_hands
from iclr25_simhand._render import _LENGTHS, JOINT_LIMITS_DEG, PARENTS


@pytest.fixture(scope="module")
def batch():
    return render_hands(12, size=32, seed=3, backgrounds=load_backgrounds(("coffee", "sklearn:china.jpg")))


def test_2d_joints_are_the_projection_of_the_3d_joints(batch):
    x, y, z = batch.keypoints3d[..., 0], batch.keypoints3d[..., 1], batch.keypoints3d[..., 2]
    c = (32 - 1) / 2
    u = batch.focal * x / z + c  # the pinhole model, written out here
    v = batch.focal * y / z + c
    np.testing.assert_allclose(batch.keypoints2d[..., 0], u, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(batch.keypoints2d[..., 1], v, rtol=1e-5, atol=1e-4)
    assert bool((z > 0).all())


def test_hand_lies_inside_the_image(batch):
    assert batch.keypoints2d.min() >= 0 and batch.keypoints2d.max() <= 31


def test_bone_lengths_are_the_model_lengths_after_rotation(batch):
    """The camera-frame joints are a rigid motion of the kinematic chain: every finger bone keeps its length."""
    kp = batch.keypoints3d.astype(np.float64)
    for f in range(5):
        for b in range(3):
            j = 1 + 4 * f + b + 1
            length = np.linalg.norm(kp[:, j] - kp[:, PARENTS[j]], axis=-1)
            np.testing.assert_allclose(length, _LENGTHS[f, b], rtol=1e-4)


def test_joint_angles_within_anatomical_limits(batch):
    deg = np.rad2deg(batch.angles)
    assert bool((deg >= JOINT_LIMITS_DEG[..., 0] - 1e-9).all()) and bool(
        (deg <= JOINT_LIMITS_DEG[..., 1] + 1e-9).all()
    )


def test_flat_hand_is_planar_and_fully_flexed_finger_curls_toward_palm():
    flat = forward_kinematics(np.zeros((1, 5, 4)))
    np.testing.assert_allclose(flat[0, :, 2], 0.0, atol=1e-12)
    bent = np.zeros((1, 5, 4))
    bent[0, 1, 1] = np.pi / 2  # index MCP flexed 90 degrees
    kp = forward_kinematics(bent)
    assert kp[0, 6, 2] == pytest.approx(
        _LENGTHS[1, 0]
    )  # the proximal phalanx now points along the palm normal


def test_images_are_real_photos_with_a_hand_drawn(batch):
    assert batch.images.shape == (12, 3, 32, 32) and batch.images.dtype == np.float32
    assert batch.images.min() >= 0.0 and batch.images.max() <= 1.0
    assert batch.images.std(axis=(1, 2, 3)).min() > 0.02  # not blank


def test_rendering_is_deterministic_per_seed():
    bgs = load_backgrounds(("coffee",))
    a = render_hands(3, size=16, seed=5, backgrounds=bgs, supersample=2)
    b = render_hands(3, size=16, seed=5, backgrounds=bgs, supersample=2)
    np.testing.assert_array_equal(a.images, b.images)
    c = render_hands(3, size=16, seed=6, backgrounds=bgs, supersample=2)
    assert not np.array_equal(a.keypoints3d, c.keypoints3d)


def test_bad_inputs():
    with pytest.raises(ValueError, match="n must be"):
        render_hands(0)
    with pytest.raises(ValueError, match="background"):
        load_backgrounds(("no_such_photo",))
    with pytest.raises(ValueError, match="Z > 0"):
        project(np.array([[[0.0, 0.0, -1.0]]]), 10.0, (0.0, 0.0))
    with pytest.raises(ValueError, match="angles must have shape"):
        forward_kinematics(np.zeros((2, 4, 4)))


def test_freihand_loader_on_tiny_local_files(tmp_path):
    from skimage.io import imsave

    rng = np.random.default_rng(0)
    xyz = rng.uniform(-0.05, 0.05, (2, 21, 3)) + np.array([0, 0, 0.5])
    k = np.array([[[200.0, 0, 112], [0, 200.0, 112], [0, 0, 1]]] * 2)
    (tmp_path / "training_xyz.json").write_text(json.dumps(xyz.tolist()))
    (tmp_path / "training_K.json").write_text(json.dumps(k.tolist()))
    (tmp_path / "training" / "rgb").mkdir(parents=True)
    for i in range(2):
        imsave(
            tmp_path / "training" / "rgb" / f"{i:08d}.jpg", (rng.random((224, 224, 3)) * 255).astype(np.uint8)
        )
    b = load_freihand(tmp_path, size=112)
    assert b.images.shape == (2, 3, 112, 112)
    np.testing.assert_allclose(b.keypoints3d, xyz * 1000, rtol=1e-5)
    expected = (200 * xyz[..., :2] / xyz[..., 2:] + 112 + 0.5) * 0.5 - 0.5
    np.testing.assert_allclose(b.keypoints2d, expected, rtol=1e-5)
