"""The reproduction's pieces on tiny inputs: composites and captions, the evaluation functions against brute force,
and the composed VLM (tiny random Llama) running the library's lens / ProjectAway unchanged."""

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from iclr25_vl_interp import ProjectAway, internal_confidence, lens_logits, vlm_parts  # noqa: E402
from iclr25_vl_interp._composite import (  # noqa: E402
    CLASS_WORDS,
    COOCCURRENCE,
    caption_of,
    make_composites,
)
from iclr25_vl_interp._metrics import (  # noqa: E402
    auroc,
    localisation_hits,
    removal_counts,
    word_first_token_prob,
)
from iclr25_vl_interp._vlm import ComposedVLM, Projector, greedy_captions, train_projector  # noqa: E402


def _items(per_class=3, size=28, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(10), per_class)
    items = rng.integers(1, 256, size=(len(labels), size, size), dtype=np.uint8)
    return items, labels


# ---------------------------------------------------------------- composites and captions


def test_caption_lists_classes_in_class_order():
    assert caption_of({9, 8, 3}) == " dress, bag, boot"
    assert caption_of([0]) == " top"
    with pytest.raises(ValueError, match="at least one class"):
        caption_of([])
    with pytest.raises(ValueError, match="class"):
        caption_of([10])


def test_composites_place_each_item_in_its_cell_and_caption_it():
    items, labels = _items()
    comp = make_composites(items, labels, 40, seed=1, grid=(3, 3), cell=32)
    assert comp.images.shape == (40, 96, 96) and comp.classes.shape == (40, 9)
    for k in range(40):
        present = comp.present(k)
        filled = comp.classes[k][comp.classes[k] >= 0]
        assert 2 <= len(filled) <= 4 and len(set(filled)) == len(filled)  # distinct classes
        assert comp.captions[k] == caption_of(present)
        for pos in range(9):
            r, q = divmod(pos, 3)
            patch = comp.images[k, r * 32 + 2 : r * 32 + 30, q * 32 + 2 : q * 32 + 30]
            if comp.classes[k, pos] < 0:
                assert not patch.any()
            else:  # the patch is one of the items of that class
                cands = items[labels == comp.classes[k, pos]]
                assert any(np.array_equal(patch, c) for c in cands)
        # nothing outside the centred 28x28 items
        mask = np.zeros((96, 96), bool)
        for pos in range(9):
            r, q = divmod(pos, 3)
            mask[r * 32 + 2 : r * 32 + 30, q * 32 + 2 : q * 32 + 30] = True
        assert not comp.images[k][~mask].any()


def test_cooccurrence_bias_one_always_adds_the_partner_and_zero_is_unbiased():
    items, labels = _items()
    biased = make_composites(items, labels, 300, seed=2, bias=1.0)
    for k in range(300):
        p = biased.present(k)
        protected = set(COOCCURRENCE) | {COOCCURRENCE[t] for t in p if t in COOCCURRENCE}
        for trig, partner in COOCCURRENCE.items():
            if trig in p:  # added, unless every drawn class is a trigger or a needed partner (no free slot)
                assert partner in p or p <= protected
    n_bag = sum(8 in biased.present(k) for k in range(300))
    assert sum(8 in biased.present(k) and 9 in biased.present(k) for k in range(300)) >= 0.8 * n_bag
    plain = make_composites(items, labels, 600, seed=2, bias=0.0)
    with_bag = [k for k in range(600) if 8 in plain.present(k)]
    rate = np.mean([9 in plain.present(k) for k in with_bag])
    assert 0.15 < rate < 0.5  # the base rate (about 1/3 for 2-4 of 10 classes), far from 1


