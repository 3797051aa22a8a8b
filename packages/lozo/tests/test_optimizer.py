"""Invariants of LOZO / LOZO-M / MeZO (Chen et al., ICLR 2025, arXiv:2410.07698, Algorithms 1-2), checked from the outside where possible.

Most checks use a linear loss f(X) = <G, X>, for which the two-point estimate is exact: c = <G, Z>.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from iclr25_lozo import LOZO, MeZO, decay_param_groups


def linear_closure(params, grads, record=None):
    def closure():
        loss = sum((g * p).sum() for p, g in zip(params, grads))
        if record is not None:
            record.append(float(loss))
        return loss

    return closure


def make_matrix(m=6, n=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = nn.Parameter(torch.randn(m, n, generator=g, dtype=torch.float64))
    grad = torch.randn(m, n, generator=g, dtype=torch.float64)
    return x, grad


# ---------------------------------------------------------------------------------------------------------------
# 1. the estimate and the update
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("interval", [1, 3, 50])
def test_update_is_minus_lr_c_uvt_over_r_on_every_step_including_v_redraws(interval):
    """Regression for the official code's seed replay bug (the official optsuite/LOZO code redraws V from the global RNG before U on V-resample steps): on V-redraw steps the update must still
    use the U of the perturbation. For a linear loss that means <G, dX> = -lr c^2 / r exactly, every step."""
    x, grad = make_matrix()
    lr, rank, eps = 0.01, 2, 1e-3
    opt = LOZO([x], lr=lr, eps=eps, rank=rank, interval=interval, seed=7)
    for _ in range(2 * interval + 2):
        losses = []
        before = x.detach().clone()
        opt.step(linear_closure([x], [grad], losses))
        c = (losses[0] - losses[1]) / (2 * eps)
        delta = x.detach() - before
        assert float((grad * delta).sum()) == pytest.approx(-lr * c * c / rank, rel=1e-6)
        # and the step is exactly rank-r: ||dX||_F = lr |c| ||U V^T||_F / r, with dX of rank <= r
        assert torch.linalg.matrix_rank(delta, rtol=1e-9).item() <= rank


def test_linear_loss_estimate_is_exact():
    """c equals <G, Z> for the direction the update uses: dX = -lr c Z / r  =>  Z = -r dX / (lr c)."""
    x, grad = make_matrix()
    lr, rank, eps = 0.1, 3, 1e-2
    opt = LOZO([x], lr=lr, eps=eps, rank=rank, interval=4, seed=3)
    for _ in range(5):
        losses = []
        before = x.detach().clone()
        opt.step(linear_closure([x], [grad], losses))
        c = (losses[0] - losses[1]) / (2 * eps)
        z = -rank * (x.detach() - before) / (lr * c)
        assert float((grad * z).sum()) == pytest.approx(c, rel=1e-8)
        # the measured losses are exactly f(X +- eps Z)
        assert losses[0] == pytest.approx(float((grad * (before + eps * z)).sum()), rel=1e-9, abs=1e-9)


def test_unbiased_with_one_over_r():
    """E[c U V^T / r] = G (arXiv:2410.07698, the LOZO estimator: E_U[c U V^T | V] = G V V^T, E_V[V V^T] = r I): the mean step over many fresh (U, V) is -lr G. Without 1/r it is r G."""
    torch.manual_seed(0)
    x, grad = make_matrix(4, 3, seed=1)
    start = x.detach().clone()
    lr, rank, samples = 1e-4, 2, 20_000
    opt = LOZO([x], lr=lr, eps=1e-3, rank=rank, interval=1, seed=11)
    closure = linear_closure([x], [grad])
    for _ in range(samples):
        opt.step(closure)
    # dX accumulates; the loss is linear so the gradient does not change as X moves.
    mean_step = (x.detach() - start) / (-lr * samples)
    rel_err = (mean_step - grad).norm() / grad.norm()
    assert rel_err < 0.06, f"mean estimate off by {rel_err:.3f} of |G|"
    assert (rank * mean_step - grad).norm() / grad.norm() > 0.5  # the un-normalised estimate would be r G


def test_updates_stay_in_span_of_v_within_a_period():
    """Brief §3.4.3: within one lazy period X_t - X_t0 = B V^T, rank <= r; a new period leaves that span."""
    x, grad = make_matrix(8, 7)
    rank, interval = 2, 5
    opt = LOZO([x], lr=0.05, eps=1e-3, rank=rank, interval=interval, seed=5)
    closure = linear_closure([x], [grad])
    x0 = x.detach().clone()
    for _ in range(interval):
        opt.step(closure)
    v = opt.state[x]["V"].double()
    projector = v @ torch.linalg.pinv(v)  # onto span(V) in R^n
    diff = x.detach() - x0
    assert torch.linalg.matrix_rank(diff, rtol=1e-9).item() <= rank
    assert (diff - diff @ projector).abs().max() < 1e-10
    opt.step(closure)  # first step of the next period: a new V
    diff2 = x.detach() - x0
    assert (diff2 - diff2 @ projector).abs().max() > 1e-6
    assert torch.linalg.matrix_rank(diff2, rtol=1e-9).item() > rank


def test_v_constant_within_interval_and_redrawn_after():
    """Regression for optsuite/LOZO#1: V is reused for `interval` steps, not redrawn every step."""
    x, grad = make_matrix()
    opt = LOZO([x], lr=0.01, rank=2, interval=3)
    closure = linear_closure([x], [grad])
    vs = []
    for _ in range(7):
        opt.step(closure)
        vs.append(opt.state[x]["V"].clone())
    assert torch.equal(vs[0], vs[1]) and torch.equal(vs[1], vs[2])
    assert not torch.equal(vs[2], vs[3])
    assert torch.equal(vs[3], vs[5]) and not torch.equal(vs[5], vs[6])


