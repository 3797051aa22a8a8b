"""The SimGCD / DebGCD losses against hand cases, loop-by-loop references and finite differences."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from iclr25_debgcd import (
    GCDLossConfig,
    GCDModel,
    GCDOutputs,
    certainty,
    debgcd_loss,
    debiased_loss,
    distill_loss,
    info_nce_loss,
    mean_entropy_regulariser,
    ova_consistency,
    ova_entropy,
    ova_loss,
    ova_probabilities,
    simgcd_loss,
    supcon_loss,
    teacher_temperature,
    unknown_score,
)

torch.set_num_threads(1)


def ova_logits(neg, pos):
    """(N, 2K) logits from the (N, K) negative and positive halves (the (N, 2, K) view)."""
    return torch.cat(
        [torch.as_tensor(neg, dtype=torch.float64), torch.as_tensor(pos, dtype=torch.float64)], 1
    )


# ---------------------------------------------------------------- the semantic distribution detector (OVA)


def test_ova_loss_hand_case():
    # K_old = 3, temp 1. Image 0 label 1, image 1 label 0. The two-way softmax of (neg, pos) logits is a sigmoid.
    neg = [[0.0, 0.0, 2.0], [1.0, -1.0, 0.5]]
    pos = [[1.0, 3.0, 0.0], [0.0, 0.0, 0.0]]
    logits = ova_logits(neg, pos)
    sig = lambda z: 1 / (1 + math.exp(-z))  # noqa: E731
    # image 0: p+_1 = sig(3 - 0); negatives k in {0, 2}: p-_k = sig(neg - pos): sig(-1), sig(2)
    l0 = -math.log(sig(3.0)) + max(-math.log(sig(0.0 - 1.0)), -math.log(sig(2.0 - 0.0)))
    # image 1: p+_0 = sig(0 - 1); negatives k in {1, 2}: sig(-1 - 0), sig(0.5 - 0)
    l1 = -math.log(sig(0.0 - 1.0)) + max(-math.log(sig(-1.0)), -math.log(sig(0.5)))
    got = ova_loss(logits, torch.tensor([1, 0]), temp=1.0)
    assert float(got) == pytest.approx((l0 + l1) / 2, rel=1e-6)


def test_ova_loss_uses_the_hardest_negative_only():
    # p-_k = sigmoid(neg_k - pos_k); a lower neg_k makes "not class k" less likely, a harder negative
    base = ova_logits([[0.0, -1.0, -1.0]], [[5.0, 0.0, 0.0]])
    harder = ova_logits([[0.0, -1.0, -3.0]], [[5.0, 0.0, 0.0]])
    y = torch.tensor([0])
    assert float(ova_loss(harder, y, temp=1.0)) > float(ova_loss(base, y, temp=1.0))
    # changing the other, easier negative leaves the loss unchanged
    easy_changed = ova_logits([[0.0, 0.0, -3.0]], [[5.0, 0.0, 0.0]])
    assert float(ova_loss(easy_changed, y, temp=1.0)) == pytest.approx(float(ova_loss(harder, y, temp=1.0)))


def test_ova_loss_near_zero_when_confident_and_correct():
    logits = ova_logits([[-1.0, 1.0, 1.0]], [[1.0, -1.0, -1.0]])  # cosines, temp 0.1 -> margins of 20
    assert float(ova_loss(logits, torch.tensor([0]))) < 1e-7


def test_ova_entropy_is_log2_for_uniform_and_consistency_zero_for_equal_views():
    z = torch.zeros(4, 6, dtype=torch.float64)
    assert float(ova_entropy(z)) == pytest.approx(math.log(2))
    x = torch.randn(4, 6, dtype=torch.float64)
    assert float(ova_consistency(x, x)) == 0.0
    # hand value: one image, K=1, view1 p=(0.5,0.5), view2 p=(sig(-1), sig(1)): |diff|^2 summed over both entries
    p = 1 / (1 + math.exp(-1.0))
    got = ova_consistency(torch.zeros(1, 2), torch.tensor([[0.0, 1.0]]), temp=1.0)
    assert float(got) == pytest.approx(2 * (p - 0.5) ** 2, rel=1e-6)


def test_unknown_score_reads_the_negative_of_the_most_likely_known_class():
    logits = ova_logits([[0.3, -0.2, 0.9]], [[0.1, 0.8, 0.2]])  # most likely known class: k = 1
    p = ova_probabilities(logits)
    assert float(unknown_score(logits)) == pytest.approx(float(p[0, 0, 1]))


def test_bad_ova_shapes_are_refused():
    with pytest.raises(ValueError, match="2\\*K_old"):
        ova_probabilities(torch.zeros(3, 5))
    with pytest.raises(ValueError, match="labels"):
        ova_loss(torch.zeros(2, 6), torch.tensor([0, 3]))


# ---------------------------------------------------------------- the curriculum


def test_certainty_is_zero_when_undecided_one_when_sure_and_monotone():
    s = torch.linspace(0, 1, 101)
    c = certainty(s)
    assert float(c[50]) == pytest.approx(0.0, abs=1e-6) and float(c[0]) == 1.0 and float(c[-1]) == 1.0
    assert torch.all((c >= 0) & (c <= 1))
    # monotone in certainty: the further s is from 0.5 the larger the weight, on both sides
    assert torch.all(torch.diff(c[50:]) > 0) and torch.all(torch.diff(c[:51]) < 0)


def test_curriculum_weight_scales_each_images_pseudo_label_loss():
    torch.manual_seed(0)
    deb, gcd = torch.randn(6, 4, dtype=torch.float64), torch.randn(6, 4, dtype=torch.float64)
    ce = F.cross_entropy(deb / 0.1, (gcd / 0.1).argmax(1), reduction="none")
    w = torch.tensor([0.0, 0.2, 0.4, 0.6, 0.8, 1.0], dtype=torch.float64)
    got = debiased_loss(deb, gcd, w, threshold=0.0)
    assert float(got) == pytest.approx(float((ce * w).mean()))
    # c == 1 and tau = 0 -> plain cross-entropy on the pseudo-labels
    assert float(debiased_loss(deb, gcd, torch.ones(6, dtype=torch.float64), threshold=0.0)) == pytest.approx(
        float(ce.mean())
    )
    # the threshold drops the unconfident ones
    conf = (gcd / 0.1).softmax(1).max(1).values
    tau = float(conf.median())
    keep = (conf >= tau).double()
    assert float(debiased_loss(deb, gcd, None, threshold=tau)) == pytest.approx(float((ce * keep).mean()))


# ---------------------------------------------------------------- SimGCD parts


def test_teacher_temperature_is_numpys_linspace_then_constant():
    cfg = GCDLossConfig(warmup_teacher_epochs=30)
    ref = np.concatenate([np.linspace(0.07, 0.04, 30), np.full(20, 0.04)])
    assert [teacher_temperature(e, cfg) for e in range(50)] == pytest.approx(ref.tolist())


def test_distill_loss_is_the_cross_view_cross_entropy():
    torch.manual_seed(1)
    s, t = torch.randn(8, 5, dtype=torch.float64), torch.randn(8, 5, dtype=torch.float64)
    q = (t / 0.05).softmax(1)
    logp = F.log_softmax(s / 0.1, 1)
    ce = lambda a, b: float(-(q[a] * logp[b]).sum(1).mean())  # noqa: E731
    v1, v2 = slice(0, 4), slice(4, 8)
    expected = (ce(v1, v2) + ce(v2, v1)) / 2  # same-view pairs skipped
    assert float(distill_loss(s, t, teacher_temp=0.05)) == pytest.approx(expected)


def test_mean_entropy_regulariser_zero_for_uniform_logk_for_collapse():
    k = 7
    assert float(mean_entropy_regulariser(torch.zeros(5, k, dtype=torch.float64))) == pytest.approx(
        0.0, abs=1e-12
    )
    collapsed = torch.full((5, k), -1.0, dtype=torch.float64)
    collapsed[:, 2] = 1.0  # cosines; at temp 0.1 the softmax is one-hot up to e^-20
    assert float(mean_entropy_regulariser(collapsed)) == pytest.approx(math.log(k), abs=1e-6)


def test_info_nce_matches_a_row_by_row_reference():
    torch.manual_seed(2)
    z = torch.randn(6, 4, dtype=torch.float64)
    zn = F.normalize(z, dim=1)
    total = 0.0
    for i in range(6):
        pos = (i + 3) % 6
        others = [j for j in range(6) if j != i]
        num = torch.exp(zn[i] @ zn[pos] / 0.5)
        den = sum(torch.exp(zn[i] @ zn[j] / 0.5) for j in others)
        total += -float(torch.log(num / den))
    assert float(info_nce_loss(z, temperature=0.5)) == pytest.approx(total / 6)


def test_supcon_matches_a_loop_over_anchors():
    torch.manual_seed(3)
    m, v = 5, 2
    f = F.normalize(torch.randn(m, v, 3, dtype=torch.float64), dim=-1)
    y = torch.tensor([0, 1, 0, 2, 1])
    rows = [(f[i, a], int(y[i])) for a in range(v) for i in range(m)]
    total = 0.0
    for i, (zi, yi) in enumerate(rows):
        den = sum(torch.exp(zi @ zj / 0.07) for j, (zj, _) in enumerate(rows) if j != i)
        pos = [j for j, (_, yj) in enumerate(rows) if j != i and yj == yi]
        total += -sum(float(torch.log(torch.exp(zi @ rows[j][0] / 0.07) / den)) for j in pos) / len(pos)
    assert float(supcon_loss(f, y)) == pytest.approx(total / len(rows))


# ---------------------------------------------------------------- DebGCD reduces to SimGCD


def _model(debiased, seed=0):
    torch.manual_seed(seed)
    backbone = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 16))
    return GCDModel(backbone, 16, num_classes=6, num_old=3, debiased=debiased, hidden=32, bottleneck=8)


def _batch(seed=0, b=10):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2 * b, 3, 4, generator=g)
    labels = torch.randint(0, 3, (b,), generator=g)
    mask = torch.rand(b, generator=g) < 0.5
    mask[0], mask[1] = True, False
    return x, labels, mask


def _log_softmax(z):
    """Row-wise log-softmax from exp/log/max only (the reference below calls nothing of the package's loss code)."""
    zmax = z.max(dim=1, keepdim=True).values.detach()
    return z - zmax - torch.log(torch.exp(z - zmax).sum(dim=1, keepdim=True))


def _simgcd_reference(proj, logits, labels, mask_lab, *, epoch, cfg):
    """SimGCD's objective written out independently, after the official training step (github.com/CVMI-Lab/SimGCD,
    ``train.py``: ``DistillLoss``, the me-max line, ``info_nce_logits``, Khosla et al.'s ``SupConLoss``), in plain
    torch. Only the hyper-parameter values are read from ``cfg``. Returns the total and its five terms."""
    lam, eps, st = cfg.sup_weight, cfg.memax_weight, cfg.student_temp
    b, k = logits.shape[0] // 2, logits.shape[1]
    # supervised classification: both views' labelled rows, view-major, CE at the student temperature
    sup_logits = torch.cat([f[mask_lab] for f in (logits / st).chunk(2)])
    sup_labels = torch.cat([labels[mask_lab], labels[mask_lab]])
    cls = -_log_softmax(sup_logits)[torch.arange(len(sup_labels)), sup_labels].mean()
    # self-distillation: numpy's linspace teacher schedule, detached teacher of one view -> student of the other
    warm = cfg.warmup_teacher_epochs
    tt = (
        float(np.linspace(cfg.teacher_temp_start, cfg.teacher_temp_end, warm)[epoch])
        if epoch < warm
        else cfg.teacher_temp_end
    )
    t = logits.detach() / tt
    teacher = (
        torch.exp(t - t.max(1, keepdim=True).values)
        / torch.exp(t - t.max(1, keepdim=True).values).sum(1, keepdim=True)
    ).chunk(2)
    student = (logits / st).chunk(2)
    terms = [
        torch.sum(-q * _log_softmax(student[v]), dim=-1).mean()
        for iq, q in enumerate(teacher)
        for v in range(2)
        if v != iq
    ]
    distill = sum(terms) / len(terms)
    # mean-entropy maximisation, as the official line: -sum(log(p ** -p)) + log K
    avg = torch.exp(_log_softmax(logits / st)).mean(0)
    me = -torch.sum(torch.log(avg ** (-avg))) + math.log(k)
    # unsupervised contrastive: positives / negatives gathered as info_nce_logits does, target column 0
    ids = torch.cat([torch.arange(b), torch.arange(b)])
    same = (ids[None] == ids[:, None]).float()
    z = proj / torch.sqrt((proj * proj).sum(1, keepdim=True))
    sim = z @ z.T
    off = ~torch.eye(2 * b, dtype=torch.bool)
    same, sim = same[off].view(2 * b, -1), sim[off].view(2 * b, -1)
    nce_logits = (
        torch.cat([sim[same.bool()].view(2 * b, -1), sim[~same.bool()].view(2 * b, -1)], 1)
        / cfg.contrast_temp
    )
    infonce = -_log_softmax(nce_logits)[:, 0].mean()
    # supervised contrastive, Khosla et al.'s SupConLoss (contrast_mode "all", base_temperature = temperature)
    f = torch.stack([p[mask_lab] for p in proj.chunk(2)], dim=1)
    f = f / torch.sqrt((f * f).sum(-1, keepdim=True))
    y = labels[mask_lab].view(-1, 1)
    pos = (y == y.T).double().repeat(2, 2)
    contrast = torch.cat(torch.unbind(f, dim=1))
    s = contrast @ contrast.T / cfg.supcon_temp
    s = s - s.max(1, keepdim=True).values.detach()
    not_self = 1.0 - torch.eye(len(contrast), dtype=torch.float64)
    pos = pos * not_self
    log_prob = s - torch.log((torch.exp(s) * not_self).sum(1, keepdim=True))
    supcon = (-(pos * log_prob).sum(1) / pos.sum(1)).mean()
    total = (1 - lam) * (distill + eps * me) + lam * cls + (1 - lam) * infonce + lam * supcon
    return total, {"cls": cls, "distill": distill, "me": me, "infonce": infonce, "supcon": supcon}


# Tolerance: both sides evaluate the same float64 expressions (terms of order 1-10) in different orders, a few
# hundred operations deep; each rounding is <= 2**-53 ~ 1.1e-16 relative, so they agree to ~1e-13. 1e-10 relative
# leaves a 1000x margin and is still ~1e7 times smaller than any change of one term's weight, sign or temperature.
_RTOL, _ATOL = 1e-10, 1e-12


@pytest.mark.parametrize(
    ("cfg", "epoch"),
    [
        (GCDLossConfig(sdl_weight=0.0, adl_weight=0.0), 3),  # the defaults, inside the teacher warm-up
        (  # every SimGCD weight and temperature moved off its default, after the warm-up
            GCDLossConfig(
                sdl_weight=0.0,
                adl_weight=0.0,
                sup_weight=0.6,
                memax_weight=0.7,
                student_temp=0.2,
                teacher_temp_start=0.09,
                teacher_temp_end=0.05,
                warmup_teacher_epochs=4,
                contrast_temp=0.5,
                supcon_temp=0.3,
            ),
            6,
        ),
    ],
)
def test_simgcd_objective_and_gradients_match_an_independent_reference(cfg, epoch):
    # labelled rows include repeated classes, so SupCon has positives beyond the other view
    x, y, m = _batch()
    assert m.sum() >= 3 and (~m).sum() >= 3 and len(set(y[m].tolist())) < int(m.sum())
    x = x.double()
    deb, sim = _model(True).double(), _model(False).double()
    # the SimGCD parameters are created first, so the same seed gives the same SimGCD part
    sim_state = sim.state_dict()
    assert all(torch.equal(sim_state[k], v) for k, v in deb.state_dict().items() if k in sim_state)
    for model, loss_fn in ((sim, simgcd_loss), (deb, debgcd_loss)):  # DebGCD with both weights 0 = SimGCD
        params = [p for _, p in model.named_parameters()]
        out = model(x)
        got, parts = loss_fn(out, y, m, epoch=epoch, cfg=cfg)
        ref, ref_parts = _simgcd_reference(out.proj, out.logits, y, m, epoch=epoch, cfg=cfg)
        assert set(parts) == set(ref_parts)
        for name, value in ref_parts.items():
            assert parts[name] == pytest.approx(float(value.detach()), rel=_RTOL, abs=_ATOL), name
        assert float(got.detach()) == pytest.approx(float(ref.detach()), rel=_RTOL, abs=_ATOL)
        g_got = torch.autograd.grad(got, params, allow_unused=True, retain_graph=True)
        g_ref = torch.autograd.grad(ref, params, allow_unused=True)
        for (name, _), a, r in zip(model.named_parameters(), g_got, g_ref, strict=True):
            if r is None:  # the DebGCD heads: no SimGCD term reaches them
                assert a is None or torch.count_nonzero(a) == 0, name
                continue
            assert r.abs().max() > 0, name  # every SimGCD parameter gets a gradient, so the check has teeth
            torch.testing.assert_close(a, r, rtol=_RTOL, atol=_ATOL, msg=name)


def test_debgcd_adds_each_term_with_its_weight():
    x, y, m = _batch(1)
    model = _model(True)
    out = model(x)
    base, _ = simgcd_loss(out, y, m, epoch=0, cfg=GCDLossConfig())
    cfg = GCDLossConfig(sdl_weight=0.3, adl_weight=0.7, threshold=0.0)
    total, parts = debgcd_loss(out, y, m, epoch=0, cfg=cfg)
    extra = 0.3 * (parts["ova"] + 0.1 * parts["oem"] + 1.0 * parts["socr"])
    extra += 0.7 * (0.5 * parts["deb_lab"] + 0.5 * parts["deb_unl"])
    assert total.item() == pytest.approx(base.item() + extra, rel=1e-6)


def test_gradients_of_the_new_terms_match_finite_differences():
    # the teacher, the pseudo-labels and the certainty weight are stop-gradient by design, so each differentiable
    # term is checked on its own arguments
    torch.manual_seed(4)
    ood = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    ood2 = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    y = torch.tensor([0, 1, 1, 0, 1, 0])
    assert torch.autograd.gradcheck(lambda o: ova_loss(o, y), (ood,))
    assert torch.autograd.gradcheck(lambda o: ova_entropy(o), (ood,))
    assert torch.autograd.gradcheck(lambda a, b: ova_consistency(a, b), (ood, ood2))
    deb = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    gcd, w = torch.randn(6, 5, dtype=torch.float64), torch.rand(6, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda d: debiased_loss(d, gcd, w, threshold=0.0), (deb,))
    proj = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda p: info_nce_loss(p), (proj,))
    feats = torch.randn(3, 2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda f: supcon_loss(F.normalize(f, dim=-1), y[:3]), (feats,))


