"""The two stages (SemiCLIP Sec. 3) and the evaluation metrics (Sec. 4), on small random features."""

import pytest
import torch
import torch.nn.functional as F

from iclr25_semiclip import (
    Features,
    SemiCLIPHead,
    Settings,
    SurrogateCaptions,
    clip_contrastive_loss,
    evaluate,
    retrieval_recall,
    store_concept_logits,
    train_stage1,
    train_stage2,
)

CONCEPTS = ["coat", "dress", "bag", "shirt", "sandal"]


def feats(tower_dim, n_l=12, n_u=20, f=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = (torch.rand(n_l, len(CONCEPTS), generator=g) < 0.4).float()
    return Features(
        torch.randn(n_l, f, generator=g),
        torch.randn(n_l, tower_dim, generator=g),
        y,
        torch.randn(n_u, f, generator=g),
        torch.randn(n_u, f, generator=g),
    )


def head_for(fe, tower_dim, concepts=True):
    torch.manual_seed(0)
    head = SemiCLIPHead(fe.labelled_image.shape[1], tower_dim, dim=8)
    if concepts:
        head.init_concepts(torch.randn(len(CONCEPTS), tower_dim))
    return head


def test_stage1_without_concepts_optimises_exactly_the_clip_loss():
    fe = feats(6)
    head = head_for(fe, 6, concepts=False)
    with torch.no_grad():  # full batch: the loss is invariant to the batch's order
        want = clip_contrastive_loss(
            head.image(fe.labelled_image), head.text(fe.labelled_text), head.scale()
        ).item()
    hist = train_stage1(
        head, fe, steps=3, settings=Settings(batch_size=64, lambda1=0.0), generator=torch.Generator()
    )
    assert hist[0]["clip"] == pytest.approx(want, rel=1e-6)
    assert set(hist[0]) == {"clip"}
    assert hist[-1]["clip"] < hist[0]["clip"]


def test_stage1_concept_term_is_the_soft_ce_against_normalised_multi_hot_targets():
    fe = feats(6)
    head = head_for(fe, 6)
    with torch.no_grad():
        z = head.concept_logits(head.image(fe.labelled_image))
        y = fe.concept_targets
        rows = [
            -(y[i] / y[i].sum() * torch.log_softmax(z[i], 0)).sum() if y[i].sum() > 0 else torch.tensor(0.0)
            for i in range(len(y))
        ]
        want = torch.stack(rows).mean().item()
    hist = train_stage1(head, fe, steps=1, settings=Settings(batch_size=64), generator=torch.Generator())
    assert hist[0]["concept"] == pytest.approx(want, rel=1e-5)


def test_stage2_trains_projections_concepts_and_template_but_not_the_tower(tiny):
    _, tower = tiny
    fe = feats(tower.dim)
    head = head_for(fe, tower.dim)
    train_stage1(head, fe, steps=2, settings=Settings(), generator=torch.Generator())
    stored = store_concept_logits(head, fe.unlabelled_weak)
    sur = SurrogateCaptions(tower, CONCEPTS, words=2)
    before_tower = {k: v.clone() for k, v in tower.state_dict().items()}
    before = {n: p.detach().clone() for n, p in [*head.named_parameters(), *sur.named_parameters()]}
    s = Settings(batch_size=6, unlabelled_batch=10, words=2, topk=2, select_ratio=0.3)
    hist = train_stage2(head, sur, tower, fe, stored, steps=3, settings=s, generator=torch.Generator())
    assert [h["selected"] for h in hist] == [3, 3, 3]
    assert all(h["trapezoid_in"] >= 0 and h["trapezoid_cross"] >= 0 for h in hist)
    after = dict([*head.named_parameters(), *sur.named_parameters()])
    for name in ("image_proj.weight", "text_proj.weight", "concept_emb", "template"):
        assert not torch.equal(before[name], after[name].detach()), name
    assert all(torch.equal(before_tower[k], v) for k, v in tower.state_dict().items())
    assert torch.equal(stored, store_concept_logits(head, fe.unlabelled_weak)) is False  # the head moved ...
    # ... but stage 2 used the stored stage-1 logits, not fresh ones (the pseudo-labels were fixed)


def test_stage2_refuses_mismatched_stored_logits(tiny):
    _, tower = tiny
    fe = feats(tower.dim)
    head = head_for(fe, tower.dim)
    sur = SurrogateCaptions(tower, CONCEPTS, words=2)
    with pytest.raises(ValueError, match="stored_logits has 3 rows"):
        train_stage2(
            head,
            sur,
            tower,
            fe,
            torch.zeros(3, 5),
            steps=1,
            settings=Settings(words=2),
            generator=torch.Generator(),
        )


def test_features_refuse_inconsistent_shapes():
    with pytest.raises(ValueError, match="labelled_text has 2 rows"):
        Features(
            torch.zeros(3, 4), torch.zeros(2, 4), torch.zeros(3, 2), torch.zeros(1, 4), torch.zeros(1, 4)
        )
    with pytest.raises(ValueError, match="same shape"):
        Features(
            torch.zeros(3, 4), torch.zeros(3, 4), torch.zeros(3, 2), torch.zeros(2, 4), torch.zeros(1, 4)
        )
    with pytest.raises(ValueError, match="at least one captioned"):
        Features(
            torch.zeros(0, 4), torch.zeros(0, 4), torch.zeros(0, 2), torch.zeros(1, 4), torch.zeros(1, 4)
        )


def test_recall_at_k_matches_a_brute_force_count():
    g = torch.Generator().manual_seed(4)
    sim = torch.randn(30, 12, generator=g)
    rel = torch.rand(30, 12, generator=g) < 0.15
    got = retrieval_recall(sim, rel, (1, 3, 12))
    for k in (1, 3, 12):
        hits = 0
        for q in range(30):
            order = sorted(range(12), key=lambda j: -float(sim[q, j]))[:k]
            hits += any(bool(rel[q, j]) for j in order)
        assert got[k] == pytest.approx(hits / 30)
    with pytest.raises(ValueError, match=r"k must be in \[1, 12\]"):
        retrieval_recall(sim, rel, (13,))


def test_zero_shot_accuracy_is_the_argmax_over_class_prompts():
    head = SemiCLIPHead(4, 4, dim=4)
    with torch.no_grad():
        head.image_proj.weight.copy_(torch.eye(4))
        head.text_proj.weight.copy_(torch.eye(4))
    classes = torch.eye(4)[:3]
    images = F.normalize(
        torch.tensor([[1.0, 0.1, 0, 0], [0, 1, 0.2, 0], [0.1, 0, 1, 0], [1, 0, 0, 0]]), dim=1
    )
    labels = torch.tensor([0, 1, 2, 2])  # the last one is wrong on purpose
    out = evaluate(head, images, labels, classes, classes, torch.arange(3), ks=(1,))
    assert out["zero_shot"] == pytest.approx(0.75)
    assert out["i2t_R@1"] == pytest.approx(0.75)
    # text→image: class 0's nearest image is the last one (cosine 1.0, labelled 2): a miss; classes 1, 2 hit
    assert out["t2i_R@1"] == pytest.approx(2 / 3)


@pytest.mark.parametrize(("u", "ratio"), [(9, 0.5), (10, 0.3), (7, 0.0), (5, 1.0)])
def test_stage2_selection_by_indices_keeps_the_rows_of_select_top_fraction_in_order(u, ratio):
    from iclr25_semiclip import select_top_fraction
    from iclr25_semiclip._stages import _top_rows

    scores = torch.randn(u, generator=torch.Generator().manual_seed(u))
    want = torch.nonzero(select_top_fraction(scores, ratio)).flatten()
    assert torch.equal(_top_rows(scores, ratio), want)
