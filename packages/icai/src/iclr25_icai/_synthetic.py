"""Planted-principle preference data on real text, and a scripted oracle LLM that perceives its features.

The paper's synthetic experiment (Section 4.1) labels pairs by a hidden rule and asks whether ICAI recovers it, in
three settings: *orthogonal* (a rule the default annotator has no opinion on), *aligned* (a rule the default annotator
already follows) and *unaligned* (the aligned labels flipped). Here the texts are real Wikipedia lead summaries
(``iclr25_shared.data.wiki_summaries``) and the rules are:

- ``person`` (orthogonal): prefer the summary about a person (Wikipedia topic "People");
- ``longer`` (aligned: LLM judges are known to favour longer answers): prefer the longer text;
- ``shorter`` (unaligned): the ``longer`` pairs with every label flipped.

:func:`matches_rule` decides whether a principle states a rule (keyword patterns, listed in :data:`RULES`).
:func:`feature_oracle` is a scripted backend that reads the prompts and answers from the true features; it is a
pipeline check (does the algorithm recover the rule when the LLM perceives it perfectly?), not a model.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_icai._backends import ScriptedBackend
from iclr25_shared.checks import check_choice, check_int

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["RULES", "SETTINGS", "Rule", "clip_text", "feature_oracle", "make_planted_pairs", "matches_rule"]


@dataclass(frozen=True)
class Rule:
    """A planted rule: its canonical statement, its inverse, and the keyword patterns that recognise it."""

    name: str
    statement: str
    inverse: str
    pattern: str
    inverse_pattern: str


_LONG = r"\b(longer|lengthier|more detail\w*|detailed|more information|more informative|comprehensive|thorough|elaborat\w*|extensive|in-depth|more context|more complete|more words)\b"
_SHORT = (
    r"\b(shorter|concise|brief|briefer|succinct|fewer words|short|less verbose|to the point|less detail\w*)\b"
)
_PERSON = r"\b(person|people|individual|human being|biograph\w*|someone|life of|born)\b"
_NOT_PERSON = r"\b(not|no|non)\b[^.]*\b(person|people|individual|human)\b|\b(place|object|concept|thing)\b"

RULES = {
    "person": Rule(
        "person",
        "Select the response that is about a person",
        "Select the response that is not about a person",
        _PERSON,
        _NOT_PERSON,
    ),
    "longer": Rule(
        "longer", "Select the response that is longer", "Select the response that is shorter", _LONG, _SHORT
    ),
    "shorter": Rule(
        "shorter", "Select the response that is shorter", "Select the response that is longer", _SHORT, _LONG
    ),
}
SETTINGS = {"orthogonal": "person", "aligned": "longer", "unaligned": "shorter"}
"""The paper's three synthetic settings and the rule planted in each here."""


def matches_rule(principle: str, rule: str) -> bool:
    """Whether ``principle`` states ``rule`` (matches its pattern and not its inverse's; case-insensitive)."""
    r = RULES[check_choice("rule", rule, tuple(RULES))]
    text = principle.lower()
    return bool(re.search(r.pattern, text)) and not re.search(r.inverse_pattern, text)


def clip_text(text: str, *, sentences: int, max_words: int) -> str:
    """The first ``sentences`` sentences of ``text`` (whitespace normalised), cut to at most ``max_words`` words
    (whole sentences when they fit; a cut sentence ends with "...")."""
    check_int("sentences", sentences, low=1)
    check_int("max_words", max_words, low=1)
    parts = re.split(r"(?<=[.!?])\s+", " ".join(text.split()))
    out: list[str] = []
    for s in parts[:sentences]:
        words = s.split()
        if len(out) + len(words) <= max_words:
            out += words
        else:
            if not out:
                out = [*words[:max_words]]
                out[-1] = out[-1].rstrip(".,;:") + "..."
            break
    return " ".join(out)


