"""The universal set and the exact heavy-entry finder against a dense computation (arXiv:2410.05462 §2-3)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from scipy.special import softmax

from iclr25_levattention import (
    brute_force_heavy_entries,
    heavy_entries,
    leverage_scores,
    sensitivities,
    tensor_dim,
    universal_set,
)


def dense_attention(Q, K, p):
    """A = rownormalise(|QKᵀ|^p), written out in full (the independent reference)."""
    F = np.abs(np.asarray(Q, float) @ np.asarray(K, float).T) ** p
    return F / F.sum(axis=1, keepdims=True)


def inputs(kind: str, rng, n=600, d=5):
    if kind == "gaussian":
        return rng.standard_normal((n, d)), rng.standard_normal((n, d))
    if kind == "heavy_tailed":
        return rng.standard_t(1.5, size=(n, d)), rng.standard_t(1.5, size=(n, d))
    if kind == "rank_deficient":
        basis = rng.standard_normal((2, d))
        K = rng.standard_t(2, size=(n, 2)) @ basis
        return rng.standard_normal((n, d)), K
    if kind == "outliers":  # a few huge keys, many small: the heavy columns are few and obvious
        K = rng.standard_normal((n, d))
        K[rng.choice(n, 5, replace=False)] *= 50
        return rng.standard_normal((n, d)), K
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["gaussian", "heavy_tailed", "rank_deficient", "outliers"])
@pytest.mark.parametrize("p", [2, 4])
@pytest.mark.parametrize("eps", [0.02, 0.05, 0.1])
def test_complete_and_exact_against_dense_attention(kind, p, eps):
    rng = np.random.default_rng(zlib.crc32(f"{kind}-{p}-{eps}".encode()))
    Q, K = inputs(kind, rng)
    A = dense_attention(Q, K, p)
    # No entry sits on the threshold within rounding, so the comparison is exact set equality.
    assert not np.any(np.abs(A - eps) < 1e-9)
    truth = set(zip(*np.nonzero(eps <= A)))
    result = heavy_entries(Q, K, eps, p)
    assert result.pairs() == {(int(i), int(j)) for i, j in truth}
    np.testing.assert_allclose(result.values, A[result.rows, result.cols], rtol=1e-9)
    assert np.all(result.values >= eps)
    # Every heavy column is in U, and |U| obeys both bounds.
    assert set(result.cols.tolist()) <= set(result.universal_set.tolist())
    assert result.universal_set.size <= result.bound + 1e-9
    assert result.bound <= tensor_dim(Q.shape[1], p // 2) / eps <= Q.shape[1] ** (p / 2) / eps


@pytest.mark.parametrize("p", [2, 4])
def test_normalizers_are_exact(p):
    rng = np.random.default_rng(10)
    Q, K = inputs("heavy_tailed", rng, n=400, d=6)
    result = heavy_entries(Q, K, 0.1, p)
    brute = np.sum(np.abs(Q @ K.T) ** p, axis=1)
    np.testing.assert_allclose(result.normalizers, brute, rtol=1e-10)


def test_p2_normalizer_is_the_quadratic_form():
    rng = np.random.default_rng(11)
    Q, K = rng.standard_normal((50, 8)), rng.standard_normal((300, 8))
    result = heavy_entries(Q, K, 0.5, 2)
    np.testing.assert_allclose(result.normalizers, np.einsum("ij,jk,ik->i", Q, K.T @ K, Q), rtol=1e-10)


@pytest.mark.parametrize("p", [2, 4])
def test_universal_set_is_exactly_the_columns_that_some_query_makes_heavy(p):
    """j ∈ U ⇔ some query makes A_qj ≥ eps; for p = 2 the adversarial query q* = (KᵀK)⁺k_j attains σ_j."""
    rng = np.random.default_rng(12)
    _, K = inputs("heavy_tailed", rng, n=300, d=4)
    eps = 0.05
    U = set(universal_set(K, eps, p).tolist())
    sens = sensitivities(K, p)
    assert set(np.flatnonzero(sens >= eps).tolist()) == U
    if p == 2:
        Q_star = (np.linalg.pinv(K.T @ K) @ K.T).T  # one adversarial query per key
        A = dense_attention(Q_star, K, 2)
        np.testing.assert_allclose(np.diag(A), leverage_scores(K), rtol=1e-8)
        heavy_cols = {j for j in range(len(K)) if A[j, j] >= eps}
        assert heavy_cols == U
    # Random queries never make a column outside U heavy.
    Q = rng.standard_normal((3000, 4)) * rng.pareto(1.0, size=(3000, 1))
    cols = set(np.nonzero(dense_attention(Q, K, p) >= eps)[1].tolist())
    assert cols <= U


def test_agrees_with_brute_force_baseline_and_chunk_size_does_not_matter():
    rng = np.random.default_rng(13)
    Q, K = inputs("outliers", rng, n=700, d=6)
    brute = brute_force_heavy_entries(Q, K, 0.05, 2, chunk_size=64)
    for chunk in (1, 7, 1024):
        ours = heavy_entries(Q, K, 0.05, 2, chunk_size=chunk)
        assert ours.pairs() == brute.pairs()
    np.testing.assert_allclose(ours.normalizers, brute.normalizers, rtol=1e-10)


def test_zero_query_rows_are_degenerate_and_report_nothing():
    rng = np.random.default_rng(14)
    K = rng.standard_normal((100, 3))
    K[:, 2] = 0.0  # keys span only the first two axes
    Q = rng.standard_normal((5, 3))
    Q[1] = 0.0
    Q[3] = [0.0, 0.0, 7.0]  # orthogonal to every key
    result = heavy_entries(Q, K, 0.02, 2)
    assert result.degenerate_rows.tolist() == [1, 3]
    assert not {1, 3} & set(result.rows.tolist())
    brute = brute_force_heavy_entries(Q, K, 0.02, 2)
    assert set(brute.degenerate_rows.tolist()) >= {1}
    assert result.pairs() == brute.pairs()


def test_integer_and_float32_inputs_give_the_float64_answer():
    rng = np.random.default_rng(15)
    K = rng.integers(-5, 6, size=(200, 4))
    Q = rng.integers(-5, 6, size=(50, 4))
    ref = heavy_entries(Q.astype(float), K.astype(float), 0.05)
    assert heavy_entries(Q, K, 0.05).pairs() == ref.pairs()
    assert heavy_entries(Q.astype(np.float32), K.astype(np.float32), 0.05).pairs() == ref.pairs()


def test_softmax_has_no_small_universal_set_documented_negative_case():
    """Brief §5.1/§5.4 item 6: keys on a circle; any key is softmax-heavy for q = c·k_j, but none is p=2-heavy."""
    n = 256
    theta = 2 * np.pi * np.arange(n) / n
    K = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    tau = leverage_scores(K)
    np.testing.assert_allclose(tau, 2.0 / n, rtol=1e-9)
    U = universal_set(K, 0.05, 2)
    assert U.size == 0  # for |x|^2 no key can ever get weight >= 0.05 ...
    Q = 1e5 * K  # ... but with softmax each key j dominates the row of q = c·k_j
    A_soft = softmax(Q @ K.T, axis=1)
    assert np.all(np.diag(A_soft) > 0.5)
    # so a universal set for softmax at eps = 0.5 would need all n keys; the leverage set misses every one.
    heavy_soft_cols = set(np.nonzero(A_soft >= 0.5)[1].tolist())
    assert len(heavy_soft_cols) == n
    assert not heavy_soft_cols & set(U.tolist())
    assert len(heavy_entries(Q, K, 0.05, 2)) == 0  # correct for |x|^2: A_qj <= 2/n there
    with pytest.raises(TypeError, match="positive even integer"):
        heavy_entries(Q, K, 0.05, "exp")


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"Q": np.ones((3, 4)), "K": np.ones((5, 3))}, ValueError, "must share d"),
        ({"eps": 0.0}, ValueError, r"eps must be in \(0.0, 1.0\]"),
        ({"eps": -0.1}, ValueError, r"eps must be in \(0.0, 1.0\]"),
        ({"eps": 1.5}, ValueError, r"eps must be in \(0.0, 1.0\]"),
        ({"eps": float("nan")}, ValueError, r"eps must be a finite number in \(0.0, 1.0\]"),
        ({"eps": "0.1"}, TypeError, "eps must be a number"),
        ({"p": 3}, ValueError, "heavy_entries .exact routine.*lewis_weights"),
        ({"p": 0}, ValueError, "positive even integer"),
        ({"p": -2}, ValueError, "positive even integer"),
        ({"p": 2.5}, ValueError, "positive even integer"),
        (
            {"Q": np.array([[np.nan, 1.0, 1.0]])},
            ValueError,
            "Q must be finite; 1 of 3 entries are NaN or inf",
        ),
        (
            {"K": np.array([[1.0, np.inf, 1.0]])},
            ValueError,
            "K must be finite; 1 of 3 entries are NaN or inf",
        ),
        ({"K": np.zeros((0, 3))}, ValueError, "K must have at least one row"),
        ({"Q": np.zeros((0, 3))}, ValueError, "Q must have at least one row"),
        ({"chunk_size": 0}, ValueError, "chunk_size"),
    ],
)
def test_bad_input_is_rejected_with_a_named_error(kwargs, exc, match):
    args = {"Q": np.ones((4, 3)), "K": np.eye(3), "eps": 0.1, "p": 2} | kwargs
    with pytest.raises(exc, match=match):
        heavy_entries(args.pop("Q"), args.pop("K"), args.pop("eps"), args.pop("p"), **args)


def test_universal_set_rejects_odd_p_and_names_the_routine():
    with pytest.raises(ValueError, match="universal_set"):
        universal_set(np.eye(3), 0.1, 3)
    with pytest.raises(ValueError, match="p must be a finite real number > 0"):
        brute_force_heavy_entries(np.eye(3), np.eye(3), 0.1, -1)
