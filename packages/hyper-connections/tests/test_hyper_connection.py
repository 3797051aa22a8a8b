"""Invariants of the HyperConnection module (arXiv 2409.19606 §2, eq. 14, Algorithm 2).

Regressions from public reports: lucidrains/hyper-connections#8 and #13, tokenbender/mHC#3 and #5, SkyRL PR#1008.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from iclr25_hyper_connections import (
    HyperConnection,
    expand_streams,
    hyper_connection_num_params,
    parallel_arrangement,
    param_groups,
    reduce_streams,
    sequential_arrangement,
)

D = 16


def _branches(num: int, dim: int = D, seed: int = 0) -> list[nn.Module]:
    """Pre-norm MLP branches T_k(norm_k(h)) with random weights (a stand-in for attention/FFN)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(num):
        lin1, lin2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
        with torch.no_grad():
            for p in (*lin1.parameters(), *lin2.parameters()):
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        out.append(nn.Sequential(nn.LayerNorm(dim), lin1, nn.GELU(), lin2))
    return out


def _randomise(hc: HyperConnection, seed: int, scale: float = 1.0) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in hc.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)


# ---------------------------------------------------------------------------------------------------------------
# 1. Exact reduction to the Pre-Norm residual network at initialisation
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("dynamic", [True, False])
def test_init_is_exactly_the_prenorm_residual_network(n: int, dynamic: bool) -> None:
    layers = 6
    branches = _branches(layers)
    hcs = [HyperConnection(D, expansion_rate=n, layer_index=k, dynamic=dynamic) for k in range(layers)]
    x = torch.randn(3, 5, D, generator=torch.Generator().manual_seed(1))

    h, streams = x, expand_streams(x, n)
    with torch.no_grad():
        for branch, hc in zip(branches, hcs):
            h = h + branch(h)  # Pre-Norm residual block
            streams = hc(streams, branch)
            for i in range(n):  # every stream is bit-for-bit the residual stream
                assert torch.equal(streams[..., i, :], h)
    torch.testing.assert_close(reduce_streams(streams), n * h, rtol=0, atol=0)
    final = nn.LayerNorm(D, eps=0.0, elementwise_affine=False)
    torch.testing.assert_close(final(reduce_streams(streams)), final(h), rtol=1e-6, atol=1e-6)


def test_n1_static_untrainable_is_the_residual_connection_bit_for_bit() -> None:
    branch = _branches(1)[0]
    hc = HyperConnection(D, expansion_rate=1, layer_index=7, dynamic=False, trainable=False)
    assert list(hc.parameters()) == []  # nothing to train: a fixed residual connection
    x = torch.randn(4, 9, D)
    with torch.no_grad():
        out = hc(expand_streams(x, 1), branch)[..., 0, :]
        assert torch.equal(out, x + branch(x))


@pytest.mark.parametrize("dynamic", [False, True])
def test_identity_preserving_untrainable_hc_equals_residual_with_n4(dynamic: bool) -> None:
    # SkyRL PR#1008 expectation: n > 1 with identity-preserving frozen matrices equals the residual network.
    branches = _branches(3)
    hcs = [
        HyperConnection(D, expansion_rate=4, layer_index=k, dynamic=dynamic, trainable=False)
        for k in range(3)
    ]
    assert not any(p.requires_grad for hc in hcs for p in hc.parameters())
    x = torch.randn(2, 3, D)
    h, s = x, expand_streams(x, 4)
    with torch.no_grad():
        for b, hc in zip(branches, hcs):
            h, s = h + b(h), hc(s, b)
    assert torch.equal(reduce_streams(s) / 4, h)