def test_parameters_restored_after_perturbation_with_zero_lr():
    model = nn.Sequential(nn.Linear(5, 7), nn.LayerNorm(7), nn.Linear(7, 3))
    original = copy.deepcopy(model.state_dict())
    opt = LOZO(model.parameters(), lr=0.0, eps=1e-3, rank=2)
    inputs = torch.randn(4, 5)
    for _ in range(3):
        opt.step(lambda: model(inputs).pow(2).mean())
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, original[name], rtol=0, atol=1e-6)


def test_parameters_restored_when_the_closure_raises():
    x, _ = make_matrix()
    before = x.detach().clone()
    opt = LOZO([x], lr=0.1)
    calls = []

    def closure():
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("boom")
        return x.sum()

    with pytest.raises(RuntimeError, match="boom"):
        opt.step(closure)
    torch.testing.assert_close(x.detach(), before, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------------------------------------
# 2. reductions
# ---------------------------------------------------------------------------------------------------------------


def test_lozo_m_with_zero_momentum_equals_lozo():
    a, grad = make_matrix()
    b = nn.Parameter(a.detach().clone())
    bias_a = nn.Parameter(torch.randn(4, dtype=torch.float64))
    bias_b = nn.Parameter(bias_a.detach().clone())
    gb = torch.randn(4, dtype=torch.float64)
    lozo = LOZO([a, bias_a], lr=0.02, rank=2, interval=3, momentum=0.0, seed=1)
    lozo_m = LOZO([b, bias_b], lr=0.02, rank=2, interval=3, momentum=1e-300, seed=1)  # beta -> 0
    for _ in range(7):
        lozo.step(linear_closure([a, bias_a], [grad, gb]))
        lozo_m.step(linear_closure([b, bias_b], [grad, gb]))
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(bias_a, bias_b, rtol=1e-12, atol=1e-12)


def test_lozo_m_without_v_redraw_is_an_ema_of_lozo_steps():
    """Brief §3.4.5: with nu = infinity, LOZO-M's update is the EMA (first term c U / r) of LOZO's updates."""
    x, grad = make_matrix()
    y = nn.Parameter(x.detach().clone())
    beta, lr, steps = 0.8, 0.05, 6
    lozo = LOZO([x], lr=lr, rank=2, interval=10_000, seed=4)
    lozo_m = LOZO([y], lr=lr, rank=2, interval=10_000, momentum=beta, seed=4)
    ema = None
    for _ in range(steps):
        # LOZO's step from the same point gives the raw (non-momentum) update -lr c U V^T / r
        x.data.copy_(y.detach())
        before = y.detach().clone()
        lozo.step(linear_closure([x], [grad]))
        raw = x.detach() - before
        ema = raw if ema is None else beta * ema + (1 - beta) * raw
        lozo_m.step(linear_closure([y], [grad]))
        torch.testing.assert_close(y.detach() - before, ema, rtol=1e-9, atol=1e-12)


def test_momentum_moved_to_new_subspace_on_v_redraw():
    """Brief §3.4.7: at a V switch M <- beta M V_old^T V_new / n + (1 - beta) c U / r, so ||M V_new^T|| keeps the
    scale of the old momentum's projection, and the step stays in span(V_new)."""
    x, grad = make_matrix(10, 200)
    beta = 0.9
    opt = LOZO([x], lr=1e-3, rank=2, interval=4, momentum=beta, seed=2)
    closure = linear_closure([x], [grad])
    for _ in range(4):
        opt.step(closure)
    m_old = opt.state[x]["momentum_buffer"].clone()
    v_old = opt.state[x]["V"].clone()
    before = x.detach().clone()
    losses = []
    opt.step(linear_closure([x], [grad], losses))
    v_new = opt.state[x]["V"]
    c = (losses[0] - losses[1]) / (2 * opt.eps)
    step = -(x.detach() - before) / opt.param_groups[0]["lr"]  # = M_new V_new^T
    projector = v_new @ torch.linalg.pinv(v_new)
    assert (step - step @ projector).abs().max() < 1e-8
    carried = beta * (m_old @ v_old.T) @ v_new @ v_new.T / 200  # beta M_old V_old^T projected (V^T V ~ n I)
    fresh = step - carried
    # what is left is the fresh (1 - beta) c U V^T / r term: rank <= 2, and <G, fresh> = (1 - beta) c^2 / r
    assert float((grad * fresh).sum()) == pytest.approx((1 - beta) * c * c / 2, rel=1e-6)
    # a random r-dim subspace keeps sqrt(r / n) of a matrix's norm in expectation
    expected = beta * (m_old @ v_old.T).norm() * math.sqrt(2 / 200)
    assert 0.25 * expected < carried.norm() < 4.0 * expected


def test_one_dimensional_parameters_get_mezo_behaviour():
    """A model with only 1-D parameters is optimised by LOZO exactly as by MeZO (same seeds)."""
    a = nn.Parameter(torch.randn(9, dtype=torch.float64))
    b = nn.Parameter(a.detach().clone())
    grad = torch.randn(9, dtype=torch.float64)
    lozo = LOZO([a], lr=0.03, rank=2, interval=2, seed=9)
    mezo = MeZO([b], lr=0.03, seed=9)
    for _ in range(5):
        lozo.step(linear_closure([a], [grad]))
        mezo.step(linear_closure([b], [grad]))
    assert torch.equal(a, b)


def test_mezo_update_is_full_rank_gaussian_step():
    x, grad = make_matrix(6, 6)
    opt = MeZO([x], lr=0.01, eps=1e-3, seed=0)
    losses = []
    before = x.detach().clone()
    opt.step(linear_closure([x], [grad], losses))
    c = (losses[0] - losses[1]) / (2 * 1e-3)
    delta = x.detach() - before
    assert float((grad * delta).sum()) == pytest.approx(-0.01 * c * c, rel=1e-6)
    assert torch.linalg.matrix_rank(delta, rtol=1e-9).item() == 6


def test_conv_weights_are_treated_as_matrices():
    conv = nn.Conv2d(3, 4, 3)
    opt = LOZO(conv.parameters(), lr=0.1, rank=1)
    before = conv.weight.detach().clone()
    x = torch.randn(2, 3, 5, 5)
    opt.step(lambda: conv(x).sum())
    delta = (conv.weight.detach() - before).reshape(4, -1)
    assert torch.linalg.matrix_rank(delta.double(), rtol=1e-5).item() == 1


# ---------------------------------------------------------------------------------------------------------------
# 3. weight decay by module type
# ---------------------------------------------------------------------------------------------------------------


class GPT2ishBlock(nn.Module):
    """Norm layers named like GPT-2 (ln_1, ln_f) and LLaMA (norm), which a name filter misses (the official name filter, "bias"/"layer_norm"/"layernorm", misses ln_*)."""

    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(4)
        self.attn = nn.Linear(4, 4)
        self.norm = type("LlamaRMSNorm", (nn.Module,), {})()
        self.norm.weight = nn.Parameter(torch.ones(4))
        self.ln_f = nn.LayerNorm(4)


def test_weight_decay_skips_norms_and_biases_by_module_type():
    block = GPT2ishBlock()
    groups = decay_param_groups(block, 0.1)
    decayed = {id(p) for p in groups[0]["params"]}
    assert decayed == {id(block.attn.weight)}
    assert groups[1]["weight_decay"] == 0.0
    opt = LOZO(block, lr=1.0, weight_decay=0.5, eps=1e-3)
    norms_before = [block.ln_1.weight.detach().clone(), block.norm.weight.detach().clone()]
    opt.step(lambda: torch.tensor(0.0))  # c = 0: only weight decay can move parameters
    torch.testing.assert_close(block.ln_1.weight.detach(), norms_before[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(block.norm.weight.detach(), norms_before[1], rtol=0, atol=1e-6)


def test_weight_decay_shrinks_matrices():
    x, _ = make_matrix()
    before = x.detach().clone()
    opt = LOZO([x], lr=0.1, weight_decay=0.5)
    opt.step(lambda: torch.tensor(1.0, dtype=torch.float64))
    torch.testing.assert_close(x.detach(), before * (1 - 0.05), rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------------------------------------------------------
# 4. robustness: non-finite losses, resume
# ---------------------------------------------------------------------------------------------------------------


def test_non_finite_loss_skips_not_zeroes():
    """Regression for optsuite/LOZO#2 and princeton-nlp/MeZO#42: an fp16 overflow must skip the step (counted)."""
    model = nn.Linear(8, 8).half()
    with torch.no_grad():
        model.weight.fill_(1.0)
    before = copy.deepcopy(model.state_dict())
    opt = LOZO(model, lr=1e-2, rank=2)
    x = torch.full(
        (2, 8), 1e4, dtype=torch.float16
    )  # 8 * 1e4 overflows fp16 (max 65504): every output is inf
    for _ in range(3):
        out = opt.step(lambda: model(x).float().pow(2).mean())
        assert not math.isfinite(float(out))
    assert opt.skipped_steps == 3 and opt.global_step == 3
    for name, value in model.state_dict().items():
        torch.testing.assert_close(
            value, before[name], rtol=0, atol=4e-3
        )  # restored to within fp16 rounding (ulp 1e-3)
        assert torch.isfinite(value).all() and value.abs().sum() > 0


def test_low_precision_loss_warns():
    model = nn.Linear(4, 4).to(torch.bfloat16)
    opt = MeZO(model, lr=1e-3)
    x = torch.randn(2, 4, dtype=torch.bfloat16)
    with pytest.warns(RuntimeWarning, match="float32"):
        opt.step(lambda: model(x).pow(2).mean())


@pytest.mark.parametrize("momentum", [0.0, 0.9])
@pytest.mark.parametrize("cls", ["lozo", "mezo"])
def test_resume_from_state_dict_is_bit_identical(cls, momentum):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    inputs = torch.randn(8, 6)

    def build(m):
        if cls == "lozo":
            return LOZO(m.parameters(), lr=0.05, rank=2, interval=3, momentum=momentum, seed=3)
        return MeZO(m.parameters(), lr=0.05, momentum=momentum, seed=3)

    opt = build(model)
    for _ in range(4):  # stop mid-period
        opt.step(lambda: model(inputs).pow(2).mean())
    saved_model = copy.deepcopy(model.state_dict())
    saved_opt = copy.deepcopy(opt.state_dict())
    for _ in range(5):
        opt.step(lambda: model(inputs).pow(2).mean())
    expected = copy.deepcopy(model.state_dict())

    resumed = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    resumed.load_state_dict(saved_model)
    opt2 = build(resumed)
    opt2.load_state_dict(saved_opt)
    for _ in range(5):
        opt2.step(lambda: resumed(inputs).pow(2).mean())
    for name, value in resumed.state_dict().items():
        assert torch.equal(value, expected[name]), name


def test_state_is_small():
    """LOZO stores V (n r per matrix); LOZO-M adds M (m r). Nothing the size of the weights."""
    model = nn.Linear(100, 50, bias=False)
    lozo = LOZO(model.parameters(), lr=0.0, rank=2)
    lozo.step(lambda: torch.tensor(1.0))
    assert lozo.state_bytes() == 100 * 2 * 4
    lozo_m = LOZO(model.parameters(), lr=0.0, rank=2, momentum=0.9)
    lozo_m.step(lambda: torch.tensor(1.0))
    assert lozo_m.state_bytes() == (100 + 50) * 2 * 4


# ---------------------------------------------------------------------------------------------------------------
# 5. bad input
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rank": 0}, "rank must be in"),
        ({"eps": 0.0}, "eps must be in"),
        ({"eps": -1e-3}, "eps must be in"),
        ({"lr": -0.1}, "lr must be in"),
        ({"interval": 0}, "interval must be in"),
        ({"momentum": 1.0}, "momentum must be in"),
        ({"momentum": -0.1}, "momentum must be in"),
        ({"weight_decay": -1.0}, "weight_decay must be in"),
    ],
)
def test_bad_hyperparameters_raise_value_error_naming_the_field(kwargs, match):
    x, _ = make_matrix()
    with pytest.raises(ValueError, match=match):
        LOZO([x], **{"lr": 0.1, **kwargs})


def test_bad_types_raise_type_error():
    x, _ = make_matrix()
    with pytest.raises(TypeError, match="rank must be an int"):
        LOZO([x], lr=0.1, rank=2.5)
    with pytest.raises(TypeError, match="lr must be a number"):
        LOZO([x], lr="0.1")


def test_rank_larger_than_a_dimension_is_clamped_per_parameter_with_a_warning():
    x = nn.Parameter(torch.randn(3, 40, dtype=torch.float64))
    y = nn.Parameter(torch.randn(30, 40, dtype=torch.float64))
    with pytest.warns(UserWarning, match="rank=8 exceeds the smaller side of 1 parameter"):
        opt = LOZO([x, y], lr=0.1, rank=8)
    assert opt.rank_of(x) == 3 and opt.rank_of(y) == 8
    opt.step(lambda: x.sum() + y.sum())
    assert opt.state[x]["V"].shape == (40, 3)


def test_no_trainable_parameters():
    model = nn.Linear(3, 3).requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        LOZO(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="no trainable parameters"):
        MeZO([], lr=0.1)


def test_closure_must_return_a_scalar():
    x, _ = make_matrix()
    opt = LOZO([x], lr=0.1)
    with pytest.raises(TypeError, match="needs a closure"):
        opt.step()
    with pytest.raises(TypeError, match="returned None"):
        opt.step(lambda: None)
    with pytest.raises(ValueError, match="scalar loss"):
        opt.step(lambda: x.sum(dim=0))
    with pytest.raises(TypeError, match="scalar tensor or number"):
        opt.step(lambda: "loss")
    # nothing was applied by the failed calls
    assert opt.global_step == 0


def test_frozen_parameters_are_untouched():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    model[0].requires_grad_(False)
    frozen = copy.deepcopy(model[0].state_dict())
    opt = LOZO(model.parameters(), lr=0.5)
    inputs = torch.randn(3, 4)
    opt.step(lambda: model(inputs).sum())
    for name, value in model[0].state_dict().items():
        assert torch.equal(value, frozen[name])


# ---------------------------------------------------------------------------------------------------------------
# regressions from issue 21
# ---------------------------------------------------------------------------------------------------------------


def _simulate_lozo_m(x0, grad, directions, vs, skipped, lr, beta, rank, interval):
    """Algorithm 2 of arXiv 2410.07698 (LOZO-M) in float64, written independently of the optimizer.

    ``directions[t]`` is the direction Z_t = U_t V_t^T observed inside the closure at step t (first perturbed point
    minus the weights before the step, over eps) and ``vs[t]`` the V in force at step t; U_t is recovered from Z_t
    by least squares. A skipped step (non-finite
    loss) leaves X and the momentum's coordinates unchanged, but the momentum still moves to the new subspace when V
    is redrawn on that step: M <- M V_old^T V_new / n (Alg. 2 line "M <- M V_old^T V_new / n" without a new term).
    Returns the list of X after every step."""
    n = x0.shape[1]
    x = x0.clone()
    m = None
    out = []
    for t, (z, v) in enumerate(zip(directions, vs)):
        u = z @ v @ torch.linalg.inv(v.T @ v)
        if t > 0 and t % interval == 0 and m is not None:
            m = m @ vs[t - 1].T @ v / n
        if t in skipped:
            out.append(x.clone())
            continue
        c = float((grad * z).sum())  # a linear loss: the two-point estimate is exact
        g = c * u / rank
        m = g if m is None else beta * m + (1 - beta) * g
        x = x - lr * m @ v.T
        out.append(x.clone())
    return out


EPS_SIM = 1e-3


def test_lozo_m_skip_on_a_v_redraw_step_still_moves_the_momentum_to_the_new_subspace():
    """Issue 21: a skipped step (fp16 overflow) on a V-redraw step left the momentum in the old subspace, so the
    next update was ~40x too large in a random direction. Compared with an independent float64 Alg. 2."""
    x, grad = make_matrix(16, 96, seed=4)
    x0 = x.detach().clone()
    lr, beta, rank, interval = 0.01, 0.9, 2, 4
    opt = LOZO([x], lr=lr, eps=EPS_SIM, rank=rank, interval=interval, momentum=beta, seed=5)
    skipped = {4, 9}  # 4 is a redraw step, 9 is not
    directions, vs, after = [], [], []
    for t in range(13):
        before = x.detach().clone()
        seen = []

        def closure(t=t, seen=seen):
            seen.append(x.detach().clone())
            return float("nan") if t in skipped else (grad * x).sum()

        opt.step(closure)
        directions.append((seen[0] - before) / EPS_SIM)
        vs.append(opt.state[x]["V"].clone())
        after.append(x.detach().clone())
    assert opt.skipped_steps == 2
    expected = _simulate_lozo_m(x0, grad, directions, vs, skipped, lr, beta, rank, interval)
    for t, (got, want) in enumerate(zip(after, expected)):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9, msg=f"step {t}")


@pytest.mark.parametrize("cls", ["lozo", "mezo"])
def test_bf16_resume_with_momentum_is_bit_identical(cls):
    """Issue 21: torch's Optimizer.load_state_dict casts state tensors to the parameter's dtype, so the float32
    momentum of a bf16 model came back rounded to bf16 and the resumed run diverged."""
    torch.manual_seed(0)
    inputs = torch.randn(8, 6)

    def build_model():
        return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).to(torch.bfloat16)

    def build(m):
        if cls == "lozo":
            return LOZO(m, lr=0.05, rank=2, interval=3, momentum=0.9, seed=3)
        return MeZO(m, lr=0.05, momentum=0.9, seed=3)

    def closure(m):
        return lambda: m(inputs.to(torch.bfloat16)).float().pow(2).mean()

    model = build_model()
    opt = build(model)
    for _ in range(4):
        opt.step(closure(model))
    saved_model = copy.deepcopy(model.state_dict())
    saved_opt = copy.deepcopy(opt.state_dict())
    for _ in range(5):
        opt.step(closure(model))
    expected = copy.deepcopy(model.state_dict())

    resumed = build_model()
    resumed.load_state_dict(saved_model)
    opt2 = build(resumed)
    opt2.load_state_dict(saved_opt)
    for p in resumed.parameters():
        assert opt2.state[p]["momentum_buffer"].dtype == torch.float32
    for _ in range(5):
        opt2.step(closure(resumed))
    for name, value in resumed.state_dict().items():
        assert torch.equal(value, expected[name]), name