def make_planted_pairs(
    corpus: Any,
    rule: str,
    n_pairs: int,
    *,
    seed: int = 0,
    max_words: int = 40,
    rows: Sequence[int] | None = None,
) -> pd.DataFrame:
    """Pairs of real texts labelled by a planted rule.

    Args:
        corpus: an ``iclr25_shared.data.TextClassification`` with a ``"People"`` class (Wikipedia summaries).
        rule: ``"person"``, ``"longer"`` or ``"shorter"``. ``"shorter"`` returns exactly the ``"longer"`` pairs
            of the same seed with every label flipped.
        n_pairs: number of pairs (>= 1).
        seed: picks the documents and the A/B positions.
        max_words: longest text in words.
        rows: corpus rows to draw from (e.g. a train or test split); default all.

    Returns:
        ``(n_pairs, 7)`` table: ``input`` (empty), ``text_a``, ``text_b``, ``preferred_text``, and the hidden
        features ``words_a``, ``words_b`` (int), ``person_a``, ``person_b`` (bool). Each document is used once.

    Raises:
        ValueError: unknown rule, ``n_pairs < 1``, or too few documents in ``rows``.
    """
    import pandas as pd

    check_choice("rule", rule, tuple(RULES))
    check_int("n_pairs", n_pairs, low=1)
    check_int("max_words", max_words, low=8)
    rng = np.random.default_rng(seed)
    people = corpus.classes.index("People")
    pool = np.asarray(rows if rows is not None else range(len(corpus)), dtype=np.int64)
    pool = pool[rng.permutation(len(pool))]
    is_person = corpus.labels[pool] == people
    persons, others = list(pool[is_person]), list(pool[~is_person])
    short_max = max(6, max_words // 2)
    out = []
    if rule == "person":
        if len(persons) < n_pairs or len(others) < n_pairs:
            raise ValueError(
                f"rows hold {len(persons)} person and {len(others)} other documents; need {n_pairs} each"
            )
        for i in range(n_pairs):
            good = clip_text(corpus.texts[persons[i]], sentences=2, max_words=max_words)
            bad = clip_text(corpus.texts[others[i]], sentences=2, max_words=max_words)
            out.append((good, bad, True, False))
    else:
        docs = list(pool)
        k = 0
        while len(out) < n_pairs:
            if k + 1 >= len(docs):
                raise ValueError(f"rows hold too few documents for {n_pairs} length-contrast pairs")
            long = clip_text(corpus.texts[docs[k]], sentences=4, max_words=max_words)
            short = clip_text(corpus.texts[docs[k + 1]], sentences=1, max_words=short_max)
            k += 2
            if len(long.split()) < 1.6 * len(short.split()):
                continue
            # (long, short) in this order for both rules, so that "shorter" gives the same pairs as "longer"
            out.append(
                (long, short, corpus.labels[docs[k - 2]] == people, corpus.labels[docs[k - 1]] == people)
            )
    table = []
    for first, second, p1, p2 in out:
        swap = rule == "shorter"  # the preferred text is the second one
        good, bad, pg, pb = (second, first, p2, p1) if swap else (first, second, p1, p2)
        if rng.integers(2) != swap:  # A/B positions depend on the pair, not on the rule
            table.append(
                {
                    "input": "",
                    "text_a": good,
                    "text_b": bad,
                    "preferred_text": "text_a",
                    "person_a": pg,
                    "person_b": pb,
                }
            )
        else:
            table.append(
                {
                    "input": "",
                    "text_a": bad,
                    "text_b": good,
                    "preferred_text": "text_b",
                    "person_a": pb,
                    "person_b": pg,
                }
            )
    df = pd.DataFrame(table)
    df["words_a"] = df["text_a"].str.split().str.len()
    df["words_b"] = df["text_b"].str.split().str.len()
    return df[["input", "text_a", "text_b", "preferred_text", "words_a", "words_b", "person_a", "person_b"]]


# ----------------------------------------------------------------------------------------------------------------
# Scripted oracle LLM
# ----------------------------------------------------------------------------------------------------------------

_PARAPHRASES = {
    ("person", True): ["is about a person", "describes a specific person", "is a biography of someone"],
    ("person", False): ["is not about a person"],
    ("length", True): ["is longer", "gives more detailed information", "is more comprehensive"],
    ("length", False): ["is shorter", "is more concise", "is brief and to the point"],
    ("digits", True): ["mentions numbers or dates"],
    ("digits", False): ["does not mention numbers"],
}
_NOISE = ["uses formal language", "is written in English", "is factually accurate"]


def _features(text: str, person: dict[str, bool]) -> dict[str, Any]:
    return {
        "person": person.get(text, False),
        "length": len(text.split()),
        "digits": bool(re.search(r"\d", text)),
    }


def _feature_of(principle: str) -> tuple[str, bool] | None:
    p = principle.lower()
    if re.search(_NOT_PERSON, p):
        return ("person", False)
    if re.search(_PERSON, p):
        return ("person", True)
    if re.search(_LONG, p):
        return ("length", True)
    if re.search(_SHORT, p):
        return ("length", False)
    if "number" in p or "date" in p:
        return ("digits", "not" not in p)
    return None


def _select(feature: tuple[str, bool], fa: dict[str, Any], fb: dict[str, Any]) -> str:
    """'A', 'B', 'Both' or 'None' for one principle on texts with features fa, fb."""
    name, positive = feature
    a, b = fa[name], fb[name]
    if name == "length":
        return "None" if a == b else ("A" if (a > b) == positive else "B")
    a, b = bool(a) == positive, bool(b) == positive
    return "Both" if a and b else "A" if a else "B" if b else "None"


def feature_oracle(
    pairs: Sequence[pd.DataFrame], *, default: str = "longer", seed: int = 0
) -> ScriptedBackend:
    """A scripted LLM that answers ICAI's prompts from the true features of the texts in ``pairs``.

    Proposal: states the features on which the preferred text differs from the rejected one (person, length,
    digits; random paraphrases), padded with irrelevant principles. Voting: maps each principle to a feature by
    keywords and answers A/B/Both/None from the features. Annotation: follows the first rule of the constitution that
    separates the two texts, else its default preference (``"longer"``: the verbosity bias of LLM judges; or
    ``"random"``).

    Args:
        pairs: tables from :func:`make_planted_pairs` (their ``person_*`` columns give the topic features).
    """
    check_choice("default", default, ("longer", "random"))
    person: dict[str, bool] = {}
    for t in pairs:
        for side in ("a", "b"):
            person.update(dict(zip(t[f"text_{side}"], t[f"person_{side}"].astype(bool))))

    def rng_for(*parts: str) -> np.random.Generator:
        h = hashlib.sha256(("\x00".join(parts) + str(seed)).encode()).digest()
        return np.random.default_rng(int.from_bytes(h[:8], "little"))

    def reply(messages: list[dict[str, str]]) -> str:
        text = messages[-1]["content"]
        m = re.search(
            r"Preferred response: (.*?)\n\nRejected response: (.*?)\n\n.*Write (\d+)", text, flags=re.S
        )
        if m:
            good, bad, n = m.group(1), m.group(2), int(m.group(3))
            fg, fb = _features(good, person), _features(bad, person)
            rng = rng_for(good, bad)
            found = []
            for name in ("person", "length", "digits"):
                if fg[name] != fb[name]:
                    positive = fg[name] > fb[name]
                    options = _PARAPHRASES[(name, bool(positive))]
                    found.append("Select the response that " + options[int(rng.integers(len(options)))])
            while len(found) < n:
                found.append("Select the response that " + _NOISE[int(rng.integers(len(_NOISE)))])
            return json.dumps({"principles": found[:n]})
        m = re.search(r"Response A: (.*?)\n\nResponse B: (.*?)\n\n", text, flags=re.S)
        if m is None:
            return "I cannot answer that."
        fa, fb = _features(m.group(1), person), _features(m.group(2), person)
        listing = re.findall(r"^(\d+)\. (.*)$", text, flags=re.M)
        if "mapping each number" in text:
            votes = {}
            for idx, principle in listing:
                feat = _feature_of(principle)
                votes[idx] = "None" if feat is None else _select(feat, fa, fb)
            return json.dumps(votes)
        for _, principle in listing:  # annotation with a constitution
            feat = _feature_of(principle)
            choice = None if feat is None else _select(feat, fa, fb)
            if choice in ("A", "B"):
                return choice
        if default == "longer" and fa["length"] != fb["length"]:
            return "A" if fa["length"] > fb["length"] else "B"
        return "A" if rng_for(m.group(1), m.group(2)).integers(2) == 0 else "B"

    return ScriptedBackend(reply, model_name=f"feature-oracle(default={default})")
