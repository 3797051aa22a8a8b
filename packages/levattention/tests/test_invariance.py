"""Issue 14: the finder is exact in every key basis (K → K M, Q → Q M⁻ᵀ leaves A unchanged, so the answer must not
change), on ill-conditioned, near-collinear and outlier keys, and only queries orthogonal to every key are
degenerate. Every case is checked against the brute force: no misses, no false positives, no spurious degenerate
rows."""

from __future__ import annotations

import numpy as np
import pytest

from iclr25_levattention import StreamingUniversalSet, brute_force_heavy_entries, heavy_entries


def adversarial_queries(K: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """q_j = R⁻¹ Q_K[j] (K = Q_K R): ⟨q_j, k_l⟩ = (Q_K Q_Kᵀ)_jl, the query that favours key j most (p = 2)."""
    q_k, r = np.linalg.qr(K)
    return np.linalg.solve(r, q_k[rows].T).T


def pairs_outside_margin(res, eps, margin):
    """The reported pairs, and the brute-force pairs whose weight is not within ``margin`` (relative) of eps."""
    keep = np.abs(res.values - eps) > margin * eps
    return set(zip(res.rows[keep].tolist(), res.cols[keep].tolist()))


def assert_exact(Q, K, eps, p, *, margin=0.0, stream=False):
    brute = brute_force_heavy_entries(Q, K, eps, p)
    ours = heavy_entries(Q, K, eps, p)
    results = [ours]
    if stream:
        s = StreamingUniversalSet(K.shape[1], eps, p, block_size=97)
        for block in np.array_split(K, 5):
            s.update(block)
        results.append(s.heavy_entries(Q))
    # brute-force entries within `margin` of eps may round either way; nothing else may differ
    near = set()
    if margin:
        z = brute.normalizers
        near = {
            (i, j)
            for i in range(Q.shape[0])
            for j in np.flatnonzero(np.abs(np.abs(Q[i] @ K.T) ** p / z[i] - eps) <= margin * eps).tolist()
        }
    truth = brute.pairs()
    for res in results:
        found = res.pairs()
        assert not (truth - found - near), f"missed {len(truth - found - near)} of {len(truth)}"
        assert not (found - truth - near), f"{len(found - truth - near)} false positives"
        assert res.degenerate_rows.size == 0
        both = sorted(truth & found)
        if both:
            a = dict(zip(zip(brute.rows.tolist(), brute.cols.tolist()), brute.values))
            b = dict(zip(zip(res.rows.tolist(), res.cols.tolist()), res.values))
            np.testing.assert_allclose([b[x] for x in both], [a[x] for x in both], rtol=max(margin, 1e-9))
    return brute


@pytest.mark.parametrize("p", [2, 4, 6, 8])
@pytest.mark.parametrize("log2_cond", [0, 13, 27])
def test_power_of_two_rescaling_changes_nothing(p, log2_cond):
    """M = diag(2^-k) · permutation is exact in floating point: the heavy entries of (Q M⁻ᵀ, K M) must be those of
    (Q, K), bit for bit in the set and to 1e-9 in the values, for condition numbers up to 2^27 ≈ 1.3e8."""
    rng = np.random.default_rng(p + log2_cond)
    n, d = 400, 4
    K = rng.standard_normal((n, d)) * (1 + rng.pareto(2.0, size=(n, 1)))
    Q = np.vstack([adversarial_queries(K, rng.choice(n, 60, replace=False)), rng.standard_normal((40, d))])
    scale = 2.0 ** -np.round(np.linspace(0, log2_cond, d))
    perm = rng.permutation(d)
    M = (np.diag(scale))[:, perm]
    KM, QM = K @ M, Q @ np.linalg.inv(M).T
    eps = 0.05
    brute = assert_exact(Q, K, eps, p, stream=p <= 4)
    assert len(brute) > 0  # the setting has heavy entries to miss
    ours_m = heavy_entries(QM, KM, eps, p)
    assert ours_m.pairs() == brute.pairs()
    assert ours_m.degenerate_rows.size == 0
    np.testing.assert_allclose(ours_m.values, brute.values, rtol=1e-9)
    assert_exact(QM, KM, eps, p, stream=p <= 4)


@pytest.mark.parametrize("p", [2, 4, 6, 8])
@pytest.mark.parametrize("cond", [1e4, 1e8])
def test_dense_ill_conditioned_change_of_basis(p, cond):
    """M = O₁ diag(logspace(0, −log cond)) O₂ (dense, cond(M) up to 1e8): exact against the brute force on the
    transformed data, and against the untransformed data up to the rounding of forming K M and Q M⁻ᵀ."""
    rng = np.random.default_rng(int(np.log10(cond)) * 10 + p)
    n, d = 400, 4
    K = rng.standard_normal((n, d)) * (1 + rng.pareto(2.0, size=(n, 1)))
    Q = np.vstack([adversarial_queries(K, rng.choice(n, 60, replace=False)), rng.standard_normal((40, d))])
    o1, _ = np.linalg.qr(rng.standard_normal((d, d)))
    o2, _ = np.linalg.qr(rng.standard_normal((d, d)))
    M = o1 @ np.diag(np.logspace(0, -np.log10(cond), d)) @ o2
    KM, QM = K @ M, Q @ np.linalg.inv(M).T
    eps = 0.05
    brute = assert_exact(QM, KM, eps, p, margin=1e-6, stream=p <= 4)
    assert len(brute) > 0
    original = brute_force_heavy_entries(Q, K, eps, p)
    far = pairs_outside_margin(original, eps, 1e-5)
    assert far <= heavy_entries(QM, KM, eps, p).pairs() <= original.pairs() | far | brute.pairs()


def test_the_issue_gaussian_case_with_diagonal_logspace_scaling():
    """Issue 14: Gaussian keys/queries, M = diag(logspace(0, −4, 8)), n = 3000, p = 8 lost most entries and flagged
    most rows degenerate; now exact, with no degenerate row."""
    rng = np.random.default_rng(0)
    K = rng.standard_normal((3000, 8))
    Q = rng.standard_normal((600, 8))
    M = np.diag(np.logspace(0, -4, 8))
    brute = assert_exact(Q @ np.linalg.inv(M).T, K @ M, 0.02, 8, margin=1e-9)
    assert len(brute) > 1000


@pytest.mark.parametrize("p", [2, 4, 6])
def test_near_collinear_keys(p):
    """Keys = one direction + 1e-6 noise: the noise directions are real and adversarial queries use them."""
    rng = np.random.default_rng(p)
    n, d = 300, 5
    K = np.outer(1 + rng.random(n), rng.standard_normal(d)) + 1e-6 * rng.standard_normal((n, d))
    Q = adversarial_queries(K, np.arange(0, n, 5))
    brute = assert_exact(Q, K, 0.05, p, margin=1e-6, stream=True)
    assert len(brute) > 0


@pytest.mark.parametrize("p", [2, 4, 6])
def test_one_huge_key(p):
    """One key ×1e6 dominates every column; queries orthogonal to it see only the others."""
    rng = np.random.default_rng(10 + p)
    n, d = 1000, 5
    K = rng.standard_normal((n, d))
    K[7] *= 1e6
    Q = np.vstack([rng.standard_normal((100, d)), adversarial_queries(K, np.arange(0, n, 20))])
    Q[:50] -= np.outer(Q[:50] @ K[7] / (K[7] @ K[7]), K[7])  # orthogonal to the huge key
    brute = assert_exact(Q, K, 0.05, p, margin=1e-8, stream=True)
    assert len(brute) > 0


@pytest.mark.parametrize("p", [2, 4])
def test_wildly_different_column_scales_keep_the_small_coordinate(p):
    """Issue 14: K = diag(1e16, 1), q = [6.2e-16, 1]: A = (0.975, 0.025) at p = 2; the weight 0.025 ≥ 0.02 was lost
    with no degenerate flag."""
    K = np.diag([1e16, 1.0])
    q = np.array([[6.2e-16, 1.0]])
    ours = heavy_entries(q, K, 0.02, p)
    brute = brute_force_heavy_entries(q, K, 0.02, p)
    assert ours.pairs() == brute.pairs()
    assert ours.degenerate_rows.size == 0
    if p == 2:
        assert (0, 1) in ours.pairs()
        np.testing.assert_allclose(ours.values[ours.cols == 1], 1 / (1 + 6.2**2), rtol=1e-12)


@pytest.mark.parametrize("p", [2, 4, 6])
@pytest.mark.parametrize("scale", [1e-150, 1.0, 1e150])
def test_only_queries_orthogonal_to_every_key_are_degenerate(p, scale):
    """Keys span a 3-dim subspace of R^5 (two zero coordinates, permuted and rescaled by powers of two so the
    construction is exact); queries in the complement are 0/0 rows, every other query is not — at any scale, and
    however small its component inside the keys' span."""
    rng = np.random.default_rng(p)
    n, d = 200, 5
    K = np.zeros((n, d))
    K[:, :3] = rng.standard_normal((n, 3))
    Q = rng.standard_normal((12, d))
    Q[:4, :3] = 0.0  # orthogonal to every key
    Q[4:6, :3] *= 1e-12  # nearly, but not, orthogonal
    Q[6:8, 3:] = 0.0
    M = np.diag(2.0 ** rng.integers(-20, 20, d))[:, rng.permutation(d)] * scale
    KM, QM = K @ M, Q @ np.linalg.inv(M).T
    for keys, queries in ((K, Q), (KM, QM)):
        ours = heavy_entries(queries, keys, 0.05, p)
        brute = brute_force_heavy_entries(queries, keys, 0.05, p)
        assert ours.degenerate_rows.tolist() == [0, 1, 2, 3]
        assert brute.degenerate_rows.tolist() == [0, 1, 2, 3]
        assert ours.pairs() == brute.pairs()
        assert np.all(ours.normalizers[:4] == 0.0) and np.all(ours.normalizers[4:] > 0.0)


def test_rotated_orthogonal_queries_are_degenerate_and_the_rest_exact():
    """The same subspace in a random rotation: the orthogonal queries' scores are now rounding noise (~1e-16 |q||k|),
    which the finder reports as 0/0 rows; the other rows agree with the brute force."""
    rng = np.random.default_rng(3)
    n, d = 300, 5
    basis, _ = np.linalg.qr(rng.standard_normal((d, d)))
    K = (rng.standard_normal((n, 3)) * (1 + rng.pareto(1.5, size=(n, 1)))) @ basis[:, :3].T
    favour = np.linalg.pinv(K)[:, ::10].T  # q = K⁺ e_j: ⟨q, k_l⟩ = (K K⁺)_lj (K is rank 3)
    Q = np.vstack([rng.standard_normal((3, 2)) @ basis[:, 3:].T, favour])
    for p in (2, 4):
        ours = heavy_entries(Q, K, 0.05, p)
        assert ours.degenerate_rows.tolist() == [0, 1, 2]
        brute = brute_force_heavy_entries(Q[3:], K, 0.05, p)
        assert {(i + 3, j) for i, j in brute.pairs()} == ours.pairs()
        assert len(brute) > 0


def test_random_small_cases_of_every_kind_against_brute_force():
    """150 random instances: tiny n (down to 1 key), d ≤ 5, p ∈ {2, 4, 6}, columns scaled by 10^±8, a zero
    column, integer keys with duplicates, near-rank-one keys. Offline and streaming finders agree with the brute force
    (entries within 1e-7 of eps may round either way) and flag exactly its degenerate rows."""
    rng = np.random.default_rng(1)
    for _ in range(150):
        n, d = int(rng.integers(1, 60)), int(rng.integers(1, 6))
        p, eps = int(rng.choice([2, 4, 6])), float(rng.choice([0.05, 0.2, 0.5]))
        kind = rng.integers(0, 5)
        K = rng.standard_normal((n, d))
        Q = rng.standard_normal((20, d))
        if kind == 1:
            scale = 10.0 ** rng.integers(-8, 8, size=d)
            K, Q = K * scale, Q / scale
        elif kind == 2 and d > 1:
            K[:, -1] = 0.0
        elif kind == 3:
            K = np.round(K)
        elif kind == 4:
            K = K[:, :1] @ rng.standard_normal((1, d)) + 1e-7 * rng.standard_normal((n, d))
        brute = brute_force_heavy_entries(Q, K, eps, p)
        F = np.abs(Q @ K.T) ** p
        Z = F.sum(axis=1, keepdims=True)
        A = np.divide(F, Z, out=np.zeros_like(F), where=Z > 0)
        near = set(zip(*(x.tolist() for x in np.nonzero(np.abs(A - eps) < 1e-7 * eps))))
        stream = StreamingUniversalSet(d, eps, p, block_size=7)
        for block in np.array_split(K, 3):
            if len(block):
                stream.update(block)
        for res in (heavy_entries(Q, K, eps, p), stream.heavy_entries(Q)):
            assert not (res.pairs() ^ brute.pairs()) - near
            assert res.degenerate_rows.tolist() == brute.degenerate_rows.tolist()