@pytest.mark.parametrize("cls", [LOZO, MeZO])
def test_zero_size_parameter_raises_value_error_naming_it(cls):
    """Issue 21: a zero-size dimension raised a bare ZeroDivisionError in the middle of a step."""
    good = nn.Parameter(torch.zeros(3, 4))
    empty = nn.Parameter(torch.zeros(0, 4))
    with pytest.raises(ValueError, match=r"parameter 1 .*shape \(0, 4\).*zero-size"):
        cls([good, empty], lr=1e-3)


def test_closure_returning_numpy_scalar_works():
    """Issue 21: a closure returning np.float32 (or a 0-d array) raised TypeError."""
    import numpy as np

    x, grad = make_matrix()
    opt = LOZO([x], lr=1e-2, seed=1)
    ref = copy.deepcopy(x)
    opt_ref = LOZO([ref], lr=1e-2, seed=1)
    opt.step(lambda: np.float64((grad * x).sum().item()))
    opt.step(lambda: np.array((grad * x).sum().item()))
    opt_ref.step(lambda: (grad * ref).sum())
    opt_ref.step(lambda: (grad * ref).sum())
    torch.testing.assert_close(x.detach(), ref.detach(), rtol=0, atol=0)
    out = opt.step(lambda: np.float32(1.5))
    assert float(out) == 1.5