# ---------------------------------------------------------------------------------------------------------------
# 2. Matrix form equals an explicit per-token, per-stream loop (brute force, float64)
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("tanh", [True, False])
@pytest.mark.parametrize("dynamic", [True, False])
def test_matrix_form_equals_per_stream_loop(dynamic: bool, tanh: bool) -> None:
    n, d = 3, 8
    hc = HyperConnection(d, expansion_rate=n, layer_index=2, dynamic=dynamic, tanh=tanh).double()
    _randomise(hc, seed=3, scale=0.5)
    H = torch.randn(2, 4, n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    W_branch = torch.randn(d, d, dtype=torch.float64, generator=torch.Generator().manual_seed(5))

    def branch(h: torch.Tensor) -> torch.Tensor:
        return torch.sin(h @ W_branch)

    with torch.no_grad():
        out = hc(H, branch)
        expected = _brute_force(hc, H, branch, dynamic=dynamic, tanh=tanh)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


def _brute_force(hc: HyperConnection, H: torch.Tensor, branch, *, dynamic: bool, tanh: bool) -> torch.Tensor:
    n = H.shape[-2]
    expected = torch.empty_like(H)
    for b in range(H.shape[0]):
        for t in range(H.shape[1]):
            rows = [H[b, t, i] for i in range(n)]
            alpha = [[hc.static_alpha[i, j].item() for j in range(n + 1)] for i in range(n)]
            beta = [hc.static_beta[i].item() for i in range(n)]
            if dynamic:
                for i in range(n):
                    r = rows[i]
                    normed = (r - r.mean()) / torch.sqrt(r.var(unbiased=False) + 1e-5)  # non-affine LayerNorm
                    for j in range(n + 1):
                        a = float(normed @ hc.dynamic_alpha_fn[:, j])
                        a = math.tanh(a) if tanh else a
                        alpha[i][j] += hc.dynamic_alpha_scale.item() * a
                    bb = float(normed @ hc.dynamic_beta_fn)
                    bb = math.tanh(bb) if tanh else bb
                    beta[i] += hc.dynamic_beta_scale.item() * bb
            h0 = sum(alpha[i][0] * rows[i] for i in range(n))
            y = branch(h0)
            for j in range(n):
                expected[b, t, j] = beta[j] * y + sum(alpha[i][j + 1] * rows[i] for i in range(n))
    return expected


def test_gradients_match_finite_differences() -> None:
    n, d = 2, 4
    hc = HyperConnection(d, expansion_rate=n, layer_index=1, dynamic=True, norm="layernorm_affine").double()
    _randomise(hc, seed=11, scale=0.7)
    lin = nn.Linear(d, d).double()
    H = torch.randn(2, 3, n, d, dtype=torch.float64, requires_grad=True)
    params = tuple(hc.parameters())

    def f(H: torch.Tensor, *ps: torch.Tensor) -> torch.Tensor:
        out = torch.func.functional_call(hc, dict(zip([k for k, _ in hc.named_parameters()], ps)), (H, lin))
        return out

    assert torch.autograd.gradcheck(
        f, (H, *(p.detach().requires_grad_(True) for p in params)), eps=1e-6, atol=1e-6
    )


# ---------------------------------------------------------------------------------------------------------------
# 3. Sequential / parallel arrangements (paper §3)
# ---------------------------------------------------------------------------------------------------------------
def _spy(seen: list[torch.Tensor], branch: nn.Module):
    def f(h: torch.Tensor) -> torch.Tensor:
        seen.append(h.clone())
        return branch(h)

    return f


def test_sequential_arrangement_feeds_layer2_with_x_plus_T1() -> None:
    t1, t2 = _branches(2)
    hcs = [
        HyperConnection(
            D, expansion_rate=2, layer_index=k, dynamic=False, init_matrix=sequential_arrangement()
        )
        for k in range(2)
    ]
    x = torch.randn(3, D)
    seen: list[torch.Tensor] = []
    with torch.no_grad():
        s = expand_streams(x, 2)
        s = hcs[0](s, _spy(seen, t1))
        s = hcs[1](s, _spy(seen, t2))
        torch.testing.assert_close(seen[0], x)
        torch.testing.assert_close(seen[1], x + t1(x))
        h2 = x + t1(x) + t2(x + t1(x))
        torch.testing.assert_close(s, torch.stack([h2, h2], dim=-2))


def test_parallel_arrangement_gives_both_layers_the_same_input() -> None:
    t1, t2 = _branches(2, seed=5)
    hcs = [
        HyperConnection(
            D, expansion_rate=2, layer_index=k, dynamic=False, init_matrix=parallel_arrangement(k)
        )
        for k in range(2)
    ]
    h1, h2 = torch.randn(3, D), torch.randn(3, D)
    u = h1 + h2
    seen: list[torch.Tensor] = []
    with torch.no_grad():
        s = hcs[0](torch.stack([h1, h2], dim=-2), _spy(seen, t1))
        s = hcs[1](s, _spy(seen, t2))
        torch.testing.assert_close(seen[0], u)
        torch.testing.assert_close(seen[1], u)  # the pair acts as one parallel block
        torch.testing.assert_close(s[..., 0, :], u + t1(u))
        torch.testing.assert_close(s[..., 1, :], u + t2(u))
    assert parallel_arrangement(2).equal(parallel_arrangement(0))


# ---------------------------------------------------------------------------------------------------------------
# 4. Width mixing is applied (regression: lucidrains/hyper-connections#8, tokenbender/mHC#3)
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dynamic", [False, True])
def test_permutation_A_r_permutes_the_streams(dynamic: bool) -> None:
    n = 4
    perm = [2, 0, 3, 1]  # stream i goes to output position perm[i]
    matrix = torch.zeros(n + 1, n + 1)
    matrix[1, 0] = 1.0  # A_m = e_0; B = 0
    for i, j in enumerate(perm):
        matrix[1 + i, 1 + j] = 1.0
    hc = HyperConnection(D, expansion_rate=n, layer_index=0, dynamic=dynamic, init_matrix=matrix)
    H = torch.randn(2, 5, n, D)
    with torch.no_grad():
        h0, residual, _ = hc.width_connection(H)
        out = hc(H, lambda h: 100 * h + 1)  # B = 0: the branch must not reach the streams
    for i, j in enumerate(perm):
        assert torch.equal(residual[..., j, :], H[..., i, :])
        assert torch.equal(out[..., j, :], H[..., i, :])
    assert not torch.equal(out, H)
    assert torch.equal(h0, H[..., 0, :])


# ---------------------------------------------------------------------------------------------------------------
# 5. Custom depth residual function is used on every path (regression: tokenbender/mHC#5)
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("n", "dynamic", "trainable"), [(1, False, True), (1, True, True), (4, False, False), (4, True, True)]
)
def test_custom_depth_residual_fn_is_called_on_every_path(n: int, dynamic: bool, trainable: bool) -> None:
    calls: list[tuple[torch.Size, torch.Size]] = []

    def spy(residual: torch.Tensor, term: torch.Tensor) -> torch.Tensor:
        calls.append((residual.shape, term.shape))
        return residual - term  # observable: differs from the default addition

    hc = HyperConnection(
        D, expansion_rate=n, layer_index=0, dynamic=dynamic, trainable=trainable, depth_residual_fn=spy
    )
    x = torch.randn(2, 3, D)
    with torch.no_grad():
        out = hc(expand_streams(x, n), lambda h: 2 * h)
        h0, res, beta = hc.width_connection(expand_streams(x, n))
        out2 = hc.depth_connection(res, 2 * h0, beta)
    assert calls == [((2, 3, n, D), (2, 3, n, D))] * 2
    torch.testing.assert_close(out, expand_streams(x - 2 * x, n))
    torch.testing.assert_close(out2, out)


