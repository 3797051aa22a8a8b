"""Semantic concept mining (SemiCLIP Sec. 3.1) without NLTK: hand examples, determinism, filters, bad input."""

import numpy as np
import pytest

from iclr25_semiclip import concept_multi_hot, mine_concepts, words

CAPTIONS = [
    "A red Dress on a black background.",
    "a dress with a belt",
    "Two dresses and a dress",
    "a coat with a belt",
    "The COAT near a tree",
    "a coat",
    "a photo of a hat",
    "",
]


def test_concept_mining_on_a_hand_example():
    # counted once per caption: dress 3, coat 3, belt 2, a/with/the stop words, photo generic, others 1
    assert mine_concepts(CAPTIONS, min_count=2, max_frequency=0.5) == ["coat", "dress", "belt"]
    assert mine_concepts(CAPTIONS, min_count=3, max_frequency=0.5) == ["coat", "dress"]


def test_ubiquitous_words_are_not_concepts():
    caps = ["a shirt on a table", "a shoe on a table", "a shirt on a table", "a shoe on a table"]
    assert mine_concepts(caps, min_count=2, max_frequency=0.6) == ["shirt", "shoe"]
    assert mine_concepts(caps, min_count=2, max_frequency=1.0) == ["table", "shirt", "shoe"]


def test_mining_is_deterministic_case_normalised_and_order_free():
    a = mine_concepts(CAPTIONS, min_count=2, max_frequency=0.5)
    b = mine_concepts([c.upper() for c in reversed(CAPTIONS)], min_count=2, max_frequency=0.5)
    assert a == b


def test_a_user_noun_filter_restricts_the_candidates():
    assert mine_concepts(CAPTIONS, min_count=2, max_frequency=0.5, is_noun=lambda w: w != "belt") == [
        "coat",
        "dress",
    ]


def test_words_keep_hyphenated_compounds_whole():
    assert words("A T-Shirt, an ankle-boot; 3 bags!") == ["a", "t-shirt", "an", "ankle-boot", "bags"]


def test_multi_hot_vectors_and_an_empty_caption():
    y = concept_multi_hot(CAPTIONS, ["coat", "dress", "belt"])
    assert y.dtype == np.float32 and y.shape == (8, 3)
    assert y.tolist() == [
        [0, 1, 0],
        [0, 1, 1],
        [0, 1, 0],
        [1, 0, 1],
        [1, 0, 0],
        [1, 0, 0],
        [0, 0, 0],
        [0, 0, 0],
    ]


def test_an_empty_concept_set_is_refused_with_the_thresholds_named():
    with pytest.raises(ValueError, match="concept set is empty.*min_count=5"):
        mine_concepts(["a dress", "a coat"], min_count=5)
    with pytest.raises(ValueError, match="empty concept set"):
        concept_multi_hot(["a dress"], [])
    with pytest.raises(ValueError, match="at least one labelled caption"):
        mine_concepts([])
    with pytest.raises(ValueError, match="distinct"):
        concept_multi_hot(["a dress"], ["dress", "dress"])
    with pytest.raises(TypeError, match="caption must be a str"):
        mine_concepts(["a dress", None])
    with pytest.raises(ValueError, match="max_frequency must be in"):
        mine_concepts(CAPTIONS, max_frequency=0.0)
