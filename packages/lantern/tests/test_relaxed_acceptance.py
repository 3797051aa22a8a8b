"""LANTERN's relaxed acceptance (arXiv:2410.03355): the paper's claims as checkable invariants.

Expected values come from closed forms (δ = 0 reproduces p), brute-force loops written here, or numpy float64
distances; never from the function under test.
"""

import itertools
import math

import numpy as np
import pytest
import torch

from iclr25_lantern import (
    LogitsProcessor,
    Relaxation,
    acceptance_probability,
    greedy_accept,
    latent_proximity,
    one_step_law,
    relaxed_target_mass,
    residual_distribution,
)


def _random_pq(rng, vocab, kind="dirichlet"):
    if kind == "dirichlet":
        p, q = rng.dirichlet(np.full(vocab, 0.5)), rng.dirichlet(np.full(vocab, 0.5))
    elif kind == "sparse":  # exact zeros in both
        p, q = rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab))
        p[rng.random(vocab) < 0.4] = 0
        q[rng.random(vocab) < 0.4] = 0
        p[0] += 1e-3
        q[1] += 1e-3
        p, q = p / p.sum(), q / q.sum()
    elif kind == "equal":
        p = rng.dirichlet(np.ones(vocab))
        q = p.copy()
    else:  # one-hot target, flat drafter
        p = np.zeros(vocab)
        p[rng.integers(vocab)] = 1.0
        q = np.full(vocab, 1.0 / vocab)
    return torch.tensor(p), torch.tensor(q)


def _table(rng, vocab, k=None, dim=3):
    return latent_proximity(torch.tensor(rng.standard_normal((vocab, dim))), k)


def _brute_law_standard(p, q):
    """Leviathan et al. (2023) Alg. 1, enumerated by hand: accept x w.p. min(1, p/q), else resample (p - q)+."""
    p, q = p.numpy(), q.numpy()
    law = np.zeros_like(p)
    resid = np.maximum(p - q, 0)
    for x in range(len(p)):
        if q[x] == 0:
            continue
        a = min(1.0, p[x] / q[x])
        law[x] += q[x] * a
        if a < 1:
            law += q[x] * (1 - a) * resid / resid.sum()
    return law


# -- delta = 0 is standard speculative sampling, whose output law is the target's ---------------------------------


@pytest.mark.parametrize("kind", ["dirichlet", "sparse", "equal", "onehot"])
def test_delta_zero_output_law_equals_target_by_enumeration(kind):
    rng = np.random.default_rng(0)
    for trial in range(60):
        vocab = int(rng.integers(2, 9))
        p, q = _random_pq(rng, vocab, kind)
        table = _table(rng, vocab)
        for relax in (
            Relaxation(),
            Relaxation(neighbours=table, delta=0.0),
            Relaxation(neighbours=table, lam=1.0),
        ):
            law = one_step_law(p, q, relax)
            np.testing.assert_allclose(law.numpy(), p.numpy(), atol=1e-12, err_msg=f"{kind} trial {trial}")
        # and the hand-enumerated standard rule agrees with the closed form too
        np.testing.assert_allclose(_brute_law_standard(p, q), p.numpy(), atol=1e-12)


def test_k_zero_table_is_standard_speculative_sampling():
    rng = np.random.default_rng(1)
    p, q = _random_pq(rng, 7)
    relax = Relaxation(neighbours=_table(rng, 7, k=0), delta=0.5)
    assert relax.exact
    np.testing.assert_allclose(one_step_law(p, q, relax).numpy(), p.numpy(), atol=1e-12)


# -- the per-draft total-variation bound, B a prefix of the proximity order ---------------------------------------


def _brute_b(p, row, budget):
    """Longest prefix of ``row`` whose cumulative p-mass is <= budget (a plain loop)."""
    total, size = 0.0, 0
    for y in row:
        if total + p[y] > budget:
            break
        total += p[y]
        size += 1
    return size, total


