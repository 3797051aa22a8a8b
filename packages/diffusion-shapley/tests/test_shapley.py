"""Shapley / KernelSHAP / Banzhaf / LOO / datamodel / LDS (arXiv:2407.03153 Section 3-4) against brute force.

Expected values come from independent brute force (average marginal contribution over all n! orderings, explicit
loops over coalitions), closed forms (additive and symmetric games) or the game's construction, never from the
code under test.
"""

import itertools
import math

import numpy as np
import pytest

from iclr25_diffusion_shapley import (
    CachedGame,
    all_subsets,
    banzhaf,
    banzhaf_from_samples,
    banzhaf_from_table,
    datamodel,
    exact_shapley,
    kernel_shap,
    kernel_shap_from_samples,
    lds,
    lds_interval,
    leave_one_out,
    sample_datamodel_subsets,
    sample_shapley_kernel,
    shapley_from_table,
    shapley_kernel_size_probabilities,
    subset_table,
)


def permutation_shapley(game, n):
    """Independent reference: average marginal contribution over all n! orderings."""
    phi = np.zeros(n)
    for order in itertools.permutations(range(n)):
        mask = np.zeros(n, dtype=bool)
        prev = game(mask.copy())
        for i in order:
            mask[i] = True
            cur = game(mask.copy())
            phi[i] += cur - prev
            prev = cur
    return phi / math.factorial(n)


def random_game(n, seed):
    """A non-additive game: a random value for every coalition."""
    table = np.random.default_rng(seed).normal(size=2**n)

    def v(mask):
        return float(table[int(np.dot(mask, 1 << np.arange(n)))])

    return v


def weighted_majority(weights, quota):
    w = np.asarray(weights, dtype=float)
    return lambda mask: float(w[mask].sum() >= quota)


def exact_kernel_weights(n):
    """Shapley-kernel probability of every non-trivial coalition, written from its definition."""
    masks = all_subsets(n)[1:-1]
    s = masks.sum(axis=1)
    w = np.array([(n - 1) / (math.comb(n, k) * k * (n - k)) for k in s])
    return masks, w / w.sum()


# ---- exact Shapley --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 5])
def test_exact_shapley_matches_permutation_brute_force(n):
    game = random_game(n, seed=n)
    np.testing.assert_allclose(exact_shapley(game, n), permutation_shapley(game, n), atol=1e-12)


def test_weighted_majority_game_known_values():
    # weights (3, 1, 1), quota 4: player 0 is needed with at least one other; by hand phi = (2/3, 1/6, 1/6)
    phi = exact_shapley(weighted_majority([3, 1, 1], 4), 3)
    np.testing.assert_allclose(phi, [2 / 3, 1 / 6, 1 / 6], atol=1e-12)


def test_efficiency_exact_shapley_sums_to_grand_minus_empty():
    game = random_game(6, seed=1)
    n = 6
    assert exact_shapley(game, n).sum() == pytest.approx(
        game(np.ones(n, bool)) - game(np.zeros(n, bool)), abs=1e-12
    )


def test_symmetry_identical_contributors_get_equal_values():
    # contributors 0 and 1 are interchangeable: v depends on them only through their count
    def v(m):
        m = m.astype(int)
        return float((m[0] + m[1]) ** 2 + 3 * m[2] * max(m[0], m[1]) - m[3])

    phi = exact_shapley(v, 4)
    assert phi[0] == pytest.approx(phi[1], abs=1e-12)
    masks, w = exact_kernel_weights(4)
    vals = np.array([v(m) for m in masks])
    beta = kernel_shap_from_samples(masks, vals, v(np.zeros(4, bool)), v(np.ones(4, bool)), weights=w)
    assert beta[0] == pytest.approx(beta[1], abs=1e-10)


def test_null_player_gets_zero():
    def v(m):
        m = m.astype(int)
        return float(2 * m[0] * m[1] + m[2] - 0.5 * m[0])  # contributor 3 never changes v

    assert exact_shapley(v, 4)[3] == pytest.approx(0.0, abs=1e-12)
    masks, w = exact_kernel_weights(4)
    vals = np.array([v(m) for m in masks])
    beta = kernel_shap_from_samples(masks, vals, v(np.zeros(4, bool)), v(np.ones(4, bool)), weights=w)
    assert beta[3] == pytest.approx(0.0, abs=1e-10)
    # sampled: only in expectation (sample correlations leak a little credit), shrinking with m
    assert abs(kernel_shap(v, 4, 4000, seed=3).values[3]) < 0.03


def test_additive_game_gives_singleton_gains_and_linearity():
    a = np.array([0.5, -1.0, 2.0, 0.0, 3.0])

    def add(m):
        return float(1.0 + a[m].sum())

    np.testing.assert_allclose(exact_shapley(add, 5), a, atol=1e-12)
    g1, g2 = random_game(5, 10), random_game(5, 11)
    np.testing.assert_allclose(
        exact_shapley(lambda m: g1(m) + 2 * g2(m), 5),
        exact_shapley(g1, 5) + 2 * exact_shapley(g2, 5),
        atol=1e-12,
    )


