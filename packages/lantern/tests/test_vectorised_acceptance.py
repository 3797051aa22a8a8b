"""The vectorised verification step (``verify_drafts`` / ``relaxed_acceptance``, one pass over the neighbour table,
one host sync per round) against the previous implementation, kept here verbatim as the reference: the per-call
table conversion, three separate relaxed-mass computations and the per-position Python loop of
``speculative_generate`` at commit 9640f0e. Same random inputs and generator seed -> the same numbers, bit for bit,
and the same accepted prefix and resampled token. Then δ = 0 (any k, k = 1 included) and λ = 1 reduce exactly to
standard speculative decoding, token for token."""

import numpy as np
import pytest
import torch

from iclr25_lantern import (
    FunctionDecoder,
    Relaxation,
    acceptance_probability,
    latent_proximity,
    relaxed_target_mass,
    residual_distribution,
    speculative_generate,
)
from iclr25_lantern._decoding import verify_drafts
from iclr25_lantern._relaxed import relaxed_acceptance

# -- the previous implementation (9640f0e), verbatim but for names -----------------------------------------------


def _old_relaxed_target_mass(p, x, relax):
    px = p.gather(-1, x.unsqueeze(-1)).squeeze(-1)
    if relax.k == 0:
        zero = torch.zeros_like(px)
        return px, zero, torch.zeros_like(x)
    nb = relax.neighbours.to(p.device).long()[x]
    cums = torch.cumsum(p.gather(-1, nb), dim=-1)
    budget = (relax.lam - 1.0) * px if relax.lam is not None else torch.full_like(px, relax.delta)
    size = (cums <= budget.unsqueeze(-1)).sum(-1)
    moved = torch.where(size > 0, cums.gather(-1, (size - 1).clamp(min=0).unsqueeze(-1)).squeeze(-1), 0.0)
    return px + moved, moved, size


def _old_acceptance_probability(p, q, x, relax):
    pt, _, _ = _old_relaxed_target_mass(p, x, relax)
    qx = q.gather(-1, x.unsqueeze(-1)).squeeze(-1)
    ratio = torch.where(qx > 0, pt / torch.where(qx > 0, qx, 1.0), (pt > 0).to(pt.dtype))
    return ratio.clamp(max=1.0)


def _old_residual_distribution(p, q, x, relax):
    r = (p - q).clamp(min=0.0)
    keep = torch.ones_like(p, dtype=torch.bool)
    keep.scatter_(-1, x.unsqueeze(-1), False)
    if relax.residual == "lantern" and relax.k > 0:
        _, _, size = _old_relaxed_target_mass(p, x, relax)
        nb = relax.neighbours.to(p.device).long()[x]
        in_b = torch.arange(relax.k, device=p.device) < size.unsqueeze(-1)
        keep.scatter_(-1, nb, ~in_b & keep.gather(-1, nb))
        r = r * keep
    total = r.sum(-1, keepdim=True)
    fallback = p * keep
    ftotal = fallback.sum(-1, keepdim=True)
    return torch.where(
        total > 0,
        r / torch.where(total > 0, total, 1.0),
        torch.where(ftotal > 0, fallback / torch.where(ftotal > 0, ftotal, 1.0), p / p.sum(-1, keepdim=True)),
    )


def _old_verify(ps, qs, x_all, relax, generator):
    """Step 3 of the previous loop (sampling): ``rand(g)``, then position by position until the first rejection."""
    g = len(x_all)
    alpha = _old_acceptance_probability(ps, qs, x_all, relax)
    u = torch.rand(g, generator=generator, device=alpha.device, dtype=alpha.dtype)
    ok_all = (u < alpha).tolist()
    accepted, new_token = 0, None
    for i in range(g):
        if not ok_all[i]:
            res = _old_residual_distribution(ps[i], qs[i], x_all[i], relax)
            new_token = torch.multinomial(res, 1, generator=generator).squeeze(-1)
            break
        accepted += 1
    return accepted, new_token


# -- random inputs ---------------------------------------------------------------------------------------------


def _inputs(rng, vocab, g, sparse):
    p = rng.dirichlet(np.full(vocab, 0.3), size=g)
    q = rng.dirichlet(np.full(vocab, 0.3), size=g)
    if sparse:  # exact zeros, as top-k leaves them
        p[rng.random(p.shape) < 0.5] = 0.0
        p[:, 0] += 1e-3
        p /= p.sum(1, keepdims=True)
    x = np.array([rng.choice(vocab, p=row) for row in q])
    return torch.tensor(p), torch.tensor(q), torch.tensor(x)


RELAXATIONS = [
    {"delta": 0.0},
    {"delta": 0.05},
    {"delta": 0.3},
    {"delta": 1.0},
    {"lam": 1.5},
    {"lam": 3.0},
    {"delta": 0.3, "residual": "standard"},
]