@pytest.mark.parametrize("delta", [0.0, 0.01, 0.05, 0.2, 0.7, 1.0])
def test_per_draft_tvd_at_most_delta_and_b_is_a_prefix(delta):
    rng = np.random.default_rng(2)
    for _ in range(40):
        vocab = int(rng.integers(3, 30))
        p = torch.tensor(rng.dirichlet(np.full(vocab, 0.3)))
        k = int(rng.integers(1, vocab))
        table = _table(rng, vocab, k)
        relax = Relaxation(neighbours=table, delta=delta)
        x = torch.arange(vocab)
        pt, moved, size = relaxed_target_mass(p.expand(vocab, vocab), x, relax)
        for xi in range(vocab):
            row = table[xi].long().tolist()
            b_size, b_mass = _brute_b(p.numpy(), row, delta)
            assert int(size[xi]) == b_size
            assert moved[xi] <= delta
            # p~_x moves the mass of B onto x: TVD(p, p~_x) = 0.5 |p - p~_x|_1 = moved mass
            ptilde = p.clone()
            ptilde[row[:b_size]] = 0
            ptilde[xi] += b_mass
            tvd = 0.5 * float((ptilde - p).abs().sum())
            assert tvd == pytest.approx(float(moved[xi]), abs=1e-12)
            assert tvd <= delta + 1e-12
            assert float(pt[xi]) == pytest.approx(float(p[xi]) + b_mass, abs=1e-12)


def test_lambda_mode_bounds_ptilde_by_lambda_times_p():
    rng = np.random.default_rng(3)
    vocab = 40
    table = _table(rng, vocab, 20)
    for lam in (1.0, 1.5, 3.0, 10.0):
        p = torch.tensor(rng.dirichlet(np.full(vocab, 0.3)))
        x = torch.arange(vocab)
        pt, moved, size = relaxed_target_mass(
            p.expand(vocab, vocab), x, Relaxation(neighbours=table, lam=lam)
        )
        assert (pt <= lam * p + 1e-15).all()
        for xi in range(vocab):
            assert (
                int(size[xi]) == _brute_b(p.numpy(), table[xi].long().tolist(), (lam - 1) * float(p[xi]))[0]
            )
        if lam == 1.0:
            assert (moved == 0).all()


# -- monotonicity -------------------------------------------------------------------------------------------------


def test_acceptance_rate_is_monotone_in_delta_and_k():
    rng = np.random.default_rng(4)
    for _ in range(30):
        vocab = 24
        p, q = _random_pq(rng, vocab)
        full = _table(rng, vocab)
        x = torch.arange(vocab)

        def rate(k, delta, p=p, q=q, full=full, x=x, vocab=vocab):
            relax = Relaxation(neighbours=full[:, :k], delta=delta)
            return float(
                (q * acceptance_probability(p.expand(vocab, vocab), q.expand(vocab, vocab), x, relax)).sum()
            )

        for k in (1, 4, 12, 23):
            rates = [rate(k, d) for d in (0.0, 0.02, 0.1, 0.3, 0.6, 1.0)]
            assert all(b >= a - 1e-12 for a, b in itertools.pairwise(rates)), rates
        for delta in (0.05, 0.3):
            rates = [rate(k, delta) for k in (1, 2, 4, 8, 16, 23)]
            assert all(b >= a - 1e-12 for a, b in itertools.pairwise(rates)), rates
        # delta = 0: the standard acceptance rate sum_x min(p, q) = 1 - TVD(p, q)
        assert rate(23, 0.0) == pytest.approx(float(torch.minimum(p, q).sum()), abs=1e-12)


