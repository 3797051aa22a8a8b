"""The five ICAI stages on hand-checked inputs (arXiv:2406.06560, Section 3).

Expected values are worked out by hand from the rules as the paper states them, never taken from the code.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from iclr25_icai import (
    VOTE_KINDS,
    Constitution,
    ScriptedBackend,
    TfidfEmbedder,
    cluster_principles,
    count_votes,
    deduplicate_principles,
    filter_principles,
    merge_reannotations,
    parse_principles,
    parse_votes,
    reconstruct,
    validate_pairs,
    vote,
)


def _counts(rows: dict[str, dict[str, int]]) -> pd.DataFrame:
    table = pd.DataFrame(
        [{k: r.get(k, 0) for k in VOTE_KINDS} for r in rows.values()], columns=list(VOTE_KINDS)
    )
    table.insert(0, "principle", list(rows))
    table["total"] = table[list(VOTE_KINDS)].sum(axis=1)
    return table


# The official filter fixture: for/against 8/2, 6/5, 3/7 (10, 11, 10 votes).
FIXTURE = {"p1": {"for": 8, "against": 2}, "p2": {"for": 6, "against": 5}, "p3": {"for": 3, "against": 7}}


def test_filter_keeps_principles_with_more_for_than_against_votes():
    kept = filter_principles(_counts(FIXTURE), max_principles=None)
    assert list(kept["principle"]) == ["p1", "p2"]


def test_filter_relevance_threshold_counts_for_votes_over_all_votes():
    # p1: 8/10 = 0.8 >= 0.7; p2: 6/11 = 0.545 < 0.7
    kept = filter_principles(_counts(FIXTURE), max_principles=None, min_relevance=0.7)
    assert list(kept["principle"]) == ["p1"]


def test_filter_ranks_by_for_minus_against_and_by_for():
    table = _counts(
        {"x": {"for": 5, "against": 4}, "y": {"for": 4, "against": 0}, "z": {"for": 6, "against": 5}}
    )
    assert list(filter_principles(table, max_principles=None)["principle"]) == [
        "y",
        "x",
        "z",
    ]  # 4, 1, 1 (stable)
    assert list(filter_principles(table, max_principles=None, order_by="for")["principle"]) == ["z", "x", "y"]


def test_filter_drops_a_principle_whose_votes_are_mostly_invalid():
    table = _counts({"ok": {"for": 3, "against": 1}, "bad": {"for": 3, "against": 1, "invalid": 4}})
    assert list(filter_principles(table, max_principles=None)["principle"]) == ["ok"]  # 4 invalid vs 4 valid
    kept = filter_principles(table, max_principles=None, require_majority_valid=False)
    assert list(kept["principle"]) == ["ok", "bad"]


def test_filter_majority_relevant_counts_both_neither_and_abstain_as_irrelevant():
    table = _counts(
        {
            "rel": {"for": 3, "against": 1, "neither": 3},
            "irr": {"for": 2, "against": 1, "both": 1, "neither": 2},
        }
    )
    kept = filter_principles(table, max_principles=None, require_majority_relevant=True)
    assert list(kept["principle"]) == ["rel"]  # 4 > 3, but 3 > 3 fails


def test_filter_of_nothing_is_empty_and_bad_order_is_refused():
    assert filter_principles(_counts({}), max_principles=3).empty
    with pytest.raises(ValueError, match="order_by must be"):
        filter_principles(_counts(FIXTURE), order_by="votes")


def test_filter_clusters_again_when_more_than_n_pass_and_keeps_the_best_of_each_cluster():
    # 6 pass; n = 2 → top floor(1.5 * 2) = 3 go on: a1 (score 9), b1 (8), a2 (7); clusters {a1, a2}, {b1}
    rows = {
        "Select the response that is shorter": {"for": 9},
        "Select the response about animals": {"for": 8},
        "Select the response that is shorter and brief": {"for": 7},
        "x4": {"for": 6},
        "x5": {"for": 5},
        "x6": {"for": 4},
    }
    kept = filter_principles(_counts(rows), max_principles=2, embed=TfidfEmbedder())
    assert list(kept["principle"]) == [
        "Select the response that is shorter",
        "Select the response about animals",
    ]
    with pytest.raises(ValueError, match="embed="):
        filter_principles(_counts(rows), max_principles=2)


@pytest.mark.parametrize(
    ("votes", "unanimous", "majority"),
    [
        (["for", "for", "for"], "for", "for"),
        (["for", "for", "against"], "abstain", "for"),
        (["for", "against"], "abstain", "abstain"),  # 1 of 2 is not more than half
        (["neither", "neither", "both"], "abstain", "neither"),
        (["invalid", "invalid", "invalid"], "invalid", "invalid"),
    ],
)
def test_reannotations_merge_unanimously_or_by_strict_majority(votes, unanimous, majority):
    assert merge_reannotations(votes, "unanimous") == unanimous
    assert merge_reannotations(votes, "majority") == majority


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"0": "A", "1": "B", "2": "Both", "3": "None"}', ["A", "B", "both", "neither"]),
        ("{0: 'a', 1: 'b', 2: 'both', 3: 'neither'}", ["A", "B", "both", "neither"]),
        ('```json\n{"0": "A", "1": null, "2": "B", "3": "Z"}\n```', ["A", "neither", "B", "invalid"]),
        (
            'Sure! {"0": "B", "3": "A"} hope this helps',
            ["B", "invalid", "invalid", "A"],
        ),  # missing keys invalid
        (
            '{"0": "A", "1": "A", "2": "A", "3": "A", "7": "B", "x": "A"}',
            ["A", "A", "A", "A"],
        ),  # extra keys ignored
        ("invalid_json", ["invalid"] * 4),
        ("", ["invalid"] * 4),
    ],
)
def test_vote_replies_parse_robustly(reply, expected):
    assert parse_votes(reply, 4) == expected


def test_principle_replies_parse_json_fenced_quotes_and_prose():
    assert parse_principles(
        '{"principles": ["Select the response that is short", "Select the response that is kind"]}', 2
    ) == [
        "Select the response that is short",
        "Select the response that is kind",
    ]
    assert parse_principles("```\n{'principles': ['Select the response that is short']}\n```", 3) == [
        "Select the response that is short"
    ]
    prose = "Here you go:\n1. Select the response that is short\n2. Select the response that names a person\n3. Select the response that rhymes"
    assert parse_principles(prose, 2) == [
        "Select the response that is short",
        "Select the response that names a person",
    ]
    assert parse_principles("no idea", 2) == []
    assert parse_principles("Select the response that", 2) == []  # the bare prefix says nothing


def _one_pair(preferred: str) -> pd.DataFrame:
    return validate_pairs(
        pd.DataFrame({"text_a": ["first text"], "text_b": ["second text"], "preferred_text": [preferred]})
    )


def _shows(messages):
    content = messages[-1]["content"]
    return content.split("Response A: ")[1].split("\n\n")[0]


@pytest.mark.parametrize("preferred", ["text_a", "text_b"])
def test_votes_are_flipped_back_so_the_result_does_not_depend_on_the_shown_order(preferred):
    # The scripted LLM always answers for the response that shows "first text": the principle selects text_a.
    def reply(messages):
        letter = "A" if _shows(messages) == "first text" else "B"
        return json.dumps({"0": letter})

    raw, merged = vote(
        _one_pair(preferred), ["p"], ScriptedBackend(reply), reannotations=8, mode="json", seed=3
    )
    assert raw["flipped"].any() and (~raw["flipped"]).any(), "the seed should show both orders"
    expected = "for" if preferred == "text_a" else "against"
    assert set(raw["vote"]) == {expected}
    assert list(merged["vote"]) == [expected]


def test_when_flipped_a_returned_a_means_the_second_text():
    raw, _ = vote(
        _one_pair("text_a"),
        ["p"],
        ScriptedBackend(lambda m: '{"0": "A"}'),
        reannotations=8,
        mode="json",
        seed=3,
    )
    for flipped, v in zip(raw["flipped"], raw["vote"]):
        assert v == ("against" if flipped else "for")


def test_neither_and_both_are_separate_buckets():
    replies = iter(['{"0": "None", "1": "Both"}'] * 3)
    _, merged = vote(
        _one_pair("text_a"),
        ["p0", "p1"],
        ScriptedBackend(lambda m: next(replies)),
        reannotations=1,
        mode="json",
    )
    counts = count_votes(merged, ["p0", "p1"])
    assert counts.loc[0, "neither"] == 1 and counts.loc[0, "both"] == 0
    assert counts.loc[1, "both"] == 1 and counts.loc[1, "neither"] == 0


def test_unparseable_votes_are_counted_invalid_and_the_run_continues():
    _, merged = vote(
        _one_pair("text_a"), ["p0", "p1"], ScriptedBackend(lambda m: "I refuse"), reannotations=2, mode="json"
    )
    counts = count_votes(merged, ["p0", "p1"])
    assert list(counts["invalid"]) == [1, 1] and list(counts["total"]) == [1, 1]


def test_principles_are_split_into_prompts_of_at_most_max_per_prompt():
    seen = []

    def reply(messages):
        n = messages[-1]["content"].count("\n") and len(
            [ln for ln in messages[-1]["content"].splitlines() if ln[:1].isdigit()]
        )
        seen.append(n)
        return json.dumps(dict.fromkeys(map(str, range(n)), "A"))

    backend = ScriptedBackend(reply)
    vote(
        _one_pair("text_a"),
        [f"rule {i}" for i in range(5)],
        backend,
        reannotations=1,
        mode="json",
        max_per_prompt=2,
    )
    assert sorted(seen) == [1, 2, 2] and backend.calls == 3


def test_logprob_merge_cancels_a_constant_position_bias_exactly():
    # log p(A) - log p(B) = 5 (bias towards A) + 1 if A shows text_a else -1: text_a is truly selected.
    def choice(messages, options):
        m = 5.0 + (1.0 if _shows(messages) == "first text" else -1.0)
        return [m, 0.0]

    backend = ScriptedBackend(lambda m: "", choice=choice)
    raw, merged = vote(
        _one_pair("text_a"),
        ["p"],
        backend,
        reannotations=2,
        flips="balanced",
        merge="logprob",
        options=("A", "B"),
    )
    assert sorted(raw["flipped"]) == [False, True]
    assert set(raw["answer"]) == {"A"}  # argmax alone always says A...
    assert list(merged["vote"]) == ["for"]  # ...the summed margin (6 - 4 = 2 > 0) recovers text_a
    _, merged_u = vote(
        _one_pair("text_a"),
        ["p"],
        backend,
        reannotations=2,
        flips="balanced",
        merge="unanimous",
        options=("A", "B"),
    )
    assert list(merged_u["vote"]) == ["abstain"]


def test_cluster_partition_covers_every_principle_once_and_exact_duplicates_share_a_cluster():
    ps = ["be short", "be brief", "be short", "about cats", "about dogs and cats", "be brief"]
    labels = cluster_principles(ps, TfidfEmbedder(), 2, seed=0)
    assert labels.shape == (6,) and set(labels.tolist()) == {0, 1}
    assert labels[0] == labels[2] and labels[1] == labels[5]


def test_no_embedding_when_clusters_are_at_least_the_distinct_principles():
    def never(texts):
        raise AssertionError("embed must not be called")

    labels = cluster_principles(["x", "y", "x"], never, 5)
    assert labels.tolist() == [0, 1, 0]
    assert deduplicate_principles(["x", "y", "x"], labels) == ["x", "y"]
    with pytest.raises(ValueError, match="principles is empty"):
        cluster_principles([], never, 3)


def test_reconstruction_agreement_is_one_for_a_perfect_and_zero_for_an_inverted_annotator():
    pairs = validate_pairs(
        pd.DataFrame(
            {
                "text_a": ["good one", "bad two", "good three"],
                "text_b": ["bad one", "good two", "bad three"],
                "preferred_text": ["a", "b", "text_a"],
            }
        )
    )

    def perfect(messages):
        shown = messages[-1]["content"].split("Response A: ")[1]
        return "A" if shown.startswith("good") else "B"

    assert reconstruct(None, pairs, ScriptedBackend(perfect))["agree"].mean() == 1.0
    inverted = ScriptedBackend(lambda m: "B" if perfect(m) == "A" else "A")
    assert reconstruct(None, pairs, inverted)["agree"].mean() == 0.0
    # a position-biased annotator disagrees with itself across the two orders: every pair is a tie
    ties = reconstruct(None, pairs, ScriptedBackend(lambda m: "A"))
    assert set(ties["predicted"]) == {"tie"} and ties["agree"].mean() == 0.0


def test_constitution_text_is_numbered_from_one():
    c = Constitution(("Select the response that is short", "Select the response that is kind"))
    assert str(c) == "1. Select the response that is short\n2. Select the response that is kind"
    assert "empty" in Constitution(()).to_markdown()


@pytest.mark.parametrize(
    ("frame", "match"),
    [
        (pd.DataFrame({"text_a": ["x"], "preferred_text": ["a"]}), r"lacks column\(s\) \['text_b'\]"),
        (pd.DataFrame({"text_a": [], "text_b": [], "preferred_text": []}), "empty"),
        (
            pd.DataFrame({"text_a": ["x", "y"], "text_b": ["u", "v"], "preferred_text": ["tie", "tie"]}),
            "all 2 pairs are ties",
        ),
        (
            pd.DataFrame({"text_a": ["x"], "text_b": ["u"], "preferred_text": ["c"]}),
            "preferred_text must be one of .* got 'c' in row 0",
        ),
        (
            pd.DataFrame({"text_a": ["x", None], "text_b": ["u", "v"], "preferred_text": ["a", "b"]}),
            "text_a is empty or missing in row 1",
        ),
    ],
)
def test_bad_pair_tables_are_refused_naming_the_problem(frame, match):
    with pytest.raises(ValueError, match=match):
        validate_pairs(frame)


def test_aliases_map_a_to_text_a_and_b_to_text_b_and_ties_are_dropped():
    out = validate_pairs(
        pd.DataFrame(
            {
                "text_a": ["1", "2", "3", "4"],
                "text_b": ["5", "6", "7", "8"],
                "preferred_text": ["A", "b", "tie", "text_b"],
            }
        )
    )
    assert list(out["preferred_text"]) == ["text_a", "text_b", "text_b"]
    assert list(out["text_a"]) == ["1", "2", "4"] and list(out.index) == [0, 1, 2]


def test_counts_refuse_unknown_vote_values():
    with pytest.raises(ValueError, match="vote values must be in"):
        count_votes(pd.DataFrame({"pair": [0], "principle": [0], "vote": ["maybe"]}), ["p"])


def test_vote_on_no_principles_gives_empty_tables():
    raw, merged = vote(_one_pair("text_a"), [], ScriptedBackend(lambda m: "{}"), mode="json")
    assert raw.empty and merged.empty
    assert count_votes(merged, []).empty
    np.testing.assert_array_equal(filter_principles(count_votes(merged, []), max_principles=2).shape, (0, 9))


def test_the_pipeline_is_deterministic_given_the_seed(length_pairs):
    from iclr25_icai import ICAIConfig, feature_oracle, run_icai

    cfg = ICAIConfig(n_clusters=3, max_principles=2, reannotations=3)
    runs = [
        run_icai(length_pairs, feature_oracle([length_pairs]), TfidfEmbedder(), cfg, seed=s)
        for s in (11, 11, 12)
    ]
    assert runs[0].constitution == runs[1].constitution
    pd.testing.assert_frame_equal(runs[0].votes, runs[1].votes)
    assert not runs[0].votes["flipped"].equals(runs[2].votes["flipped"])  # another seed shows other orders


def test_when_no_proposal_parses_the_constitution_is_empty_and_the_failures_are_counted(length_pairs):
    from iclr25_icai import ICAIConfig, run_icai

    result = run_icai(length_pairs, ScriptedBackend(lambda m: "I like both."), TfidfEmbedder(), ICAIConfig())
    assert result.constitution.principles == () and result.candidates == []
    assert result.stats["proposal_failures"] == len(length_pairs) and result.stats["principles_proposed"] == 0


def test_several_constitutions_at_once_equal_one_at_a_time(length_pairs):
    from iclr25_icai import feature_oracle, reconstruct_many

    pairs = validate_pairs(length_pairs)
    oracle = feature_oracle([length_pairs])
    cons = {
        "none": None,
        "short": ["Select the response that is shorter"],
        "long": ["Select the response that is longer"],
    }
    many = reconstruct_many(cons, pairs, oracle)
    for name, c in cons.items():
        pd.testing.assert_frame_equal(many[name], reconstruct(c, pairs, oracle))
    assert many["short"]["agree"].all() and not many["long"]["agree"].any()


def test_probes_are_voted_but_never_enter_the_constitution(length_pairs):
    from iclr25_icai import ICAIConfig, feature_oracle, run_icai

    probes = ["Select the response that is shorter", "Select the response that is longer"]
    res = run_icai(
        length_pairs, feature_oracle([length_pairs]), TfidfEmbedder(), ICAIConfig(n_clusters=2), probes=probes
    )
    got = res.probe_counts.set_index("principle")
    assert got.loc[probes[0], "for"] == len(length_pairs) and got.loc[probes[1], "against"] == len(
        length_pairs
    )
    assert set(res.counts["principle"]) == set(res.candidates)
    assert set(res.constitution.principles) <= set(res.candidates)


def _perfect(messages):
    shown = messages[-1]["content"].split("Response A: ")[1]
    return "A" if shown.startswith("good") else "B"


def test_reconstruct_takes_the_raw_table_run_icai_takes():
    # regression (issue 42): without `input` it raised KeyError 'input'; with a/b labels agreement was silently 0.00
    from iclr25_icai import reconstruct_many

    raw = pd.DataFrame(
        {
            "text_a": ["good one", "bad two", "good three", "x"],
            "text_b": ["bad one", "good two", "bad three", "y"],
            "preferred_text": ["a", "B", "text_a", "tie"],
        }
    )
    table = reconstruct(["Select the response that is good"], raw, ScriptedBackend(_perfect))
    assert list(table["preferred_text"]) == ["text_a", "text_b", "text_a"]  # normalised, the tie dropped
    assert table["agree"].mean() == 1.0
    many = reconstruct_many({"none": None}, raw, ScriptedBackend(_perfect))
    pd.testing.assert_frame_equal(
        many["none"], reconstruct(None, validate_pairs(raw), ScriptedBackend(_perfect))
    )


@pytest.mark.parametrize(
    ("frame", "match"),
    [
        (pd.DataFrame({"text_a": ["x"], "preferred_text": ["a"]}), r"lacks column\(s\) \['text_b'\]"),
        (pd.DataFrame({"text_a": ["x"], "text_b": ["u"], "preferred_text": ["c"]}), "got 'c' in row 0"),
    ],
)
def test_reconstruct_refuses_a_bad_table_as_run_icai_does(frame, match):
    from iclr25_icai import ICAIConfig, reconstruct_many, run_icai

    for call in (
        lambda: reconstruct(None, frame, ScriptedBackend(_perfect)),
        lambda: reconstruct_many({"c": None}, frame, ScriptedBackend(_perfect)),
        lambda: run_icai(frame, ScriptedBackend(_perfect), TfidfEmbedder(), ICAIConfig()),
    ):
        with pytest.raises(ValueError, match=match):
            call()
