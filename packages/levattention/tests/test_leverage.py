"""Leverage scores, tensor-power sensitivities and Lewis weights (arXiv:2410.05462 §2-3)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from iclr25_levattention import (
    leverage_scores,
    lewis_weights,
    sensitivities,
    symmetric_tensor_features,
    tensor_dim,
)


def _reference_leverage(K: np.ndarray) -> np.ndarray:
    """k_jᵀ (KᵀK)⁺ k_j straight from the definition (numpy pinv), for well-conditioned K."""
    return np.einsum("ij,jk,ik->i", K, np.linalg.pinv(K.T @ K), K)


def _heavy_tailed(rng, n, d):
    return rng.standard_t(2, size=(n, d))


@pytest.mark.parametrize("shape", [(50, 3), (400, 8), (7, 7), (5, 9)])
def test_scores_match_definition_lie_in_unit_interval_and_sum_to_rank(shape):
    rng = np.random.default_rng(0)
    K = rng.standard_normal(shape)
    tau = leverage_scores(K)
    assert tau.shape == (shape[0],)
    assert np.all(tau >= 0)
    assert np.all(tau <= 1 + 1e-12)
    assert tau.sum() == pytest.approx(np.linalg.matrix_rank(K), abs=1e-9)
    if shape[0] > shape[1]:
        np.testing.assert_allclose(tau, _reference_leverage(K), rtol=1e-9, atol=1e-12)


def test_rank_deficient_keys_sum_to_true_rank():
    rng = np.random.default_rng(1)
    K = rng.standard_normal((300, 3)) @ rng.standard_normal((3, 10))  # rank 3 in d = 10
    tau = leverage_scores(K)
    assert tau.sum() == pytest.approx(3.0, abs=1e-8)
    # The definition with a pseudo-inverse of the projected Gram agrees on the 3-dim row space.
    u, _s, _vt = np.linalg.svd(K, full_matrices=False)
    np.testing.assert_allclose(tau, np.sum(u[:, :3] ** 2, axis=1), rtol=1e-9)


def test_invariant_to_invertible_right_multiplication():
    rng = np.random.default_rng(2)
    K = _heavy_tailed(rng, 500, 6)
    M = rng.standard_normal((6, 6)) + 3 * np.eye(6)
    assert abs(np.linalg.det(M)) > 1e-3
    np.testing.assert_allclose(leverage_scores(K @ M), leverage_scores(K), rtol=1e-8, atol=1e-12)


def test_duplicated_row_follows_sherman_morrison_and_halves_a_unique_direction():
    rng = np.random.default_rng(3)
    K = rng.standard_normal((40, 4))
    tau = leverage_scores(K)
    j = 5
    dup = leverage_scores(np.vstack([K, K[j]]))
    # Adding a copy: τ' = τ / (1 + τ) for both copies.
    assert dup[j] == pytest.approx(tau[j] / (1 + tau[j]), rel=1e-9)
    assert dup[-1] == pytest.approx(dup[j], rel=1e-12)
    # A key alone in its direction has τ = 1; duplicating it halves both copies (Sherman-Morrison).
    K2 = np.hstack([K, np.zeros((40, 1))])
    K2 = np.vstack([K2, [0, 0, 0, 0, 2.5]])
    assert leverage_scores(K2)[-1] == pytest.approx(1.0, abs=1e-12)
    halves = leverage_scores(np.vstack([K2, K2[-1]]))
    np.testing.assert_allclose(halves[-2:], [0.5, 0.5], rtol=1e-12)


def test_leverage_bounds_p2_attention_with_equality_at_the_adversarial_query():
    rng = np.random.default_rng(4)
    K = _heavy_tailed(rng, 200, 5)
    tau = leverage_scores(K)
    Q = rng.standard_normal((300, 5)) * 10
    A = (Q @ K.T) ** 2
    A /= A.sum(axis=1, keepdims=True)
    assert np.all(tau[None, :] * (1 + 1e-10) >= A)
    G_pinv = np.linalg.pinv(K.T @ K)
    for j in (0, 17, int(np.argmax(tau))):
        q = G_pinv @ K[j]
        row = (K @ q) ** 2
        assert row[j] / row.sum() == pytest.approx(tau[j], rel=1e-9)


@pytest.mark.parametrize(("d", "m"), [(3, 1), (4, 2), (3, 3), (5, 2)])
def test_symmetric_tensor_features_give_powers_of_inner_products(d, m):
    rng = np.random.default_rng(5)
    X, Y = rng.standard_normal((6, d)), rng.standard_normal((7, d))
    fx, fy = symmetric_tensor_features(X, m), symmetric_tensor_features(Y, m)
    assert fx.shape == (6, tensor_dim(d, m)) == (6, math.comb(d + m - 1, m))
    np.testing.assert_allclose(fx @ fy.T, (X @ Y.T) ** m, rtol=1e-12, atol=1e-12)


def test_p4_rank_revealing_sum_is_21_where_naive_qr_overcounts():
    """Brief §5.1 [checked]: p = 4, n = 3000, d = 6 heavy-tailed data; Σ τ = 21; naive QR on K⊗K gives 36."""
    rng = np.random.default_rng(6)
    K = _heavy_tailed(rng, 3000, 6)
    sens = sensitivities(K, 4)
    assert sens.sum() == pytest.approx(21.0, abs=1e-6)
    kron = np.einsum("ni,nj->nij", K, K).reshape(3000, 36)  # the full tensor square, rank 21 of 36 columns
    lev_kron = leverage_scores(kron)
    assert lev_kron.sum() == pytest.approx(21.0, abs=1e-6)
    np.testing.assert_allclose(lev_kron, sens, rtol=1e-6, atol=1e-10)
    q_naive = np.linalg.qr(kron)[0]  # QR without a rank threshold over-counts the rank
    assert np.sum(q_naive**2) == pytest.approx(36.0, abs=1e-6)


def test_p4_sensitivity_bounds_every_query_and_equals_leverage_at_p2():
    rng = np.random.default_rng(7)
    K = _heavy_tailed(rng, 300, 4)
    np.testing.assert_allclose(sensitivities(K, 2), leverage_scores(K), rtol=1e-12)
    sens = sensitivities(K, 4)
    assert sens.sum() <= tensor_dim(4, 2) + 1e-8 <= 4**2
    Q = rng.standard_normal((2000, 4))
    A = (Q @ K.T) ** 4
    A /= A.sum(axis=1, keepdims=True)
    assert np.all(sens[None, :] * (1 + 1e-9) >= A)
    # The bound is close to tight for the key with the largest score (q = k_j is a natural probe).
    j = int(np.argmax(sens))
    row = (K @ K[j]) ** 4
    assert row[j] / row.sum() > 0.5 * sens[j]


def test_lewis_weights_p2_are_leverage_scores_and_other_p_satisfy_the_fixed_point():
    rng = np.random.default_rng(8)
    K = _heavy_tailed(rng, 200, 4)
    np.testing.assert_allclose(lewis_weights(K, 2), leverage_scores(K), rtol=1e-9)
    for p in (1.0, 3.0):
        w = lewis_weights(K, p)
        assert w.sum() == pytest.approx(4.0, abs=1e-6)
        scaled = K * (w ** (0.5 - 1.0 / p))[:, None]
        np.testing.assert_allclose(w, _reference_leverage(scaled), rtol=1e-6, atol=1e-10)


@pytest.mark.parametrize("bad_p", [0, -1, 4, 5.5, True])
def test_lewis_weights_reject_p_outside_0_4(bad_p):
    with pytest.raises(ValueError, match="p must be in"):
        lewis_weights(np.ones((5, 2)), bad_p)


@pytest.mark.parametrize(
    ("K", "exc", "match"),
    [
        (np.zeros((0, 3)), ValueError, "at least one row"),
        (np.zeros((3, 0)), ValueError, "at least one row"),
        (np.ones(5), ValueError, "2-D"),
        (np.array([[1.0, np.nan]]), ValueError, "NaN or inf"),
        (np.array([[1.0, np.inf]]), ValueError, "NaN or inf"),
        (np.ones((3, 2), dtype=complex), TypeError, "real numbers"),
        (np.ones((3, 2), dtype=bool), TypeError, "real numbers"),
        (np.array([["a", "b"]]), TypeError, "real numbers"),
    ],
)
def test_bad_keys_are_rejected_by_name(K, exc, match):
    with pytest.raises(exc, match=match):
        leverage_scores(K)


@pytest.mark.parametrize("p", [3, 0, -2, 2.5, float("inf"), True])
def test_sensitivities_need_even_p_and_name_the_approximate_route(p):
    with pytest.raises((ValueError, TypeError), match="p must be a positive even integer") as info:
        sensitivities(np.ones((4, 2)), p)
    if info.type is ValueError:
        assert "lewis_weights" in str(info.value)


@pytest.mark.parametrize("rank_tol", [-0.1, 1.0, 2])
def test_bad_rank_tol(rank_tol):
    with pytest.raises(ValueError, match="rank_tol"):
        leverage_scores(np.ones((4, 2)), rank_tol=rank_tol)


def test_integer_input_and_all_zero_keys():
    K = np.arange(12).reshape(6, 2)
    assert leverage_scores(K).sum() == pytest.approx(2.0)
    assert np.all(leverage_scores(np.zeros((4, 3))) == 0.0)