class TiedLM(nn.Module):
    """Embedding -> LayerNorm (weight of ones) -> Linear -> tied output head (the embedding's own Parameter)."""

    def __init__(self, vocab=40, dim=24):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(torch.tanh(self.mlp(self.norm(self.embed(tokens)))))


def _tied_closure(model):
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 40, (4, 6), generator=g)
    target = torch.randint(0, 40, (4, 6), generator=g)
    return lambda: nn.functional.cross_entropy(model(tokens).float().flatten(0, 1), target.flatten())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    ("cls", "kwargs"), [(LOZO, {}), (LOZO, {"momentum": 0.9, "interval": 7}), (MeZO, {"momentum": 0.9})]
)
def test_low_precision_weights_are_bit_identical_after_many_zero_lr_steps(dtype, cls, kwargs):
    """Issue 21: in bf16 the in-place perturb/restore drifted ~1 ulp per step (3.9 % after 100 steps at lr = 0).
    Passing the module restores every weight bit for bit, tied weights and norm weights of ones included."""
    torch.manual_seed(0)
    model = TiedLM().to(dtype)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = cls(model, lr=0.0, eps=1e-2, seed=1, **kwargs)
    assert opt.restore == "exact"
    closure = _tied_closure(model)
    for _ in range(100):
        out = opt.step(closure)
        assert math.isfinite(float(out))
    assert opt.last_projected_grad != 0.0  # the forwards did see a perturbation
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name
    # memory: one copy of the running module's own parameters, never the model's
    largest = max(
        sum(p.numel() * p.element_size() for p in m.parameters(recurse=False)) for m in model.modules()
    )
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    assert 0 < opt.restore_bytes_peak <= largest < total


