"""Learnable surrogate captions (SemiCLIP Sec. 3.2): layout from the tokenizer, exactness, gradients, frozen towers."""

import pytest
import torch
import torch.nn.functional as F

from iclr25_semiclip import SemiCLIPHead, SurrogateCaptions, TextTower

CONCEPTS = ["coat", "dress", "bag", "shirt", "sandal", "t-shirt"]


def test_slots_and_positions_come_from_the_tokenizer(tiny):
    _, tower = tiny
    sur = SurrogateCaptions(tower, CONCEPTS, words=4)
    topk = [2, 0, 3, 1]
    literal = " ".join(f"a photo includes {CONCEPTS[k]}" for k in topk)
    assert sur.token_ids(topk) == tower.token_ids(literal)
    assert len(sur.slot_positions) == 4 and sur.length == 2 + 4 * (sur.template_len + 1)
    emb = sur.inputs_embeds(torch.tensor([topk]))
    table = tower.encoder.get_input_embeddings().weight
    for j, pos in enumerate(sur.slot_positions):
        assert torch.equal(emb[0, pos], table[tower.token_ids(CONCEPTS[topk[j]])[0]])


def test_at_initialisation_a_surrogate_caption_encodes_as_its_literal_text(tiny):
    _, tower = tiny
    single = ["coat", "dress", "bag", "shirt", "hat"]
    assert all(len(tower.token_ids(c)) == 1 for c in single)  # single word-piece concepts: exact
    sur = SurrogateCaptions(tower, single, words=3)
    topk = torch.tensor([[4, 1, 0], [2, 3, 1]])
    with torch.no_grad():
        got = sur(tower, topk)
    texts = [" ".join(f"a photo includes {single[k]}" for k in row) for row in topk.tolist()]
    want = tower.encode_texts(texts)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_multi_piece_concept_fills_its_slot_with_the_mean_piece_embedding(tiny):
    _, tower = tiny
    pieces = tower.token_ids("t-shirt")
    assert len(pieces) > 1
    sur = SurrogateCaptions(tower, CONCEPTS, words=1)
    table = tower.encoder.get_input_embeddings().weight
    torch.testing.assert_close(
        sur.inputs_embeds(torch.tensor([[5]]))[0, sur.slot_positions[0]], table[pieces].mean(0)
    )


def test_the_template_embeddings_are_the_only_new_parameters_and_receive_gradient(tiny):
    _, tower = tiny
    sur = SurrogateCaptions(tower, CONCEPTS, words=4)
    assert [n for n, _ in sur.named_parameters()] == ["template"]
    assert sur.template.shape == (4, sur.template_len, tower.dim)
    before = {k: v.clone() for k, v in tower.state_dict().items()}
    head = SemiCLIPHead(8, tower.dim, dim=6)
    out = head.text(sur(tower, torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0]])))
    out.sum().backward()
    assert sur.template.grad is not None and sur.template.grad.abs().sum() > 0
    assert all(p.grad is None for p in tower.parameters())
    assert all(torch.equal(before[k], v) for k, v in tower.state_dict().items())


def test_equal_concept_tuples_are_encoded_once_with_the_same_result(tiny):
    _, tower = tiny
    sur = SurrogateCaptions(tower, CONCEPTS, words=2)
    topk = torch.tensor([[0, 1], [2, 3], [0, 1], [1, 0]])
    with torch.no_grad():
        fast = sur(tower, topk)
        emb = sur.inputs_embeds(topk)
        slow = tower.encode_embeddings(emb, torch.ones(emb.shape[:2], dtype=torch.long))
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-6)
    assert torch.equal(fast[0], fast[2]) and not torch.allclose(fast[0], fast[3])


def test_frozen_towers_stay_in_eval_mode(tiny):
    image, text = tiny
    text.train()
    image.train()
    assert not text.encoder.training and not image.backbone.training
    assert not any(p.requires_grad for p in text.parameters())
    assert not any(p.requires_grad for p in image.parameters())


def test_surrogate_refuses_bad_settings(tiny):
    _, tower = tiny
    with pytest.raises(ValueError, match="words must be"):
        SurrogateCaptions(tower, CONCEPTS[:2], words=3)
    with pytest.raises(ValueError, match="empty concept set"):
        SurrogateCaptions(tower, [], words=1)
    sur = SurrogateCaptions(tower, CONCEPTS, words=2)
    with pytest.raises(ValueError, match=r"topk must be \(U, 2\)"):
        sur.inputs_embeds(torch.zeros(3, 4, dtype=torch.long))


def test_head_embeddings_are_unit_norm_and_the_scale_is_clamped_at_100():
    head = SemiCLIPHead(5, 7, dim=3)
    x = torch.randn(4, 5)
    assert torch.allclose(head.image(x).norm(dim=1), torch.ones(4))
    with torch.no_grad():
        head.logit_scale.fill_(10.0)
    assert head.scale().item() == pytest.approx(100.0)
    with pytest.raises(RuntimeError, match="init_concepts"):
        head.concept_logits(F.normalize(torch.randn(2, 3), dim=1))
    assert isinstance(TextTower, type)