# -- residual ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", ["lantern", "standard"])
def test_residual_is_a_distribution_with_zero_mass_on_the_rejected_token_and_b(rule):
    rng = np.random.default_rng(5)
    checked = 0
    for _ in range(60):
        vocab = int(rng.integers(3, 16))
        p, q = _random_pq(rng, vocab, "sparse" if _ % 3 == 0 else "dirichlet")
        table = _table(rng, vocab)
        relax = Relaxation(neighbours=table, delta=float(rng.uniform(0, 0.5)), residual=rule)
        x = torch.arange(vocab)
        pt, _, size = relaxed_target_mass(p.expand(vocab, vocab), x, relax)
        r = residual_distribution(p.expand(vocab, vocab), q.expand(vocab, vocab), x, relax)
        assert (r >= 0).all()
        np.testing.assert_allclose(r.sum(-1).numpy(), 1.0, atol=1e-12)
        for xi in range(vocab):
            if not pt[xi] < q[xi]:  # x can only be rejected when p~_x(x) < q(x)
                continue
            checked += 1
            assert r[xi, xi] == 0
            if rule == "lantern":
                b = table[xi, : int(size[xi])].long()
                assert (r[xi, b] == 0).all()
    assert checked > 50


def test_one_step_law_matches_an_independent_enumeration_for_positive_delta():
    """Cross-check of the accept/resample bookkeeping for delta > 0 against a loop written here."""
    rng = np.random.default_rng(6)
    for _ in range(20):
        vocab = 7
        p, q = _random_pq(rng, vocab)
        table = _table(rng, vocab)
        delta = float(rng.uniform(0.05, 0.5))
        pn, qn = p.numpy(), q.numpy()
        law = np.zeros(vocab)
        for x in range(vocab):
            row = table[x].long().tolist()
            size, mass = _brute_b(pn, row, delta)
            a = min(1.0, (pn[x] + mass) / qn[x])
            law[x] += qn[x] * a
            r = np.maximum(pn - qn, 0)
            r[[x, *row[:size]]] = 0
            if r.sum() == 0:
                r = pn.copy()
                r[[x, *row[:size]]] = 0
            law += qn[x] * (1 - a) * (r / r.sum() if a < 1 else 0)
        got = one_step_law(p, q, Relaxation(neighbours=table, delta=delta)).numpy()
        np.testing.assert_allclose(got, law, atol=1e-12)


def test_output_law_can_move_further_than_delta_so_it_is_not_asserted():
    """The δ bound is per draft; the output law of a step is not within δ of p (documented, not a bug)."""
    rng = np.random.default_rng(7)
    worst = 0.0
    for _ in range(300):
        p, q = _random_pq(rng, 8)
        law = one_step_law(p, q, Relaxation(neighbours=_table(rng, 8), delta=0.05))
        worst = max(worst, 0.5 * float((law - p).abs().sum()))
    assert worst > 0.05


# -- greedy mode ---------------------------------------------------------------------------------------------------


def test_greedy_delta_zero_is_plain_argmax_verification():
    rng = np.random.default_rng(8)
    for _ in range(50):
        vocab = 10
        p = torch.tensor(rng.dirichlet(np.ones(vocab)))
        relax = Relaxation(neighbours=_table(rng, vocab), delta=0.0)
        ok = greedy_accept(p.expand(vocab, vocab), torch.arange(vocab), relax)
        assert ok.tolist() == [x == int(p.argmax()) for x in range(vocab)]


def test_greedy_lantern_accepts_a_token_whose_neighbours_make_it_the_argmax():
    # codebook on a line: token 0 at 0, 1 at 0.1, 2 at 0.2, 3 at 5 → A(0) = [1, 2, 3]
    table = latent_proximity(torch.tensor([[0.0], [0.1], [0.2], [5.0]]))
    assert table[0].tolist() == [1, 2, 3]
    p = torch.tensor([0.25, 0.125, 0.125, 0.5], dtype=torch.float64)  # exact binary fractions
    x = torch.tensor(0)
    assert not bool(greedy_accept(p, x, Relaxation(neighbours=table, delta=0.0)))
    assert not bool(greedy_accept(p, x, Relaxation(neighbours=table, delta=0.1)))  # 0.125 > 0.1: B empty
    assert not bool(greedy_accept(p, x, Relaxation(neighbours=table, delta=0.2)))  # 0.375 < 0.5
    assert bool(
        greedy_accept(p, x, Relaxation(neighbours=table, delta=0.25))
    )  # 0.25 + 0.25 = 0.5 ties the max
    assert bool(greedy_accept(p, x, Relaxation(neighbours=table, delta=0.6)))  # B = {1, 2}: 3 would exceed