def test_teacher_pseudo_labels_and_certainty_carry_no_gradient():
    x, y, m = _batch(3)
    out = _model(True)(x)
    logits = out.logits.detach().requires_grad_()
    ood = out.logits_ood.detach().requires_grad_()
    deb = out.logits_deb.detach()
    cfg = GCDLossConfig(threshold=0.0, sdl_weight=0.0, adl_weight=1.0, pl_weight=1.0)
    # with only the pseudo-label term on, neither the GCD logits nor the detector receive a gradient from it
    loss, _ = debgcd_loss(
        GCDOutputs(out.proj.detach(), logits, ood, deb.requires_grad_()), y, m, epoch=0, cfg=cfg
    )
    sim, _ = simgcd_loss(GCDOutputs(out.proj.detach(), logits, ood, deb), y, m, epoch=0, cfg=cfg)
    g_total = torch.autograd.grad(loss, (logits, ood), allow_unused=True)
    g_sim = torch.autograd.grad(sim, (logits,))
    assert torch.allclose(g_total[0], g_sim[0]) and (
        g_total[1] is None or torch.count_nonzero(g_total[1]) == 0
    )


def test_debgcd_weights_without_heads_are_refused():
    x, y, m = _batch()
    with pytest.raises(ValueError, match="detector"):
        debgcd_loss(_model(False)(x), y, m, epoch=0, cfg=GCDLossConfig())


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("sup_weight", 1.5, "sup_weight"),
        ("student_temp", 0.0, "student_temp"),
        ("sdl_weight", -1.0, "sdl_weight"),
        ("threshold", float("nan"), "threshold"),
        ("warmup_teacher_epochs", -1, "warmup_teacher_epochs"),
    ],
)
def test_bad_loss_config_names_the_field(field, value, match):
    with pytest.raises(ValueError, match=match):
        GCDLossConfig(**{field: value})


