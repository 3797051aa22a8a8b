"""Semantic concept mining from the labelled captions (SemiCLIP, OpenReview 97D725GJtQ, Sec. 3.1).

The paper keeps the nouns of the labelled captions that are frequent enough but not ubiquitous, and describes each
labelled image by the multi-hot vector of the concepts its caption mentions. The official code finds nouns with
NLTK's tagger, whose data it downloads at run time. Here the words come from a dependency-free tokenizer and a
rule: lower-cased alphabetic words (hyphenated compounds kept whole), at least ``min_length`` characters, not in a
stop-list of function words and generic image words, counted once per caption. Pass ``is_noun`` (any callable,
e.g. a POS tagger you have locally) to restrict the candidates to nouns exactly as the paper does.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from iclr25_shared.checks import check_float, check_int

__all__ = ["STOPWORDS", "concept_multi_hot", "mine_concepts", "words"]

_WORD = re.compile(r"[a-z]+(?:-[a-z]+)*")

#: Function words, colours/sizes-free generic words about the picture itself; never concepts.
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "from",
        "with",
        "without",
        "by",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "this",
        "that",
        "these",
        "those",
        "it",
        "its",
        "there",
        "here",
        "which",
        "who",
        "whom",
        "whose",
        "what",
        "when",
        "where",
        "while",
        "into",
        "onto",
        "over",
        "under",
        "above",
        "below",
        "near",
        "next",
        "very",
        "some",
        "any",
        "each",
        "every",
        "all",
        "both",
        "no",
        "not",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "photo",
        "photos",
        "image",
        "images",
        "picture",
        "pictures",
        "view",
        "shot",
        "includes",
        "include",
        "including",
        "showing",
        "shows",
        "show",
        "front",
        "back",
        "side",
        "top",
        "bottom",
        "left",
        "right",
        "small",
        "large",
        "big",
        "little",
        "has",
        "have",
        "having",
        "his",
        "her",
        "their",
        "our",
        "your",
        "my",
        "me",
        "we",
        "you",
        "they",
        "he",
        "she",
        "them",
        "us",
    ]
)


def words(caption: str) -> list[str]:
    """Lower-cased words of ``caption`` in order (letters and inner hyphens, e.g. ``"t-shirt"``)."""
    if not isinstance(caption, str):
        raise TypeError(f"caption must be a str, got {type(caption).__name__}")
    return _WORD.findall(caption.lower())


def mine_concepts(
    captions: Sequence[str],
    *,
    min_count: int = 5,
    min_length: int = 3,
    max_frequency: float = 0.3,
    stopwords: Iterable[str] = STOPWORDS,
    is_noun: Callable[[str], bool] | None = None,
) -> list[str]:
    """The concept vocabulary of a set of labelled captions (SemiCLIP Sec. 3.1, semantic concept mining).

    A word is a concept when it is in at least ``min_count`` captions, has at least ``min_length`` characters,
    is not a stop word, passes ``is_noun`` (if given), and appears in at most ``max_frequency`` of the captions
    (ubiquitous words carry no image-specific meaning).

    Args:
        captions: the ``N_l`` labelled captions (strings).
        min_count: minimum number of captions containing the word (>= 1; the paper's ``c_min`` = 5).
        min_length: minimum word length in characters (>= 1; official: longer than 2).
        max_frequency: maximum fraction of captions containing the word, in ``(0, 1]``.
        stopwords: words never kept.
        is_noun: optional predicate; only words for which it returns True are kept.

    Returns:
        The concepts, most frequent first (ties alphabetical): deterministic, lower-case, no duplicates.

    Raises:
        ValueError: no captions, or no word passes the rules (the message names the thresholds to relax).
        TypeError: a caption is not a string.
    """
    min_count = check_int("min_count", min_count, low=1)
    min_length = check_int("min_length", min_length, low=1)
    max_frequency = check_float("max_frequency", max_frequency, low=0.0, high=1.0, low_inclusive=False)
    if len(captions) == 0:
        raise ValueError("captions must hold at least one labelled caption, got 0")
    stop = {w.lower() for w in stopwords}
    counts: Counter[str] = Counter()
    for caption in captions:
        counts.update(set(words(caption)))
    n = len(captions)
    kept = [
        w
        for w, c in counts.items()
        if c >= min_count
        and len(w) >= min_length
        and w not in stop
        and c / n <= max_frequency
        and (is_noun is None or is_noun(w))
    ]
    if not kept:
        raise ValueError(
            f"the concept set is empty: no word of the {n} captions is in >= min_count={min_count} captions, "
            f"has >= min_length={min_length} letters and is in <= max_frequency={max_frequency} of them "
            f"(lower min_count or raise max_frequency)"
        )
    return sorted(kept, key=lambda w: (-counts[w], w))


def concept_multi_hot(captions: Sequence[str], concepts: Sequence[str]) -> np.ndarray:
    """Multi-hot concept vector ``y_i`` of every caption: ``y_ik = 1`` iff concept ``k`` is a word of caption ``i``.

    Args:
        captions: ``N`` strings.
        concepts: ``K`` distinct concepts (from :func:`mine_concepts`).

    Returns:
        ``(N, K)`` float32 array of 0/1; a caption with no concept gives an all-zero row.

    Raises:
        ValueError: ``concepts`` is empty or has duplicates.
    """
    if len(concepts) == 0:
        raise ValueError("concepts must hold at least one concept, got an empty concept set")
    if len(set(concepts)) != len(concepts):
        raise ValueError("concepts must be distinct, got duplicates")
    index = {c: k for k, c in enumerate(concepts)}
    out = np.zeros((len(captions), len(concepts)), dtype=np.float32)
    for i, caption in enumerate(captions):
        for w in set(words(caption)):
            if w in index:
                out[i, index[w]] = 1.0
    return out
