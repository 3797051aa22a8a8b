"""Issue 39: bounded concurrent endpoint calls (``--concurrency N``), a call cache that is safe under concurrent
writers (threads and processes), and results that do not depend on N."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

from iclr25_icai._backends import CachedBackend, OpenAICompatibleBackend, ScriptedBackend, bounded_map
from iclr25_icai._embed import TfidfEmbedder
from iclr25_icai._icai import ICAIConfig, reconstruct, run_icai
from iclr25_icai._localserver import LatencyEndpoint
from iclr25_icai._synthetic import feature_oracle
from iclr25_icai.cli import main


def _msg(i):
    return [{"role": "user", "content": f"prompt {i}"}]


class _SlowCounting:
    """A backend that sleeps a little (so concurrent callers overlap) and counts calls per prompt."""

    model_name = "slow"

    def __init__(self, delay=0.002):
        self.delay, self.lock, self.per_prompt = delay, threading.Lock(), Counter()

    def chat(self, messages, *, max_tokens=256, temperature=0.0):
        with self.lock:
            self.per_prompt[messages[-1]["content"]] += 1
        time.sleep(self.delay)
        return "reply to " + messages[-1]["content"]


def _lines(path):
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def test_many_threads_writing_one_cache_lose_and_duplicate_nothing(tmp_path):
    # regression: without the lock and the in-flight table two threads missing the same key both called the
    # backend and both appended a line (duplicates), and the store/counters raced
    path = tmp_path / "calls.jsonl"
    inner = _SlowCounting()
    cache = CachedBackend(inner, path)
    prompts = [_msg(i) for i in range(40)]
    work = [p for _ in range(6) for p in prompts]  # every prompt asked 6 times
    random.Random(0).shuffle(work)
    replies = bounded_map(cache.chat, work, 16)
    assert replies == [f"reply to {p[-1]['content']}" for p in work]
    assert (
        set(inner.per_prompt.values()) == {1} and len(inner.per_prompt) == 40
    )  # one backend call per prompt
    rows = _lines(path)
    assert (
        len(rows) == 40 and len({r["key"] for r in rows}) == 40
    )  # one line per prompt: none lost, none twice
    assert cache.misses == 40 and cache.hits == len(work) - 40
    again = CachedBackend(_SlowCounting(), path)  # a resumed run finds every call
    assert len(again) == 40 and again.chat_many(prompts) == [f"reply to prompt {i}" for i in range(40)]
    assert again.misses == 0


_WRITER = """
import sys, time
from pathlib import Path
from iclr25_icai._backends import CachedBackend, ScriptedBackend
path, offset, go = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
def reply(m):
    time.sleep(0.001)
    return "reply to " + m[-1]["content"]
cache = CachedBackend(ScriptedBackend(reply), path)
while not go.exists():
    time.sleep(0.005)
# 20 prompts of its own and 10 every process asks for
for i in [*range(offset, offset + 20), *range(1000, 1010)]:
    cache.chat([{"role": "user", "content": f"prompt {i}"}])
"""


def test_several_processes_appending_to_one_cache_keep_every_line_once(tmp_path):
    # regression: processes sharing a cache file each appended the prompts they all asked for (duplicate lines);
    # lines are now appended under an exclusive flock after reading what the others appended
    path, go = tmp_path / "calls.jsonl", tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(100 * k), str(go)]) for k in range(4)
    ]
    time.sleep(0.5)
    go.touch()
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    rows = _lines(path)  # every line parses: none interleaved or cut
    keys = Counter(r["key"] for r in rows)
    assert len(keys) == 4 * 20 + 10 and set(keys.values()) == {1}


def test_chat_many_keeps_at_most_n_requests_in_flight_and_the_prompt_order():
    with LatencyEndpoint(lambda m: m[-1]["content"].upper(), latency_s=0.05) as ep:
        for n in (1, 3, 8):
            ep.reset()
            client = OpenAICompatibleBackend("m", base_url=ep.url, concurrency=n)
            out = client.chat_many([_msg(i) for i in range(16)])
            client.close()
            assert out == [f"PROMPT {i}" for i in range(16)]
            assert ep.requests == 16 and client.calls == 16 and client.requests == 16
            assert ep.max_in_flight <= n
            if n > 1:  # 16 requests of 50 ms each: with n threads several overlap
                assert ep.max_in_flight >= 2


def test_a_failing_call_stops_the_others_and_raises_its_error():
    calls = []

    def fn(x):
        calls.append(x)
        if x == 3:
            raise RuntimeError("call 3 failed")
        time.sleep(0.01)
        return x

    with pytest.raises(RuntimeError, match="call 3 failed"):
        bounded_map(fn, list(range(200)), 4)
    assert len(calls) < 200  # calls not yet started were cancelled
    with pytest.raises(ValueError, match="concurrency"):
        bounded_map(fn, [1], 0)


@pytest.fixture(scope="module")
def oracle_pairs():
    from iclr25_icai._synthetic import make_planted_pairs
    from iclr25_shared.data import wiki_summaries
    from iclr25_shared.testing import require

    return make_planted_pairs(require(wiki_summaries), "person", 10, seed=3, max_words=24)


def test_icai_results_do_not_depend_on_concurrency(oracle_pairs, tmp_path):
    oracle = feature_oracle([oracle_pairs], seed=3)
    cfg = ICAIConfig(n_clusters=6, max_principles=3, reannotations=2, flips="balanced")
    out = {}
    with LatencyEndpoint(oracle._reply, latency_s=0.0) as ep:
        for n in (1, 6):
            client = OpenAICompatibleBackend("oracle", base_url=ep.url, concurrency=n)
            llm = CachedBackend(client, tmp_path / f"calls-{n}.jsonl")
            res = run_icai(oracle_pairs, llm, TfidfEmbedder(), cfg, seed=3)
            rec = reconstruct(res.constitution, oracle_pairs, llm, seed=3)
            out[n] = (res, rec, llm.misses)
            client.close()
    (r1, rec1, m1), (r6, rec6, m6) = out[1], out[6]
    assert r1.constitution == r6.constitution and r1.constitution.principles
    assert r1.proposals.equals(r6.proposals) and r1.votes.equals(r6.votes) and r1.counts.equals(r6.counts)
    assert rec1.equals(rec6) and m1 == m6
    # the same calls were cached (in another order): the same set of lines
    lines = {n: sorted(x["key"] for x in _lines(tmp_path / f"calls-{n}.jsonl")) for n in (1, 6)}
    assert lines[1] == lines[6]


def test_cli_concurrency_is_checked(capsys):
    assert main(["run", "--backend", "openai", "--model", "m", "--concurrency", "0"]) == 2
    assert "concurrency" in capsys.readouterr().err


def test_the_scripted_backend_is_unchanged_by_chat_many():
    # a backend without chat_many (scripted, local) keeps one call at a time through the cache
    sb = ScriptedBackend(lambda m: "x")
    cache = CachedBackend(sb, None)
    assert cache.concurrency == 1 and cache.chat_many([_msg(0), _msg(1), _msg(0)]) == ["x", "x", "x"]
    assert sb.calls == 2
