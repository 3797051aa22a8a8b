"""What the CLI runs: ICAI on a dataset (``run``), the planted-rule reproduction and the benchmark.

Each command takes ``(cfg, ctx)`` and returns an :class:`iclr25_shared.cli.Result`; the runner writes
results.json / results.md into ``--out`` (atomically, as one folder) and prints the tables.
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_shared.cli import Result, RunContext
from iclr25_shared.errors import InputError
from iclr25_shared.inputs import validating

if TYPE_CHECKING:
    import pandas as pd

    from iclr25_icai.cli import BenchConfig, ReproduceConfig, RunConfig

PAPER = {  # arXiv:2406.06560, Table 1 (synthetic data, GPT-3.5-Turbo, mean over 6 seeds): default → constitutional
    "orthogonal": (37.8, 86.7),
    "aligned": (100.0, 92.2),
    "unaligned": (0.0, 84.4),
}


def _wiki() -> Any:
    from iclr25_shared.data import wiki_summaries

    return wiki_summaries()


def _load_data(cfg: RunConfig) -> pd.DataFrame:
    from iclr25_icai._formats import read_alpacaeval, read_arena, read_pairs

    if cfg.data is None:
        from iclr25_icai._synthetic import make_planted_pairs

        return make_planted_pairs(_wiki(), "person", 12, seed=cfg.seed, max_words=24)
    reader = {"pairs": read_pairs, "alpacaeval": read_alpacaeval, "arena": read_arena}[cfg.format]
    return reader(cfg.data, label="--data")


def _backend(cfg: RunConfig, ctx: RunContext) -> Any:
    from iclr25_icai._backends import LocalChatBackend, OpenAICompatibleBackend

    if cfg.backend == "local":
        ctx.log.info(f"loading the local judge {cfg.model}")
        with validating("--model"):  # the user's model: no chat template, a folder transformers refuses
            return LocalChatBackend(cfg.model, device=ctx.torch_device(), seed=cfg.seed)
    return OpenAICompatibleBackend(
        cfg.model,
        base_url=cfg.base_url,
        api_key=_api_key(cfg),
        embedding_model=cfg.embedding_model,
        timeout=cfg.timeout,
        max_retries=cfg.retries,
        seed=cfg.seed,
        concurrency=cfg.concurrency,
    )


def _api_key(cfg: RunConfig) -> str:
    """The endpoint's key, read only from where the user says (iclr25_icai._backends.resolve_api_key): the
    variable --api-key-env names, else $OPENAI_API_KEY for OpenAI's own URL only, else none (``""``).

    Raises:
        InputError: the named variable is unset or empty, or OpenAI's URL without $OPENAI_API_KEY.
    """
    from iclr25_icai._backends import default_base_url, resolve_api_key

    try:
        url = default_base_url(cfg.base_url)
    except ValueError as exc:
        raise InputError(f"--base-url (or $OPENAI_BASE_URL): {exc}") from None
    return resolve_api_key(url, api_key_env=cfg.api_key_env, label="--api-key-env") or ""


def run_config(cfg: RunConfig) -> Any:
    """The :class:`~iclr25_icai.ICAIConfig` that ``run`` uses for ``cfg``.

    Flips default to ``balanced`` for every judge: with an even ``--reannotations`` each pair is voted on equally
    often in both A/B orders, so a constant position bias cancels (an always-"A" judge abstains on every pair).
    """
    from iclr25_icai._icai import ICAIConfig

    local = cfg.backend == "local"
    return ICAIConfig(
        num_principles_per_pair=cfg.principles_per_pair,
        n_clusters=cfg.clusters,
        max_principles=cfg.max_principles,
        reannotations=cfg.reannotations,
        merge=("logprob" if local else "unanimous") if cfg.merge == "auto" else cfg.merge,
        flips="balanced" if cfg.flips == "auto" else cfg.flips,
        vote_options=("A", "B") if local else ("A", "B", "Both", "Neither"),
        prefill=local,
        proposal_max_tokens=32 if local else 200,
    )


def _embedder(kind: str, backend: Any, device: Any = "cpu") -> Any:
    from iclr25_icai._embed import EndpointEmbedder, MiniLMEmbedder, TfidfEmbedder

    if kind == "tfidf":
        return TfidfEmbedder()
    if kind == "endpoint":
        return EndpointEmbedder(backend)
    return MiniLMEmbedder(device=device)


def run(cfg: RunConfig, ctx: RunContext) -> Result:
    """ICAI on ``--data`` (or the embedded planted-rule Wikipedia pairs): constitution, votes, reconstruction."""
    from iclr25_icai._backends import CachedBackend, check_cache_file
    from iclr25_icai._icai import reconstruct, run_icai, validate_pairs
    from iclr25_shared import cache_dir
    from iclr25_shared.metrics import accuracy

    cache_path = None if cfg.no_cache else (cfg.cache or cache_dir("icai") / "calls.jsonl")
    if cache_path is not None:  # before any model loads
        check_cache_file(cache_path, label="--cache" if cfg.cache else "the default cache")
    if cfg.backend == "openai":
        _api_key(cfg)  # a named key variable that is unset exits 2 here, before any work
    icai_cfg = run_config(cfg)
    if icai_cfg.flips == "balanced" and icai_cfg.reannotations % 2:
        ctx.log.info(
            f"note: --reannotations {cfg.reannotations} is odd: balanced flips show one order once more than the "
            "other, so a judge's position bias does not cancel exactly (use an even count)"
        )
    pairs = validate_pairs(_load_data(cfg))
    rng = np.random.default_rng(cfg.seed)
    if cfg.max_pairs and len(pairs) > cfg.max_pairs:
        pairs = pairs.iloc[np.sort(rng.choice(len(pairs), cfg.max_pairs, replace=False))].reset_index(
            drop=True
        )
    n_test = round(cfg.test_fraction * len(pairs))
    if cfg.test_fraction > 0 and (n_test < 1 or n_test >= len(pairs)):
        raise InputError(
            f"--test-fraction: {cfg.test_fraction} leaves no train or no test pair out of {len(pairs)}"
        )
    order = rng.permutation(len(pairs))
    train = pairs.iloc[np.sort(order[n_test:])].reset_index(drop=True)
    test = pairs.iloc[np.sort(order[:n_test])].reset_index(drop=True) if n_test else train
    inner = _backend(cfg, ctx)
    llm = CachedBackend(inner, cache_path)
    if llm.skipped_lines:
        ctx.log.warning(f"cache {cache_path}: {llm.skipped_lines} unreadable line(s) ignored")
    embed = _embedder(cfg.embedder, llm, ctx.torch_device() if cfg.embedder == "minilm" else "cpu")
    local = cfg.backend == "local"
    t0 = time.perf_counter()
    result = run_icai(train, llm, embed, icai_cfg, seed=cfg.seed, log=ctx.log.info)
    t_icai = time.perf_counter() - t0
    ctx.log.info("reconstructing the labels with and without the constitution")
    t0 = time.perf_counter()
    base = reconstruct(None, test, llm, seed=cfg.seed)
    const = reconstruct(result.constitution, test, llm, seed=cfg.seed)
    t_rec = time.perf_counter() - t0
    ones = np.ones(len(test), dtype=np.int64)
    acc0 = accuracy(base["agree"].to_numpy().astype(np.int64), ones)  # agreement with a Wilson interval
    acc1 = accuracy(const["agree"].to_numpy().astype(np.int64), ones)
    ctx.save_json(
        "constitution.json",
        {"principles": list(result.constitution.principles), "text": str(result.constitution)},
    )
    ctx.save_text("constitution.md", result.constitution.to_markdown())
    if ctx.writes:
        result.proposals.to_csv(ctx.path("proposals.csv"), index=False)
        result.votes.assign(principle_text=[result.candidates[p] for p in result.votes["principle"]]).to_csv(
            ctx.path("votes.csv"), index=False
        )
        result.counts.to_csv(ctx.path("vote_counts.csv"), index_label="id")
        test.assign(default=base["predicted"], constitutional=const["predicted"]).to_csv(
            ctx.path("reconstruction.csv"), index=False
        )
    rows = [
        {
            "id": int(i),
            "principle": r["principle"],
            **{k: int(r[k]) for k in ("for", "against", "both", "neither", "abstain", "invalid")},
            "kept": i in set(result.kept.index),
        }
        for i, r in result.counts.iterrows()
    ]
    notes = [
        f"constitution:\n{result.constitution}"
        if result.constitution.principles
        else "constitution: empty (no principle passed the filter)"
    ]
    if local and inner.model_name == "local:smollm2-135m-instruct":
        notes.append(
            "the local judge is a 135M model: its principles and votes are weak; use --backend openai for real models"
        )
    return Result(
        metrics={
            "agreement_default": acc0.as_dict(),
            "agreement_constitutional": acc1.as_dict(),
            "evaluated_on": "held-out pairs" if n_test else "training pairs",
            **result.stats,
            "llm_calls": llm.misses,
            "cache_hits": llm.hits,
        },
        tables={"principles": rows},
        timings={"icai": t_icai, "reconstruction": t_rec},
        notes=notes,
    )


# ----------------------------------------------------------------------------------------------------------------
# reproduce
# ----------------------------------------------------------------------------------------------------------------


def _sizes(backend: str, size: str) -> tuple[int, int]:
    if backend == "oracle" or size in ("full", "gpu"):
        return 30, 30
    return 4, 4


def _settings(backend: str, size: str, settings: tuple[str, ...]) -> list[str]:
    if backend == "oracle" or size in ("full", "gpu"):
        return list(settings)
    return [s for s in settings if s != "aligned"] or list(
        settings
    )  # quick SmolLM2: the two headline settings


def _icai_config(backend: str) -> Any:
    from iclr25_icai._icai import ICAIConfig

    if backend == "oracle":
        # the paper's settings (Appendix, synthetic configs): random flips, 3 reannotations; no position bias here
        return ICAIConfig(
            num_principles_per_pair=2, n_clusters=40, max_principles=5, reannotations=3, flips="random"
        )
    return ICAIConfig(
        num_principles_per_pair=1,
        n_clusters=3,
        max_principles=3,
        reannotations=2,
        merge="logprob",
        flips="balanced",
        vote_options=("A", "B"),
        prefill=True,
        proposal_max_tokens=20,
    )


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """Planted-rule recovery and reconstruction agreement (arXiv:2406.06560, Section 4.1, Table 1) on Wikipedia."""
    from iclr25_icai._backends import CachedBackend, LocalChatBackend
    from iclr25_icai._embed import TfidfEmbedder
    from iclr25_icai._icai import reconstruct_many, run_icai
    from iclr25_icai._synthetic import RULES, SETTINGS, feature_oracle, make_planted_pairs, matches_rule
    from iclr25_shared.metrics import paired_t_interval

    corpus = _wiki()
    embed = TfidfEmbedder()
    per_seed: list[dict[str, Any]] = []
    timings: dict[str, float] = {}
    local = None
    for backend_name in cfg.backends:
        n_train, n_test = _sizes(backend_name, cfg.size)
        n_train, n_test = cfg.train_pairs or n_train, cfg.test_pairs or n_test
        icai_cfg = _icai_config(backend_name)
        t_backend = time.perf_counter()
        if backend_name == "local" and local is None:
            ctx.log.info("loading SmolLM2-135M-Instruct")
            local = CachedBackend(LocalChatBackend(device=ctx.torch_device(), seed=cfg.seed), None)
        n_seeds = 5 if cfg.size == "gpu" and cfg.seeds == 3 else cfg.seeds  # --size gpu: 5 unless given
        for s in range(n_seeds):
            seed = cfg.seed + s
            split = np.random.default_rng(10_000 + seed).permutation(len(corpus))
            train_rows, test_rows = split[: len(split) // 2], split[len(split) // 2 :]
            for setting in _settings(backend_name, cfg.size, cfg.settings):
                rule = SETTINGS[setting]
                train = make_planted_pairs(
                    corpus, rule, n_train, seed=seed, max_words=cfg.max_words, rows=train_rows
                )
                test = make_planted_pairs(
                    corpus, rule, n_test, seed=seed, max_words=cfg.max_words, rows=test_rows
                )
                llm = feature_oracle([train, test], seed=seed) if backend_name == "oracle" else local
                ctx.log.info(f"{backend_name} seed {seed} {setting}: {n_train} train / {n_test} test pairs")
                t0 = time.perf_counter()
                probes = [RULES[rule].statement, RULES[rule].inverse]
                res = run_icai(train, llm, embed, icai_cfg, seed=seed, probes=probes)
                principles = list(res.constitution.principles)
                ranks = [i + 1 for i, p in enumerate(principles) if matches_rule(p, rule)]
                inv_rule = {"person": None, "longer": "shorter", "shorter": "longer"}[rule]
                probe = res.probe_counts.set_index("principle")
                rec = reconstruct_many(
                    {"default": None, "constitution": res.constitution, "true": [RULES[rule].statement]},
                    test,
                    llm,
                    seed=seed,
                )
                agree0, agree1, agree_true = (
                    rec[k]["agree"].mean() for k in ("default", "constitution", "true")
                )
                per_seed.append(
                    {
                        "backend": backend_name,
                        "setting": setting,
                        "rule": rule,
                        "seed": seed,
                        "recovered_rank1": bool(ranks[:1] == [1]),
                        "rank": ranks[0] if ranks else 0,
                        "inverse_in_constitution": bool(
                            inv_rule is not None and any(matches_rule(p, inv_rule) for p in principles)
                        ),
                        "proposed_at_all": bool(
                            any(matches_rule(p, rule) for p in res.proposals["principle"] if p)
                        ),
                        "probe_rule_net": int(probe.loc[probes[0], "for"] - probe.loc[probes[0], "against"]),
                        "probe_inverse_net": int(
                            probe.loc[probes[1], "for"] - probe.loc[probes[1], "against"]
                        ),
                        "agreement_default": float(agree0),
                        "agreement_constitutional": float(agree1),
                        "agreement_true_rule": float(agree_true),
                        "constitution": " | ".join(principles),
                        "seconds": round(time.perf_counter() - t0, 1),
                    }
                )
                ctx.log.info(f"row: {per_seed[-1]}")  # a record even if the run is stopped later
        timings[backend_name] = time.perf_counter() - t_backend
    summary = []
    for backend_name in cfg.backends:
        for setting in _settings(backend_name, cfg.size, cfg.settings):
            rows = [r for r in per_seed if r["backend"] == backend_name and r["setting"] == setting]
            diffs = [r["agreement_constitutional"] - r["agreement_default"] for r in rows]
            est = paired_t_interval(diffs)
            summary.append(
                {
                    "backend": backend_name,
                    "setting": setting,
                    "planted rule": RULES[SETTINGS[setting]].statement.removeprefix(
                        "Select the response that "
                    ),
                    "seeds": len(rows),
                    "recovered (rank 1)": f"{sum(r['recovered_rank1'] for r in rows)}/{len(rows)}",
                    "in constitution": f"{sum(r['rank'] > 0 for r in rows)}/{len(rows)}",
                    "inverse rule in constitution": f"{sum(r['inverse_in_constitution'] for r in rows)}/{len(rows)}",
                    "default %": round(100 * statistics.mean(r["agreement_default"] for r in rows), 1),
                    "constitutional %": round(
                        100 * statistics.mean(r["agreement_constitutional"] for r in rows), 1
                    ),
                    "diff (95% CI), pts": f"{100 * est.value:+.1f} [{100 * est.low:+.1f}, {100 * est.high:+.1f}]",
                    "true-rule constitution %": round(
                        100 * statistics.mean(r["agreement_true_rule"] for r in rows), 1
                    ),
                    "paper default → const. %": "{} → {}".format(*PAPER[setting]),
                }
            )
    notes = [
        "oracle = a scripted LLM that reads the prompts and answers from the true text features (a pipeline check, "
        "not a model); local = SmolLM2-135M-Instruct, scoring A vs B by next-token log-probability.",
        "default and constitutional annotators: same model, same test pairs, both orders of every pair (equal calls).",
        "probe_*_net: for - against votes of the planted rule and of its inverse on the training pairs (the voter's "
        "ability to see the rule, independent of the proposer).",
    ]
    return Result(
        metrics={"size": cfg.size, "seeds": len({r["seed"] for r in per_seed}) if per_seed else cfg.seeds},
        tables={"summary": summary, "per_seed": per_seed},
        timings=timings,
        notes=notes,
    )


# ----------------------------------------------------------------------------------------------------------------
# bench
# ----------------------------------------------------------------------------------------------------------------


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


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Calls per 100 pairs, resume cache hits, ICAI wall time against a latency endpoint at each --concurrency, and
    batched local scoring throughput; every timing through :func:`iclr25_shared.bench.interleaved`."""
    from iclr25_icai._backends import CachedBackend, LocalChatBackend
    from iclr25_icai._embed import TfidfEmbedder
    from iclr25_icai._icai import ICAIConfig, choice_vote_messages, reconstruct, run_icai, validate_pairs
    from iclr25_icai._synthetic import feature_oracle, make_planted_pairs
    from iclr25_shared.bench import interleaved

    corpus = _wiki()
    pairs = make_planted_pairs(corpus, "person", cfg.pairs, seed=cfg.seed)
    icai_cfg = ICAIConfig(n_clusters=40, max_principles=5, reannotations=3, flips="random")
    embed = TfidfEmbedder()
    embed(["warm up the vectorizer import"])
    rows = []
    oracle = feature_oracle([pairs], seed=cfg.seed)
    res = run_icai(pairs, oracle, embed, icai_cfg, seed=cfg.seed)
    calls_icai = oracle.calls
    reconstruct(res.constitution, pairs, oracle, seed=cfg.seed)
    per100 = 100 / cfg.pairs
    rows.append(
        {
            "measurement": "ICAI calls per 100 pairs (scripted oracle)",
            "value": round(calls_icai * per100, 1),
            "detail": f"{cfg.pairs} pairs, {len(res.candidates)} candidates, k=3 reannotations",
        }
    )
    rows.append(
        {
            "measurement": "reconstruction calls per 100 pairs (both orders)",
            "value": round((oracle.calls - calls_icai) * per100, 1),
            "detail": "",
        }
    )
    # resume after a crash half-way
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
        rows.append(
            {
                "measurement": "cache hit rate on the resumed run",
                "value": round(resumed.hits / max(1, resumed.hits + resumed.misses), 3),
                "detail": f"crash after {first} calls; resume: {resumed.hits} hits, {resumed.misses} new calls; "
                f"calls repeated: {repeated}; same constitution: {res2.constitution == res.constitution}",
            }
        )
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
        tables["local vote scoring (interleaved)"] = local_rows
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
