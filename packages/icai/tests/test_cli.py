"""The CLI end to end against a local OpenAI-compatible stub server, resume from the cache, and bad input (exit 2,
one line, before any long work)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from iclr25_icai import feature_oracle
from iclr25_icai.cli import main


def _serve_oracle(stub_server, pairs):
    oracle = feature_oracle([pairs])
    stub_server.reply = lambda messages: oracle._reply(messages)
    return oracle


def _run_args(csv, stub_server, tmp_path, out="out"):
    return [
        "run", "--data", str(csv), "--backend", "openai", "--model", "stub", "--base-url", stub_server.url,
        "--embedder", "endpoint", "--cache", str(tmp_path / "calls.jsonl"), "--max-principles", "2",
        "--clusters", "3", "--reannotations", "2", "--out", str(tmp_path / out), "--quiet",
    ]  # fmt: skip


def test_run_through_an_openai_compatible_endpoint_writes_the_constitution_and_resumes_from_the_cache(
    stub_server, length_pairs, tmp_path
):
    csv = tmp_path / "pairs.csv"
    length_pairs.drop(columns=["person_a", "person_b"]).to_csv(csv, index=False)
    _serve_oracle(stub_server, length_pairs)
    assert main(_run_args(csv, stub_server, tmp_path)) == 0
    out = tmp_path / "out"
    constitution = json.loads((out / "constitution.json").read_text())
    assert constitution["principles"], "a planted rule this plain must yield a constitution"
    assert any(w in constitution["principles"][0] for w in ("shorter", "concise", "brief"))
    assert (out / "constitution.md").read_text().startswith("# Constitution\n\n1. Select the response that")
    results = json.loads((out / "results.json").read_text())
    metrics = results["metrics"]
    assert metrics["agreement_constitutional"]["value"] == 1.0
    assert metrics["agreement_default"]["value"] == 0.0  # the oracle's default prefers longer texts
    votes = pd.read_csv(out / "votes.csv")
    assert set(votes["answer"]) <= {"A", "B", "both", "neither", "invalid"} and len(votes) > 0
    assert {"for", "against", "both", "neither", "abstain", "invalid"} <= set(
        pd.read_csv(out / "vote_counts.csv").columns
    )
    n_requests = len(stub_server.requests)
    assert metrics["llm_calls"] == n_requests and metrics["cache_hits"] == 0
    # same run again: everything from the cache, no request reaches the server
    assert main(_run_args(csv, stub_server, tmp_path, out="again")) == 0
    again = json.loads((tmp_path / "again" / "results.json").read_text())["metrics"]
    assert len(stub_server.requests) == n_requests and again["llm_calls"] == 0
    assert json.loads((tmp_path / "again" / "constitution.json").read_text()) == constitution


def test_no_cache_repeats_the_calls(stub_server, length_pairs, tmp_path):
    csv = tmp_path / "pairs.csv"
    length_pairs.to_csv(csv, index=False)
    _serve_oracle(stub_server, length_pairs)
    args = _run_args(csv, stub_server, tmp_path)
    assert main([*args, "--no-cache"]) == 0
    first = len(stub_server.requests)
    assert main([*args[:-3], "--out", str(tmp_path / "b"), "--no-cache", "--quiet"]) == 0
    assert len(stub_server.requests) == 2 * first
    assert not (tmp_path / "calls.jsonl").exists()


def _one_line_error(capsys, code, match):
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert match in err, err


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("text_a,preferred_text\nx,a\n", "lacks column(s) ['text_b']"),
        ("text_a,text_b,preferred_text\nx,y,tie\nu,v,tie\n", "all 2 pairs are ties"),
        ("text_a,text_b,preferred_text\n", "empty"),
        ("", "is empty (0 bytes)"),
        ("text_a,text_b,preferred_text\nx,y,maybe\n", "got 'maybe' in row 0"),
    ],
)
def test_bad_csv_exits_2_with_one_line(tmp_path, capsys, content, match):
    csv = tmp_path / "bad.csv"
    csv.write_text(content)
    code = main(
        [
            "run",
            "--data",
            str(csv),
            "--backend",
            "openai",
            "--model",
            "m",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ]
    )
    _one_line_error(capsys, code, match)


def test_missing_data_file_exits_2(tmp_path, capsys):
    code = main(["run", "--data", str(tmp_path / "nope.csv"), "--backend", "openai", "--model", "m"])
    _one_line_error(capsys, code, "does not exist")


def test_unreachable_endpoint_exits_2_after_bounded_retries_and_keeps_the_cache(
    tmp_path, capsys, length_pairs
):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    csv = tmp_path / "pairs.csv"
    length_pairs.to_csv(csv, index=False)
    cache = tmp_path / "calls.jsonl"
    cache.write_text('{"key": "k", "kind": "chat", "model": "m", "request": {}, "response": "old"}\n')
    code = main(
        ["run", "--data", str(csv), "--backend", "openai", "--model", "m", "--base-url", f"http://127.0.0.1:{port}/v1",
         "--embedder", "tfidf", "--retries", "1", "--timeout", "2", "--cache", str(cache), "--out", str(tmp_path / "o"), "--quiet"]
    )  # fmt: skip
    _one_line_error(capsys, code, "failed after 2 attempt(s)")
    assert (
        cache.read_text() == '{"key": "k", "kind": "chat", "model": "m", "request": {}, "response": "old"}\n'
    )
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--backend", "openai"], "needs --model"),
        (
            ["--merge", "logprob", "--backend", "openai", "--model", "m"],
            "merge='logprob' needs --backend local",
        ),
        (["--embedder", "endpoint"], "--embedder endpoint needs --backend openai"),
        (["--format", "arena"], "needs --data"),
        (["--max-principles", "0"], "max_principles must be"),
        (["--test-fraction", "1.0"], "test_fraction must be"),
    ],
)
def test_bad_options_exit_2_before_any_work(capsys, args, match):
    _one_line_error(capsys, main(["run", *args]), match)


def test_malformed_model_json_is_counted_invalid_and_the_run_finishes(stub_server, length_pairs, tmp_path):
    csv = tmp_path / "pairs.csv"
    length_pairs.to_csv(csv, index=False)
    oracle = feature_oracle([length_pairs])

    def reply(messages):
        text = oracle._reply(messages)
        return "{this is not json" if "mapping each number" in messages[-1]["content"] else text

    stub_server.reply = reply
    assert main(_run_args(csv, stub_server, tmp_path)) == 0
    counts = pd.read_csv(tmp_path / "out" / "vote_counts.csv")
    assert (counts["invalid"] == counts["total"]).all() and counts["total"].gt(0).all()
    assert json.loads((tmp_path / "out" / "constitution.json").read_text())["principles"] == []