@pytest.mark.parametrize("vocab", [7, 64])
@pytest.mark.parametrize("k", [1, 3, None])
@pytest.mark.parametrize("kwargs", RELAXATIONS)
def test_vectorised_step_equals_the_previous_loop_on_random_inputs(vocab, k, kwargs):
    rng = np.random.default_rng(vocab * 100 + (k or 0))
    table = latent_proximity(torch.tensor(rng.standard_normal((vocab, 3))), vocab - 1 if k is None else k)
    relax = Relaxation(neighbours=table, **kwargs)
    rejections = 0
    for trial in range(30):
        g = 1 + trial % 5
        p, q, x = _inputs(rng, vocab, g, sparse=trial % 2 == 1)
        alpha, qx, moved, in_b = relaxed_acceptance(p, q, x, relax)
        old_pt, old_moved, old_size = _old_relaxed_target_mass(p, x, relax)
        assert torch.equal(alpha, _old_acceptance_probability(p, q, x, relax))
        assert torch.equal(moved, old_moved)
        assert torch.equal(in_b.sum(-1), old_size)
        assert torch.equal(qx, q[torch.arange(g), x])
        pt, moved2, size = relaxed_target_mass(p, x, relax)
        assert torch.equal(pt, old_pt) and torch.equal(moved2, old_moved) and torch.equal(size, old_size)
        assert torch.equal(acceptance_probability(p, q, x, relax), alpha)
        for i in range(g):
            want = _old_residual_distribution(p[i], q[i], x[i], relax)
            assert torch.equal(residual_distribution(p[i], q[i], x[i], relax, in_b=in_b[i]), want)
            assert torch.equal(residual_distribution(p[i], q[i], x[i], relax), want)
        seed = int(rng.integers(2**31))
        got = verify_drafts(p, q, x, relax, greedy=False, generator=torch.Generator().manual_seed(seed))
        want = _old_verify(p, q, x, relax, torch.Generator().manual_seed(seed))
        assert got[0] == want[0]
        assert (got[1] is None) == (want[1] is None)
        if want[1] is not None:
            rejections += 1
            assert int(got[1]) == int(want[1])
    if k is not None:  # (with every token a neighbour, large budgets accept everything)
        assert rejections >= 3  # the residual branch was exercised


def test_the_int64_table_is_built_once_per_device():
    table = latent_proximity(torch.randn(32, 4), 5)
    relax = Relaxation(neighbours=table, delta=0.2)
    first = relax.index("cpu")
    assert first.dtype == torch.int64 and torch.equal(first, table.long())
    assert relax.index(torch.device("cpu")) is first  # cached: no conversion in the decoding step


# -- delta = 0 (any k) and lambda = 1 are standard speculative decoding, token for token --------------------------

V = 12


def _markov(seed):
    logits = torch.randn(V, V, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 1.5
    return FunctionDecoder(lambda ids: logits[ids])


@pytest.mark.parametrize(
    "make",
    [
        lambda t: Relaxation(neighbours=t[:, :1], delta=0.0),
        lambda t: Relaxation(neighbours=t, delta=0.0),
        lambda t: Relaxation(neighbours=t[:, :1], lam=1.0),
        lambda t: Relaxation(neighbours=t, lam=1.0, residual="standard"),
    ],
    ids=["k1-delta0", "k11-delta0", "k1-lam1", "k11-lam1-standard"],
)
def test_delta_zero_and_lambda_one_reduce_exactly_to_standard_sd(make):
    table = latent_proximity(torch.randn(V, 3, generator=torch.Generator().manual_seed(1)))
    relax = make(table)
    target, drafter = _markov(0), _markov(1)
    for seed in range(40):
        runs = []
        for r in (Relaxation(), relax):
            gen = torch.Generator().manual_seed(seed)
            runs.append(speculative_generate(target, drafter, torch.tensor([seed % V]), max_new_tokens=15, gamma=3,
                                             relax=r, generator=gen))  # fmt: skip
        sd, lantern = runs
        assert torch.equal(sd.tokens, lantern.tokens)
        assert sd.accepted_per_round == lantern.accepted_per_round
        assert lantern.draft_moved == [0.0] * len(lantern.draft_moved)


def test_delta_zero_acceptance_is_min_one_p_over_q_by_hand():
    rng = np.random.default_rng(3)
    table = latent_proximity(torch.tensor(rng.standard_normal((V, 2))), 1)
    p, q, x = _inputs(rng, V, 5, sparse=True)
    alpha = relaxed_acceptance(p, q, x, Relaxation(neighbours=table, delta=0.0))[0].numpy()
    pn, qn, xn = p.numpy(), q.numpy(), x.numpy()
    want = [min(1.0, pn[i, xn[i]] / qn[i, xn[i]]) for i in range(5)]
    np.testing.assert_array_equal(alpha, want)
