"""Global properties and baselines against closed forms and brute force."""

import math

import numpy as np
import pytest

from iclr25_diffusion_shapley import (
    class_entropy,
    class_share,
    frechet_pixel_distance,
    pixel_diversity,
    pixel_similarity_attribution,
    size_only_attribution,
)
from iclr25_diffusion_shapley._properties import downsample


class FixedClassifier:
    """Predicts a stored label per image (the images' first pixel encodes it)."""

    def predict(self, images):
        return np.rint((images[:, 0, 0, 0] + 1) * 4.5).astype(np.int64)


def images_with_labels(labels):
    x = np.zeros((len(labels), 1, 2, 2), np.float32)
    x[:, 0, 0, 0] = np.asarray(labels) / 4.5 - 1
    return x


def test_class_entropy_closed_forms():
    ent = class_entropy(FixedClassifier(), 10)
    assert ent(images_with_labels(np.arange(10).repeat(3))) == pytest.approx(math.log(10))
    assert ent(images_with_labels([4] * 7)) == pytest.approx(0.0)
    assert ent(images_with_labels([0, 0, 1, 1])) == pytest.approx(math.log(2))


def test_class_share_counts_the_target_class():
    share = class_share(FixedClassifier(), 3)
    assert share(images_with_labels([3, 3, 1, 0])) == pytest.approx(0.5)


def test_pixel_diversity_matches_brute_force():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(6, 1, 3, 3)).astype(np.float32)
    flat = (x.reshape(6, -1).astype(np.float64) + 1) / 2
    ref = np.mean([np.linalg.norm(flat[i] - flat[j]) for i in range(6) for j in range(6) if i != j])
    assert pixel_diversity(x) == pytest.approx(ref, rel=1e-9)
    assert pixel_diversity(np.repeat(x[:1], 4, axis=0)) == pytest.approx(0.0, abs=1e-6)


def test_frechet_pixel_distance_is_zero_on_the_reference_and_grows_with_a_shift():
    rng = np.random.default_rng(0)
    ref = np.clip(rng.normal(0, 0.3, size=(300, 1, 4, 4)), -1, 1).astype(np.float32)
    fd = frechet_pixel_distance(ref, dims=4)
    assert fd(ref) == pytest.approx(0.0, abs=1e-6)
    assert fd(np.clip(ref + 0.3, -1, 1)) > fd(np.clip(ref + 0.1, -1, 1)) > 0.01


def test_pixel_similarity_matches_brute_force():
    rng = np.random.default_rng(1)
    gen = rng.uniform(-1, 1, size=(4, 1, 2, 2)).astype(np.float32)
    train = rng.uniform(-1, 1, size=(5, 1, 2, 2)).astype(np.float32)
    owners = np.array([0, 1, 1, 0, 1])

    def cos(a, b):
        a, b = (a.ravel() + 1) / 2, (b.ravel() + 1) / 2
        return a @ b / (np.linalg.norm(a) * np.linalg.norm(b))

    for reduce, agg in (("mean", np.mean), ("max", np.max)):
        ref = [
            np.mean([agg([cos(g, train[k]) for k in np.flatnonzero(owners == i)]) for g in gen])
            for i in (0, 1)
        ]
        np.testing.assert_allclose(pixel_similarity_attribution(gen, train, owners, 2, reduce=reduce), ref)
    with pytest.raises(ValueError, match="reduce"):
        pixel_similarity_attribution(gen, train, owners, 2, reduce="median")
    with pytest.raises(ValueError, match="contributor 2 has no data"):
        pixel_similarity_attribution(gen, train, owners, 3)


def test_size_only_baseline_and_downsample():
    np.testing.assert_array_equal(size_only_attribution(3), [1, 1, 1])
    x = np.arange(16, dtype=np.float32).reshape(1, 4, 4)
    np.testing.assert_allclose(downsample(x, 2)[0], [[2.5, 4.5], [10.5, 12.5]])
    with pytest.raises(ValueError, match="divisible"):
        downsample(np.zeros((1, 5, 5)), 2)