def test_exact_restore_when_the_closure_raises_mid_forward():
    torch.manual_seed(0)
    model = TiedLM().to(torch.bfloat16)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = LOZO(model, lr=1e-2, seed=1)

    def closure():
        h = model.mlp(model.norm(model.embed(torch.zeros(2, 3, dtype=torch.long))))
        raise RuntimeError(f"boom {float(h.sum())}")

    with pytest.raises(RuntimeError, match="boom"):
        opt.step(closure)
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name


class RecordingLinear(nn.Linear):
    def forward(self, x):
        self.seen.append(self.weight.detach().clone())
        return super().forward(x)


def test_exact_restore_each_forward_sees_the_perturbed_weights():
    """Inside its module's forward a weight is X + eps Z, then X - eps Z (both from X); outside it, it is X. The
    first perturbed point is bit-identical to the in-place mode's (same add from the same X)."""
    torch.manual_seed(0)
    model = TiedLM()
    model.mlp = RecordingLinear(24, 24)
    model.mlp.seen = []
    ref_model = copy.deepcopy(model)
    ref_model.mlp.seen = []
    x0 = model.mlp.weight.detach().clone()
    opt = LOZO(model, lr=0.0, eps=1e-3, seed=1, restore="exact")
    ref = LOZO(ref_model, lr=0.0, eps=1e-3, seed=1, restore="in_place")
    outside = []
    closure = _tied_closure(model)

    def recording_closure():
        outside.append(model.mlp.weight.detach().clone())
        return closure()

    opt.step(recording_closure)
    ref.step(_tied_closure(ref_model))
    assert all(torch.equal(w, x0) for w in outside)
    plus, minus = model.mlp.seen
    assert torch.equal(plus, ref_model.mlp.seen[0])
    torch.testing.assert_close(minus, ref_model.mlp.seen[1], rtol=0, atol=1e-6)
    torch.testing.assert_close(plus + minus, 2 * x0, rtol=0, atol=1e-6)
    assert (plus - x0).abs().max() > 1e-4


