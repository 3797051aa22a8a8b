"""``iclr25-icai``: Inverse Constitutional AI — compress pairwise preferences into a short constitution with a local
or OpenAI-compatible LLM. Config dataclasses and ``main`` only; the work is in ``_run.py``, ``_reproduce.py`` and
``_bench.py``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from iclr25_shared import inputs
from iclr25_shared.checks import check_float, check_int
from iclr25_shared.cli import CommonOptions, run
from iclr25_shared.errors import InputError

__all__ = ["COMMANDS", "DEFAULT", "PROG", "BenchConfig", "ReproduceConfig", "RunConfig", "main"]

PROG = "iclr25-icai"
DEFAULT = "run"


def _check_data(path: Path, label: str) -> None:
    from iclr25_icai._formats import check_preferences

    check_preferences(path, label)


def _check_chat_model(value: str | Path, label: str) -> None:
    """A model name, or a local model the judge can load: a Hugging Face folder (config.json, weights) whose
    tokenizer has a chat template, or a .gguf file."""
    inputs.check_model_ref(value, label=label)
    folder = Path(value).expanduser()
    if not folder.is_dir():
        return
    if any(folder.glob("chat_template.*")):
        return
    config = folder / "tokenizer_config.json"
    try:
        template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
    except (OSError, ValueError, AttributeError):
        template = None
    if not template:
        raise InputError(
            f"{label}: {str(value)!r} has no chat template (tokenizer_config.json or chat_template.jinja); the "
            "judge needs an instruct/chat model"
        )


@dataclass(frozen=True, kw_only=True)
class RunConfig(CommonOptions):
    """Find the constitution of a preference dataset and measure how well it reconstructs the labels.

    Without --data the input is the embedded real default: 12 pairs of Wikipedia lead summaries where the preferred
    one is about a person (a planted rule). Writes constitution.json/.md, the votes per principle, and the
    agreement of the annotator with and without the constitution."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {
        "data": inputs.custom(_check_data, kind="table"),
        "model": inputs.Input("model_ref", True, _check_chat_model, may_be_name=True),
    }
    NOT_INPUTS: ClassVar[Mapping[str, str]] = {
        "cache": "a JSONL file the run appends to: created when missing, and an empty or partly written one is a "
        "valid cache; the command checks it (iclr25_icai._backends.check_cache_file) before any model loads",
    }

    data: Path | None = None
    """Pairs file (.csv/.json/.jsonl/.parquet with text_a, text_b, preferred_text, optional input)."""
    format: Literal["pairs", "alpacaeval", "arena"] = "pairs"
    """Layout of --data: our pairs table, AlpacaEval annotations, or Chatbot Arena conversations."""
    backend: Literal["local", "openai"] = "local"
    """local: a transformers chat model (default SmolLM2-135M-Instruct); openai: any OpenAI-compatible endpoint."""
    model: str = "smollm2-135m-instruct"
    """Model: for local a name/path for iclr25_shared.models.load_causal_lm; for openai the server's model id."""
    base_url: str | None = None
    """OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (default $OPENAI_BASE_URL, then OpenAI)."""
    api_key_env: str | None = None
    """NAME of the environment variable holding the endpoint's API key (never the key itself); sent to any
    --base-url. Unset: $OPENAI_API_KEY for OpenAI's own URL only, no key for any other server. A named variable that
    is unset or empty exits 2. Ignored by --backend local (it sends nothing anywhere)."""
    embedder: Literal["minilm", "tfidf", "endpoint"] = "minilm"
    """Principle embeddings for clustering: packaged all-MiniLM-L6-v2, TF-IDF, or the endpoint's /embeddings."""
    embedding_model: str | None = None
    """Model id for --embedder endpoint (default: --model)."""
    max_principles: int = 5
    """Constitution size n (>= 1)."""
    principles_per_pair: int = 2
    """Principles proposed per pair (>= 1)."""
    clusters: int = 40
    """KMeans clusters before deduplication (>= 1)."""
    reannotations: int = 2
    """Votes per (pair, principle), each with its own A/B order (>= 1; even, so that balanced flips show every pair
    equally often in both orders)."""
    merge: Literal["auto", "unanimous", "majority", "logprob"] = "auto"
    """How reannotations merge; auto = logprob for the local judge, unanimous (the paper's) for endpoints."""
    flips: Literal["auto", "random", "balanced"] = "auto"
    """A/B order per reannotation; auto = balanced (half the reannotations in each order, so a judge's position
    bias cancels; the paper flips at random, which lets an always-"A" judge pass principles by chance)."""
    max_pairs: int = 0
    """Use at most this many pairs (0 = all), chosen at random with --seed."""
    test_fraction: float = 0.0
    """Share of pairs held out for the reconstruction (0 = reconstruct on the training pairs, as the paper's
    synthetic tables do)."""
    cache: Path | None = None
    """JSONL cache of LLM calls (default: calls.jsonl in the iclr25 user cache); an interrupted run resumes from it."""
    no_cache: bool = False
    """Call the LLM for everything (nothing read from or written to the cache)."""
    retries: int = 5
    """Retries per endpoint call on 408/409/429/5xx and errors without status (>= 0)."""
    timeout: float = 60.0
    """Seconds per endpoint request (> 0)."""
    concurrency: int = 4
    """Endpoint requests in flight at once (>= 1; --backend openai). Results do not depend on it: every prompt of a
    stage is built first and the replies are used in prompt order."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("concurrency", self.concurrency, low=1)
        check_int("max_principles", self.max_principles, low=1)
        check_int("principles_per_pair", self.principles_per_pair, low=1)
        check_int("clusters", self.clusters, low=1)
        check_int("reannotations", self.reannotations, low=1)
        check_int("max_pairs", self.max_pairs, low=0)
        check_float("test_fraction", self.test_fraction, low=0.0, high=1.0, high_inclusive=False)
        check_int("retries", self.retries, low=0)
        check_float("timeout", self.timeout, low=0.0, low_inclusive=False)
        if self.merge == "logprob" and self.backend != "local":
            raise ValueError("merge='logprob' needs --backend local (next-token log-probabilities)")
        if self.backend == "openai" and self.model == "smollm2-135m-instruct":
            raise ValueError("--backend openai needs --model (the endpoint's model id)")
        if self.embedder == "endpoint" and self.backend != "openai":
            raise ValueError("--embedder endpoint needs --backend openai")
        if self.data is None and self.format != "pairs":
            raise ValueError(f"--format {self.format} needs --data")


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """The paper's synthetic experiment on real text: is a planted rule recovered, and does the constitution raise
    the annotator's agreement with the labels (orthogonal, aligned, unaligned settings; >= 3 seeds)."""

    size: Literal["quick", "full", "gpu"] = "quick"
    """quick: 30/30 pairs for the scripted oracle; 4/4 pairs and the orthogonal setting (the primary comparison) for
    SmolLM2 (minutes per seed on 2 CPU cores); full: 30/30 pairs and every setting for both; gpu: full with --seeds
    left at 3 raised to 5, for --device cuda (7.5x quick's SmolLM2 pairs, 3x its settings: an estimate of a few
    minutes on one GPU, README "GPU")."""
    seeds: int = 3
    """Independent seeds (>= 3 for an interval)."""
    backends: tuple[Literal["oracle", "local"], ...] = ("oracle", "local")
    """oracle: a scripted LLM answering from the true text features (pipeline check); local: SmolLM2-135M."""
    settings: tuple[Literal["orthogonal", "aligned", "unaligned"], ...] = (
        "orthogonal",
        "aligned",
        "unaligned",
    )
    """Synthetic settings (Section 4.1): rule person / longer / shorter."""
    max_words: int = 24
    """Longest text in words (>= 8)."""
    train_pairs: int = 0
    """Training pairs per run (0 = the --size default)."""
    test_pairs: int = 0
    """Held-out pairs per run (0 = the --size default)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("seeds", self.seeds, low=1)
        check_int("train_pairs", self.train_pairs, low=0)
        check_int("test_pairs", self.test_pairs, low=0)
        check_int("max_words", self.max_words, low=8)
        if not self.backends or not self.settings:
            raise ValueError("backends and settings must each name at least one value")


@dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions):
    """LLM calls per 100 pairs, cache hits on a resumed run, ICAI wall time against an endpoint at several
    --concurrency values, and batched vs one-by-one local scoring (shared interleaved protocol)."""

    pairs: int = 100
    """Pairs for the call-count and resume measurements (scripted oracle backend, >= 2)."""
    endpoint_pairs: int = 20
    """Pairs of the timed ICAI runs against the local latency endpoint (>= 2)."""
    latency_ms: float = 50.0
    """Latency the local test endpoint adds to every request, in milliseconds (>= 0)."""
    concurrency: tuple[int, ...] = (1, 4, 16)
    """--concurrency values timed against the endpoint (the first is the baseline)."""
    local_pairs: int = 2
    """Pairs for the SmolLM2 scoring-throughput measurement (0 skips it)."""
    repeats: int = 5
    """Timed rounds of each interleaved measurement (the median and a bootstrap interval are reported, >= 1)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("pairs", self.pairs, low=2)
        check_int("endpoint_pairs", self.endpoint_pairs, low=2)
        check_float("latency_ms", self.latency_ms, low=0.0)
        if not self.concurrency:
            raise ValueError("concurrency must name at least one value")
        for n in self.concurrency:
            check_int("concurrency", n, low=1)
        check_int("local_pairs", self.local_pairs, low=0)
        check_int("repeats", self.repeats, low=1)


COMMANDS = {
    "run": (RunConfig, "iclr25_icai._run:run"),
    "reproduce": (ReproduceConfig, "iclr25_icai._reproduce:reproduce"),
    "bench": (BenchConfig, "iclr25_icai._bench:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-icai``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
