"""Claims of the adaptive-weight NT-Xent (arXiv:2502.15251, Section 3.3), checked against independent references."""

import math

import numpy as np
import pytest
import torch

from iclr25_simhand import adaptive_weights, ntxent, pair_weights, weighted_ntxent


def brute_force_loss(z1, z2, wp, wn, tau):
    """Plain-Python loop over the 2N anchors, straight from the formula."""
    z = np.concatenate([z1, z2]).astype(np.float64)
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    m, n = len(z), len(z1)
    total = 0.0
    for i in range(m):
        p = (i + n) % m
        num = math.exp(wp[i % n] * float(z[i] @ z[p]) / tau)
        den = sum(math.exp(wn[i, j] * float(z[i] @ z[j]) / tau) for j in range(m) if j != i)
        total += -math.log(num / den)
    return total / m


def rand(n=6, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=torch.float64), torch.randn(
        n, d, generator=g, dtype=torch.float64
    )


def test_weighted_loss_matches_brute_force_formula():
    z1, z2 = rand()
    rng = np.random.default_rng(1)
    wp, wn = rng.random(6), rng.random((12, 12))
    got = weighted_ntxent(z1, z2, torch.tensor(wp), torch.tensor(wn), temperature=0.3)
    assert float(got) == pytest.approx(brute_force_loss(z1.numpy(), z2.numpy(), wp, wn, 0.3), rel=1e-10)


@pytest.mark.parametrize("tau", [0.07, 0.5, 1.0])
def test_all_ones_weights_equal_ntxent(tau):
    z1, z2 = rand(seed=3)
    ones_p, ones_n = torch.ones(6, dtype=torch.float64), torch.ones(12, 12, dtype=torch.float64)
    a = weighted_ntxent(z1, z2, ones_p, ones_n, temperature=tau)
    assert float(a) == pytest.approx(float(ntxent(z1, z2, temperature=tau)), rel=1e-12)
    assert float(a) == pytest.approx(
        brute_force_loss(z1.numpy(), z2.numpy(), np.ones(6), np.ones((12, 12)), tau)
    )


@pytest.mark.parametrize("n", [2, 8, 32])
def test_identical_embeddings_give_log_2n_minus_1(n):
    z = torch.ones(n, 5)
    assert float(weighted_ntxent(z, z.clone(), temperature=0.5)) == pytest.approx(
        math.log(2 * n - 1), rel=1e-6
    )
    assert float(ntxent(z, z.clone(), temperature=0.1)) == pytest.approx(math.log(2 * n - 1), rel=1e-6)


def test_swapping_views_with_transposed_weights_gives_same_loss():
    z1, z2 = rand(seed=4)
    rng = np.random.default_rng(2)
    wp = torch.tensor(rng.random(6))
    a = rng.random((12, 12))
    wn = torch.tensor((a + a.T) / 2)
    swap = torch.cat([torch.arange(6, 12), torch.arange(6)])
    x = weighted_ntxent(z1, z2, wp, wn)
    y = weighted_ntxent(z2, z1, wp, wn[swap][:, swap])
    assert float(x) == pytest.approx(float(y), rel=1e-12)


def test_permuting_the_batch_consistently_gives_same_loss():
    z1, z2 = rand(seed=5)
    j1 = torch.rand(6, 21, 2, dtype=torch.float64) * 32
    j2 = torch.rand(6, 21, 2, dtype=torch.float64) * 32
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    x = weighted_ntxent(z1, z2, *pair_weights(j1, j2))
    y = weighted_ntxent(z1[perm], z2[perm], *pair_weights(j1[perm], j2[perm]))
    assert float(x) == pytest.approx(float(y), rel=1e-6)


def test_linear_weights_in_unit_interval_closest_one_farthest_zero():
    d = torch.tensor([3.0, 0.5, 7.0, 2.0, 7.0 - 1e-3])
    w = adaptive_weights(d)
    assert float(w.min()) >= 0 and float(w.max()) <= 1
    assert float(w[1]) == 1.0 and float(w[2]) == 0.0
    assert float(w[0]) == pytest.approx((7.0 - 3.0) / 6.5)


def test_pair_weights_diagonal_is_one_and_positive_weights_follow_distance():
    j1 = torch.rand(5, 21, 2) * 32
    j2 = j1.clone()
    j2[1] += 10.0  # the farthest positive
    j2[3] += 0.1
    wp, wn = pair_weights(j1, j2)
    assert torch.allclose(torch.diag(wn), torch.ones(10))
    assert float(wp[1]) == 0.0 and float(wp.max()) == 1.0
    assert torch.allclose(wn, wn.T)


def test_nonlinear_weight_is_half_at_mean_and_decreasing():
    d = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    w = adaptive_weights(d, kind="nonlinear", lam=2.0)
    assert float(w[2]) == pytest.approx(0.5)
    assert bool((w[1:] < w[:-1]).all())


