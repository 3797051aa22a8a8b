"""The linear-time mixers: Mamba's parallel scan vs its recurrence, Linformer vs closed forms, gradients."""

import math

import pytest
import torch

from iclr25_cald import LinformerProjection, MambaConfig, MambaMixer, selective_scan


def naive_recurrence(x, delta, A, B, C, D):
    """h_t = exp(Δ_t A) h_{t-1} + Δ_t B_t x_t ; y_t = C_t h_t + D x_t, one step at a time (Gu & Dao Eq. 2)."""
    b, n, c = x.shape
    h = torch.zeros(b, c, A.shape[1], dtype=x.dtype)
    ys = []
    for t in range(n):
        for_t = torch.exp(delta[:, t, :, None] * A)
        h = for_t * h + delta[:, t, :, None] * B[:, t, None, :] * x[:, t, :, None]
        ys.append((h * C[:, t, None, :]).sum(-1) + D * x[:, t])
    return torch.stack(ys, 1), h


def scan_inputs(b=2, n=23, c=5, ns=4, seed=0, big_decay=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, n, c, generator=g, dtype=torch.float64)
    delta = torch.rand(b, n, c, generator=g, dtype=torch.float64) * (5.0 if big_decay else 0.5)
    A = -torch.rand(c, ns, generator=g, dtype=torch.float64) * (20.0 if big_decay else 2.0)
    B = torch.randn(b, n, ns, generator=g, dtype=torch.float64)
    C = torch.randn(b, n, ns, generator=g, dtype=torch.float64)
    D = torch.randn(c, generator=g, dtype=torch.float64)
    return x, delta, A, B, C, D


@pytest.mark.parametrize("chunk", [1, 2, 7, 16, 64])
@pytest.mark.parametrize("big_decay", [False, True])
def test_mamba_scan_equals_naive_recurrence(chunk, big_decay):
    x, delta, A, B, C, D = scan_inputs(big_decay=big_decay)
    want_y, want_h = naive_recurrence(x, delta, A, B, C, D)
    y, h = selective_scan(x, delta, A, B, C, D, chunk=chunk)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y, want_y, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(h, want_h, rtol=1e-10, atol=1e-10)


def test_mamba_scan_continues_from_a_state_exactly():
    x, delta, A, B, C, D = scan_inputs(n=20)
    y_all, h_all = selective_scan(x, delta, A, B, C, D, chunk=4)
    y1, h1 = selective_scan(x[:, :9], delta[:, :9], A, B[:, :9], C[:, :9], D, chunk=4)
    y2, h2 = selective_scan(x[:, 9:], delta[:, 9:], A, B[:, 9:], C[:, 9:], D, h1, chunk=5)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y_all, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(h2, h_all, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("chunk", [1, 4])
def test_mamba_recurrent_step_equals_parallel_forward(chunk):
    torch.manual_seed(0)
    m = MambaMixer(8, MambaConfig(d_state=4, expand=2, chunk=chunk)).double()
    u = torch.randn(3, 17, 8, dtype=torch.float64)
    full = m(u)
    state = m.empty_state(3)
    steps = []
    for t in range(17):
        y, state = m.step(u[:, t], state)
        steps.append(y)
    torch.testing.assert_close(torch.stack(steps, 1), full, rtol=1e-12, atol=1e-12)


def test_mamba_is_causal():
    torch.manual_seed(1)
    m = MambaMixer(8, MambaConfig(d_state=4, chunk=3)).double()
    u = torch.randn(1, 12, 8, dtype=torch.float64)
    v = u.clone()
    v[:, 7:] = torch.randn(1, 5, 8, dtype=torch.float64)
    torch.testing.assert_close(m(u)[:, :7], m(v)[:, :7], rtol=0, atol=0)
    assert not torch.allclose(m(u)[:, 7:], m(v)[:, 7:])


def test_mamba_initial_step_sizes_lie_in_dt_range():
    m = MambaMixer(32, MambaConfig(dt_min=1e-3, dt_max=1e-1), generator=torch.Generator().manual_seed(0))
    dt = torch.nn.functional.softplus(m.dt_proj.bias)
    assert dt.min() >= 1e-3 * 0.999 and dt.max() <= 1e-1 * 1.001


def test_mamba_gradients_match_finite_differences():
    torch.manual_seed(2)
    m = MambaMixer(4, MambaConfig(d_state=2, d_conv=3, expand=1, chunk=3)).double()
    u = torch.randn(2, 7, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda z: m(z), (u,), eps=1e-6, atol=1e-6)
    names = ["A_log", "dt_proj.bias", "in_proj.weight", "conv1d.weight"]
    x = u.detach()

    def f(*ps):
        return torch.func.functional_call(m, dict(zip(names, ps)), (x,))

    params = dict(m.named_parameters())
    ps = tuple(params[n].detach().clone().requires_grad_(True) for n in names)
    assert torch.autograd.gradcheck(f, ps, eps=1e-6, atol=1e-6)


def softmax_attention(q, k, v, scaling):
    """Plain softmax attention, (b, h, n, d) -> (b, n, h, d)."""
    w = torch.softmax(q @ k.transpose(-1, -2) * scaling, dim=-1)
    return (w @ v).transpose(1, 2)


def qkv(b=2, h=3, n=8, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, d, generator=g, dtype=torch.float64) for _ in range(3)]


