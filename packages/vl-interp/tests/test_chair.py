"""CHAIR-style hallucination metrics (used in arXiv:2410.02762, Table 2), checked by hand-counted examples."""

import pytest

from iclr25_vl_interp import chair, mentioned_objects

SYN = {"dog": ["puppy"], "hot dog": ["hotdog"], "person": ["man", "men", "woman"], "cat": []}


def test_mentions_prefer_the_longest_phrase_and_accept_plurals():
    assert mentioned_objects("A man eats a hot dog next to two dogs.", SYN) == ["person", "hot dog", "dog"]
    assert mentioned_objects("Cats and puppies; a catalog.", SYN) == ["cat"]  # 'puppies' is not puppy+s
    assert mentioned_objects("", SYN) == []


def test_chair_counts_by_hand():
    caps = ["A dog and a cat.", "Two men with a puppy.", "An empty room."]
    gt = [{"dog"}, {"person"}, {"cat"}]
    s = chair(caps, gt, SYN)
    # mentions: {dog, cat}, {person, dog}, {} -> 4; hallucinated: cat, dog -> 2; captions with one: 2 of 3
    assert (s.mentions, s.hallucinated) == (4, 2)
    assert s.chair_i == pytest.approx(0.5) and s.chair_s == pytest.approx(2 / 3)
    assert s.recall == pytest.approx(2 / 3)


def test_chair_bad_inputs():
    with pytest.raises(ValueError, match="differ in length"):
        chair(["a"], [], SYN)
    with pytest.raises(ValueError, match="not in synonyms: \\['zebra'\\]"):
        chair(["a zebra"], [{"zebra"}], SYN)
    with pytest.raises(ValueError, match="captions is empty"):
        chair([], [], SYN)