# ---------------------------------------------------------------------------------------------------------------
# 6. Dynamic weights stay within the scale of the static ones (tanh bound)
# ---------------------------------------------------------------------------------------------------------------
def test_dynamic_weights_are_bounded_by_the_scales() -> None:
    hc = HyperConnection(D, expansion_rate=4, layer_index=1, dynamic=True, norm="layernorm_affine")
    _randomise(hc, seed=2, scale=50.0)  # huge dynamic projections and norm gains
    with torch.no_grad():
        hc.static_alpha.uniform_(-2, 2)
        hc.static_beta.uniform_(-2, 2)
        hc.dynamic_alpha_scale.fill_(0.3)
        hc.dynamic_beta_scale.fill_(-0.2)
    H = 1e4 * torch.randn(8, 7, 4, D)
    alpha, beta = hc.connection_weights(H)
    assert alpha.dtype == beta.dtype == torch.float32
    assert (alpha - hc.static_alpha).abs().max() <= 0.3 + 1e-6
    assert (beta - hc.static_beta).abs().max() <= 0.2 + 1e-6
    assert (
        alpha - hc.static_alpha
    ).abs().max() > 0.29  # the bound is attained (tanh saturates), not trivially met

    no_tanh = HyperConnection(
        D, expansion_rate=4, layer_index=1, dynamic=True, tanh=False, norm="layernorm_affine"
    )
    no_tanh.load_state_dict(hc.state_dict())
    alpha, _ = no_tanh.connection_weights(H)
    assert (alpha - no_tanh.static_alpha).abs().max() > 1.0  # without tanh nothing bounds them


