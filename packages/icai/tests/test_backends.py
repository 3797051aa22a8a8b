"""Backends: the call cache and resume, the retry predicate, the OpenAI-compatible client against a local stub
server, and the local judge's shared-prefix scoring against plain forward passes."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from iclr25_icai import (
    CachedBackend,
    EndpointUnavailable,
    ICAIConfig,
    LocalChatBackend,
    OpenAICompatibleBackend,
    ScriptedBackend,
    TfidfEmbedder,
    feature_oracle,
    is_retryable,
    run_icai,
    status_code_of,
)

MSG = [{"role": "user", "content": "hello"}]


# ---------------------------------------------------------------------------------------------------------------
# retry predicate
# ---------------------------------------------------------------------------------------------------------------


def _status_error(code: int) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "http://x/v1/chat/completions")
    return httpx.HTTPStatusError("boom", request=request, response=httpx.Response(code, request=request))


@pytest.mark.parametrize("code", [408, 409, 429, 500, 502, 503, 599])
def test_retry_on_rate_limits_and_server_errors(code):
    assert status_code_of(_status_error(code)) == code
    assert is_retryable(_status_error(code))


@pytest.mark.parametrize("code", [400, 401, 403, 404, 422])
def test_no_retry_on_client_errors(code):
    assert not is_retryable(_status_error(code))


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionRefusedError("refused"),
        httpx.ConnectError("no route"),
        httpx.ReadTimeout("slow"),
        RuntimeError("odd"),
    ],
)
def test_retry_predicate_accepts_exceptions_without_an_http_code(exc):
    # regression: the official code evaluates `None // 100` on these and crashes instead of retrying
    assert status_code_of(exc) is None
    assert is_retryable(exc) is True


# ---------------------------------------------------------------------------------------------------------------
# cache
# ---------------------------------------------------------------------------------------------------------------


def test_same_inputs_hit_the_cache_with_zero_backend_calls(tmp_path):
    inner = ScriptedBackend(lambda m: m[-1]["content"].upper())
    cache = CachedBackend(inner, tmp_path / "c.jsonl")
    assert cache.chat(MSG) == "HELLO" and inner.calls == 1
    assert cache.chat(MSG) == "HELLO" and inner.calls == 1
    assert cache.chat(MSG, max_tokens=5) == "HELLO" and inner.calls == 2  # settings are part of the key
    again = CachedBackend(ScriptedBackend(lambda m: "never"), tmp_path / "c.jsonl")
    assert again.chat(MSG) == "HELLO" and again.calls == 0 and len(again) == 2


def test_cache_path_none_keeps_an_in_memory_cache():
    inner = ScriptedBackend(lambda m: "x")
    cache = CachedBackend(inner, None)
    cache.chat(MSG)
    cache.chat(MSG)
    assert inner.calls == 1 and cache.hits == 1


def test_a_partly_written_last_line_is_ignored_and_the_file_is_only_appended(tmp_path):
    path = tmp_path / "c.jsonl"
    cache = CachedBackend(ScriptedBackend(lambda m: "first"), path)
    cache.chat(MSG)
    good = path.read_bytes()
    path.write_bytes(good + b'{"key": "abc", "kind": "chat", "resp')  # killed while writing
    resumed = CachedBackend(ScriptedBackend(lambda m: "second"), path)
    assert resumed.skipped_lines == 1 and resumed.chat(MSG) == "first"
    resumed.chat([{"role": "user", "content": "new"}])
    data = path.read_bytes()
    assert data.startswith(good + b'{"key": "abc", "kind": "chat", "resp\n')  # old bytes untouched
    lines = [json.loads(line) for line in data.decode().splitlines()[2:]]
    assert [r["response"] for r in lines] == ["second"]


class _Crash(Exception):
    pass


def test_resume_after_a_crash_repeats_no_call_and_gives_the_same_constitution(tmp_path, length_pairs):
    cfg = ICAIConfig(n_clusters=4, max_principles=2, reannotations=2)
    full = feature_oracle([length_pairs])
    reference = run_icai(length_pairs, full, TfidfEmbedder(), cfg, seed=4)
    total = full.calls

    first = feature_oracle([length_pairs])
    budget = {"left": total // 2}

    def crashing(messages):
        if budget["left"] == 0:
            raise _Crash
        budget["left"] -= 1
        return first._reply(messages)

    path = tmp_path / "calls.jsonl"
    with pytest.raises(_Crash):
        run_icai(
            length_pairs,
            CachedBackend(ScriptedBackend(crashing, model_name=full.model_name), path),
            TfidfEmbedder(),
            cfg,
            seed=4,
        )
    second = feature_oracle([length_pairs])
    resumed = CachedBackend(second, path)
    result = run_icai(length_pairs, resumed, TfidfEmbedder(), cfg, seed=4)
    assert resumed.hits == total // 2
    assert second.calls == total - total // 2  # every call made exactly once over the two runs
    assert result.constitution == reference.constitution


def test_choice_scores_are_cached_per_prompt_and_infinities_survive(tmp_path):
    scores = {"x": [-0.1, -np.inf], "y": [-2.0, -0.5]}
    inner = ScriptedBackend(lambda m: "", choice=lambda m, o: scores[m[-1]["content"]])
    cache = CachedBackend(inner, tmp_path / "c.jsonl")
    prompts = [[{"role": "user", "content": "x"}], [{"role": "user", "content": "y"}]]
    first = cache.choice_logprobs(prompts, ["A", "B"])
    again = CachedBackend(ScriptedBackend(lambda m: "", choice=lambda m, o: [0, 0]), tmp_path / "c.jsonl")
    second = again.choice_logprobs(prompts[::-1], ["A", "B"])
    np.testing.assert_array_equal(second, first[::-1])
    assert again.calls == 0 and second[1, 1] == -np.inf


# ---------------------------------------------------------------------------------------------------------------
# OpenAI-compatible endpoint (a real HTTP server on 127.0.0.1)
# ---------------------------------------------------------------------------------------------------------------


def test_the_real_client_talks_to_a_local_openai_compatible_server(stub_server):
    stub_server.reply = lambda messages: "echo: " + messages[-1]["content"]
    client = OpenAICompatibleBackend("stub-model", base_url=stub_server.url, api_key="sk-test", backoff=0)
    assert client.chat(MSG, max_tokens=7) == "echo: hello"
    path, body, auth = stub_server.requests[-1]
    assert path == "/v1/chat/completions" and auth == "Bearer sk-test"
    assert body == {"model": "stub-model", "messages": MSG, "max_tokens": 7, "temperature": 0.0}
    emb = client.embed(["short", "long detail"])
    assert emb.shape == (2, 10) and emb[0, 0] == 1.0 and emb[1, 3] == pytest.approx(1.03)


def test_base_url_comes_from_the_environment_and_the_key_from_the_variable_the_user_names(
    stub_server, monkeypatch
):
    monkeypatch.setenv("OPENAI_BASE_URL", stub_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    OpenAICompatibleBackend("m", backoff=0).chat(MSG)
    assert stub_server.requests[-1][2] is None  # not OpenAI's URL: $OPENAI_API_KEY stays home
    OpenAICompatibleBackend("m", backoff=0, api_key_env="OPENAI_API_KEY").chat(MSG)
    assert stub_server.requests[-1][2] == "Bearer sk-env"  # named: sent


def test_429_and_500_are_retried_with_backoff_then_succeed(stub_server):
    stub_server.fail = [429, 500, 503]
    slept = []
    client = OpenAICompatibleBackend(
        "m", base_url=stub_server.url, backoff=1.0, max_backoff=3.0, sleep=slept.append
    )
    assert client.chat(MSG) == "A"
    assert client.requests == 4 and len(slept) == 3
    assert (
        0.5 <= slept[0] <= 1.0 and 1.0 <= slept[1] <= 2.0 and 1.5 <= slept[2] <= 3.0
    )  # doubling, jitter, cap


def test_client_errors_fail_at_once_with_a_clear_message(stub_server):
    stub_server.fail = [401]
    client = OpenAICompatibleBackend("m", base_url=stub_server.url, sleep=lambda s: None)
    with pytest.raises(EndpointUnavailable, match=r"failed after 1 attempt\(s\) \(HTTP 401\)"):
        client.chat(MSG)


def test_an_unreachable_endpoint_fails_after_bounded_retries_and_the_cache_stays_intact(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "c.jsonl"
    earlier = ScriptedBackend(lambda m: "kept", model_name="m")
    earlier.endpoint = f"http://127.0.0.1:{port}/v1"  # as if that server had answered in an earlier run
    CachedBackend(earlier, path).chat(MSG)
    before = path.read_bytes()
    slept = []
    client = OpenAICompatibleBackend(
        "m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=2, sleep=slept.append, timeout=2
    )
    cache = CachedBackend(client, path)
    assert cache.chat(MSG) == "kept"  # cached: no request at all
    with pytest.raises(EndpointUnavailable, match=r"failed after 3 attempt\(s\) \(ConnectError"):
        cache.chat([{"role": "user", "content": "not cached"}])
    assert client.requests == 3 and len(slept) == 2
    assert path.read_bytes() == before


def test_a_200_without_content_is_retried_as_an_error_without_status(stub_server):
    replies = iter([None, "fine"])

    def reply(messages):
        value = next(replies)
        if value is None:
            raise_marker.append(1)
            return None
        return value

    raise_marker: list[int] = []
    stub_server.reply = reply
    client = OpenAICompatibleBackend("m", base_url=stub_server.url, sleep=lambda s: None)
    assert client.chat(MSG) == "fine"
    assert raise_marker == [1] and client.requests == 2


@pytest.mark.parametrize("url", ["ftp://x", "127.0.0.1:8000"])
def test_bad_base_url_is_refused(url):
    with pytest.raises(ValueError, match="base_url must start with http"):
        OpenAICompatibleBackend("m", base_url=url)


# ---------------------------------------------------------------------------------------------------------------
# Local judge (tiny random-init Llama; no download)
# ---------------------------------------------------------------------------------------------------------------


def _prompts():
    head = "Response A: a cat sat on mat \n\nResponse B: the dog ran far away \n\nPrinciple: "
    rules = [
        "Select the short text",
        "Select the long text",
        "Select a person",
        "Select the cold river and sun",
    ]
    return [
        [{"role": "user", "content": head + r + " Which response does the principle select?"}] for r in rules
    ] + [[{"role": "user", "content": "Which is better? A or B"}]]


def test_shared_prefix_scores_equal_plain_forward_passes(tiny_lm):
    import torch

    options = ["A", "B", "Both", "Neither"]
    shared = LocalChatBackend(lm=tiny_lm, batch_size=8, share_prefix=True)
    got = shared.choice_logprobs(_prompts(), options)
    # independent reference: one full forward pass per prompt, log-softmax at the last position
    tok, model = tiny_lm.tokenizer, tiny_lm.model
    ids = [tok.convert_tokens_to_ids(o) for o in options]
    ref = []
    for p in _prompts():
        text = tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
        x = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            ref.append(torch.log_softmax(model(x).logits[0, -1].double(), -1)[ids].numpy())
    np.testing.assert_allclose(got, np.asarray(ref), atol=1e-5)
    plain = LocalChatBackend(lm=tiny_lm, batch_size=1, share_prefix=False).choice_logprobs(
        _prompts(), options
    )
    np.testing.assert_allclose(plain, np.asarray(ref), atol=1e-5)
    assert shared.tokens_forwarded < LocalChatBackend(
        lm=tiny_lm, batch_size=8, share_prefix=False
    ).tokens_forwarded + sum(
        len(tok(tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True))["input_ids"])
        for p in _prompts()
    )


def test_scores_are_log_probabilities(tiny_lm):
    backend = LocalChatBackend(lm=tiny_lm)
    out = backend.choice_logprobs(_prompts(), ["A", "B"])
    assert out.shape == (5, 2) and np.all(out < 0) and np.all(np.exp(out).sum(1) < 1)


def test_options_must_differ_in_their_first_token(tiny_lm):
    backend = LocalChatBackend(lm=tiny_lm)
    with pytest.raises(ValueError, match="do not differ in their first token"):
        backend.choice_logprobs(_prompts(), ["A", "A"])


def test_prefill_is_continued_not_repeated_and_greedy_generation_is_deterministic(tiny_lm):
    backend = LocalChatBackend(lm=tiny_lm)
    msgs = [{"role": "user", "content": "a cat"}, {"role": "assistant", "content": "Select the"}]
    rendered = backend._render(msgs)
    assert rendered.endswith("<|assistant|> Select the")
    one = backend.chat_batch([msgs, MSG], max_tokens=4)
    assert one == backend.chat_batch([msgs, MSG], max_tokens=4)
    assert one[0] == backend.chat(msgs, max_tokens=4)  # left padding in a batch does not change the reply


@pytest.mark.gpu
def test_tiny_judge_scores_on_cuda_match_cpu(tiny_lm):
    import copy

    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    gpu_lm = copy.copy(tiny_lm)
    gpu_lm.model = copy.deepcopy(tiny_lm.model).to("cuda")
    got = LocalChatBackend(lm=gpu_lm).choice_logprobs(_prompts(), ["A", "B"])
    ref = LocalChatBackend(lm=tiny_lm).choice_logprobs(_prompts(), ["A", "B"])
    np.testing.assert_allclose(got, ref, atol=1e-4)


def test_sampling_is_reproducible_with_the_seed(tiny_lm):
    a = LocalChatBackend(lm=tiny_lm, seed=3).chat_batch([MSG, MSG], max_tokens=6, temperature=1.0)
    b = LocalChatBackend(lm=tiny_lm, seed=3).chat_batch([MSG, MSG], max_tokens=6, temperature=1.0)
    assert a == b
