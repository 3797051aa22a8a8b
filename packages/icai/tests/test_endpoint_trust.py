"""Issue 38: the API key goes only where the user sends it and is never written; the call cache knows its endpoint;
a 200 without content is retried as --retries says, with backoff. Real HTTP servers on 127.0.0.1 (conftest)."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from iclr25_icai import CachedBackend, EndpointUnavailable, OpenAICompatibleBackend, feature_oracle
from iclr25_icai._backends import normalise_base_url
from iclr25_icai.cli import main
from iclr25_shared.errors import InputError

MSG = [{"role": "user", "content": "hello"}]
MARK = "sk-marker-7f3a9c1e"  # the user's key for their own server
OPENAI_MARK = "sk-openai-marker-5b2e8d"  # the user's OpenAI key, which must stay home


def _csv(tmp_path, pairs):
    path = tmp_path / "pairs.csv"
    pairs.drop(columns=["person_a", "person_b"]).to_csv(path, index=False)
    return path


def _args(csv, server, tmp_path, *extra):
    return [
        "run", "--data", str(csv), "--backend", "openai", "--model", "stub", "--base-url", server.url,
        "--embedder", "endpoint", "--cache", str(tmp_path / "calls.jsonl"), "--max-principles", "2",
        "--clusters", "3", "--out", str(tmp_path / "out"), *extra,
    ]  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# secrets
# ---------------------------------------------------------------------------------------------------------------


def test_a_named_key_reaches_the_server_and_is_in_no_file_or_log_the_run_writes(
    stub_server, length_pairs, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("MY_LOCAL_KEY", MARK)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_MARK)
    oracle = feature_oracle([length_pairs])
    stub_server.reply = oracle.chat
    assert (
        main(_args(_csv(tmp_path, length_pairs), stub_server, tmp_path, "--api-key-env", "MY_LOCAL_KEY")) == 0
    )
    assert {auth for _, _, auth in stub_server.requests} == {f"Bearer {MARK}"}
    written = [f for f in tmp_path.rglob("*") if f.is_file()]
    names = {f.name for f in written}
    assert {"calls.jsonl", "results.json", "results.md", "config.json", "votes.csv"} <= names, names
    for f in written:
        data = f.read_bytes()
        assert MARK.encode() not in data and OPENAI_MARK.encode() not in data, f
    logs = capsys.readouterr()
    assert logs.err and MARK not in logs.err + logs.out and OPENAI_MARK not in logs.err + logs.out
    assert json.loads((tmp_path / "out" / "config.json").read_text())["api_key_env"] == "MY_LOCAL_KEY"


def test_an_unset_named_variable_exits_2_naming_it_and_the_openai_key_is_never_sent(
    stub_server, length_pairs, tmp_path, monkeypatch, capsys
):
    # regression: the server received "Bearer $OPENAI_API_KEY" (the backend fell back to it)
    monkeypatch.delenv("MY_LOCAL_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_MARK)
    code = main(_args(_csv(tmp_path, length_pairs), stub_server, tmp_path, "--api-key-env", "MY_LOCAL_KEY"))
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "MY_LOCAL_KEY" in err and "not set" in err and OPENAI_MARK not in err
    assert stub_server.requests == []
    assert not (tmp_path / "out").exists()


def test_without_a_named_variable_a_local_server_gets_no_key(stub_server, monkeypatch):
    # regression: $OPENAI_API_KEY was sent to whatever --base-url said
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_MARK)
    OpenAICompatibleBackend("m", base_url=stub_server.url).chat(MSG)
    assert stub_server.requests[-1][2] is None


def _capture():
    seen = []

    def handler(request):
        seen.append((str(request.url), request.headers.get("authorization")))
        return httpx.Response(200, json={"choices": [{"message": {"content": "ok"}}]})

    return seen, httpx.MockTransport(handler)


def test_openai_own_url_gets_openai_api_key_and_needs_one(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_MARK)
    seen, transport = _capture()
    assert OpenAICompatibleBackend("gpt-4o-mini", transport=transport).chat(MSG) == "ok"
    assert seen == [("https://api.openai.com/v1/chat/completions", f"Bearer {OPENAI_MARK}")]
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(InputError, match="needs an API key: set OPENAI_API_KEY"):
        OpenAICompatibleBackend("gpt-4o-mini", transport=transport)


def test_a_key_pasted_as_the_variable_name_is_refused_without_repeating_it(tmp_path, length_pairs, capsys):
    with pytest.raises(InputError, match="NAME of an environment variable") as info:
        OpenAICompatibleBackend("m", base_url="http://127.0.0.1:9/v1", api_key_env=OPENAI_MARK)
    assert OPENAI_MARK not in str(info.value)
    argv = ["run", "--data", str(_csv(tmp_path, length_pairs)), "--backend", "openai", "--model", "m",
            "--base-url", "http://127.0.0.1:9/v1", "--api-key-env", OPENAI_MARK]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--api-key-env takes the NAME" in err and OPENAI_MARK not in err


def test_a_server_that_echoes_the_key_does_not_put_it_into_the_error_message():
    def echo(request):
        return httpx.Response(200, text=f"<html>debug: {request.headers['authorization']}</html>")

    client = OpenAICompatibleBackend(
        "m",
        base_url="http://127.0.0.1:9/v1",
        api_key=MARK,
        max_retries=0,
        transport=httpx.MockTransport(echo),
    )
    with pytest.raises(EndpointUnavailable, match="not JSON") as info:
        client.chat(MSG)
    assert MARK not in str(info.value) and "<api key>" in str(info.value)
    assert MARK not in repr(client)


def test_credentials_in_the_base_url_are_refused():
    with pytest.raises(ValueError, match="must not hold credentials"):
        OpenAICompatibleBackend("m", base_url=f"http://user:{MARK}@127.0.0.1:9/v1")


# ---------------------------------------------------------------------------------------------------------------
# the cache knows its endpoint
# ---------------------------------------------------------------------------------------------------------------


def test_two_servers_with_the_same_model_name_never_share_cache_entries(
    stub_server, second_stub_server, tmp_path
):
    # regression: the key was model + request only; the second server was never contacted
    stub_server.reply = lambda m: "from one"
    second_stub_server.reply = lambda m: "from two"
    path = tmp_path / "calls.jsonl"
    one = CachedBackend(OpenAICompatibleBackend("default", base_url=stub_server.url), path)
    assert one.chat(MSG) == "from one"
    two = CachedBackend(OpenAICompatibleBackend("default", base_url=second_stub_server.url), path)
    assert two.chat(MSG) == "from two" and len(second_stub_server.requests) == 1
    emb_one = one.embed(["short text"])
    stub_server.embed = lambda t: [9.0] * 10
    assert (two.embed(["short text"]) == emb_one).all() and len(second_stub_server.requests) == 2
    assert (one.embed(["short text"]) == emb_one).all() and len(stub_server.requests) == 2  # cached
    # the same endpoint written another way is the same cache entry; another model on it is not
    port = stub_server.server_address[1]
    again = CachedBackend(OpenAICompatibleBackend("default", base_url=f"HTTP://127.0.0.1:{port}//v1/"), path)
    assert again.chat(MSG) == "from one" and len(stub_server.requests) == 2
    other = CachedBackend(OpenAICompatibleBackend("other", base_url=stub_server.url), path)
    assert other.chat(MSG) == "from one" and len(stub_server.requests) == 3
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert {r["endpoint"] for r in rows} == {stub_server.url, second_stub_server.url}


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("HTTP://LocalHost:80/v1/", "http://localhost/v1"),
        ("https://API.openai.com:443/v1", "https://api.openai.com/v1"),
        ("http://127.0.0.1:8000//v1//", "http://127.0.0.1:8000/v1"),
        ("http://[::1]:8080/v1", "http://[::1]:8080/v1"),
    ],
)
def test_base_urls_are_normalised(url, expected):
    assert normalise_base_url(url) == expected


# ---------------------------------------------------------------------------------------------------------------
# a 200 without content follows --retries, with backoff
# ---------------------------------------------------------------------------------------------------------------


def _empty_then(server, n, text="fine"):
    left = {"n": n}

    def reply(messages):
        if left["n"]:
            left["n"] -= 1
            return None  # {"content": null}
        return text

    server.reply = reply


def test_a_200_without_content_is_retried_max_retries_times_with_exponential_backoff(stub_server):
    # regression: retried once, at once, whatever max_retries said
    _empty_then(stub_server, 3)
    slept = []
    client = OpenAICompatibleBackend(
        "m", base_url=stub_server.url, max_retries=3, backoff=1.0, max_backoff=30.0, sleep=slept.append
    )
    assert client.chat(MSG) == "fine" and client.requests == 4
    assert len(slept) == 3 and 0.5 <= slept[0] <= 1 and 1 <= slept[1] <= 2 and 2 <= slept[2] <= 4
    _empty_then(stub_server, 3)
    client = OpenAICompatibleBackend("m", base_url=stub_server.url, max_retries=2, sleep=slept.append)
    with pytest.raises(EndpointUnavailable, match=r"after 3 attempt\(s\).*choices\[0\]\.message\.content"):
        client.chat(MSG)
    assert client.requests == 3


def test_the_cli_retries_empty_replies_as_retries_says_and_exits_2(
    stub_server, length_pairs, tmp_path, monkeypatch, capsys
):
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)  # the backend's default sleep, looked up when it is made
    _empty_then(stub_server, 10**6)
    # one request at a time: this test counts the retries of one call (test_concurrency.py covers --concurrency)
    args = _args(_csv(tmp_path, length_pairs), stub_server, tmp_path, "--retries", "2", "--concurrency", "1")
    code = main([*args, "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "failed after 3 attempt(s)" in err and "choices[0].message.content" in err, err
    assert len(stub_server.requests) == 3 and len(slept) == 2 and slept[1] >= 1.0
