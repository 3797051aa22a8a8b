"""SemiCLIP's losses (OpenReview 97D725GJtQ, Sec. 3): trapezoidal consistency, InfoNCE, soft CE, pseudo-labels.

Expected values come from explicit loops, closed forms or torch's own cross-entropy, never from the code under test.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from iclr25_semiclip import (
    clip_contrastive_loss,
    normalize_multi_hot,
    select_top_fraction,
    soft_cross_entropy,
    topk_uniform_targets,
    trapezoidal_consistency_loss,
)


def unit(n, d, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(n, d, generator=g, dtype=dtype), dim=1)


def rotation(d, seed=1, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=dtype))
    return q * torch.sign(torch.diagonal(r))


def brute_trapezoid(i, t, weight):
    n = i.shape[0]
    l_in = l_cross = 0.0
    for j in range(n):
        for k in range(n):
            l_in += (float(i[j] @ i[k]) - float(t[j] @ t[k])) ** 2
            l_cross += (float(i[j] @ t[k]) - float(i[k] @ t[j])) ** 2
    return weight * l_in / n**2, weight * l_cross / n**2


def test_trapezoid_matches_the_pairwise_definition():
    i, t = unit(7, 5, 0), unit(7, 5, 1)
    got = trapezoidal_consistency_loss(i, t, weight=3.0)
    want = brute_trapezoid(i, t, 3.0)
    assert got[0].item() == pytest.approx(want[0], rel=1e-12)
    assert got[1].item() == pytest.approx(want[1], rel=1e-12)
    default = trapezoidal_consistency_loss(i, t)  # weight defaults to N
    assert default[0].item() == pytest.approx(brute_trapezoid(i, t, 7.0)[0], rel=1e-12)


def test_trapezoid_is_zero_for_perfectly_consistent_pairs():
    i = unit(9, 6)
    l_in, l_cross = trapezoidal_consistency_loss(i, i.clone())
    # zero up to rounding: I Tᵀ and T Iᵀ come from two matmuls whose BLAS blocking may differ (3e-33 seen)
    assert l_in.item() < 1e-24 and l_cross.item() < 1e-24


def test_in_modal_term_vanishes_for_any_orthogonal_map_of_the_image_embeddings():
    i = unit(8, 6)
    l_in, l_cross = trapezoidal_consistency_loss(i, i @ rotation(6))
    assert l_in.item() < 1e-24
    assert l_cross.item() > 1e-3  # a generic rotation makes I Tᵀ non-symmetric


def test_cross_term_vanishes_for_a_symmetric_orthogonal_map():
    v = F.normalize(torch.randn(6, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(3)), dim=0)
    householder = torch.eye(6, dtype=torch.float64) - 2 * v @ v.T  # symmetric and orthogonal
    i = unit(8, 6)
    l_in, l_cross = trapezoidal_consistency_loss(i, i @ householder)
    assert l_in.item() < 1e-24 and l_cross.item() < 1e-24


def test_trapezoid_is_invariant_to_a_joint_rotation_and_to_swapping_modalities():
    i, t = unit(10, 4, 5), unit(10, 4, 6)
    r = rotation(4, 7)
    base = trapezoidal_consistency_loss(i, t)
    rotated = trapezoidal_consistency_loss(i @ r, t @ r)
    swapped = trapezoidal_consistency_loss(t, i)
    for a, b, c in zip(base, rotated, swapped):
        assert b.item() == pytest.approx(a.item(), rel=1e-10)
        assert c.item() == pytest.approx(a.item(), rel=1e-12)


def test_trapezoid_scale_factor_of_the_official_form_cancels():
    # official code: mean((s I Iᵀ - s T Tᵀ)²) / s² · B_l; for any s > 0 it equals our scale-free form
    i, t = unit(6, 4, 8), unit(6, 4, 9)
    ours = trapezoidal_consistency_loss(i, t, weight=4.0)[0].item()
    for s in (1.0, 14.3, 100.0):
        official = ((s * i @ i.T - s * t @ t.T) ** 2).mean().item() / s**2 * 4.0
        assert official == pytest.approx(ours, rel=1e-12)


def test_trapezoid_in_bfloat16_stays_close_to_float32():
    i, t = unit(16, 32, 1, torch.float32), unit(16, 32, 2, torch.float32)
    ref = trapezoidal_consistency_loss(i, t)
    low = trapezoidal_consistency_loss(i.bfloat16(), t.bfloat16())
    for a, b in zip(ref, low):
        assert b.dtype == torch.bfloat16 and torch.isfinite(b)
        assert b.float().item() == pytest.approx(a.item(), rel=0.05)


@pytest.mark.parametrize(
    ("i", "t", "kw", "match"),
    [
        (torch.zeros(3, 4), torch.zeros(3, 5), {}, "same shape"),
        (torch.zeros(0, 4), torch.zeros(0, 4), {}, "at least one pair"),
        (torch.zeros(4), torch.zeros(4), {}, "2-D"),
        (torch.zeros(2, 4), torch.zeros(2, 4), {"weight": 0.0}, "weight must be"),
        (torch.zeros(2, 4), torch.zeros(2, 4), {"weight": float("nan")}, "weight must be"),
    ],
)
def test_trapezoid_refuses_bad_input(i, t, kw, match):
    with pytest.raises(ValueError, match=match):
        trapezoidal_consistency_loss(i, t, **kw)


def test_symmetric_infonce_equals_a_hand_computation():
    i, t = unit(4, 3, 10), unit(4, 3, 11)
    s = 7.5
    total = 0.0
    for a in range(4):  # image→text rows and text→image columns, written out
        row = [s * float(i[a] @ t[b]) for b in range(4)]
        col = [s * float(i[b] @ t[a]) for b in range(4)]
        total += -row[a] + math.log(sum(math.exp(x) for x in row))
        total += -col[a] + math.log(sum(math.exp(x) for x in col))
    assert clip_contrastive_loss(i, t, s).item() == pytest.approx(total / 8, rel=1e-12)


def test_infonce_is_log_batch_for_identical_embeddings():
    e = F.normalize(torch.ones(6, 4, dtype=torch.float64), dim=1)
    assert clip_contrastive_loss(e, e, 100.0).item() == pytest.approx(math.log(6), rel=1e-12)


def test_infonce_gradient_matches_finite_differences():
    i = unit(5, 3, 12).requires_grad_(True)
    t = unit(5, 3, 13).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: clip_contrastive_loss(a, b, 3.0), (i, t))
    assert torch.autograd.gradcheck(lambda a, b: sum(trapezoidal_consistency_loss(a, b)), (i, t))


def test_soft_cross_entropy_with_one_hot_targets_equals_cross_entropy():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 5, generator=g, dtype=torch.float64)
    labels = torch.tensor([0, 4, 2, 2, 1, 3])
    assert soft_cross_entropy(logits, F.one_hot(labels, 5).double()).item() == pytest.approx(
        F.cross_entropy(logits, labels).item(), rel=1e-12
    )


def test_concept_targets_sum_to_one_and_an_empty_caption_gives_zero_not_nan():
    y = torch.tensor([[1.0, 0, 1, 1], [0, 0, 0, 0], [0, 1, 0, 0]])
    q = normalize_multi_hot(y)
    assert torch.isfinite(q).all()
    assert q.sum(1).tolist() == pytest.approx([1.0, 0.0, 1.0])
    assert q[0].tolist() == pytest.approx([1 / 3, 0, 1 / 3, 1 / 3])
    logits = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    expected = -(torch.log_softmax(logits[0], 0)[[0, 2, 3]].mean() + torch.log_softmax(logits[2], 0)[1]) / 3
    assert soft_cross_entropy(logits, q).item() == pytest.approx(expected.item(), rel=1e-6)
    with pytest.raises(ValueError, match="non-negative"):
        normalize_multi_hot(-y)


def test_topk_pseudo_label_is_uniform_on_the_k_largest_concepts():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(20, 9, generator=g)
    q = topk_uniform_targets(logits, 3)
    assert not q.requires_grad
    assert q.sum(1).tolist() == pytest.approx([1.0] * 20)
    for row, lrow in zip(q, logits):
        top = sorted(range(9), key=lambda k: -float(lrow[k]))[:3]
        assert sorted(torch.nonzero(row).flatten().tolist()) == sorted(top)
        assert row[top].tolist() == pytest.approx([1 / 3] * 3)
    for k in (0, 10):
        with pytest.raises(ValueError, match="k must be"):
            topk_uniform_targets(logits, k)


@pytest.mark.parametrize(
    ("u", "ratio", "kept"), [(10, 0.3, 3), (100, 0.29, 29), (7, 0.0, 0), (7, 1.0, 7), (3, 0.3, 0)]
)
def test_selection_keeps_exactly_floor_ratio_u_of_the_best_matches(u, ratio, kept):
    scores = torch.randn(u, generator=torch.Generator().manual_seed(u))
    mask = select_top_fraction(scores, ratio)
    assert int(mask.sum()) == kept
    best = sorted(range(u), key=lambda j: -float(scores[j]))[:kept]
    assert sorted(torch.nonzero(mask).flatten().tolist()) == sorted(best)


def test_selection_refuses_a_ratio_outside_the_unit_interval():
    with pytest.raises(ValueError, match="ratio must be in"):
        select_top_fraction(torch.zeros(4), 1.5)