# -- latent proximity tables ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_proximity_rows_exclude_x_are_sorted_and_are_permutations(chunk):
    rng = np.random.default_rng(9)
    e = rng.standard_normal((50, 6)).astype(np.float32)
    table = latent_proximity(torch.tensor(e), chunk_size=chunk)
    assert table.dtype == torch.int16 and table.shape == (50, 49)
    e64 = e.astype(np.float64)
    dist = np.sqrt(((e64[:, None] - e64[None]) ** 2).sum(-1))
    for x in range(50):
        row = table[x].long().numpy()
        assert x not in row
        assert sorted(row.tolist()) == [y for y in range(50) if y != x]
        assert np.all(np.diff(dist[x, row]) >= -1e-12)
    # the top-k path agrees with the prefix of the full order (no ties in random data)
    top = latent_proximity(torch.tensor(e), 5, chunk_size=chunk)
    assert torch.equal(top, table[:, :5])


def test_proximity_with_duplicate_codes_and_change_of_basis():
    rng = np.random.default_rng(10)
    e = rng.standard_normal((20, 4))
    e[5] = e[3]  # duplicate code: distance 0 to each other, still excluded from its own row
    table = latent_proximity(torch.tensor(e))
    assert table[3, 0] == 5 and table[5, 0] == 3
    assert 3 not in table[3].tolist() and 5 not in table[5].tolist()
    # Euclidean distances are invariant to rotation + translation of the codebook
    rot, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    moved = latent_proximity(torch.tensor(e @ rot + 3.0))
    assert torch.equal(moved[:, :3].sort(1).values, table[:, :3].sort(1).values)


def test_proximity_dtype_fits_the_vocabulary():
    from iclr25_lantern._relaxed import proximity_dtype

    assert proximity_dtype(16384) == torch.int16
    assert proximity_dtype(32768) == torch.int16
    assert proximity_dtype(49152) == torch.int32
    assert latent_proximity(torch.randn(300, 2), 3).dtype == torch.int16


@pytest.mark.parametrize("k", [-1, 50, 1000])
def test_k_above_v_minus_1_is_refused(k):
    with pytest.raises(ValueError, match=r"k must be"):
        latent_proximity(torch.randn(50, 3), k)


def test_bad_codebooks_are_refused():
    with pytest.raises(ValueError, match="2-D"):
        latent_proximity(torch.randn(5))
    bad = torch.randn(6, 2)
    bad[2, 1] = math.nan
    with pytest.raises(ValueError, match="NaN/inf"):
        latent_proximity(bad)
    with pytest.raises(TypeError, match="floats"):
        latent_proximity(torch.ones(4, 2, dtype=torch.int64))


# -- bad relaxation settings ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"delta": -0.1}, "delta must be"),
        ({"delta": math.nan}, "delta must be"),
        ({"lam": 0.5}, "lam must be"),
        ({"residual": "eagle"}, "residual must be"),
    ],
)
def test_bad_relaxation_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Relaxation(**kwargs)


def test_delta_above_one_is_refused_pointing_at_the_lambda_mode():
    """The official code reads delta > 1 as the lambda mode; here it acted as delta = 1, so a ported config changed
    meaning silently (issue 38)."""
    table = latent_proximity(torch.randn(8, 2), 3)
    for delta in (1.0000001, 1.5, 3.0):
        with pytest.raises(ValueError, match=rf"delta must be in \[0, 1\].*lambda mode: pass lam={delta:g}"):
            Relaxation(neighbours=table, delta=delta)
    assert Relaxation(neighbours=table, delta=1.0).delta == 1.0  # the whole budget is still allowed
    assert Relaxation(neighbours=table, lam=3.0).lam == 3.0


def test_table_wider_than_v_minus_1_and_float_tables_are_refused():
    with pytest.raises(ValueError, match=r"k must be an integer in \[0, V - 1 = 3\]"):
        Relaxation(neighbours=torch.zeros(4, 4, dtype=torch.int16), delta=0.1)
    with pytest.raises(ValueError, match="integer"):
        Relaxation(neighbours=torch.zeros(4, 3), delta=0.1)


