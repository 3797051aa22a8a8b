"""Issue 38: a judge's position bias alone never passes a principle under the default flips; paraphrases of one rule
do not fill the constitution when no more than n principles pass (the second deduplication)."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from iclr25_icai import (
    VOTE_KINDS,
    ICAIConfig,
    ScriptedBackend,
    TfidfEmbedder,
    filter_principles,
    merge_near_duplicates,
    run_icai,
)
from iclr25_icai.cli import main

RULES = [
    "is shorter",
    "mentions a colour",
    "is about a person",
    "uses formal language",
    "is factually accurate",
]
SHORT = ["The cat sat.", "A dog ran.", "Sun is hot.", "Cold river.", "A short city.", "Who was born.", "Red car.",
         "Blue sky.", "Big tree.", "Old man.", "New book.", "Fast fox."]  # fmt: skip


def _pairs() -> pd.DataFrame:
    """12 pairs; the preferred text is the shorter one, half of them shown first."""
    rows = []
    for i, s in enumerate(SHORT):
        long = s[:-1] + " on the mat in the sun and the dog ran far away from it."
        rows.append(
            {"text_a": s, "text_b": long, "preferred_text": "a"}
            if i % 2
            else {"text_a": long, "text_b": s, "preferred_text": "b"}
        )
    return pd.DataFrame(rows)


def _always_a(messages):
    """Proposes principles like a real judge; votes "A" for every principle and annotates "A"."""
    text = messages[-1]["content"]
    m = re.search(r"Preferred response: (.*?)\n\n.*Write (\d+)", text, flags=re.S)
    if m:
        h = sum(map(ord, m.group(1)))
        found = [f"Select the response that {RULES[(h + i) % len(RULES)]}" for i in range(int(m.group(2)))]
        return json.dumps({"principles": found})
    if "mapping each number" in text:
        return json.dumps({str(i): "A" for i in range(len(re.findall(r"^\d+\. ", text, flags=re.M)))})
    return "A"


def test_an_always_a_judge_yields_an_empty_constitution_under_the_default_flips():
    # regression: with random flips (the endpoint default) 5 of these 20 seeds kept a principle from position bias
    pairs = _pairs()
    for seed in range(20):
        result = run_icai(pairs, ScriptedBackend(_always_a), TfidfEmbedder(), ICAIConfig(), seed=seed)
        assert result.candidates, "the judge proposes principles"
        assert result.constitution.principles == (), (seed, result.constitution)
        assert (result.counts["for"] == 0).all() and (result.counts["against"] == 0).all()


def test_the_cli_default_for_an_endpoint_is_balanced_flips_with_an_even_count(stub_server, tmp_path):
    # regression: the endpoint default (random flips, 3 reannotations) kept all 5 principles at this seed
    csv = tmp_path / "pairs.csv"
    _pairs().to_csv(csv, index=False)
    stub_server.reply = _always_a
    args = ["run", "--data", str(csv), "--backend", "openai", "--model", "m", "--base-url", stub_server.url,
            "--embedder", "tfidf", "--no-cache", "--seed", "0", "--out", str(tmp_path / "o"), "--quiet"]  # fmt: skip
    assert main(args) == 0
    config = json.loads((tmp_path / "o" / "config.json").read_text())
    assert config["flips"] == "auto" and config["reannotations"] % 2 == 0
    votes = pd.read_csv(tmp_path / "o" / "votes.csv")
    per_pair = votes.groupby(["pair", "principle"])["flipped"].mean()
    assert (per_pair == 0.5).all()  # each pair seen equally often in both orders
    assert json.loads((tmp_path / "o" / "constitution.json").read_text())["principles"] == []


# ---------------------------------------------------------------------------------------------------------------
# second deduplication
# ---------------------------------------------------------------------------------------------------------------

COLOUR = [
    "Select the response that mentions a colour",
    "Select the response that names a colour",
    "Select the response that refers to a colour",
]
SHORTER = "Select the response that is shorter"


def _keyword_embed(texts):
    """Stands in for all-MiniLM-L6-v2, which puts the three colour paraphrases at cosine 0.93-0.97 (measured; the
    slow tier checks it): colour -> axis 0, length-like words -> axis 1, plus a small per-text offset."""
    out = []
    for t in texts:
        length_like = any(w in t for w in ("short", "long", "helpful", "comprehensive"))
        v = np.array([2.0 * ("colour" in t), 2.0 * length_like, 0.0])
        v[2] = 0.1 * (sum(map(ord, t)) % 7)
        out.append(v)
    return np.asarray(out)


def _counts(rows):
    table = pd.DataFrame(
        [{k: r.get(k, 0) for k in VOTE_KINDS} for r in rows.values()], columns=list(VOTE_KINDS)
    )
    table.insert(0, "principle", list(rows))
    table["total"] = table[list(VOTE_KINDS)].sum(axis=1)
    return table


def _merged(per_principle):
    return pd.DataFrame(
        [
            {"pair": j, "principle": i, "vote": v}
            for i, vs in enumerate(per_principle)
            for j, v in enumerate(vs)
        ]
    )


def test_paraphrases_of_one_rule_are_merged_after_the_filter_when_no_more_than_n_pass():
    # regression: all three colour paraphrases were kept (3 + 1 <= n = 5, so the second clustering never ran)
    colour_votes = ["for", "for", "for", "for", "against"]
    counts = _counts({COLOUR[0]: {"for": 4, "against": 1}, COLOUR[1]: {"for": 4, "against": 1},
                      SHORTER: {"for": 3, "against": 2}, COLOUR[2]: {"for": 4, "against": 1}})  # fmt: skip
    votes = _merged([colour_votes, colour_votes, ["for", "against", "for", "for", "against"], colour_votes])
    kept = filter_principles(counts, max_principles=5, embed=_keyword_embed, votes=votes)
    assert list(kept["principle"]) == [COLOUR[0], SHORTER]
    assert kept.attrs["merged_into"] == {1: 0, 3: 0}


def test_close_embeddings_with_different_votes_are_not_merged():
    # embeddings put "shorter" next to "longer" (0.93 with MiniLM) and sibling rules close; the votes tell them apart
    a, b = "Select the response that is more comprehensive", "Select the response that is more helpful"
    counts = _counts({a: {"for": 3, "against": 1}, b: {"for": 3, "against": 1}})
    votes = _merged([["for", "for", "for", "against"], ["against", "for", "for", "for"]])  # agree on 2 of 4
    kept, merged = merge_near_duplicates(counts, _keyword_embed, votes=votes)
    assert list(kept["principle"]) == [a, b] and merged == {}
    kept, merged = merge_near_duplicates(counts, _keyword_embed, votes=votes, min_agreement=0.5)
    assert list(kept["principle"]) == [a] and merged == {1: 0}
    with pytest.raises(ValueError, match="embed returned shape"):
        merge_near_duplicates(counts, lambda t: np.zeros((1, 3)), votes=votes)


def test_the_pipeline_keeps_one_colour_rule_out_of_three_paraphrases():
    pairs = pd.DataFrame(
        {
            "text_a": ["a red car", "it rained", "the blue sky", "no", "green grass grows", "hello"],
            "text_b": [
                "it rained today",
                "a red coat",
                "it is late now",
                "a white wall",
                "we slept",
                "a pink hat",
            ],
            "preferred_text": ["a", "b", "a", "b", "a", "b"],
        }
    )
    colours = ("red", "blue", "green", "white", "pink")

    def judge(messages):
        text = messages[-1]["content"]
        m = re.search(r"Preferred response: (.*?)\n\n", text)
        if m:  # three wordings of the colour rule, one per pair in turn
            return json.dumps({"principles": [COLOUR[sum(map(ord, m.group(1))) % 3], SHORTER]})
        a, b = re.search(r"Response A: (.*?)\n\nResponse B: (.*?)\n\n", text, flags=re.S).groups()
        votes = {}
        for idx, principle in re.findall(r"^(\d+)\. (.*)$", text, flags=re.M):
            if "colour" in principle:
                ca, cb = (any(c in t for c in colours) for t in (a, b))
                votes[idx] = "Both" if ca and cb else "A" if ca else "B" if cb else "None"
            else:
                votes[idx] = "A" if len(a) < len(b) else "B"
        return json.dumps(votes)

    result = run_icai(pairs, ScriptedBackend(judge), _keyword_embed, ICAIConfig(max_principles=5), seed=0)
    assert sum("colour" in c for c in result.candidates) == 3, result.candidates
    principles = result.constitution.principles
    assert sum("colour" in p for p in principles) == 1, principles
    assert result.stats["near_duplicates_merged"] == 2
