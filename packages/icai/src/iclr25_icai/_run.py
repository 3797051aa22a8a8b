"""``run``: ICAI on a dataset (or the embedded planted-rule Wikipedia pairs): the constitution, the votes per
principle, and the agreement of the annotator with and without the constitution.

Each command takes ``(cfg, ctx)`` and returns an :class:`iclr25_shared.cli.Result`; the runner writes
results.json / results.md into ``--out`` (atomically, as one folder) and prints the tables.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_icai._corpus import _wiki
from iclr25_shared.cli import Result, RunContext
from iclr25_shared.errors import InputError
from iclr25_shared.inputs import validating

if TYPE_CHECKING:
    import pandas as pd

    from iclr25_icai.cli import RunConfig

__all__ = ["run", "run_config"]


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


def _prepare(cfg: RunConfig, ctx: RunContext) -> tuple[Path | None, Any]:
    """The cache path and the ICAI configuration, after the checks that must come before any model loads."""
    from iclr25_icai._backends import check_cache_file
    from iclr25_shared import cache_dir

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
    return cache_path, icai_cfg


def _split(cfg: RunConfig, pairs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """``(train, test, n_test)``: at most ``--max-pairs`` pairs, ``--test-fraction`` of them held out (none: test =
    train), both drawn from one generator seeded with ``--seed``."""
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
    return train, test, n_test


def _save_outputs(ctx: RunContext, result: Any, test: pd.DataFrame, base: Any, const: Any) -> None:
    """constitution.json/.md and, with ``--out``, the proposals, votes, vote counts and reconstruction as CSV."""
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


def _principle_rows(result: Any) -> list[dict[str, Any]]:
    """One row per candidate principle: its vote counts and whether it is in the constitution."""
    return [
        {
            "id": int(i),
            "principle": r["principle"],
            **{k: int(r[k]) for k in ("for", "against", "both", "neither", "abstain", "invalid")},
            "kept": i in set(result.kept.index),
        }
        for i, r in result.counts.iterrows()
    ]


def _notes(cfg: RunConfig, result: Any, inner: Any) -> list[str]:
    """The constitution, and a warning when the judge is the small default local model."""
    notes = [
        f"constitution:\n{result.constitution}"
        if result.constitution.principles
        else "constitution: empty (no principle passed the filter)"
    ]
    if cfg.backend == "local" and inner.model_name == "local:smollm2-135m-instruct":
        notes.append(
            "the local judge is a 135M model: its principles and votes are weak; use --backend openai for real models"
        )
    return notes


def run(cfg: RunConfig, ctx: RunContext) -> Result:
    """ICAI on ``--data`` (or the embedded planted-rule Wikipedia pairs): constitution, votes, reconstruction."""
    from iclr25_icai._backends import CachedBackend
    from iclr25_icai._icai import reconstruct, run_icai, validate_pairs
    from iclr25_shared.metrics import accuracy

    cache_path, icai_cfg = _prepare(cfg, ctx)
    pairs = validate_pairs(_load_data(cfg))
    train, test, n_test = _split(cfg, pairs)
    inner = _backend(cfg, ctx)
    llm = CachedBackend(inner, cache_path)
    if llm.skipped_lines:
        ctx.log.warning(f"cache {cache_path}: {llm.skipped_lines} unreadable line(s) ignored")
    embed = _embedder(cfg.embedder, llm, ctx.torch_device() if cfg.embedder == "minilm" else "cpu")
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
    _save_outputs(ctx, result, test, base, const)
    return Result(
        metrics={
            "agreement_default": acc0.as_dict(),
            "agreement_constitutional": acc1.as_dict(),
            "evaluated_on": "held-out pairs" if n_test else "training pairs",
            **result.stats,
            "llm_calls": llm.misses,
            "cache_hits": llm.hits,
        },
        tables={"principles": _principle_rows(result)},
        timings={"icai": t_icai, "reconstruction": t_rec},
        notes=_notes(cfg, result, inner),
    )