def test_restore_option_is_checked_and_in_place_low_precision_warns():
    model = nn.Linear(4, 4).to(torch.bfloat16)
    with pytest.raises(ValueError, match="restore must be one of"):
        LOZO(model, restore="copy")
    with pytest.raises(ValueError, match="needs the model"):
        LOZO(model.parameters(), restore="exact")
    with pytest.warns(RuntimeWarning, match="drift"):
        LOZO(model.parameters())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("block", [1 << 20, 7])  # one block, and many blocks with a ragged last one
def test_low_precision_low_rank_add_rounds_once_from_float32(monkeypatch, dtype, block):
    """X <- round(X + L V^T) with the product in float32, block by block, on CPU (no bf16 addmm_, which is
    ~30x slower on CPUs without bf16 matrix units and rounds L and V to bf16 first)."""
    from iclr25_lozo import _optimizer

    monkeypatch.setattr(_optimizer, "_LOW_PRECISION_BLOCK", block)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(23, 5, 3, generator=gen).to(dtype)  # viewed as 23 x 15
    left = torch.randn(23, 2, generator=gen) * 1e-2
    v = torch.randn(15, 2, generator=gen)
    expected = (x.float().view(23, 15) + left.double().matmul(v.double().T).float()).to(dtype).view_as(x)
    got = x.clone()
    LOZO._add_low_rank(got, left, v)
    assert torch.equal(got, expected)
    bf16_factors = x.clone().view(23, 15).addmm_(left.to(dtype), v.T.to(dtype)).view_as(x)
    assert not torch.equal(bf16_factors, expected)  # the two roundings differ: the test can tell them apart
