"""Baselines: exact budgets, brute-force cross-checks, and the peer libraries' reported bugs as regressions."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from infomax_testlib import dense_objective, random_instance

import iclr25_infomax as im


def test_random_select_exact_seeded():
    a = im.random_select(100, 0.3, seed=1)
    assert a.size == 30
    assert np.unique(a).size == 30
    np.testing.assert_array_equal(a, im.random_select(100, 0.3, seed=1))
    assert not np.array_equal(a, im.random_select(100, 0.3, seed=2))


def test_topk_both_directions():
    scores = np.array([0.5, 0.9, 0.1, 0.9, 0.3])
    np.testing.assert_array_equal(im.topk_select(scores, 2, direction="hard_first"), [1, 3])
    np.testing.assert_array_equal(im.topk_select(scores, 2, direction="easy_first"), [2, 4])
    with pytest.raises(ValueError, match="direction"):
        im.topk_select(scores, 2, direction="hardest")


def test_ccs_prunes_the_hardest_and_covers_the_score_range():
    scores = np.linspace(0, 1, 1000)
    idx = im.ccs_select(scores, 100, hard_prune=0.1, num_strata=10, seed=0)
    assert idx.size == 100
    assert np.unique(idx).size == 100
    assert scores[idx].max() < scores[900]  # the hardest 10 % are pruned
    counts = np.histogram(scores[idx], bins=10, range=(0, 0.9))[0]
    assert counts.min() >= 8  # every stratum is represented (about 10 each)
    big = im.ccs_select(scores, 950, hard_prune=0.1)  # more than survives pruning: refilled
    assert big.size == 950


def naive_kcenter(x: np.ndarray, start: list[int], p: int) -> list[int]:
    sel = list(start)
    while len(sel) < p:
        d = np.min(((x[:, None, :] - x[None, sel, :]) ** 2).sum(-1), axis=1)
        d[sel] = -1
        sel.append(int(np.argmax(d)))
    return sel


def test_kcenter_is_farthest_first_and_deterministic():
    x = np.random.default_rng(0).normal(size=(150, 3))
    got = im.kcenter_select(x, 12, initial=[7])
    assert got.tolist() == naive_kcenter(x, [7], 12)
    np.testing.assert_array_equal(got, im.kcenter_select(x, 12, initial=[7]))


def test_kcenter_returns_budget_including_initial_set():
    # selection-via-proxy #2: k-center returned budget + size of the initial set
    x = np.random.default_rng(1).normal(size=(200, 4))
    init = [3, 10, 50, 120]
    got = im.kcenter_select(x, 20, initial=init)
    assert got.size == 20
    assert np.unique(got).size == 20
    assert got[:4].tolist() == init  # anomalib #3459: the initial centre is kept, not dropped


def test_kcenter_is_not_random_sampling():
    # PatchCore #46: `already_selected` not updated -> degenerate to random. Farthest-first covers far better.
    x = np.random.default_rng(2).normal(size=(2000, 2))
    idx, radius = im.kcenter_select(x, 50, seed=0, return_radius=True)
    rand = im.random_select(2000, 50, seed=0)
    d_rand = np.sqrt(np.min(((x[:, None] - x[None, rand]) ** 2).sum(-1), axis=1).max())
    d_kc = np.sqrt(np.min(((x[:, None] - x[None, idx]) ** 2).sum(-1), axis=1).max())
    assert radius == pytest.approx(d_kc, rel=1e-6)
    assert d_kc < 0.6 * d_rand


def fl_value(K: np.ndarray, sel: list[int]) -> float:
    return float(K[:, sel].max(axis=1).sum()) if sel else 0.0


def test_facility_location_matches_naive_greedy_with_monotone_gains():
    # apricot #19: duplicate indices and non-monotone gains with a precomputed sparse matrix
    _, _, K = random_instance(3, 60, k=6)
    idx, gains = im.facility_location_select(sp.csr_matrix(K), 15, return_gains=True)
    assert idx.size == 15
    assert np.unique(idx).size == 15
    assert np.all(np.diff(gains) <= 1e-9)
    Kd = K.copy()
    np.fill_diagonal(Kd, 1.0)
    sel: list[int] = []
    for _ in range(15):
        cand = [j for j in range(60) if j not in sel]
        vals = [fl_value(Kd, [*sel, j]) for j in cand]
        sel.append(cand[int(np.argmax(vals))])
    assert fl_value(Kd, idx.tolist()) == pytest.approx(fl_value(Kd, sel))
    np.testing.assert_allclose(
        gains, np.diff([0.0] + [fl_value(Kd, idx[: i + 1].tolist()) for i in range(15)])
    )


def test_facility_location_with_initial_set_and_exact_budget():
    # apricot #29: an initial subset gave a shape mismatch (budget vs budget - |initial|)
    _, _, K = random_instance(4, 80, k=5)
    idx = im.facility_location_select(K, 25, initial=[1, 2, 3])
    assert idx.size == 25
    assert idx[:3].tolist() == [1, 2, 3]
    assert np.unique(idx).size == 25


def test_greedy_matches_naive_greedy():
    _, scores, K = random_instance(5, 50, k=6)
    idx, gains = im.greedy_select(scores, K, 12, alpha=0.8, return_gains=True)
    sel: list[int] = []
    for _ in range(12):
        cand = [j for j in range(50) if j not in sel]
        vals = [dense_objective(np.array([*sel, j]), scores, K, 0.8) for j in cand]
        sel.append(cand[int(np.argmax(vals))])
    assert idx.tolist() == sel
    assert np.all(np.diff(gains) <= 1e-12)  # submodular: gains never increase


def test_greedy_keeps_the_budget_when_gains_turn_negative():
    _, scores, K = random_instance(6, 30, k=10)
    idx = im.greedy_select(scores, K, 30, alpha=50.0)
    assert np.array_equal(np.sort(idx), np.arange(30))


def test_milp_refuses_large_instances():
    _, scores, K = random_instance(7, 50)
    with pytest.raises(ValueError, match="max_n"):
        im.milp_select(scores, K, 5, max_n=40)


def test_infomax_after_hard_pruning_never_keeps_the_hardest_tenth_and_solves_the_rest():
    from iclr25_infomax._experiment import select_by

    feats, scores, K = random_instance(31, 60)
    Ks = sp.csr_matrix(K)
    hardest = set(np.argsort(-scores, kind="stable")[:6].tolist())  # 10 % of 60
    for p in (5, 20, 54):
        idx = select_by("infomax_hp", p, scores=scores, similarity=Ks, features=feats, alpha=1.0, seed=0)
        assert idx.size == p == np.unique(idx).size
        assert not hardest & set(idx.tolist()), f"p={p}: a pruned (hardest 10 %) sample was kept"
        rest = np.setdiff1d(np.arange(60), sorted(hardest))
        direct = im.solve(scores[rest], K[np.ix_(rest, rest)], p, alpha=1.0).indices
        assert dense_objective(idx, scores, K, 1.0) == pytest.approx(
            dense_objective(rest[direct], scores, K, 1.0)
        )
    # past 90 % of the pool the pruned samples come back (only as many as the budget needs)
    idx = select_by("infomax_hp", 57, scores=scores, similarity=Ks, features=feats, alpha=1.0, seed=0)
    assert idx.size == 57 and len(hardest & set(idx.tolist())) == 3