def test_codebook_vocabulary_mismatch_is_refused():
    relax = Relaxation(neighbours=latent_proximity(torch.randn(8, 2), 3), delta=0.1)
    p = torch.full((10,), 0.1, dtype=torch.float64)
    with pytest.raises(ValueError, match="codebook/vocabulary size mismatch.*V = 8.*V = 10"):
        relaxed_target_mass(p, torch.tensor(2), relax)


# -- logits processors ---------------------------------------------------------------------------------------------


def test_processor_temperature_top_k_top_p_and_cfg_match_hand_computation():
    z = torch.tensor([[2.0, 1.0, 0.5, -1.0, 0.0]])
    zn = z[0].numpy().astype(np.float64)

    def softmax(v):
        v = np.exp(v - v[np.isfinite(v)].max())
        return v / v.sum()

    np.testing.assert_allclose(LogitsProcessor(temperature=0.5)(z).numpy(), softmax(zn / 0.5), atol=1e-12)
    top2 = softmax(np.where(zn >= 1.0, zn, -np.inf))
    np.testing.assert_allclose(LogitsProcessor(top_k=2)(z).numpy(), top2, atol=1e-12)
    full = softmax(zn)
    order = np.argsort(-full)
    keep = order[: int(np.searchsorted(np.cumsum(full[order]), 0.8) + 1)]
    nucleus = np.zeros(5)
    nucleus[keep] = full[keep] / full[keep].sum()
    np.testing.assert_allclose(LogitsProcessor(top_p=0.8)(z).numpy(), nucleus, atol=1e-12)
    zu = torch.tensor([[0.0, 0.5, 0.5, 0.0, 1.0]])
    guided = zu[0].numpy() + 3.0 * (zn - zu[0].numpy())
    np.testing.assert_allclose(
        LogitsProcessor(cfg_scale=3.0)(torch.cat([z, zu])).numpy(), softmax(guided), atol=1e-12
    )
    with pytest.raises(ValueError, match="2 row"):
        LogitsProcessor(cfg_scale=3.0)(z)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_logits_give_the_same_acceptance_as_float32(dtype):
    rng = np.random.default_rng(11)
    vocab = 64
    zp, zq = (
        torch.tensor(rng.standard_normal((1, vocab)) * 3),
        torch.tensor(rng.standard_normal((1, vocab)) * 3),
    )
    relax = Relaxation(neighbours=_table(rng, vocab, 8), delta=0.2)
    proc = LogitsProcessor(top_k=20)
    x = torch.arange(vocab)
    ref = acceptance_probability(
        proc(zp.float()).expand(vocab, -1), proc(zq.float()).expand(vocab, -1), x, relax
    )
    low = acceptance_probability(
        proc(zp.to(dtype)).expand(vocab, -1), proc(zq.to(dtype)).expand(vocab, -1), x, relax
    )
    assert low.dtype == torch.float64
    assert float((low - ref).abs().max()) < 0.05  # only the logits' rounding differs


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"temperature": -1.0}, "temperature"), ({"top_k": -2}, "top_k"), ({"top_p": 0.0}, "top_p")],
)
def test_bad_processor_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LogitsProcessor(**kwargs)


@pytest.mark.slow
def test_proximity_table_for_a_llamagen_sized_codebook():
    """V = 16 384 codes of dimension 8 (LlamaGen's tokenizer size): chunked, int16, rows match brute force."""
    rng = np.random.default_rng(12)
    e = rng.standard_normal((16384, 8))
    table = latent_proximity(torch.tensor(e), 32, chunk_size=512)
    assert table.dtype == torch.int16 and table.shape == (16384, 32)
    for x in rng.integers(0, 16384, 20):
        d = np.sqrt(((e - e[x]) ** 2).sum(1))
        d[x] = np.inf
        np.testing.assert_array_equal(table[x].long().numpy(), np.argsort(d, kind="stable")[:32])