# ---------------------------------------------------------------------------------------------------------------
# 7. Stream RMS stays bounded over depth (regression: lucidrains/hyper-connections#13)
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("perturb", [False, True])
def test_stream_rms_bounded_over_24_layers(perturb: bool) -> None:
    layers, n = 24, 4
    branches = _branches(layers, seed=9)
    hcs = [HyperConnection(D, expansion_rate=n, layer_index=k) for k in range(layers)]
    if perturb:  # trained-looking dynamic projections (the static part stays at init)
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for hc in hcs:
                hc.dynamic_alpha_fn.copy_(torch.randn(hc.dynamic_alpha_fn.shape, generator=g))
                hc.dynamic_beta_fn.copy_(torch.randn(hc.dynamic_beta_fn.shape, generator=g))
    x = torch.randn(4, 16, D, generator=torch.Generator().manual_seed(1))
    h, s = x, expand_streams(x, n)
    with torch.no_grad():
        for k, (b, hc) in enumerate(zip(branches, hcs)):
            h, s = h + b(h), hc(s, b)
            ratio = s.pow(2).mean(dim=(0, 1, 3)).sqrt() / h.pow(2).mean().sqrt()  # per stream
            assert ((ratio > 0.5) & (ratio < 2.0)).all(), (
                f"layer {k}: stream RMS / residual RMS = {ratio.tolist()}"
            )
            if not perturb:
                torch.testing.assert_close(ratio, torch.ones(n))


# ---------------------------------------------------------------------------------------------------------------
# 8. Determinism of the initialisation
# ---------------------------------------------------------------------------------------------------------------
def test_init_is_deterministic_and_leaves_global_rng_alone() -> None:
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a = HyperConnection(D, expansion_rate=4, layer_index=6)
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(999)
    b = HyperConnection(D, expansion_rate=4, layer_index=6)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb
        assert torch.equal(va, vb)
    # eq. 14: B = 1, A_m = e_{k mod n}, A_r = I, W = 0, s = 0.01
    m = a.matrix()
    expected = torch.zeros(5, 5)
    expected[0, 1:] = 1
    expected[1 + 6 % 4, 0] = 1
    expected[1:, 1:] = torch.eye(4)
    assert torch.equal(m, expected)
    assert torch.equal(a.dynamic_alpha_fn, torch.zeros(D, 5))
    assert torch.equal(a.dynamic_beta_fn, torch.zeros(D))
    assert a.dynamic_alpha_scale.item() == pytest.approx(0.01)
    assert a.dynamic_beta_scale.item() == pytest.approx(0.01)
    feeds = [
        int(HyperConnection(D, expansion_rate=3, layer_index=k).static_alpha[:, 0].argmax()) for k in range(7)
    ]
    assert feeds == [0, 1, 2, 0, 1, 2, 0]


# ---------------------------------------------------------------------------------------------------------------
# 9. Shapes and dtypes
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lead", [(), (5,), (2, 5), (2, 3, 5)])
def test_shapes_round_trip(lead: tuple[int, ...]) -> None:
    x = torch.randn(*lead, D)
    s = expand_streams(x, 4)
    assert s.shape == (*lead, 4, D)
    hc = HyperConnection(D, expansion_rate=4, layer_index=0)
    out = hc(s, nn.Linear(D, D))
    assert out.shape == (*lead, 4, D)
    assert reduce_streams(out).shape == (*lead, D)