def test_composites_are_reproducible_and_seed_dependent():
    items, labels = _items()
    a = make_composites(items, labels, 5, seed=3)
    b = make_composites(items, labels, 5, seed=3)
    c = make_composites(items, labels, 5, seed=4)
    assert np.array_equal(a.images, b.images) and a.captions == b.captions
    assert not np.array_equal(a.classes, c.classes)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"min_items": 3, "max_items": 2}, "max_items"),
        ({"grid": (1, 2), "max_items": 3}, "max_items"),
        ({"bias": 1.5}, "bias"),
        ({"cell": 20}, "cell"),
    ],
)
def test_composites_reject_bad_settings(kwargs, match):
    items, labels = _items()
    with pytest.raises(ValueError, match=match):
        make_composites(items, labels, 2, seed=0, **kwargs)


def test_composites_need_every_class():
    items, labels = _items()
    with pytest.raises(ValueError, match="no item of class 9"):
        make_composites(items[labels != 9], labels[labels != 9], 2, seed=0)


# ---------------------------------------------------------------- evaluation functions vs brute force


def _auroc_brute(pos, neg):
    return np.mean([1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg)])


@pytest.mark.parametrize("seed", range(5))
def test_auroc_equals_pairwise_count_with_ties(seed):
    rng = np.random.default_rng(seed)
    pos = rng.integers(0, 6, size=rng.integers(1, 30)).astype(float)  # many ties
    neg = rng.integers(0, 6, size=rng.integers(1, 30)).astype(float)
    assert auroc(pos, neg) == pytest.approx(_auroc_brute(pos, neg), abs=1e-12)


def test_auroc_extremes_and_errors():
    assert auroc([2, 3], [0, 1]) == 1.0
    assert auroc([0, 1], [2, 3]) == 0.0
    assert auroc([1, 1], [1]) == 0.5
    with pytest.raises(ValueError, match="non-empty"):
        auroc([], [1.0])
    with pytest.raises(ValueError, match="finite"):
        auroc([np.nan], [1.0])


def test_localisation_hits_counts_argmax_at_true_cell():
    maps = np.array([[0.1, 0.9, 0.0], [0.5, 0.2, 0.3], [0.0, 0.1, 0.2]])
    assert localisation_hits(maps, np.array([1, 2, 2])) == (2, 3)
    with pytest.raises(ValueError, match="objects"):
        localisation_hits(maps, np.array([1, 2]))


def test_word_first_token_prob_finds_the_whole_word():
    toks, probs = [5, 7, 3, 7, 8], [0.1, 0.2, 0.3, 0.4, 0.5]
    assert word_first_token_prob(toks, probs, [7, 8]) == 0.4  # not the first 7, which is not followed by 8
    assert word_first_token_prob(toks, probs, [3]) == 0.3
    assert word_first_token_prob(toks, probs, [9]) is None


def test_removal_counts():
    c = removal_counts([{"bag"}, {"boot", "coat"}], [{"top"}, set()], [{"top", "bag"}, {"coat"}])
    assert c == {"targets": 3, "removed": 1, "kept_total": 1, "kept": 1}


# ---------------------------------------------------------------- the composed VLM on a tiny random Llama

IMG = 7
FEAT = 12


@pytest.fixture(scope="module")
def vlm():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    lm = transformers.LlamaForCausalLM(cfg).eval()
    for p in lm.parameters():
        p.requires_grad_(False)
    return ComposedVLM(lm, Projector(FEAT, 32, seed=0), IMG).eval()


def _ids(n_img=4, text=(11, 12)):
    return torch.tensor([[3, *([IMG] * n_img), *text]])


def test_composed_vlm_exposes_llava_parts(vlm):
    parts = vlm_parts(vlm)
    assert parts.num_layers == 3 and parts.image_token_id == IMG
    assert parts.lm_head is vlm.lm.lm_head and parts.norm is vlm.lm.model.norm


def test_lens_at_last_layer_equals_composed_logits(vlm):
    feats = torch.randn(1, 4, FEAT)
    ids = _ids()
    logits = vlm(input_ids=ids, image_features=feats).logits[0, 1:5]
    _conf, maps = internal_confidence(vlm, {"input_ids": ids, "image_features": feats}, [[5], [6, 8]])
    probs = torch.softmax(logits, -1)
    assert torch.allclose(maps[0, -1], probs[:, 5], atol=1e-6)
    assert torch.allclose(maps[1, -1], probs[:, [6, 8]].amax(-1), atol=1e-6)
    parts = vlm_parts(vlm)
    h = torch.randn(2, 32)
    assert torch.allclose(lens_logits(parts, h), vlm.lm.lm_head(vlm.lm.model.norm(h)))