def test_identity_linformer_projection_equals_softmax_attention():
    from iclr25_cald._mixers import linformer_attention

    q, k, v = qkv()
    proj = LinformerProjection(8, 8, init="identity", scale="none").double()
    kp, vp = proj.project(k, v, None)
    torch.testing.assert_close(kp, k, rtol=0, atol=0)
    got = linformer_attention(q, kp, vp, 0.5)
    torch.testing.assert_close(got, softmax_attention(q, k, v, 0.5), rtol=1e-14, atol=1e-14)


def test_sqrt_n_scale_divides_projected_keys_and_values_by_sqrt_n():
    from iclr25_cald._mixers import linformer_attention

    q, k, v = qkv(n=9)
    proj = LinformerProjection(9, 9, init="identity", scale="sqrt_n").double()
    got = linformer_attention(q, *proj.project(k, v, None), 0.5)
    want = softmax_attention(q, k / 3.0, v / 3.0, 0.5)  # closed form: sqrt(9) = 3
    torch.testing.assert_close(got, want, rtol=1e-14, atol=1e-14)


def test_projection_is_the_sum_over_tokens_brute_force():
    _q, k, v = qkv(n=6)
    proj = LinformerProjection(10, 4, generator=torch.Generator().manual_seed(3)).double()
    kp, _ = proj.project(k, v, None)
    E = proj.proj_k.detach()
    want = torch.zeros(2, 3, 4, 4, dtype=torch.float64)
    for j in range(4):
        for t in range(6):
            want[:, :, j] += E[t, j] * k[:, :, t] / math.sqrt(6)
    torch.testing.assert_close(kp, want, rtol=1e-12, atol=1e-12)


def test_linformer_right_padding_does_not_change_real_outputs():
    from iclr25_cald._mixers import linformer_attention

    q, k, v = qkv(n=5)
    proj = LinformerProjection(12, 3, generator=torch.Generator().manual_seed(0)).double()
    out = linformer_attention(q, *proj.project(k, v, None), 0.5)
    pad = lambda t: torch.cat([t, 1e3 * torch.randn(2, 3, 4, 4, dtype=torch.float64)], dim=2)  # noqa: E731
    valid = torch.tensor([[True] * 5 + [False] * 4] * 2)
    got = linformer_attention(pad(q), *proj.project(pad(k), pad(v), valid), 0.5)
    torch.testing.assert_close(got[:, :5], out, rtol=1e-12, atol=1e-12)


def test_linformer_left_padding_is_refused():
    _, k, v = qkv(n=4)
    proj = LinformerProjection(4, 2).double()
    with pytest.raises(ValueError, match="right padding"):
        proj.project(k, v, torch.tensor([[False, True, True, True]] * 2))


def test_sequence_longer_than_projection_size_is_refused():
    _, k, v = qkv(n=9)
    proj = LinformerProjection(8, 4).double()
    with pytest.raises(ValueError, match="exceeds the Linformer projection size max_seq_len=8"):
        proj.project(k, v, None)


@pytest.mark.parametrize("k", [9, 100])
def test_k_larger_than_sequence_length_is_refused(k):
    with pytest.raises(ValueError, match="k must be an integer in \\[1, max_seq_len=8\\]"):
        LinformerProjection(8, k)


@pytest.mark.parametrize(
    ("field", "kw"), [("share", {"share": "x"}), ("scale", {"scale": 2}), ("init", {"init": "zeros"})]
)
def test_bad_linformer_options_name_the_field(field, kw):
    with pytest.raises(ValueError, match=f"{field} must be one of"):
        LinformerProjection(8, 4, **kw)


