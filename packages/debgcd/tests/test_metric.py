"""The GCD All/Old/New accuracy: one Hungarian assignment over all classes, checked by brute force."""

import itertools

import numpy as np
import pytest

from iclr25_debgcd import gcd_accuracy, known_vs_new_auroc
from iclr25_shared.metrics import cluster_accuracy


def brute_force(y_true, y_pred, old):
    """Best one-to-one map by trying every permutation; ties broken like nothing (returns all optimal maps)."""
    size = max(max(y_true), max(y_pred)) + 1
    best, maps = -1, []
    for perm in itertools.permutations(range(size)):  # perm[t] = cluster matched to class t
        hits = sum(perm[t] == p for t, p in zip(y_true, y_pred, strict=True))
        if hits > best:
            best, maps = hits, [perm]
        elif hits == best:
            maps.append(perm)
    out = []
    for perm in maps:
        ok = np.array([perm[t] == p for t, p in zip(y_true, y_pred, strict=True)])
        is_old = np.isin(y_true, list(old))
        out.append((ok.mean(), ok[is_old].mean(), ok[~is_old].mean()))
    return out


def test_hand_example():
    # true0 -> pred2 (3 of 4), true1 -> pred0 (2 of 3), true2 -> pred1 (2 of 3)
    y_true = [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    y_pred = [2, 2, 2, 1, 0, 0, 1, 1, 1, 0]
    acc = gcd_accuracy(y_true, y_pred, old_classes=[0])
    assert acc.all == pytest.approx(7 / 10)
    assert acc.old == pytest.approx(3 / 4)
    assert acc.new == pytest.approx(4 / 6)
    assert acc.mapping == {0: 2, 1: 0, 2: 1}


@pytest.mark.parametrize("seed", range(20))
def test_matches_brute_force_over_all_permutations(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 6))
    y_true = rng.integers(0, k, 25).tolist()
    y_pred = rng.integers(0, k + int(rng.integers(0, 2)), 25).tolist()  # sometimes one extra cluster
    old = set(range(k // 2))
    acc = gcd_accuracy(y_true, y_pred, old)
    options = brute_force(y_true, y_pred, old)
    assert acc.all == pytest.approx(options[0][0])
    assert any(acc.old == pytest.approx(o) and acc.new == pytest.approx(n) for _, o, n in options)


def test_all_equals_plain_hungarian_accuracy():
    rng = np.random.default_rng(1)
    y, p = rng.integers(0, 7, 300), rng.integers(0, 9, 300)
    assert gcd_accuracy(y, p, range(3)).all == pytest.approx(cluster_accuracy(y, p))


def test_one_global_assignment_differs_from_matching_subsets_separately():
    # Old class 0 (4 images) all in cluster 0; New class 1 (5 images): 3 in cluster 0, 2 in cluster 1.
    # Globally class 0 -> cluster 0, class 1 -> cluster 1: New = 2/5. Matching New alone would give 3/5.
    y_true = [0, 0, 0, 0, 1, 1, 1, 1, 1]
    y_pred = [0, 0, 0, 0, 0, 0, 0, 1, 1]
    acc = gcd_accuracy(y_true, y_pred, old_classes=[0])
    assert acc.old == 1.0 and acc.new == pytest.approx(2 / 5)
    new = np.array(y_true) == 1
    separately = cluster_accuracy(np.array(y_true)[new], np.array(y_pred)[new])
    assert separately == pytest.approx(3 / 5)


def test_invariant_to_renaming_clusters_and_perfect_is_one():
    rng = np.random.default_rng(2)
    y = rng.integers(0, 6, 200)
    p = np.where(rng.random(200) < 0.7, y, rng.integers(0, 6, 200))
    perm = rng.permutation(6)
    a, b = gcd_accuracy(y, p, [0, 1, 2]), gcd_accuracy(y, perm[p], [0, 1, 2])
    assert (a.all, a.old, a.new) == pytest.approx((b.all, b.old, b.new))
    perfect = gcd_accuracy(y, perm[y], [0, 1, 2])
    assert (perfect.all, perfect.old, perfect.new) == (1.0, 1.0, 1.0)


def test_more_clusters_than_classes():
    acc = gcd_accuracy([0, 0, 1, 1], [5, 5, 7, 3], old_classes=[0])
    assert acc.all == pytest.approx(3 / 4) and acc.old == 1.0 and acc.new == 0.5


def test_empty_new_or_old_subset_gives_nan_not_an_error():
    acc = gcd_accuracy([0, 1, 1], [1, 0, 0], old_classes=[0, 1])
    assert acc.all == 1.0 and acc.old == 1.0 and np.isnan(acc.new)


@pytest.mark.parametrize(
    ("y_true", "y_pred", "match"),
    [
        ([0, 1], [0], "same length"),
        ([], [], "must not be empty"),
        ([0, -1], [0, 1], "non-negative"),
        ([0.5, 1], [0, 1], "integer"),
        ([[0, 1]], [[0, 1]], "shape"),
    ],
)
def test_bad_inputs_are_refused(y_true, y_pred, match):
    with pytest.raises(ValueError, match=match):
        gcd_accuracy(y_true, y_pred, [0])


def test_auroc_against_pairwise_count():
    rng = np.random.default_rng(3)
    s, new = rng.random(40), rng.random(40) < 0.5
    pos, neg = s[new], s[~new]
    expected = np.mean([(a > b) + 0.5 * (a == b) for a in pos for b in neg])
    assert known_vs_new_auroc(s, new) == pytest.approx(expected)
    assert np.isnan(known_vs_new_auroc(s, np.ones(40, bool)))
    with pytest.raises(ValueError, match="finite"):
        known_vs_new_auroc(np.r_[np.nan, s[1:]], new)