def test_expand_returns_a_copy() -> None:
    x = torch.zeros(2, D)
    s = expand_streams(x, 3)
    s[0, 1, 0] = 5.0
    assert x.abs().sum() == 0
    assert s[0, 0, 0] == 0


def test_bf16_autocast_keeps_mixing_in_fp32() -> None:
    hc = HyperConnection(D, expansion_rate=4, layer_index=1)
    _randomise(hc, seed=0, scale=0.3)
    H = torch.randn(2, 6, 4, D) * 3 + 1
    seen: list[torch.dtype] = []

    def branch(h: torch.Tensor) -> torch.Tensor:
        seen.append(h.dtype)
        return h * 0.5  # elementwise: unaffected by autocast

    with torch.no_grad():
        ref = hc(H, branch)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            alpha, beta = hc.connection_weights(H)
            out = hc(H, branch)
    assert alpha.dtype == beta.dtype == torch.float32
    assert out.dtype == torch.float32
    assert seen == [torch.float32, torch.float32]
    assert torch.equal(out, ref)  # bf16 mixing would differ by ~1e-2

    # bf16 streams: output stays bf16, weights still fp32, result close to the fp32 computation
    with torch.no_grad():
        out16 = hc(H.bfloat16(), branch)
    assert out16.dtype == torch.bfloat16
    torch.testing.assert_close(out16.float(), hc(H.bfloat16().float(), branch), rtol=1e-2, atol=5e-2)


# ---------------------------------------------------------------------------------------------------------------
# 10. Parameter count (paper App. B / Table 7 formula)
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 4, 8])
@pytest.mark.parametrize(("norm", "norm_params"), [("layernorm", 0), ("layernorm_affine", 2), ("rmsnorm", 1)])
def test_parameter_count_matches_paper_formula(n: int, norm: str, norm_params: int) -> None:
    d = 24
    dyn = HyperConnection(d, expansion_rate=n, layer_index=0, norm=norm)  # type: ignore[arg-type]
    assert sum(p.numel() for p in dyn.parameters()) == d * (n + 2) + n * (n + 2) + 2 + norm_params * d
    static = HyperConnection(d, expansion_rate=n, layer_index=0, dynamic=False)
    assert sum(p.numel() for p in static.parameters()) == n * (n + 2)
    assert (
        hyper_connection_num_params(d, n, dynamic=True, norm=norm)
        == d * (n + 2) + n * (n + 2) + 2 + norm_params * d
    )  # type: ignore[arg-type]


def test_olmo_1b_overhead_is_the_papers_394k() -> None:
    # OLMo-1B: d = 2048, 16 blocks = 32 branches, non-parametric LayerNorm; paper: ~394 K extra (0.03 %).
    extra = 32 * hyper_connection_num_params(2048, 4, dynamic=True)
    assert extra == 394_048
    assert extra / 1_176_764_416 == pytest.approx(0.000335, abs=5e-6)


def test_param_groups_exclude_static_weights_from_decay() -> None:
    model = nn.ModuleDict({"hc": HyperConnection(D, expansion_rate=2, layer_index=0), "lin": nn.Linear(D, D)})
    decay, no_decay = param_groups(model, weight_decay=0.1)
    assert decay["weight_decay"] == 0.1
    assert no_decay["weight_decay"] == 0.0
    hc = model["hc"]
    ids = lambda ps: {id(p) for p in ps}  # noqa: E731
    assert ids(decay["params"]) == ids([hc.dynamic_alpha_fn, hc.dynamic_beta_fn, model["lin"].weight])
    assert ids(no_decay["params"]) == ids(
        [hc.static_alpha, hc.static_beta, hc.dynamic_alpha_scale, hc.dynamic_beta_scale, model["lin"].bias]
    )
    with pytest.raises(ValueError, match="weight_decay"):
        param_groups(model, weight_decay=-1.0)