@pytest.mark.parametrize("kind", ["linear", "nonlinear"])
def test_equal_distances_give_no_nan(kind):
    """The official linear weights are 0/0 = NaN when every distance is equal; ours are finite."""
    w = adaptive_weights(torch.full((4, 4), 2.5), kind=kind)
    assert torch.isfinite(w).all()
    j = torch.rand(4, 21, 2).expand(4, 21, 2).clone()
    j[:] = j[0]
    wp, wn = pair_weights(j, j.clone(), kind=kind)
    loss = weighted_ntxent(torch.randn(4, 8), torch.randn(4, 8), wp, wn)
    assert torch.isfinite(loss)
    if kind == "linear":
        assert torch.equal(wp, torch.ones(4))


def test_zero_positive_weight_removes_the_attraction():
    """dl/ds = w / tau: with w+ = 0 (and the sample's other weights 0) its embedding gets no gradient at all."""
    z1, z2 = rand(n=4, seed=6)
    z2 = z2.clone().requires_grad_(True)
    wn = torch.ones(8, 8, dtype=torch.float64)
    wn[4, :] = wn[:, 4] = 0.0  # sample 4 = z2[0]
    (g_on,) = torch.autograd.grad(weighted_ntxent(z1, z2, torch.ones(4, dtype=torch.float64), wn), z2)
    wp = torch.tensor([0.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    (g_off,) = torch.autograd.grad(weighted_ntxent(z1, z2, wp, wn), z2)
    assert float(g_on[0].abs().max()) > 1e-3
    assert torch.equal(g_off[0], torch.zeros_like(g_off[0]))
    assert float(g_off[1:].abs().max()) > 1e-3


def test_gradients_match_finite_differences():
    z1, z2 = rand(n=4, d=6, seed=7)
    z1.requires_grad_(True)
    z2.requires_grad_(True)
    wp = torch.rand(4, dtype=torch.float64)
    wn = torch.rand(8, 8, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda a, b: weighted_ntxent(a, b, wp, wn, temperature=0.2), (z1, z2))


def test_small_temperature_is_finite_and_self_pair_masked():
    z1, z2 = rand(seed=8)
    loss = weighted_ntxent(z1.float(), z2.float(), temperature=0.01)
    assert torch.isfinite(loss)
    z = torch.ones(3, 4)
    # with masking (not subtraction of e^{1/tau}) identical inputs still give log(2N-1) at tiny tau
    assert float(weighted_ntxent(z, z, temperature=0.01)) == pytest.approx(math.log(5), rel=1e-5)


def test_bf16_inputs_close_to_float64():
    z1, z2 = rand(seed=9)
    ref = float(weighted_ntxent(z1, z2))
    assert float(weighted_ntxent(z1.bfloat16(), z2.bfloat16())) == pytest.approx(ref, abs=0.05)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"z1": torch.randn(1, 4), "z2": torch.randn(1, 4)}, "batch size must be >= 2"),
        ({"z1": torch.randn(3, 4), "z2": torch.randn(3, 5)}, "z2 must have shape"),
        (
            {"z1": torch.tensor([[float("nan"), 1.0], [1.0, 2.0]]), "z2": torch.randn(2, 2)},
            "z1 must be finite",
        ),
        ({"z1": torch.randn(3, 4), "z2": torch.randn(3, 4), "temperature": -0.5}, "temperature must be"),
        ({"z1": torch.randn(3, 4), "z2": torch.randn(3, 4), "temperature": 0.0}, "temperature must be"),
        ({"z1": torch.randn(3, 4), "z2": torch.randn(3, 4), "w_pos": torch.ones(4)}, "w_pos must have shape"),
        (
            {"z1": torch.randn(3, 4), "z2": torch.randn(3, 4), "w_neg": torch.ones(3, 3)},
            "w_neg must have shape",
        ),
    ],
)
def test_bad_inputs_are_refused_with_their_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        weighted_ntxent(**kwargs)


def test_bad_weight_inputs():
    with pytest.raises(ValueError, match="kind must be one of"):
        adaptive_weights(torch.ones(3), kind="cubic")
    with pytest.raises(ValueError, match="distances must be >= 0"):
        adaptive_weights(torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="joints1 must be finite"):
        pair_weights(torch.full((2, 21, 2), float("nan")), torch.ones(2, 21, 2))
    with pytest.raises(ValueError, match="joints1 must have shape"):
        pair_weights(torch.ones(2, 21, 3), torch.ones(2, 21, 3))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    z1, z2 = rand(seed=10)
    j1, j2 = torch.rand(6, 21, 2) * 32, torch.rand(6, 21, 2) * 32
    wp, wn = pair_weights(j1, j2)
    cpu = weighted_ntxent(z1, z2, wp, wn)
    gpu = weighted_ntxent(z1.cuda(), z2.cuda(), wp.cuda(), wn.cuda())
    assert float(gpu.cpu()) == pytest.approx(float(cpu), rel=1e-10)