# ---- KernelSHAP -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("m", [1, 3, 20])
def test_kernel_shap_efficiency_is_exact_for_any_sample_size(m):
    n = 6
    game = random_game(n, seed=7)
    res = kernel_shap(game, n, m, seed=m)
    assert res.values.sum() == pytest.approx(game(np.ones(n, bool)) - game(np.zeros(n, bool)), abs=1e-10)


@pytest.mark.parametrize("n", [3, 5, 7])
def test_kernel_shap_with_exact_kernel_weights_equals_shapley(n):
    game = random_game(n, seed=100 + n)
    masks, w = exact_kernel_weights(n)
    vals = np.array([game(m) for m in masks])
    beta = kernel_shap_from_samples(masks, vals, game(np.zeros(n, bool)), game(np.ones(n, bool)), weights=w)
    np.testing.assert_allclose(
        beta, permutation_shapley(game, n) if n < 7 else exact_shapley(game, n), atol=1e-10
    )


def test_kernel_shap_converges_to_exact_on_weighted_majority_game():
    n = 6
    game = weighted_majority([4, 3, 2, 2, 1, 1], 7)
    exact = permutation_shapley(game, n)
    errs = {
        m: np.mean([np.abs(kernel_shap(game, n, m, seed=s).values - exact).max() for s in range(8)])
        for m in (30, 3000)
    }
    assert errs[3000] < errs[30] / 3
    assert errs[3000] < 0.02


def test_kernel_shap_subtracts_the_empty_value():
    # regression (shap/shap#565): the regression target is v(S) - v(empty), so a constant offset changes nothing
    game = random_game(5, seed=3)
    a = kernel_shap(game, 5, 50, seed=0).values
    b = kernel_shap(lambda m: game(m) + 100.0, 5, 50, seed=0).values
    np.testing.assert_allclose(a, b, atol=1e-9)


def test_kernel_shap_is_unregularised():
    # regression (shap/shap#996): no default penalty zeroes the attributions of a non-trivial game
    res = kernel_shap(lambda m: float(m[0]) + 0.01 * m[1], 4, 40, seed=0)
    np.testing.assert_allclose(
        res.values, [1.0, 0.01, 0.0, 0.0], atol=1e-9
    )  # additive: exact from any sample


def test_kernel_shap_evaluates_each_coalition_once():
    calls = []

    def v(m):
        calls.append(tuple(m))
        return float(m.sum())

    res = kernel_shap(v, 3, 200, seed=0)
    assert len(calls) == len(set(calls)) <= 2**3
    assert res.masks.shape == (200, 3)


def test_kernel_shap_from_samples_refuses_empty_or_full_rows():
    masks = np.array([[1, 0, 0], [1, 1, 1]], dtype=bool)
    with pytest.raises(ValueError, match="empty or the full coalition"):
        kernel_shap_from_samples(masks, np.array([1.0, 2.0]), 0.0, 2.0)


# ---- sampler --------------------------------------------------------------------------------------------------


def test_kernel_sampler_never_returns_empty_or_full_and_is_seeded():
    m = sample_shapley_kernel(6, 5000, seed=4)
    s = m.sum(axis=1)
    assert s.min() >= 1 and s.max() <= 5
    np.testing.assert_array_equal(m, sample_shapley_kernel(6, 5000, seed=4))
    assert not np.array_equal(m, sample_shapley_kernel(6, 5000, seed=5))


def test_kernel_sampler_size_histogram_matches_the_kernel():
    from scipy.stats import chisquare

    n, draws = 8, 20000
    sizes = sample_shapley_kernel(n, draws, seed=0).sum(axis=1)
    observed = np.bincount(sizes, minlength=n)[1:n]
    # by hand from p(z) ∝ (n-1) / (C(n,|z|) |z| (n-|z|)) summed over the C(n,s) coalitions of size s
    p = np.array([1 / (s * (n - s)) for s in range(1, n)])
    p /= p.sum()
    np.testing.assert_allclose(shapley_kernel_size_probabilities(n), p, atol=1e-15)
    assert chisquare(observed, draws * p).pvalue > 1e-3


def test_kernel_sampler_is_uniform_within_a_size():
    m = sample_shapley_kernel(5, 20000, seed=1)
    two = m[m.sum(1) == 2]
    freq = two.mean(axis=0)  # each contributor in a size-2 coalition with probability 2/5
    np.testing.assert_allclose(freq, 0.4, atol=0.02)


def test_paired_sampler_returns_complements():
    m = sample_shapley_kernel(5, 10, seed=0, paired=True)
    np.testing.assert_array_equal(m[0::2], ~m[1::2])
    with pytest.raises(ValueError, match="even"):
        sample_shapley_kernel(5, 3, paired=True)


def test_datamodel_sampler_drops_trivial_coalitions():
    m = sample_datamodel_subsets(3, 500, alpha=0.5, seed=0)
    assert (m.sum(1) > 0).all() and (m.sum(1) < 3).all()
    with pytest.raises(ValueError, match="alpha"):
        sample_datamodel_subsets(3, 5, alpha=1.0)