def test_shared_kv_projection_uses_one_matrix():
    proj = LinformerProjection(8, 4, share="kv")
    assert proj.proj_v is None and len(list(proj.parameters())) == 1


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_linformer_low_precision_stays_close_to_float64(dtype):
    from iclr25_cald._mixers import linformer_attention

    q, k, v = qkv(n=16, d=8)
    proj = LinformerProjection(16, 4, generator=torch.Generator().manual_seed(0)).double()
    ref = linformer_attention(q, *proj.project(k, v, None), 8**-0.5)
    low = linformer_attention(q.to(dtype), *proj.to(dtype).project(k.to(dtype), v.to(dtype), None), 8**-0.5)
    assert torch.isfinite(low).all()
    torch.testing.assert_close(low.double(), ref, rtol=0.05, atol=0.05)


def test_mamba_bf16_forward_is_finite_and_close():
    torch.manual_seed(0)
    m = MambaMixer(8, MambaConfig(d_state=4))
    u = torch.randn(2, 10, 8)
    ref = m.double()(u.double())
    low = m.to(torch.bfloat16)(u.to(torch.bfloat16))
    assert torch.isfinite(low).all()
    torch.testing.assert_close(low.double(), ref, rtol=0.1, atol=0.05)


@pytest.mark.parametrize(
    ("field", "kw"),
    [
        ("d_state", {"d_state": 0}),
        ("expand", {"expand": 0}),
        ("chunk", {"chunk": 0}),
        ("dt_min", {"dt_min": 0.5}),
    ],
)
def test_bad_mamba_config_names_the_field(field, kw):
    with pytest.raises(ValueError, match=field):
        MambaConfig(**kw)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_scan_and_mixer_on_cuda_match_cpu():
    x, delta, A, B, C, D = scan_inputs()
    want, _ = selective_scan(x, delta, A, B, C, D, chunk=8)
    got, _ = selective_scan(*(t.cuda() for t in (x, delta, A, B, C, D)), chunk=8)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-10, atol=1e-10)
    torch.manual_seed(0)
    m = MambaMixer(8, MambaConfig(d_state=4, chunk=4)).double()
    u = torch.randn(2, 9, 8, dtype=torch.float64)
    torch.testing.assert_close(m.cuda()(u.cuda()).cpu(), m.cpu()(u), rtol=1e-10, atol=1e-10)


# ---- issue 38: float64 stays float64 ------------------------------------------------------------------------------


def mixer_reference(m, u):
    """MambaMixer's forward written out in float64 from its parameters (A = -exp(A_log), naive recurrence)."""
    import torch.nn.functional as F

    n = u.shape[1]
    x, z = (u @ m.in_proj.weight.T).chunk(2, dim=-1)
    xc = F.silu(
        F.conv1d(
            x.transpose(1, 2), m.conv1d.weight, m.conv1d.bias, padding=m.config.d_conv - 1, groups=m.inner
        )[..., :n].transpose(1, 2)
    )
    dbc = xc @ m.x_proj.weight.T
    dt, B, C = torch.split(dbc, [m.dt_rank, m.config.d_state, m.config.d_state], dim=-1)
    delta = F.softplus(dt @ m.dt_proj.weight.T + m.dt_proj.bias)
    A = -torch.exp(m.A_log)
    y, _ = naive_recurrence(xc, delta, A, B, C, m.D)
    return (y * F.silu(z)) @ m.out_proj.weight.T


def float64_mixer(seed=3):
    torch.manual_seed(seed)
    m = MambaMixer(8, MambaConfig(d_state=4, expand=2, chunk=1)).double()
    with torch.no_grad():  # A_log off the float32 grid (the initial log(1..N) are not either)
        m.A_log.add_(0.3 * torch.rand(m.A_log.shape, dtype=torch.float64))
    return m


def test_float64_mamba_equals_an_exact_float64_reference():
    """Issue 38: A = -exp(A_log.float()) rounded through float32 (1.5e-11 from the float64 reference)."""
    m = float64_mixer()
    u = torch.randn(2, 20, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    want = mixer_reference(m, u)
    got = m(u)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-14, atol=1e-14)
    state, steps = m.empty_state(2), []
    for t in range(20):
        y, state = m.step(u[:, t], state)
        steps.append(y)
    torch.testing.assert_close(torch.stack(steps, 1), want, rtol=1e-14, atol=1e-14)


def test_float64_a_log_gradient_matches_finite_differences_tightly():
    """1e-6 steps on A_log were 5 % off with the float32 round trip; float64 central differences agree to ~1e-8."""
    m = float64_mixer()
    x = torch.randn(2, 9, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    def f(a_log):
        return torch.func.functional_call(m, {"A_log": a_log}, (x,))

    a_log = m.A_log.detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(f, (a_log,), eps=1e-6, atol=1e-9, rtol=1e-5)
