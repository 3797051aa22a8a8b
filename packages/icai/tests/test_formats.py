"""Readers for the package's pairs files, AlpacaEval annotations and Chatbot Arena conversations (tiny local files
written by the tests)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from iclr25_icai import read_alpacaeval, read_arena, read_pairs


def test_pairs_round_trip_through_csv_jsonl_and_parquet(tmp_path):
    table = pd.DataFrame(
        {
            "input": ["q1", "q2"],
            "text_a": ["a, with comma", "x"],
            "text_b": ["b", 'y "quoted"'],
            "preferred_text": ["a", "text_b"],
        }
    )
    table.to_csv(tmp_path / "p.csv", index=False)
    table.to_json(tmp_path / "p.jsonl", orient="records", lines=True)
    for name in ("p.csv", "p.jsonl"):
        got = read_pairs(tmp_path / name)
        assert list(got["preferred_text"]) == ["text_a", "text_b"]
        assert list(got["text_a"]) == ["a, with comma", "x"] and list(got["text_b"]) == ["b", 'y "quoted"']
        assert list(got["input"]) == ["q1", "q2"]


def test_pairs_reader_refuses_unknown_suffixes_naming_the_allowed_ones(tmp_path):
    (tmp_path / "p.txt").write_text("x")
    with pytest.raises(ValueError, match=r"must be \.csv, \.json, \.jsonl or \.parquet"):
        read_pairs(tmp_path / "p.txt")


def test_alpacaeval_preference_1_is_output_1_and_ties_are_dropped(tmp_path):
    rows = [
        {"instruction": "i1", "output_1": "o1a", "output_2": "o1b", "preference": 1},
        {"instruction": "i2", "output_1": "o2a", "output_2": "o2b", "preference": 2},
        {"instruction": "i3", "output_1": "o3a", "output_2": "o3b", "preference": 1.5},
    ]
    (tmp_path / "a.json").write_text(json.dumps(rows))
    got = read_alpacaeval(tmp_path / "a.json")
    assert got.to_dict("records") == [
        {"input": "i1", "text_a": "o1a", "text_b": "o1b", "preferred_text": "text_a"},
        {"input": "i2", "text_a": "o2a", "text_b": "o2b", "preferred_text": "text_b"},
    ]
    rows[0]["preference"] = 3
    (tmp_path / "b.json").write_text(json.dumps(rows))
    with pytest.raises(ValueError, match="record 0: preference must be 1, 2"):
        read_alpacaeval(tmp_path / "b.json")


def test_arena_keeps_single_turn_conversations_and_maps_the_winner(tmp_path):
    def conv(q, a):
        return [{"role": "user", "content": q}, {"role": "assistant", "content": a}]

    rows = [
        {
            "model_a": "m1",
            "model_b": "m2",
            "winner": "model_b",
            "conversation_a": conv("q", "ra"),
            "conversation_b": conv("q", "rb"),
        },
        {
            "model_a": "m1",
            "model_b": "m2",
            "winner": "tie (bothbad)",
            "conversation_a": conv("q", "x"),
            "conversation_b": conv("q", "y"),
        },
        {
            "model_a": "m1",
            "model_b": "m2",
            "winner": "model_a",
            "conversation_a": conv("q", "a") * 2,
            "conversation_b": conv("q", "b") * 2,
        },
        {
            "model_a": "m1",
            "model_b": "m2",
            "winner": "model_a",
            "conversation_a": conv("q2", "s"),
            "conversation_b": conv("q2", "t"),
        },
    ]
    (tmp_path / "arena.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    got = read_arena(tmp_path / "arena.jsonl")
    assert got.to_dict("records") == [
        {"input": "q", "text_a": "ra", "text_b": "rb", "preferred_text": "text_b"},
        {"input": "q2", "text_a": "s", "text_b": "t", "preferred_text": "text_a"},
    ]
    rows[0]["winner"] = "model_c"
    (tmp_path / "bad.json").write_text(json.dumps(rows))
    with pytest.raises(ValueError, match="winner must be model_a, model_b"):
        read_arena(tmp_path / "bad.json")