# ---- Banzhaf, LOO, datamodel ----------------------------------------------------------------------------------


def test_banzhaf_table_matches_brute_force_loop():
    n = 4
    game = random_game(n, seed=9)
    ref = np.zeros(n)
    for i in range(n):
        others = [j for j in range(n) if j != i]
        for r in range(n):
            for subset in itertools.combinations(others, r):
                m = np.zeros(n, bool)
                m[list(subset)] = True
                with_i = m.copy()
                with_i[i] = True
                ref[i] += game(with_i) - game(m)
    ref /= 2 ** (n - 1)
    np.testing.assert_allclose(banzhaf_from_table(subset_table(game, n)), ref, atol=1e-12)
    masks = all_subsets(n)
    vals = np.array([game(z) for z in masks])
    np.testing.assert_allclose(banzhaf_from_samples(masks, vals), ref, atol=1e-12)


def test_banzhaf_is_exact_for_additive_games():
    a = np.array([1.0, -2.0, 0.5])
    res = banzhaf(lambda m: float(a[m].sum() + 4), 3, 12, seed=0)
    np.testing.assert_allclose(res.values, a, atol=1e-10)


def test_leave_one_out_closed_form():
    def v(m):
        m = m.astype(int)
        return float(m[0] * m[1] + m[2])

    res = leave_one_out(v, 3)
    np.testing.assert_allclose(res.values, [1.0, 1.0, 1.0])
    res = leave_one_out(lambda m: float(m.all()), 4)
    np.testing.assert_allclose(res.values, 1.0)


def test_datamodel_recovers_additive_weights():
    a = np.array([0.5, 2.0, -1.0, 0.0, 1.5])
    res = datamodel(lambda m: float(a[m].sum()), 5, 30, seed=0)
    np.testing.assert_allclose(res.values, a, atol=0.05)


# ---- LDS ------------------------------------------------------------------------------------------------------


def test_lds_is_one_for_a_linear_game_and_order_invariant():
    a = np.array([0.31, 1.07, -0.73, 2.13])  # no two coalitions share a sum (ties would lower the rank score)
    masks = all_subsets(4)[1:-1]
    vals = masks.astype(float) @ a + 0.1
    assert lds(a, masks, vals) == pytest.approx(1.0)
    # regression (TRAIS-Lab/dattri#189): shuffling the stored (coalition, value) pairs together changes nothing
    perm = np.random.default_rng(0).permutation(len(masks))
    assert lds(a, masks[perm], vals[perm]) == pytest.approx(1.0)
    # misaligned storage (values shuffled alone) destroys it
    assert lds(a, masks, vals[perm]) < 0.9


def test_lds_of_shuffled_attributions_is_near_zero_on_average():
    rng = np.random.default_rng(0)
    n = 10
    a = rng.normal(size=n)
    masks = sample_datamodel_subsets(n, 300, seed=1)
    vals = masks.astype(float) @ a
    scores = [lds(rng.permutation(a), masks, vals - masks.sum(1) * a.mean()) for _ in range(200)]
    assert abs(np.mean(scores)) < 0.05


def test_lds_refuses_undefined_and_bad_inputs():
    masks = np.array([[1, 0], [0, 1], [1, 0]], bool)
    with pytest.raises(ValueError, match="constant"):
        lds(np.ones(2), masks, np.array([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="at least 3"):
        lds(np.ones(2), masks[:2], np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="finite"):
        lds(np.array([1.0, np.nan]), masks, np.array([1.0, 2.0, 3.0]))


def test_lds_interval_contains_the_score():
    a = np.array([0.3, 1.0, -0.7, 2.0, 0.1])
    masks = sample_datamodel_subsets(5, 40, seed=0)
    vals = masks.astype(float) @ a + np.random.default_rng(0).normal(scale=0.5, size=40)
    est = lds_interval(a, masks, vals, num_resamples=200)
    assert est.low <= est.value <= est.high and est.n == 40


# ---- bad input ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1])
def test_fewer_than_two_contributors_is_refused(n):
    with pytest.raises(ValueError, match="num_contributors"):
        exact_shapley(lambda m: 0.0, n)
    with pytest.raises(ValueError, match="num_contributors"):
        kernel_shap(lambda m: 0.0, n, 10)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_property_values_are_refused_with_the_coalition(bad):
    def v(m):
        return bad if m[0] and not m[1] else 1.0

    with pytest.raises(ValueError, match=r"coalition \[0"):
        exact_shapley(v, 3)
    with pytest.raises(ValueError, match="finite"):
        shapley_from_table(np.array([0.0, 1.0, bad, 2.0]))


def test_table_length_must_be_a_power_of_two():
    with pytest.raises(ValueError, match="2\\*\\*n"):
        shapley_from_table(np.zeros(6))


def test_cached_game_counts_distinct_coalitions():
    calls = []
    g = CachedGame(lambda m: calls.append(1) or float(m.sum()), 3)
    for _ in range(3):
        g(np.array([1, 0, 1], bool))
    assert g.calls == 1 and len(calls) == 1
    with pytest.raises(ValueError, match="mask"):
        g(np.ones((2, 3), bool))