# ---------------------------------------------------------------------------------------------------------------
# 11. Bad input
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"expansion_rate": 0, "layer_index": 0},
            ValueError,
            r"expansion_rate must be an integer in \[1, inf\), got 0",
        ),
        ({"expansion_rate": -3, "layer_index": 0}, ValueError, "expansion_rate"),
        ({"expansion_rate": 2.0, "layer_index": 0}, TypeError, "expansion_rate must be an integer"),
        ({"expansion_rate": 4}, TypeError, "layer_index is required"),
        ({"expansion_rate": 4, "layer_index": None}, TypeError, "layer_index is required"),
        (
            {"expansion_rate": 4, "layer_index": -1},
            ValueError,
            r"layer_index must be an integer in \[0, inf\), got -1",
        ),
        ({"expansion_rate": 4, "layer_index": True}, TypeError, "layer_index must be an integer"),
        ({"expansion_rate": 4, "layer_index": 0, "norm": "batchnorm"}, ValueError, "norm must be one of"),
        ({"expansion_rate": 2, "layer_index": 0, "init_matrix": torch.eye(2)}, ValueError, r"shape \(3, 3\)"),
        (
            {"expansion_rate": 2, "layer_index": 0, "init_matrix": torch.ones(3, 3)},
            ValueError,
            r"init_matrix\[0, 0\]",
        ),
        ({"expansion_rate": 2, "layer_index": 0, "depth_residual_fn": 3}, TypeError, "depth_residual_fn"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        HyperConnection(D, **kwargs)


def test_bad_dim() -> None:
    with pytest.raises(ValueError, match=r"dim must be an integer in \[1, inf\)"):
        HyperConnection(0, expansion_rate=2, layer_index=0)


def test_dim_mismatch_between_streams_and_branch_output() -> None:
    hc = HyperConnection(D, expansion_rate=2, layer_index=0)
    s = expand_streams(torch.randn(3, D), 2)
    with pytest.raises(
        ValueError, match=r"branch output must have the streams' shape without the stream axis, \(3, 16\)"
    ):
        hc(s, nn.Linear(D, D + 1))
    with pytest.raises(TypeError, match=r"branch output must be a torch\.Tensor"):
        hc(s, lambda h: (h, None))
    with pytest.raises(ValueError, match=r"streams must have shape \(\.\.\., 2, 16\)"):
        hc(expand_streams(torch.randn(3, D), 3), nn.Identity())
    with pytest.raises(ValueError, match=r"streams must have shape \(\.\.\., 2, 16\)"):
        hc(expand_streams(torch.randn(3, D + 2), 2), nn.Identity())
    with pytest.raises(TypeError, match="floating-point"):
        hc(torch.ones(3, 2, D, dtype=torch.long), nn.Identity())
    with pytest.raises(TypeError, match="branch must be callable"):
        hc(s, "not a function")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expansion_rate"):
        expand_streams(torch.randn(3, D), 0)


def test_recomputing_the_dynamic_weights_changes_memory_not_results() -> None:
    from iclr25_hyper_connections._experiment import saved_activation_bytes

    torch.manual_seed(0)
    hc = HyperConnection(D, expansion_rate=4, layer_index=3, norm="layernorm_affine")
    _randomise(hc, seed=4, scale=0.5)
    branch = nn.Linear(D, D)
    H = torch.randn(2, 8, 4, D)
    results = {}
    for recompute in (False, True):
        hc.recompute = recompute
        h = H.clone().requires_grad_(True)
        out = hc(h, branch)
        out.pow(2).sum().backward()
        grads = [h.grad.clone()] + [p.grad.clone() for p in hc.parameters()]
        hc.zero_grad()
        exclude = [*hc.parameters(), *branch.parameters()]
        saved = saved_activation_bytes(lambda h=h: hc(h, branch), exclude=exclude)
        results[recompute] = (out.detach(), grads, saved)
    torch.testing.assert_close(results[True][0], results[False][0], rtol=0, atol=0)
    for a, b in zip(results[True][1], results[False][1]):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert results[True][2] <= results[False][2] - H.numel() * 4  # the normalised streams are no longer kept
