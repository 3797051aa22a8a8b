"""The paper's synthetic claim as a pipeline property (arXiv:2406.06560, Section 4.1, Table 1): on pairs labelled
by a planted rule, an LLM that perceives the texts' features recovers that rule as the top principle, a flipped
dataset yields the inverse rule, and the constitution lifts a default annotator's agreement. Real Wikipedia
summaries; the LLM is the scripted feature oracle (a model cannot be run in the fast tier)."""

from __future__ import annotations

import numpy as np
import pytest

from iclr25_icai import (
    RULES,
    ICAIConfig,
    TfidfEmbedder,
    feature_oracle,
    make_planted_pairs,
    matches_rule,
    reconstruct,
    run_icai,
)
from iclr25_shared.data import wiki_summaries
from iclr25_shared.testing import require


@pytest.fixture(scope="module")
def corpus():
    return require(wiki_summaries)


@pytest.mark.parametrize(
    ("rule", "inverse"), [("person", None), ("longer", "shorter"), ("shorter", "longer")]
)
def test_the_planted_rule_is_ranked_first_and_the_flipped_data_gives_the_inverse_rule(corpus, rule, inverse):
    pairs = make_planted_pairs(corpus, rule, 20, seed=5)
    result = run_icai(
        pairs, feature_oracle([pairs]), TfidfEmbedder(), ICAIConfig(n_clusters=8, max_principles=3), seed=5
    )
    first = result.constitution.principles[0]
    assert matches_rule(first, rule), result.constitution
    if inverse is not None:
        assert not any(matches_rule(p, inverse) for p in result.constitution.principles)


def test_flipped_labels_are_the_same_pairs_with_every_label_inverted(corpus):
    longer = make_planted_pairs(corpus, "longer", 15, seed=2)
    shorter = make_planted_pairs(corpus, "shorter", 15, seed=2)
    assert (longer[["text_a", "text_b"]] == shorter[["text_a", "text_b"]]).all().all()
    assert (longer["preferred_text"] != shorter["preferred_text"]).all()
    words = longer[["words_a", "words_b"]].to_numpy()
    pref_a = (longer["preferred_text"] == "text_a").to_numpy()
    assert ((words[:, 0] > words[:, 1]) == pref_a).all()  # "longer" is what the label says


def test_constitution_lifts_agreement_in_the_orthogonal_setting(corpus):
    split = np.random.default_rng(0).permutation(len(corpus))
    train = make_planted_pairs(corpus, "person", 20, seed=7, rows=split[:4000])
    test = make_planted_pairs(corpus, "person", 20, seed=7, rows=split[4000:])
    assert not set(train["text_a"]) & set(test["text_a"])
    llm = feature_oracle([train, test])
    result = run_icai(train, llm, TfidfEmbedder(), ICAIConfig(n_clusters=8, max_principles=3), seed=7)
    with_c = reconstruct(result.constitution, test, llm)["agree"].mean()
    without = reconstruct(None, test, llm)["agree"].mean()
    assert with_c == 1.0 and without < 0.8


def test_rule_matching_needs_the_rule_and_not_its_inverse():
    assert matches_rule("Select the response that is more concise", "shorter")
    assert not matches_rule("Select the response that is more concise", "longer")
    assert not matches_rule("Select the response that is longer but concise", "longer")
    assert matches_rule(RULES["person"].statement, "person") and not matches_rule(
        RULES["person"].inverse, "person"
    )
    with pytest.raises(ValueError, match="rule must be one of"):
        matches_rule("x", "shortest")
