"""knn_similarity: structure, agreement with a numpy brute-force graph, duplicates, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from infomax_testlib import dense_cosine_knn

import iclr25_infomax as im


def test_structure_symmetric_nonnegative_zero_diagonal():
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(500, 12))
    K = im.knn_similarity(feats, k=7)
    assert sp.isspmatrix_csr(K)
    assert K.shape == (500, 500)
    assert abs(K - K.T).max() == 0
    assert K.data.min() > 0
    assert K.data.max() <= 1.0
    assert np.all(K.diagonal() == 0)
    assert K.nnz <= 2 * 500 * 7
    assert np.all(np.diff(K.indptr) >= 1)


def test_matches_numpy_brute_force():
    rng = np.random.default_rng(1)
    feats = rng.normal(size=(120, 6))
    K = im.knn_similarity(feats, k=5).toarray()
    ref = dense_cosine_knn(feats, 5)
    # same edges (ties aside) and same values
    np.testing.assert_allclose(K, ref, atol=1e-5)


def test_negative_cosine_is_clipped_to_zero():
    feats = np.array([[1.0, 0.0], [-1.0, 0.01], [0.9, 0.1], [-0.8, -0.2]])
    K = im.knn_similarity(feats, k=3).toarray()
    assert K.min() >= 0
    assert K[0, 1] == 0
    assert K[0, 2] > 0.9


def test_exact_duplicates_are_neighbours_and_self_is_excluded():
    rng = np.random.default_rng(2)
    base = rng.normal(size=(40, 5))
    feats = np.vstack([base, base, base])  # triplicates: self need not come first in the search
    K = im.knn_similarity(feats, k=4)
    assert np.all(K.diagonal() == 0)
    for i in range(40):
        assert K[i, i + 40] == pytest.approx(1.0, abs=1e-5)
        assert K[i, i + 80] == pytest.approx(1.0, abs=1e-5)


def test_euclidean_metric_gaussian_kernel():
    rng = np.random.default_rng(3)
    feats = rng.normal(size=(200, 3))
    K = im.knn_similarity(feats, k=5, metric="euclidean")
    assert abs(K - K.T).max() == 0
    assert K.data.min() > 0
    assert K.data.max() <= 1.0
    i, j = K.nonzero()
    d2 = ((feats[i] - feats[j]) ** 2).sum(1)
    # the kernel is a decreasing function of distance
    order = np.argsort(d2)
    assert np.all(np.diff(np.asarray(K[i, j]).ravel()[order]) <= 1e-9)


def test_hnsw_backend_recovers_most_edges():
    rng = np.random.default_rng(4)
    feats = rng.normal(size=(2000, 16)).astype(np.float32)
    exact = im.knn_similarity(feats, k=10, backend="exact")
    approx = im.knn_similarity(feats, k=10, backend="hnsw")
    recall = exact.multiply(approx > 0).nnz / exact.nnz
    assert recall > 0.9


@pytest.mark.parametrize(
    ("features", "kwargs", "error", "match"),
    [
        (np.ones((10, 3)), {"k": 10}, ValueError, "k must be"),
        (np.ones((10, 3)), {"k": 0}, ValueError, "k must be"),
        (np.ones((1, 3)), {"k": 1}, ValueError, "at least 2 rows"),
        (np.ones(10), {"k": 2}, ValueError, "2-D"),
        (np.vstack([np.ones((5, 3)), np.zeros((1, 3))]), {"k": 2}, ValueError, "all-zero"),
        (np.ones((10, 3)), {"k": 2, "metric": "manhattan"}, ValueError, "metric"),
        (np.ones((10, 3)), {"k": 2, "backend": "annoy"}, ValueError, "backend"),
        ([["a", "b"], ["c", "d"]], {"k": 1}, TypeError, "features"),
    ],
)
def test_bad_input(features, kwargs, error, match):
    with pytest.raises(error, match=match):
        im.knn_similarity(features, **kwargs)


def test_nan_and_inf_features_are_refused():
    feats = np.random.default_rng(5).normal(size=(20, 4))
    feats[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"finite.*row 3"):
        im.knn_similarity(feats, k=3)
    feats[3, 1] = np.inf
    with pytest.raises(ValueError, match="finite"):
        im.knn_similarity(feats, k=3)