def test_image_features_replace_placeholders_only(vlm):
    feats = torch.randn(1, 4, FEAT)
    emb = vlm.embed(_ids(), feats)
    assert torch.allclose(emb[0, 1:5], vlm.projector(feats)[0])
    assert torch.equal(emb[0, [0, 5, 6]], vlm.lm.model.embed_tokens(torch.tensor([3, 11, 12])))
    with pytest.raises(ValueError, match="4 image tokens but image_features give 3"):
        vlm.embed(_ids(), torch.randn(1, 3, FEAT))
    with pytest.raises(ValueError, match="no image_features"):
        vlm.embed(_ids(), None)


def test_projectaway_on_composed_vlm_changes_only_what_follows_the_image(vlm):
    feats = torch.randn(1, 4, FEAT)
    ids = _ids()
    base = vlm(input_ids=ids, image_features=feats).logits
    t = torch.randn(32)
    with ProjectAway(vlm, [t], layer=1, alpha=1.0, only_positive=False) as hook:
        edited = vlm(input_ids=ids, image_features=feats).logits
        assert hook.edited_rows == 4
    assert torch.equal(edited[0, 0], base[0, 0])  # causal: the row before the image is untouched
    assert not torch.allclose(edited[0, 5:], base[0, 5:])
    assert torch.equal(vlm(input_ids=ids, image_features=feats).logits, base)  # removed: bit for bit


def _greedy_no_cache(vlm, feats, prompt, eos, steps, allowed=None):
    ids = [IMG] * feats.shape[1] + list(prompt)
    out = []
    for _ in range(steps):
        logits = vlm(input_ids=torch.tensor([ids + out]), image_features=feats).logits[0, -1]
        if allowed is not None:
            nxt = allowed[int(logits[allowed].argmax())]
        else:
            nxt = int(logits.argmax())
        if nxt == eos:
            break
        out.append(nxt)
    return out


@pytest.mark.parametrize("allowed", [None, [2, 5, 9, 13, 20]])
def test_greedy_with_cache_matches_cache_free_loop(vlm, allowed):
    feats = torch.randn(3, 4, FEAT)
    toks, probs = greedy_captions(vlm, feats, [11], eos=2, max_new_tokens=6, allowed=allowed)
    for k in range(3):
        assert toks[k] == _greedy_no_cache(vlm, feats[k : k + 1], [11], 2, 6, allowed)
        assert all(0 < p <= 1 for p in probs[k])
        if allowed is not None:
            assert set(toks[k]) <= set(allowed)


def test_train_projector_lowers_the_loss_and_keeps_the_lm_frozen(vlm):
    before = {k: v.clone() for k, v in vlm.lm.state_dict().items()}
    proj_before = [p.clone() for p in vlm.projector.parameters()]
    gen = torch.Generator().manual_seed(0)
    feats = torch.randn(8, 4, FEAT, generator=gen)
    targets = [[20 + k % 4] for k in range(8)]  # caption = one token that depends on the image
    losses = train_projector(
        vlm, feats, targets, [11], steps=100, batch=8, lr=3e-2, seed=0, vocab=[20, 21, 22, 23]
    )
    # ln 4 = 1.39 at chance; a broken gradient path to the projector would leave it there
    assert np.mean(losses[:5]) > 1.3 and np.mean(losses[-10:]) < np.mean(losses[:5]) - 0.15
    for k, v in vlm.lm.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert any(not torch.equal(a, b) for a, b in zip(proj_before, vlm.projector.parameters()))
    for p, q in zip(proj_before, vlm.projector.parameters()):  # restore for the other tests
        q.data.copy_(p)


def test_class_words_are_distinct():
    assert len(set(CLASS_WORDS)) == 10
