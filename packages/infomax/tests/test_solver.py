"""The InfoMax DQP solver (arXiv:2506.01701 §3): invariants, exactness on tiny instances, partitioning, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from infomax_testlib import brute_force, dense_objective, random_instance

import iclr25_infomax as im


def test_alpha_zero_is_top_p_by_score():
    rng = np.random.default_rng(0)
    scores = rng.random(200)
    _, _, K = random_instance(1, 200)
    got = im.select(scores, K, 17, alpha=0.0)
    expected = np.sort(np.argsort(-scores)[:17])
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("budget", [1, 7, 0.25, 1.0])
def test_exactly_p_unique_sorted(budget):
    _feats, scores, K = random_instance(2, 80)
    idx = im.select(scores, K, budget, alpha=1.0)
    p = im.resolve_budget(budget, 80)
    assert idx.dtype == np.int64
    assert idx.size == p
    assert np.unique(idx).size == p
    assert np.all(np.diff(idx) > 0)
    assert idx.min() >= 0
    assert idx.max() < 80


def test_deterministic_and_permutation_equivariant():
    _feats, scores, K = random_instance(3, 120, k=6)
    a = im.select(scores, K, 30, alpha=0.7, partitions=1)
    np.testing.assert_array_equal(a, im.select(scores, K, 30, alpha=0.7))
    perm = np.random.default_rng(4).permutation(120)
    b = im.select(scores[perm], K[np.ix_(perm, perm)], 30, alpha=0.7)
    np.testing.assert_array_equal(np.sort(perm[b]), a)


def test_exact_duplicates_never_both_selected():
    rng = np.random.default_rng(5)
    base = rng.normal(size=(30, 6))
    feats = np.vstack([base, base])  # sample i and i+30 are exact duplicates with equal scores
    s = rng.random(30)
    scores = np.concatenate([s, s])
    K = im.knn_similarity(feats, k=5)
    np.testing.assert_allclose(np.asarray(K[np.arange(30), np.arange(30) + 30]).ravel(), 1.0, atol=1e-5)
    # 2α(K_ab + K_ba) = 8 exceeds any score gap (< 1): keeping both members of a pair does not pay.
    for p in (5, 10, 15):
        idx = im.select(scores, K, p, alpha=2.0)
        assert np.unique(idx % 30).size == idx.size, f"p={p}: both members of a duplicate pair selected"


def test_duplicates_of_orthogonal_points_up_to_p_equal_unique_count():
    # Orthogonal bases: no similarity across pairs, so any selection with a doubled pair is strictly improved by
    # swapping one copy for an unused pair; this holds up to p = number of unique samples.
    base = np.eye(20)
    feats = np.vstack([base, base])
    s = np.random.default_rng(18).random(20)
    scores = np.concatenate([s, s])
    K = im.knn_similarity(feats, k=3)
    for p in (1, 10, 20):
        idx = im.select(scores, K, p, alpha=0.5)
        assert np.unique(idx % 20).size == p


def test_large_alpha_gives_an_independent_set():
    rng = np.random.default_rng(6)
    feats = rng.normal(size=(300, 8))
    scores = rng.random(300)
    K = im.knn_similarity(feats, k=8)
    idx = im.select(scores, K, 20, alpha=1e4)
    assert K[idx][:, idx].nnz == 0
    # and among independent sets it still prefers high scores: better than the score-blind worst
    assert scores[idx].mean() > scores.mean()


def test_sparse_objective_equals_dense_at_k_n_minus_1():
    rng = np.random.default_rng(7)
    feats = rng.normal(size=(25, 5))
    scores = rng.random(25)
    K = im.knn_similarity(feats, k=24)
    f = feats / np.linalg.norm(feats, axis=1, keepdims=True)
    dense = np.clip(f @ f.T, 0, None)
    np.fill_diagonal(dense, 0.0)
    np.testing.assert_allclose(K.toarray(), dense, atol=1e-5)
    for p in (3, 10, 25):
        idx = rng.choice(25, size=p, replace=False)
        assert im.objective(idx, scores, K, alpha=0.8) == pytest.approx(
            dense_objective(idx, scores, dense, 0.8), abs=1e-4
        )


def test_objective_matches_reference_and_accepts_masks():
    _, scores, K = random_instance(8, 40)
    idx = np.array([0, 3, 5, 11, 39])
    mask = np.zeros(40, dtype=bool)
    mask[idx] = True
    ref = dense_objective(idx, scores, K, 1.3)
    assert im.objective(idx, scores, K, alpha=1.3) == pytest.approx(ref)
    assert im.objective(mask, scores, sp.csr_matrix(K), alpha=1.3) == pytest.approx(ref)


def test_asymmetric_similarity_is_symmetrised_without_changing_the_objective():
    rng = np.random.default_rng(9)
    A = rng.random((12, 12)) * (rng.random((12, 12)) < 0.3)
    scores = rng.random(12)
    idx = np.array([1, 4, 7])
    assert im.objective(idx, scores, A, alpha=1.0) == pytest.approx(dense_objective(idx, scores, A, 1.0))
    np.testing.assert_array_equal(im.select(scores, A, 4), im.select(scores, (A + A.T) / 2, 4))


def test_partition_budgets_sum_exactly():
    for sizes, p in [([10, 10, 10], 7), ([3, 50, 7, 40], 13), ([1, 1, 1, 97], 4), ([5], 5)]:
        b = im.partition_budgets(sizes, p)
        assert b.sum() == p
        assert np.all(b >= 0)
        assert np.all(b <= np.asarray(sizes))
    b = im.partition_budgets([10, 10], 4, fixed_counts=[3, 0])
    assert b.sum() == 4
    assert b[0] >= 3


def test_partitions_select_exact_budget_and_p1_equals_no_partitioning():
    _, scores, K = random_instance(10, 150, k=6)
    one = im.select(scores, K, 31, alpha=1.0, partitions=1, seed=3)
    as_groups = im.select(scores, K, 31, alpha=1.0, partitions=np.zeros(150, dtype=int), seed=99)
    np.testing.assert_array_equal(one, as_groups)
    for P in (2, 4, 31):
        res = im.solve(scores, K, 31, alpha=1.0, partitions=P, seed=1)
        assert res.indices.size == 31
        assert np.unique(res.indices).size == 31
        assert res.budgets.sum() == 31
        assert res.budgets.size == P


def test_group_partitions_on_block_diagonal_k_equal_independent_solves():
    _f1, s1, K1 = random_instance(11, 40, k=5)
    _f2, s2, K2 = random_instance(12, 60, k=5)
    K = sp.block_diag([sp.csr_matrix(K1), sp.csr_matrix(K2)]).tocsr()
    scores = np.concatenate([s1, s2])
    groups = np.repeat([0, 1], [40, 60])
    got = im.select(scores, K, 20, alpha=1.0, partitions=groups)
    b = im.partition_budgets([40, 60], 20)
    expected = np.concatenate(
        [im.select(s1, K1, int(b[0]), alpha=1.0), 40 + im.select(s2, K2, int(b[1]), alpha=1.0)]
    )
    np.testing.assert_array_equal(got, np.sort(expected))


def test_history_is_monotone_and_beats_top_p_start():
    _, scores, K = random_instance(13, 300, k=8)
    res = im.solve(scores, K, 60, alpha=1.0, init="score")
    assert np.all(np.diff(res.history) >= -1e-9)
    assert res.history[0] == pytest.approx(im.objective(im.topk_select(scores, 60), scores, K, alpha=1.0))
    assert res.objective == pytest.approx(res.history[-1])
    assert res.objective > res.history[0]


def test_default_greedy_start_is_never_worse_than_greedy():
    for seed in range(8):
        _, scores, K = random_instance(100 + seed, 60, k=6)
        g = im.objective(im.greedy_select(scores, K, 12, alpha=1.0), scores, K, alpha=1.0)
        assert im.solve(scores, K, 12, alpha=1.0).objective >= g - 1e-9


def test_score_start_on_sparse_instances_reaches_greedy():
    # the paper's start (top-p by score) plus the gradient and exchange phases lands at or above greedy here
    rng = np.random.default_rng(14)
    feats = rng.normal(size=(3000, 16))
    scores = rng.random(3000)
    K = im.knn_similarity(feats, k=10)
    for alpha in (0.3, 1.0):
        g = im.objective(im.greedy_select(scores, K, 300, alpha=alpha), scores, K, alpha=alpha)
        assert im.solve(scores, K, 300, alpha=alpha, init="score").objective > g  # strictly better here


@pytest.mark.parametrize("alpha", [0.1, 0.3])
def test_solver_vs_brute_force_on_tiny_instances(alpha):
    ratios, exact = [], 0
    for seed in range(20):
        _, scores, K = random_instance(200 + seed, 16)
        best, _ = brute_force(scores, K, 5, alpha)
        got = im.solve(scores, K, 5, alpha=alpha).objective
        assert got <= best + 1e-9
        assert im.solve(scores, K, 5, alpha=alpha, init="score").objective <= best + 1e-9
        ratios.append(got / best)
        exact += np.isclose(got, best)
    assert exact >= 16, f"optimal on only {exact}/20 instances"
    assert min(ratios) >= 0.9


def test_milp_equals_brute_force():
    for seed in range(3):
        _, scores, K = random_instance(300 + seed, 12)
        best, _arg = brute_force(scores, K, 4, 1.0)
        idx = im.milp_select(scores, K, 4, alpha=1.0)
        assert dense_objective(idx, scores, K, 1.0) == pytest.approx(best, abs=1e-7)


def test_initial_set_is_kept_and_counts_toward_budget():
    _, scores, K = random_instance(15, 100, k=6)
    init = np.array([0, 1, 2, 50])
    for P in (1, 3):
        idx = im.select(scores, K, 20, alpha=1.0, initial=init, partitions=P)
        assert idx.size == 20
        assert set(init) <= set(idx.tolist())
    np.testing.assert_array_equal(im.select(scores, K, 4, initial=init), init)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"budget": 0}, "budget"),
        ({"budget": 101}, "budget"),
        ({"budget": -0.5}, "budget"),
        ({"budget": 1.5}, "budget"),
        ({"budget": 10, "alpha": -1.0}, "alpha"),
        ({"budget": 10, "partitions": 11}, "partitions"),
        ({"budget": 10, "partitions": 0}, "partitions"),
        ({"budget": 10, "iterations": 0}, "iterations"),
        ({"budget": 3, "initial": [1, 2, 3, 4]}, "initial"),
        ({"budget": 3, "initial": [1, 1]}, "initial"),
        ({"budget": 10, "init": "best"}, "init"),
    ],
)
def test_bad_arguments(kwargs, message):
    _, scores, K = random_instance(16, 100)
    with pytest.raises(ValueError, match=message):
        im.select(scores, K, **kwargs)


def test_bad_budget_type():
    _, scores, K = random_instance(16, 30)
    with pytest.raises(TypeError, match="budget"):
        im.select(scores, K, True)
    with pytest.raises(TypeError, match="budget"):
        im.select(scores, K, "10")


def test_bad_scores_and_similarity():
    _, scores, K = random_instance(17, 30)
    bad = scores.copy()
    bad[4] = np.nan
    with pytest.raises(ValueError, match="scores must be finite"):
        im.select(bad, K, 5)
    bad[4] = np.inf
    with pytest.raises(ValueError, match="scores must be finite"):
        im.select(bad, K, 5)
    with pytest.raises(ValueError, match=r"shape \(29, 29\)"):
        im.select(scores[:29], K, 5)  # scores and similarity (features) of different lengths
    neg = K.copy()
    neg[0, 1] = neg[1, 0] = -0.2
    with pytest.raises(ValueError, match="non-negative"):
        im.select(scores, neg, 5)
    nan = K.copy()
    nan[2, 3] = np.nan
    with pytest.raises(ValueError, match="finite"):
        im.objective([1, 2], scores, nan)
    with pytest.raises(ValueError, match="1-D"):
        im.select(scores[:, None], K, 5)