def test_loss_runs_in_bfloat16_and_stays_close_to_float32():
    x, y, m = _batch(2)
    model = _model(True)
    out = model(x)
    l32, _ = debgcd_loss(out, y, m, epoch=0, cfg=GCDLossConfig(threshold=0.0))
    o16 = GCDOutputs(
        *(t.detach().to(torch.bfloat16) for t in (out.proj, out.logits, out.logits_ood, out.logits_deb))
    )
    l16, _ = debgcd_loss(o16, y, m, epoch=0, cfg=GCDLossConfig(threshold=0.0))
    assert torch.isfinite(l16) and l16.item() == pytest.approx(l32.item(), rel=0.05)


def test_curriculum_off_weights_every_confident_pseudo_label_by_one():
    x, y, m = _batch(4)
    with torch.no_grad():
        out = _model(True)(x)
    on = GCDLossConfig(threshold=0.0, sdl_weight=0.0, curriculum=True)
    off = GCDLossConfig(threshold=0.0, sdl_weight=0.0, curriculum=False)
    _, p_on = debgcd_loss(out, y, m, epoch=0, cfg=on)
    _, p_off = debgcd_loss(out, y, m, epoch=0, cfg=off)
    two = torch.cat([m, m])
    ce = F.cross_entropy(out.logits_deb[~two] / 0.1, (out.logits[~two] / 0.1).argmax(1), reduction="none")
    w = certainty(unknown_score(out.logits_ood[~two]))
    assert p_off["deb_unl"] == pytest.approx(float(ce.mean()), rel=1e-6)
    assert p_on["deb_unl"] == pytest.approx(float((ce * w).mean()), rel=1e-6)
    assert p_on["deb_unl"] < p_off["deb_unl"]  # certainty <= 1 can only shrink the loss
