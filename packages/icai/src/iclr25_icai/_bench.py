"""``bench``: the cost of the pipeline's stages, resumption and the local scorer."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_icai.cli import BenchConfig

from iclr25_icai._corpus import _wiki

__all__ = ["bench"]


class _Crash(Exception):
    """Raised by the crashing backend wrapper in the resume measurement."""


class _CrashAfter:
    def __init__(self, backend: Any, calls: int) -> None:
        self.backend, self.left, self.model_name = backend, calls, backend.model_name

    def chat(self, messages: Any, **kw: Any) -> str:
        if self.left <= 0:
            raise _Crash("simulated crash")
        self.left -= 1
        return self.backend.chat(messages, **kw)


def _endpoint_rows(
    cfg: BenchConfig, ctx: RunContext, pairs: Any, embed: Any, icai_cfg: Any
) -> tuple[Any, list]:
    """ICAI + reconstruction on ``pairs`` through an OpenAI-compatible endpoint that adds ``latency_ms`` per request,
    one arm per ``--concurrency`` value, timed with the shared interleaved protocol. Every arm makes the same calls
    (no cache) and must produce the same constitution."""
    from iclr25_icai._backends import CachedBackend, OpenAICompatibleBackend
    from iclr25_icai._icai import reconstruct, run_icai
    from iclr25_icai._localserver import LatencyEndpoint
    from iclr25_icai._synthetic import feature_oracle
    from iclr25_shared.bench import interleaved

    oracle = feature_oracle([pairs], seed=cfg.seed)
    outcome: dict[str, Any] = {}
    calls: dict[str, int] = {}
    with LatencyEndpoint(oracle._reply, latency_s=cfg.latency_ms / 1000.0) as ep:

        def arm(n: int, name: str) -> Any:
            def go() -> None:
                client = OpenAICompatibleBackend("oracle", base_url=ep.url, concurrency=n, seed=cfg.seed)
                try:
                    llm = CachedBackend(
                        client, None
                    )  # in memory, fresh per call: every call reaches the server
                    res = run_icai(pairs, llm, embed, icai_cfg, seed=cfg.seed)
                    rec = reconstruct(res.constitution, pairs, llm, seed=cfg.seed)
                finally:
                    client.close()
                outcome[name] = (res.constitution.principles, list(rec["predicted"]))
                calls[name] = client.requests

            return go

        names = {n: f"concurrency {n}" for n in cfg.concurrency}
        run = interleaved(
            {names[n]: arm(n, names[n]) for n in cfg.concurrency},
            repeats=cfg.repeats,
            warmup=1,
            threads=ctx.threads or None,
            progress=lambda it: ctx.progress(it, desc="endpoint rounds"),
        )
    base = names[cfg.concurrency[0]]
    same = all(v == outcome[base] for v in outcome.values())
    if not same:
        raise RuntimeError("the ICAI result differs between --concurrency values; it must not")
    rows = run.rows(
        base,
        units={k: float(v) for k, v in calls.items()},
        unit="requests",
        held_equal=f"the same {calls[base]} requests, {cfg.latency_ms:g} ms server latency each, same result",
    )
    return run, rows


def _call_rows(
    cfg: BenchConfig, pairs: Any, embed: Any, icai_cfg: Any
) -> tuple[list[dict[str, Any]], Any, int]:
    """LLM calls per 100 pairs of ICAI and of the reconstruction (scripted oracle); the ICAI result and its calls."""
    from iclr25_icai._icai import reconstruct, run_icai
    from iclr25_icai._synthetic import feature_oracle

    oracle = feature_oracle([pairs], seed=cfg.seed)
    res = run_icai(pairs, oracle, embed, icai_cfg, seed=cfg.seed)
    calls_icai = oracle.calls
    reconstruct(res.constitution, pairs, oracle, seed=cfg.seed)
    per100 = 100 / cfg.pairs
    rows = [
        {
            "measurement": "ICAI calls per 100 pairs (scripted oracle)",
            "value": round(calls_icai * per100, 1),
            "detail": f"{cfg.pairs} pairs, {len(res.candidates)} candidates, k=3 reannotations",
        },
        {
            "measurement": "reconstruction calls per 100 pairs (both orders)",
            "value": round((oracle.calls - calls_icai) * per100, 1),
            "detail": "",
        },
    ]
    return rows, res, calls_icai


def _resume_row(cfg: BenchConfig, pairs: Any, embed: Any, icai_cfg: Any, res: Any, calls_icai: int) -> dict:
    """Cache hits when ICAI resumes after a crash half-way through its calls."""
    from iclr25_icai._backends import CachedBackend
    from iclr25_icai._icai import run_icai
    from iclr25_icai._synthetic import feature_oracle

    with tempfile.TemporaryDirectory(prefix="icai-bench-") as tmp:
        path = Path(tmp) / "calls.jsonl"
        fresh = feature_oracle([pairs], seed=cfg.seed)
        crash = CachedBackend(_CrashAfter(fresh, calls_icai // 2), path)
        with contextlib.suppress(_Crash):
            run_icai(pairs, crash, embed, icai_cfg, seed=cfg.seed)
        first = fresh.calls
        fresh2 = feature_oracle([pairs], seed=cfg.seed)
        resumed = CachedBackend(fresh2, path)
        res2 = run_icai(pairs, resumed, embed, icai_cfg, seed=cfg.seed)
        repeated = first + fresh2.calls - calls_icai
        return {
            "measurement": "cache hit rate on the resumed run",
            "value": round(resumed.hits / max(1, resumed.hits + resumed.misses), 3),
            "detail": f"crash after {first} calls; resume: {resumed.hits} hits, {resumed.misses} new calls; "
            f"calls repeated: {repeated}; same constitution: {res2.constitution == res.constitution}",
        }


def _local_rows(cfg: BenchConfig, ctx: RunContext, pairs: Any, res: Any) -> tuple[Any, list[dict[str, Any]]]:
    """SmolLM2 vote scoring one by one against batched (padded, shared prefix), interleaved, on the same prompts."""
    from iclr25_icai._backends import LocalChatBackend
    from iclr25_icai._icai import choice_vote_messages, validate_pairs
    from iclr25_shared.bench import interleaved

    ctx.log.info("loading SmolLM2-135M-Instruct")
    base = LocalChatBackend(device=ctx.torch_device(), seed=cfg.seed)
    sub = validate_pairs(pairs.iloc[: cfg.local_pairs])
    principles = [str(p) for p in list(res.candidates)[:6]]
    prompts = [
        choice_vote_messages("", first, second, p, ["A", "B"])
        for _, r in sub.iterrows()
        for first, second in ((r["text_a"], r["text_b"]), (r["text_b"], r["text_a"]))
        for p in principles
    ]
    outs: dict[str, Any] = {}

    def scoring(label: str, bs: int, share: bool) -> Any:
        def go() -> None:
            base.batch_size, base.share_prefix = bs, share
            outs[label] = base.choice_logprobs(prompts, ["A", "B"])

        return go

    arms = {
        "one by one": scoring("one by one", 1, False),
        "batched (8), padded": scoring("batched (8), padded", 8, False),
        "batched (8), shared prefix": scoring("batched (8), shared prefix", 8, True),
    }
    local_run = interleaved(
        arms,
        repeats=cfg.repeats,
        warmup=1,
        device=ctx.torch_device(),
        threads=ctx.threads or None,
        progress=lambda it: ctx.progress(it, desc="local scoring rounds"),
    )
    local_rows = local_run.rows(
        "one by one",
        units=dict.fromkeys(arms, float(len(prompts))),
        unit="prompts",
        held_equal=f"the same {len(prompts)} prompts (2 orders x {len(principles)} principles per pair)",
    )
    for r in local_rows:
        r["max |d log p| vs one by one"] = float(np.max(np.abs(outs[r["arm"]] - outs["one by one"])))
    return local_run, local_rows


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Calls per 100 pairs, resume cache hits, ICAI wall time against a latency endpoint at each --concurrency, and
    batched local scoring throughput; every timing through :func:`iclr25_shared.bench.interleaved`."""
    from iclr25_icai._embed import TfidfEmbedder
    from iclr25_icai._icai import ICAIConfig
    from iclr25_icai._synthetic import make_planted_pairs

    corpus = _wiki()
    pairs = make_planted_pairs(corpus, "person", cfg.pairs, seed=cfg.seed)
    icai_cfg = ICAIConfig(n_clusters=40, max_principles=5, reannotations=3, flips="random")
    embed = TfidfEmbedder()
    embed(["warm up the vectorizer import"])
    rows, res, calls_icai = _call_rows(cfg, pairs, embed, icai_cfg)
    rows.append(_resume_row(cfg, pairs, embed, icai_cfg, res, calls_icai))  # resume after a crash half-way
    tables: dict[str, Any] = {"bench": rows}
    raw: dict[str, Any] = {}
    sub_pairs = pairs.iloc[: cfg.endpoint_pairs].reset_index(drop=True)
    ctx.log.info(
        f"ICAI on {len(sub_pairs)} pairs against a {cfg.latency_ms:g} ms endpoint at {cfg.concurrency}"
    )
    endpoint_run, tables["endpoint concurrency (interleaved)"] = _endpoint_rows(
        cfg, ctx, sub_pairs, embed, icai_cfg
    )
    raw["endpoint"] = endpoint_run.as_dict()
    if cfg.local_pairs:
        local_run, tables["local vote scoring (interleaved)"] = _local_rows(cfg, ctx, pairs, res)
        raw["local"] = local_run.as_dict()
    return Result(
        metrics={"pairs": cfg.pairs, "threads": ctx.threads, "bench": raw},
        tables=tables,
        notes=[
            "timings: iclr25_shared.bench.interleaved (warm-up, arms rotated each round, median and 95 % bootstrap "
            "interval of the per-round speed-up); machine state in metrics.bench.*.env",
            f"endpoint: a local OpenAI-compatible server (iclr25_icai._localserver) answering as the scripted oracle "
            f"after {cfg.latency_ms:g} ms; the speed-up is the overlap of waiting, not faster compute",
        ],
    )
