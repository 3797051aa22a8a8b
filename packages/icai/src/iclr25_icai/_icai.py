"""Inverse Constitutional AI, written from the paper (Findeis et al., ICLR 2025, arXiv:2406.06560, Section 3).

Given pairwise preferences ``D = {(text_a, text_b, preferred)}`` ICAI looks for a short list of natural-language
principles (a *constitution* ``c``, ``|c| <= n``) such that an LLM annotator prompted with ``c`` reconstructs the
labels: ``argmax_c agreement(p_o, p_M(c))`` (Section 3, problem statement). The algorithm (Section 3, Fig. 2):

1. **propose** candidate principles from each pair (:func:`propose_principles`);
2. **cluster** them by embedding (KMeans) and
3. **deduplicate**: one principle sampled per cluster (:func:`cluster_principles`, :func:`deduplicate_principles`);
4. **test** each candidate by LLM votes on every pair: does it select the preferred text, the other one, both, or
   neither; A/B order randomly flipped per call and flipped back; ``k`` reannotations merged unanimously or by
   majority (:func:`vote`, :func:`count_votes`);
5. **filter** and rank: keep principles that agree with the labels more often than not, are relevant often enough
   and mostly parsed; order by ``for - against``; merge near-duplicates (same embedding neighbourhood and same
   votes: a second deduplication, not in the paper, :func:`merge_near_duplicates`); cluster the top ``1.5 n`` again
   into ``n`` and keep the best per cluster (:func:`filter_principles`).

:func:`reconstruct` measures the objective: agreement of an annotator with and without the constitution.

Tables are pandas DataFrames. The pairs table has ``text_a``, ``text_b``, ``preferred_text`` (``"text_a"`` or
``"text_b"``) and optionally ``input`` (the prompt both texts answer).
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from iclr25_icai._backends import LLMBackend
from iclr25_shared.checks import check_choice, check_float, check_int

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "VOTE_KINDS",
    "Constitution",
    "ICAIConfig",
    "ICAIResult",
    "cluster_principles",
    "count_votes",
    "deduplicate_principles",
    "filter_principles",
    "merge_near_duplicates",
    "merge_reannotations",
    "parse_principles",
    "parse_votes",
    "propose_principles",
    "reconstruct",
    "reconstruct_many",
    "run_icai",
    "validate_pairs",
    "vote",
]

VOTE_KINDS = ("for", "against", "both", "neither", "abstain", "invalid")
"""Per (pair, principle) outcomes after merging reannotations. ``for``: the principle selects the preferred text;
``against``: the rejected one; ``both``/``neither``: it applies to both / to none (kept apart, unlike the official
code, which folds "neither" into "both"); ``abstain``: the reannotations disagreed; ``invalid``: unparseable reply."""

_ALIASES = {"text_a": "text_a", "a": "text_a", "text_b": "text_b", "b": "text_b"}
_TIES = {"tie", "both", "equal", "draw", "none", "neither", "tie (bothbad)"}


def validate_pairs(pairs: pd.DataFrame, *, drop_ties: bool = True) -> pd.DataFrame:
    """Check and normalise a pairs table; return a copy with a fresh ``0..n-1`` index.

    ``preferred_text`` accepts ``text_a``/``a`` and ``text_b``/``b`` (any case); ties (``tie``, ``both``, ...) are
    dropped when ``drop_ties``. ``input`` is optional (filled with ``""``).

    Args:
        pairs: ``(n_pairs, ...)`` table with columns ``text_a``, ``text_b``, ``preferred_text`` and optionally ``input``.
        drop_ties: drop tie rows (else they are refused).

    Returns:
        ``(n_kept, 4)`` table with ``input``, ``text_a``, ``text_b``, ``preferred_text`` ∈ {text_a, text_b} (strings).

    Raises:
        ValueError: a missing column (named), an empty table, a label outside the allowed values (row named), a
            missing text, or no pair left after dropping ties.
        TypeError: ``pairs`` is not a pandas DataFrame.
    """
    import pandas as pd

    if not isinstance(pairs, pd.DataFrame):
        raise TypeError(f"pairs must be a pandas DataFrame, got {type(pairs).__name__}")
    missing = [c for c in ("text_a", "text_b", "preferred_text") if c not in pairs.columns]
    if missing:
        raise ValueError(
            f"pairs table lacks column(s) {missing}; needs text_a, text_b, preferred_text (optional input); "
            f"has {list(pairs.columns)}"
        )
    if len(pairs) == 0:
        raise ValueError("pairs table is empty; need at least one pair with a preference")
    out = pd.DataFrame(
        {
            "input": pairs["input"] if "input" in pairs.columns else "",
            "text_a": pairs["text_a"],
            "text_b": pairs["text_b"],
        }
    ).reset_index(drop=True)
    out["input"] = out["input"].fillna("").astype(str)
    labels = pairs["preferred_text"].reset_index(drop=True).astype(str).str.strip().str.lower()
    tie = labels.isin(_TIES)
    bad = ~tie & ~labels.isin(list(_ALIASES))
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ValueError(
            f"preferred_text must be one of text_a, text_b, a, b (or a tie: {sorted(_TIES)}), "
            f"got {pairs['preferred_text'].iloc[i]!r} in row {i}"
        )
    if tie.all():
        raise ValueError(f"all {len(pairs)} pairs are ties; ICAI needs pairs with a preferred text")
    if tie.any() and not drop_ties:
        raise ValueError(f"{int(tie.sum())} pairs are ties; pass drop_ties=True to drop them")
    out["preferred_text"] = labels.map(lambda v: _ALIASES.get(v, "tie"))
    out = out[~tie.to_numpy()].reset_index(drop=True)
    for col in ("text_a", "text_b"):
        missing_text = out[col].isna() | (out[col].astype(str).str.strip() == "")
        if missing_text.any():
            raise ValueError(
                f"{col} is empty or missing in row {int(np.flatnonzero(missing_text.to_numpy())[0])}"
            )
        out[col] = out[col].astype(str)
    return out[["input", "text_a", "text_b", "preferred_text"]]


# ----------------------------------------------------------------------------------------------------------------
# Stage 1: proposal
# ----------------------------------------------------------------------------------------------------------------

PREFIX = "Select the response that"


def _input_block(text: str) -> str:
    return f"Prompt: {text}\n\n" if text else ""


def proposal_messages(row: Any, num_principles: int) -> list[dict[str, str]]:
    """The proposal prompt for one pair (Section 3, step 1; our wording of the paper's generator prompt)."""
    preferred = row["text_a"] if row["preferred_text"] == "text_a" else row["text_b"]
    rejected = row["text_b"] if row["preferred_text"] == "text_a" else row["text_a"]
    return [
        {
            "role": "user",
            "content": (
                "A person compared two responses and preferred one of them.\n\n"
                f"{_input_block(row['input'])}Preferred response: {preferred}\n\nRejected response: {rejected}\n\n"
                f"Write {num_principles} general rule(s), each at most 10 words, that explain this preference "
                f'and would pick the preferred response. Each rule starts with "{PREFIX}". '
                'Reply only with JSON: {"principles": ["...", ...]}'
            ),
        }
    ]


def _strip_fences(text: str) -> str:
    text = text.strip()
    m = re.fullmatch(r"```[a-zA-Z]*\s*(.*?)\s*```", text, flags=re.S)
    return m.group(1) if m else text


def _loads(text: str) -> Any:
    text = _strip_fences(text)
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(re.sub(r"\b(true|false|null)\b", lambda m: m.group(1).capitalize(), text))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    m = re.search(r"\{.*\}", text, flags=re.S)  # JSON inside prose
    if m and m.group(0) != text:
        return _loads(m.group(0))
    return None


def parse_principles(reply: str, max_principles: int) -> list[str]:
    """Principles from a proposal reply: JSON ``{"principles": [...]}`` (fenced or not, single quotes accepted) or a
    bare list; else every ``"Select the response that ..."`` sentence in the text. At most ``max_principles``
    (models sometimes give more than asked), whitespace-normalised, each ending without trailing quotes.

    Returns:
        The principles; empty when nothing parses (the caller counts it as a parse failure).
    """
    check_int("max_principles", max_principles, low=1)
    data = _loads(reply)
    items: list[Any] = []
    if isinstance(data, dict) and isinstance(data.get("principles"), list):
        items = data["principles"]
    elif isinstance(data, list):
        items = data
    found = [" ".join(str(p).split()) for p in items if isinstance(p, str) and p.strip()]
    if not found:
        found = [" ".join(m.split()) for m in re.findall(rf"{PREFIX}[^\n\"'\]]*", reply, flags=re.I)]
    cleaned = []
    for p in found:
        p = p.strip(" \"',")
        if len(p.split()) > len(PREFIX.split()) and p not in cleaned:
            cleaned.append(p)
    return cleaned[:max_principles]


def _chat_all(backend: LLMBackend, prompts: Sequence[Sequence[Any]], *, max_tokens: int) -> list[str]:
    """Replies in prompt order: the backend's ``chat_many`` (bounded concurrency) when it has one, else one
    :meth:`chat` at a time. Every prompt is built before the first call, so replies never depend on the order in
    which concurrent calls finish."""
    if not prompts:
        return []
    if hasattr(backend, "chat_many"):
        return list(backend.chat_many(prompts, max_tokens=max_tokens))
    return [backend.chat(p, max_tokens=max_tokens) for p in prompts]


def propose_principles(
    pairs: pd.DataFrame,
    backend: LLMBackend,
    *,
    num_principles: int = 2,
    max_tokens: int = 200,
    prefill: bool = False,
) -> pd.DataFrame:
    """Stage 1: ask the LLM for principles that explain each preference (Section 3, step 1).

    Args:
        pairs: validated pairs table (:func:`validate_pairs`), ``n_pairs`` rows.
        backend: any :class:`LLMBackend`; when it has ``chat_batch`` all prompts go in one batched call.
        num_principles: principles asked per pair (the paper's configs use 2).
        max_tokens: reply budget per pair.
        prefill: start the reply with ``"Select the response that"`` (only for backends with ``supports_prefill``,
            e.g. the local judge: a small model does not write JSON; the first sentence it completes is the principle).

    Returns:
        ``(n_principles_total, 3)`` table: ``pair`` (row of ``pairs``), ``principle``, ``reply_ok`` (False rows
        mark pairs whose reply held no principle; their ``principle`` is ``""``).
    """
    import pandas as pd

    check_int("num_principles", num_principles, low=1)
    check_int("max_tokens", max_tokens, low=1)
    head = PREFIX if prefill and getattr(backend, "supports_prefill", False) else ""
    prompts: list[list[dict[str, str]]] = []
    for _, row in pairs.iterrows():
        msgs = proposal_messages(row, num_principles)
        if head:
            msgs.append({"role": "assistant", "content": head})
        prompts.append(msgs)
    if hasattr(backend, "chat_batch"):
        replies = backend.chat_batch(prompts, max_tokens=max_tokens)
    else:
        replies = _chat_all(backend, prompts, max_tokens=max_tokens)
    rows = []
    for i, reply in enumerate(replies):
        found = parse_principles(head + reply, num_principles)
        rows += [{"pair": i, "principle": p, "reply_ok": True} for p in found]
        if not found:
            rows.append({"pair": i, "principle": "", "reply_ok": False})
    return pd.DataFrame(rows, columns=["pair", "principle", "reply_ok"])


# ----------------------------------------------------------------------------------------------------------------
# Stages 2-3: clustering and deduplication
# ----------------------------------------------------------------------------------------------------------------


def cluster_principles(
    principles: Sequence[str],
    embed: Callable[[list[str]], np.ndarray],
    n_clusters: int,
    *,
    seed: int = 0,
) -> np.ndarray:
    """Stage 2: KMeans over principle embeddings (Section 3, step 2).

    Exact duplicates always share a cluster. When ``n_clusters`` is at least the number of distinct principles,
    no embedding is computed: each distinct principle is its own cluster (exact deduplication only), as in the
    official implementation.

    Args:
        principles: ``(n,)`` strings (duplicates allowed).
        embed: ``fn(list of m distinct strings) -> (m, dim)`` float array (an :class:`~iclr25_icai.Embedder`).
        n_clusters: number of clusters, ``>= 1``.
        seed: KMeans ``random_state`` (the official code sets none).

    Returns:
        ``(n,)`` int64 cluster id per principle, ids ``0..k-1`` with ``k = min(n_clusters, distinct)``, numbered in
        order of first appearance.

    Raises:
        ValueError: ``principles`` empty; ``n_clusters < 1``; embeddings of the wrong shape or non-finite.
    """
    check_int("n_clusters", n_clusters, low=1)
    principles = [str(p) for p in principles]
    if not principles:
        raise ValueError("principles is empty: no principle to cluster (did every proposal fail to parse?)")
    distinct = list(dict.fromkeys(principles))
    index = {p: i for i, p in enumerate(distinct)}
    if n_clusters >= len(distinct):
        labels = np.arange(len(distinct))
    else:
        from sklearn.cluster import KMeans

        emb = np.asarray(embed(distinct), dtype=np.float64)
        if emb.ndim != 2 or emb.shape[0] != len(distinct):
            raise ValueError(f"embed returned shape {emb.shape}, expected ({len(distinct)}, dim)")
        if not np.isfinite(emb).all():
            raise ValueError("embed returned non-finite values")
        labels = KMeans(n_clusters=n_clusters, n_init=10, random_state=seed).fit_predict(emb)
    # renumber in order of first appearance
    order: dict[int, int] = {}
    for lab in labels:
        order.setdefault(int(lab), len(order))
    return np.asarray([order[int(labels[index[p]])] for p in principles], dtype=np.int64)


def deduplicate_principles(principles: Sequence[str], clusters: np.ndarray, *, seed: int = 0) -> list[str]:
    """Stage 3: one principle per cluster, sampled uniformly from its distinct members (the paper's default;
    Section 3, step 3).

    Args:
        principles: ``(n,)`` strings; clusters: ``(n,)`` int cluster ids.

    Returns:
        One principle per cluster, in cluster-id order.
    """
    clusters = np.asarray(clusters)
    if clusters.shape != (len(principles),):
        raise ValueError(f"clusters must have shape ({len(principles)},), got {clusters.shape}")
    rng = np.random.default_rng(seed)
    chosen = []
    for c in sorted(set(clusters.tolist())):
        members = list(dict.fromkeys(p for p, k in zip(principles, clusters) if k == c))
        chosen.append(members[int(rng.integers(len(members)))])
    return chosen


# ----------------------------------------------------------------------------------------------------------------
# Stage 4: voting
# ----------------------------------------------------------------------------------------------------------------

_VOTE_VALUES = {
    "a": "A",
    "b": "B",
    "both": "both",
    "none": "neither",
    "neither": "neither",
    "null": "neither",
}


def vote_messages(
    input_text: str, first: str, second: str, principles: Sequence[str]
) -> list[dict[str, str]]:
    """The multi-principle voting prompt (JSON reply), texts shown as A = ``first``, B = ``second``."""
    listing = "\n".join(f"{i}. {p}" for i, p in enumerate(principles))
    return [
        {
            "role": "user",
            "content": (
                f"{_input_block(input_text)}Response A: {first}\n\nResponse B: {second}\n\n"
                f'For each numbered principle below, say which response it selects: "A", "B", "Both" (it '
                f'fits both equally) or "None" (it does not apply to either).\n\n{listing}\n\n'
                'Reply only with JSON mapping each number to its answer, e.g. {"0": "A", "1": "None"}.'
            ),
        }
    ]


def choice_vote_messages(input_text: str, first: str, second: str, principle: str, options: Sequence[str]):
    """The single-principle voting prompt for next-token scoring; the principle comes last so that the prompts of
    one pair share their prefix."""
    return [
        {
            "role": "user",
            "content": (
                f"{_input_block(input_text)}Response A: {first}\n\nResponse B: {second}\n\n"
                f"Principle: {principle}\nWhich response does the principle select? "
                f"Answer with one word: {', '.join(options[:-1])} or {options[-1]}."
            ),
        }
    ]


def parse_votes(reply: str, n_principles: int) -> list[str]:
    """Votes from a JSON voting reply, one per principle: ``"A"``, ``"B"``, ``"both"``, ``"neither"`` or
    ``"invalid"``.

    Keys may be ints or strings of ints; values ``A``/``B``/``Both``/``None``/``Neither``/``null`` in any case.
    Keys outside ``0..n_principles-1`` are ignored (models sometimes invent extra principles); a missing key, an
    unknown value (e.g. ``"Z"``) or an unparseable reply gives ``"invalid"``.
    """
    check_int("n_principles", n_principles, low=0)
    data = _loads(reply)
    out = ["invalid"] * n_principles
    if not isinstance(data, dict):
        return out
    for key, value in data.items():
        try:
            idx = int(str(key).strip())
        except ValueError:
            continue
        if not 0 <= idx < n_principles:
            continue
        norm = "null" if value is None else str(value).strip().lower()
        out[idx] = _VOTE_VALUES.get(norm, "invalid")
    return out


def merge_reannotations(votes: Sequence[str], method: Literal["unanimous", "majority"] = "unanimous") -> str:
    """Merge one (pair, principle)'s ``k`` reannotations (each in :data:`VOTE_KINDS` minus abstain).

    ``unanimous``: the common value when all agree, else ``"abstain"``. ``majority``: the value held by more than
    half, else ``"abstain"``.
    """
    check_choice("method", method, ("unanimous", "majority"))
    if not votes:
        raise ValueError("votes is empty: nothing to merge")
    values, counts = np.unique(np.asarray(list(votes), dtype=object), return_counts=True)
    if method == "unanimous":
        return str(values[0]) if len(values) == 1 else "abstain"
    best = int(np.argmax(counts))
    return str(values[best]) if counts[best] * 2 > len(votes) else "abstain"


def _oriented(margin: float, flipped: bool, preferred: str) -> float:
    """``log p(A) - log p(B)`` on the shown order → ``log p(preferred) - log p(rejected)``."""
    to_text_a = -margin if flipped else margin
    return to_text_a if preferred == "text_a" else -to_text_a


def _relation(chosen: str, flipped: bool, preferred: str) -> str:
    """Map a raw vote on the shown order back to the original pair and compare with the label."""
    if chosen in ("both", "neither", "invalid"):
        return chosen
    text = {"A": "text_a", "B": "text_b"}[chosen]
    if flipped:
        text = "text_b" if text == "text_a" else "text_a"
    return "for" if text == preferred else "against"


def vote(
    pairs: pd.DataFrame,
    principles: Sequence[str],
    backend: LLMBackend,
    *,
    reannotations: int = 3,
    merge: Literal["unanimous", "majority", "logprob"] = "unanimous",
    mode: Literal["auto", "json", "choice"] = "auto",
    flips: Literal["random", "balanced"] = "random",
    options: Sequence[str] = ("A", "B", "Both", "Neither"),
    max_per_prompt: int = 40,
    max_tokens: int = 400,
    seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Stage 4: test every principle on every pair by LLM votes (Section 3, step 4).

    For each pair and reannotation ``j < k`` the A/B order is flipped at random (``flips="random"``, the paper) or
    so that the ``k`` reannotations alternate from a random start (``"balanced"``: with ``k = 2`` both orders are
    seen once), the principles are shuffled, and the LLM is asked which text each principle selects. Votes are
    flipped back and compared with the label: ``for`` (selects the preferred text), ``against``, ``both``,
    ``neither`` or ``invalid``. The ``k`` reannotations are merged by :func:`merge_reannotations`.

    Modes: ``json`` (the paper's): one call per pair, reannotation and chunk of ``max_per_prompt`` principles, the
    reply parsed by :func:`parse_votes`. ``choice`` (local judge): one scored prompt per principle, the vote is the
    option with the highest next-token log-probability among ``options`` (``A``/``B`` first, then optionally
    ``Both``/``Neither``). ``auto``: ``choice`` when the backend has ``choice_logprobs``.

    ``merge="logprob"`` (``choice`` mode only; not in the paper): instead of merging the argmax answers, sum over the
    reannotations the margin ``log p(preferred) - log p(rejected)`` (each order's ``log p(A) - log p(B)`` mapped
    back) and vote ``for``/``against`` by its sign. With ``flips="balanced"`` and even ``k`` every pair is seen
    equally often in both orders, so a constant position bias cancels exactly; small local judges that answer "A"
    to everything otherwise abstain on every pair under ``unanimous``.

    Args:
        pairs: validated pairs, ``n_pairs`` rows; principles: ``(n_principles,)`` strings.

    Returns:
        ``(raw, merged)``: ``raw`` has one row per (pair, principle, reannotation) with ``flipped``, ``answer``
        (A/B/both/neither/invalid on the shown order) and ``vote``; ``merged`` one row per (pair, principle) with
        the merged ``vote``.

    Raises:
        ValueError: bad ``reannotations``/``merge``/``mode``/``flips``/``options``; ``mode="choice"`` with a
            backend that cannot score.
    """
    import pandas as pd

    check_int("reannotations", reannotations, low=1)
    check_choice("merge", merge, ("unanimous", "majority", "logprob"))
    check_choice("mode", mode, ("auto", "json", "choice"))
    check_choice("flips", flips, ("random", "balanced"))
    check_int("max_per_prompt", max_per_prompt, low=1)
    options = list(options)
    if options[:2] != ["A", "B"] or not set(options[2:]) <= {"Both", "Neither"}:
        raise ValueError(f"options must start with 'A', 'B' and may add 'Both', 'Neither'; got {options}")
    scorer = hasattr(backend, "choice_logprobs")
    if mode == "auto":
        mode = "choice" if scorer else "json"
    if mode == "choice" and not scorer:
        raise ValueError(
            f"mode='choice' needs a backend with choice_logprobs; {backend.model_name!r} has none"
        )
    if merge == "logprob" and mode != "choice":
        raise ValueError("merge='logprob' needs mode='choice' (a backend with choice_logprobs)")
    principles = list(principles)
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    option_vote = {"A": "A", "B": "B", "Both": "both", "Neither": "neither"}
    shown: list[tuple[int, int, bool, str, dict[int, str], dict[int, float]]] = []
    jobs: list[tuple[dict[int, str], Any, list[dict[str, str]]]] = []  # json mode: (answers, chunk, prompt)
    for i, row in pairs.iterrows():
        start = int(rng.integers(2))
        for j in range(reannotations):
            flipped = bool(rng.integers(2)) if flips == "random" else bool((start + j) % 2)
            first, second = (row["text_b"], row["text_a"]) if flipped else (row["text_a"], row["text_b"])
            order = rng.permutation(len(principles))
            answers: dict[int, str] = {}
            margins: dict[int, float] = {}
            if mode == "choice":
                prompts = [
                    choice_vote_messages(row["input"], first, second, principles[p], options) for p in order
                ]
                scores = backend.choice_logprobs(prompts, options) if prompts else np.zeros((0, len(options)))
                for p, s in zip(order, scores):
                    answers[int(p)] = (
                        option_vote[options[int(np.argmax(s))]] if np.isfinite(s).any() else "invalid"
                    )
                    margins[int(p)] = float(s[0] - s[1])
            else:
                for c in range(0, len(order), max_per_prompt):
                    chunk = order[c : c + max_per_prompt]
                    prompt = vote_messages(row["input"], first, second, [principles[p] for p in chunk])
                    jobs.append((answers, chunk, prompt))
            shown.append((int(i), j, flipped, row["preferred_text"], answers, margins))
    # json mode: every call at once (``chat_many``: bounded concurrency, replies in prompt order)
    replies = _chat_all(backend, [prompt for _, _, prompt in jobs], max_tokens=max_tokens)
    for (answers, chunk, _), reply in zip(jobs, replies):
        for p, a in zip(chunk, parse_votes(reply, len(chunk))):
            answers[int(p)] = a
    for i, j, flipped, preferred, answers, margins in shown:
        for p in range(len(principles)):
            rows.append(
                {
                    "pair": i,
                    "principle": p,
                    "reannotation": j,
                    "flipped": flipped,
                    "answer": answers[p],
                    "vote": _relation(answers[p], flipped, preferred),
                    # log p(A) - log p(B) turned into log p(preferred) - log p(rejected)
                    "margin": _oriented(margins.get(p, math.nan), flipped, preferred),
                }
            )
    raw = pd.DataFrame(
        rows, columns=["pair", "principle", "reannotation", "flipped", "answer", "vote", "margin"]
    )
    if merge == "logprob":
        summed = raw.groupby(["pair", "principle"], sort=True)["margin"].sum(min_count=1)
        votes = [
            "invalid" if not np.isfinite(m) else "for" if m > 0 else "against" if m < 0 else "abstain"
            for m in summed
        ]
        merged = summed.reset_index()[["pair", "principle"]].assign(vote=votes)
    else:
        merged = (
            raw.groupby(["pair", "principle"], sort=True)["vote"]
            .agg(lambda v: merge_reannotations(list(v), merge))
            .reset_index()
        )
    return raw, merged


def count_votes(merged: pd.DataFrame, principles: Sequence[str]) -> pd.DataFrame:
    """Counts per principle of each merged outcome in :data:`VOTE_KINDS`, plus ``total``.

    Returns:
        ``(n_principles, 8)`` table: ``principle`` (text), ``for``, ``against``, ``both``, ``neither``, ``abstain``,
        ``invalid``, ``total`` (int64), indexed ``0..n_principles-1``.
    """
    import pandas as pd

    table = pd.DataFrame(0, index=range(len(principles)), columns=list(VOTE_KINDS), dtype=np.int64)
    if len(merged):
        unknown = set(merged["vote"]) - set(VOTE_KINDS)
        if unknown:
            raise ValueError(f"vote values must be in {VOTE_KINDS}, got {sorted(unknown)}")
        counts = merged.groupby(["principle", "vote"]).size()
        for (p, v), n in counts.items():
            table.loc[int(p), v] = int(n)
    table.insert(0, "principle", list(principles))
    table["total"] = table[list(VOTE_KINDS)].sum(axis=1)
    return table


# ----------------------------------------------------------------------------------------------------------------
# Stage 5: filter and rank
# ----------------------------------------------------------------------------------------------------------------


def filter_principles(
    counts: pd.DataFrame,
    *,
    max_principles: int | None = 5,
    min_relevance: float = 0.1,
    require_majority_true: bool = True,
    require_majority_valid: bool = True,
    require_majority_relevant: bool = False,
    order_by: Literal["for_minus_against", "for"] = "for_minus_against",
    ratio_to_cluster_again: float = 1.5,
    embed: Callable[[list[str]], np.ndarray] | None = None,
    seed: int = 0,
    votes: pd.DataFrame | None = None,
    dedup_similarity: float | None = 0.7,
    dedup_agreement: float = 0.9,
) -> pd.DataFrame:
    """Stage 5: keep the principles the votes support and rank them (Section 3, step 5).

    A principle is kept when (each rule switchable):

    - majority true: ``for > against``;
    - relevance: ``for >= min_relevance * total`` (the official code's rule: counts only ``for`` votes);
    - majority valid: ``invalid < total - invalid``;
    - majority relevant (off by default): ``for + against > both + neither + abstain``.

    Kept principles are sorted by ``for - against`` (or ``for``), ties by their row order. With ``embed`` and
    ``votes`` given (as :func:`run_icai` does), a second deduplication follows (:func:`merge_near_duplicates`, not in
    the paper): a principle that restates a better-ranked one (embedding similarity >= ``dedup_similarity`` and the
    same votes on at least ``dedup_agreement`` of the pairs) is dropped, whether or not more than ``max_principles``
    pass. When
    ``max_principles`` is set, the first ``floor(ratio_to_cluster_again * max_principles)`` go on; if more than
    ``max_principles`` remain they are clustered into ``max_principles`` clusters by KMeans on ``embed`` and the
    best-ranked of each cluster is kept, still in rank order.

    Args:
        counts: the table from :func:`count_votes`.
        max_principles: constitution size ``n`` (``None``: keep all that pass).
        embed: embedder for the near-duplicate merge and the second clustering (needed when more than
            ``max_principles`` pass).
        votes: merged votes (``pair``, ``principle`` = row of ``counts``, ``vote``) from :func:`vote`; without them
            (or without ``embed``) no near-duplicate is merged.
        dedup_similarity: cosine threshold of the near-duplicate merge (``None``: off).

    Returns:
        The kept rows of ``counts`` in rank order, with a ``score`` column; index = principle id.
        ``.attrs["merged_into"]`` maps each principle dropped as a near-duplicate to the one kept instead.

    Raises:
        ValueError: bad arguments; ``embed`` missing when the second clustering is needed.
    """
    check_float("min_relevance", min_relevance, low=0.0, high=1.0)
    check_choice("order_by", order_by, ("for_minus_against", "for"))
    check_float("ratio_to_cluster_again", ratio_to_cluster_again, low=1.0)
    if max_principles is not None:
        check_int("max_principles", max_principles, low=1)
    missing = [c for c in (*VOTE_KINDS, "principle", "total") if c not in counts.columns]
    if missing:
        raise ValueError(f"counts lacks column(s) {missing} (make it with count_votes)")
    c = counts
    keep = np.ones(len(c), dtype=bool)
    if require_majority_true:
        keep &= (c["for"] > c["against"]).to_numpy()
    keep &= (c["for"] >= min_relevance * c["total"]).to_numpy()
    if require_majority_valid:
        keep &= (c["invalid"] < c["total"] - c["invalid"]).to_numpy()
    if require_majority_relevant:
        keep &= ((c["for"] + c["against"]) > (c["both"] + c["neither"] + c["abstain"])).to_numpy()
    kept = c[keep].copy()
    kept["score"] = kept["for"] - kept["against"] if order_by == "for_minus_against" else kept["for"]
    kept = kept.sort_values("score", ascending=False, kind="stable")
    merged_into: dict[int, int] = {}
    if embed is not None and votes is not None and dedup_similarity is not None:
        kept, merged_into = merge_near_duplicates(
            kept, embed, votes, min_similarity=dedup_similarity, min_agreement=dedup_agreement
        )
    if max_principles is not None:
        kept = kept.iloc[: math.floor(ratio_to_cluster_again * max_principles)]
    if max_principles is not None and len(kept) > max_principles:
        if embed is None:
            raise ValueError(
                f"{len(kept)} principles pass but max_principles={max_principles}: pass embed= for the second "
                "clustering"
            )
        labels = cluster_principles(list(kept["principle"]), embed, max_principles, seed=seed)
        first: dict[int, int] = {}
        for pos, lab in enumerate(labels):
            first.setdefault(int(lab), pos)
        kept = kept.iloc[sorted(first.values())]
    kept = kept.copy()
    kept.attrs["merged_into"] = merged_into
    return kept


def merge_near_duplicates(
    ranked: pd.DataFrame,
    embed: Callable[[list[str]], np.ndarray],
    votes: pd.DataFrame,
    *,
    min_similarity: float = 0.7,
    min_agreement: float = 0.9,
) -> tuple[pd.DataFrame, dict[int, int]]:
    """The second deduplication (after the filter; not in the paper): drop principles that restate a better-ranked
    one, so that paraphrases of one rule do not fill the constitution when no more than ``n`` pass.

    Same embedder and merge rule as the first deduplication (:func:`cluster_principles` then one principle per
    group), on the full principle texts, with the filter's choice of the survivor: ``ranked`` is walked in rank
    order and a principle joins the group of the first kept one it is a near-duplicate of; the best-ranked member
    of each group stays. Near-duplicates: cosine similarity of the embeddings ``>= min_similarity`` and the same
    merged vote on at least ``min_agreement`` of the pairs where either of the two voted ``for`` or ``against``.

    The vote check is there because embeddings alone cannot tell a paraphrase from an inverse or a sibling rule:
    with all-MiniLM-L6-v2 (full texts, "Select the response that ..."), paraphrases of one rule score 0.70-0.99 and
    unrelated rules about 0.45-0.65, but "...is shorter" vs "...is longer" scores 0.93 and "...is more
    comprehensive" vs "...is more helpful" 0.85; a paraphrase selects the same text on the same pairs, an inverse
    the other one. The default threshold 0.7 is set for that embedder; TF-IDF scores paraphrases high only when
    they share most words, so with :class:`~iclr25_icai.TfidfEmbedder` few are merged.

    Args:
        ranked: kept rows of :func:`count_votes`'s table in rank order (index = principle id).
        embed: ``fn(list[str]) -> (n, dim)``.
        votes: merged votes (``pair``, ``principle`` = index of ``ranked``, ``vote``) from :func:`vote`.

    Returns:
        ``(rows of ranked that stay, in order; {dropped principle id: id of the principle kept instead})``.

    Raises:
        ValueError: embeddings of the wrong shape or non-finite.
    """
    check_float("min_similarity", min_similarity, low=-1.0, high=1.0)
    check_float("min_agreement", min_agreement, low=0.0, high=1.0)
    ids = [int(i) for i in ranked.index]
    if len(ids) < 2:
        return ranked, {}
    emb = np.asarray(embed([str(p) for p in ranked["principle"]]), dtype=np.float64)
    if emb.ndim != 2 or emb.shape[0] != len(ids):
        raise ValueError(f"embed returned shape {emb.shape}, expected ({len(ids)}, dim)")
    if not np.isfinite(emb).all():
        raise ValueError("embed returned non-finite values")
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    emb = emb / np.where(norms > 0, norms, 1.0)
    sim = emb @ emb.T
    table = votes.pivot(index="principle", columns="pair", values="vote")

    def same_votes(i: int, j: int) -> bool:
        if ids[i] not in table.index or ids[j] not in table.index:
            return False
        a, b = table.loc[ids[i]].to_numpy(dtype=object), table.loc[ids[j]].to_numpy(dtype=object)
        decisive = np.isin(a, ["for", "against"]) | np.isin(b, ["for", "against"])
        return bool(decisive.any()) and float((a[decisive] == b[decisive]).mean()) >= min_agreement

    stay: list[int] = []
    merged: dict[int, int] = {}
    for i in range(len(ids)):
        home = next((k for k in stay if sim[i, k] >= min_similarity and same_votes(i, k)), None)
        if home is None:
            stay.append(i)
        else:
            merged[ids[i]] = ids[home]
    return ranked.iloc[stay], merged


@dataclass(frozen=True)
class Constitution:
    """A ranked list of principles; ``str()`` gives the paper's ``"1. ...\\n2. ..."`` form."""

    principles: tuple[str, ...]

    def __str__(self) -> str:
        return "\n".join(f"{i}. {p}" for i, p in enumerate(self.principles, start=1))

    def to_markdown(self) -> str:
        """A markdown document with the numbered principles."""
        body = str(self) if self.principles else "_(empty: no principle passed the filter)_"
        return f"# Constitution\n\n{body}\n"


# ----------------------------------------------------------------------------------------------------------------
# Reconstruction (the objective)
# ----------------------------------------------------------------------------------------------------------------


def annotator_messages(
    input_text: str, first: str, second: str, constitution: Constitution | None
) -> list[dict[str, str]]:
    """The annotator prompt: texts first, then (optionally) the constitution, then the question."""
    body = f"{_input_block(input_text)}Response A: {first}\n\nResponse B: {second}\n\n"
    if constitution is not None and constitution.principles:
        body += (
            "Select the response according to these rules (use the ones that apply; if none applies, choose as you "
            f"normally would):\n{constitution}\n"
        )
    else:
        body += "Which response is better?\n"
    return [{"role": "user", "content": body + "Answer with one letter: A or B."}]


def _letter(reply: str) -> str | None:
    m = re.search(r"\b(?:Response\s+|Output\s+\()?([AB])\b", reply.strip())
    return m.group(1) if m else None


def reconstruct(
    constitution: Constitution | Sequence[str] | None,
    pairs: pd.DataFrame,
    backend: LLMBackend,
    *,
    orders: Literal["both", "random"] = "both",
    mode: Literal["auto", "json", "choice"] = "auto",
    seed: int = 0,
) -> pd.DataFrame:
    """Annotate ``pairs`` with an LLM prompted with ``constitution`` (``None``: the default annotator) and compare
    with the labels (Section 3: ``agreement(p_o, p_M(c))``; Section 4 reports it with and without ``c``).

    ``orders="both"`` shows each pair in both orders: in ``choice`` mode the ``A - B`` log-probability margins of
    the two orders are summed (position bias cancels); in chat mode (``json``) the two letters must agree, else the
    pair is a ``tie``. ``orders="random"`` shows one random order.

    ``pairs`` is checked and normalised exactly as :func:`run_icai` does (:func:`validate_pairs`): ``a``/``b``
    labels mean ``text_a``/``text_b``, ``input`` is optional, tie rows are dropped; so the raw table a user gave
    ``run_icai`` can be given here too.

    Returns:
        ``(n_pairs, 3)`` table, one row per validated pair (ties dropped, index ``0..n-1``): ``predicted``
        (``text_a``/``text_b``/``tie``/``invalid``), ``preferred_text`` (normalised), ``agree`` (bool; ties and
        invalid count as disagreement). ``table["agree"].mean()`` is the agreement.

    Raises:
        ValueError: an invalid pairs table (see :func:`validate_pairs`).
    """
    return reconstruct_many({"c": constitution}, pairs, backend, orders=orders, mode=mode, seed=seed)["c"]


def reconstruct_many(
    constitutions: Mapping[str, Constitution | Sequence[str] | None],
    pairs: pd.DataFrame,
    backend: LLMBackend,
    *,
    orders: Literal["both", "random"] = "both",
    mode: Literal["auto", "json", "choice"] = "auto",
    seed: int = 0,
) -> dict[str, pd.DataFrame]:
    """:func:`reconstruct` for several constitutions at once (same shown orders for all), one table per name.

    In ``choice`` mode all prompts go to the backend in one call, ordered pair by pair, so that the annotators of
    one pair share the prompt prefix (the two texts) and, with the local judge, its key/value cache. ``pairs`` goes
    through :func:`validate_pairs` first, as in :func:`run_icai`.
    """
    import pandas as pd

    pairs = validate_pairs(pairs)
    check_choice("orders", orders, ("both", "random"))
    check_choice("mode", mode, ("auto", "json", "choice"))
    names = list(constitutions)
    if not names:
        raise ValueError("constitutions is empty: give at least one (None = the default annotator)")
    cons = {
        n: c if c is None or isinstance(c, Constitution) else Constitution(tuple(str(p) for p in c))
        for n, c in constitutions.items()
    }
    scorer = hasattr(backend, "choice_logprobs")
    if mode == "auto":
        mode = "choice" if scorer else "json"
    if mode == "choice" and not scorer:
        raise ValueError(
            f"mode='choice' needs a backend with choice_logprobs; {backend.model_name!r} has none"
        )
    rng = np.random.default_rng(seed)
    shown: list[list[bool]] = []
    prompts = []  # pair-major: pair, shown order, constitution
    for _, row in pairs.iterrows():
        flips = [False, True] if orders == "both" else [bool(rng.integers(2))]
        shown.append(flips)
        for f in flips:
            first, second = (row["text_b"], row["text_a"]) if f else (row["text_a"], row["text_b"])
            prompts += [annotator_messages(row["input"], first, second, cons[n]) for n in names]
    predicted: dict[str, list[str]] = {n: [] for n in names}
    if mode == "choice":
        scores = backend.choice_logprobs(prompts, ["A", "B"]) if prompts else np.zeros((0, 2))
        k = 0
        for flips in shown:
            margin = dict.fromkeys(names, 0.0)  # log p(text_a) - log p(text_b), summed over the orders shown
            for f in flips:
                for n in names:
                    m = scores[k, 0] - scores[k, 1]
                    margin[n] += -m if f else m
                    k += 1
            for n in names:
                v = margin[n]
                predicted[n].append(
                    "invalid" if not np.isfinite(v) else "text_a" if v > 0 else "text_b" if v < 0 else "tie"
                )
    else:
        replies = _chat_all(backend, prompts, max_tokens=8)
        k = 0
        for flips in shown:
            votes: dict[str, set[str]] = {n: set() for n in names}
            for f in flips:
                for n in names:
                    letter = _letter(replies[k])
                    k += 1
                    if letter is None:
                        votes[n].add("invalid")
                    elif (letter == "A") != f:
                        votes[n].add("text_a")
                    else:
                        votes[n].add("text_b")
            for n in names:
                v = votes[n]
                predicted[n].append("invalid" if "invalid" in v else v.pop() if len(v) == 1 else "tie")
    out = {}
    for n in names:
        table = pd.DataFrame({"predicted": predicted[n], "preferred_text": list(pairs["preferred_text"])})
        table["agree"] = table["predicted"] == table["preferred_text"]
        out[n] = table
    return out


# ----------------------------------------------------------------------------------------------------------------
# The whole pipeline
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ICAIConfig:
    """Settings of :func:`run_icai` (paper defaults where the paper states them, Appendix experiment configs,
    except ``flips="balanced"`` with 2 reannotations against position bias, and the near-duplicate merge after the
    filter)."""

    num_principles_per_pair: int = 2
    """Principles proposed per pair (paper configs: 2)."""
    n_clusters: int = 40
    """KMeans clusters before sampling one principle each (paper synthetic configs: 40)."""
    max_principles: int = 5
    """Constitution size n (paper: 5)."""
    reannotations: int = 2
    """Votes per (pair, principle), each with its own order flip and shuffle (the paper's configs use 3; an even
    count lets ``flips="balanced"`` show every pair equally often in both orders)."""
    merge: Literal["unanimous", "majority", "logprob"] = "unanimous"
    flips: Literal["random", "balanced"] = "balanced"
    """A/B order per reannotation. ``balanced`` (default; not the paper's): the orders alternate from a random start,
    so with an even ``reannotations`` a judge's constant position bias cancels: a judge that always answers "A"
    votes for and against each pair once and merges to ``abstain``, so no principle passes on its bias. ``random``
    (the paper's) can show a pair in one order only, and such a judge then passes principles by chance."""
    vote_mode: Literal["auto", "json", "choice"] = "auto"
    vote_options: tuple[str, ...] = ("A", "B", "Both", "Neither")
    min_relevance: float = 0.1
    require_majority_true: bool = True
    require_majority_valid: bool = True
    require_majority_relevant: bool = False
    order_by: Literal["for_minus_against", "for"] = "for_minus_against"
    prefill: bool = False
    """Prefill proposal replies with "Select the response that" (local judge only)."""
    proposal_max_tokens: int = 200
    extra_candidates: tuple[str, ...] = ()
    """Principles added to the candidates after deduplication (e.g. hypotheses a user wants tested)."""
    dedup_similarity: float | None = 0.7
    """Second deduplication, after the filter (:func:`merge_near_duplicates`): two kept principles whose embeddings
    (the same embedder as the first deduplication) have cosine similarity >= this and whose votes agree on at least
    ``dedup_agreement`` of the pairs are one rule, and only the better-ranked one stays. ``None`` turns it off."""
    dedup_agreement: float = 0.9

    def __post_init__(self) -> None:
        check_int("num_principles_per_pair", self.num_principles_per_pair, low=1)
        check_int("n_clusters", self.n_clusters, low=1)
        check_int("max_principles", self.max_principles, low=1)
        check_int("reannotations", self.reannotations, low=1)
        check_choice("merge", self.merge, ("unanimous", "majority", "logprob"))
        check_choice("flips", self.flips, ("random", "balanced"))
        check_choice("vote_mode", self.vote_mode, ("auto", "json", "choice"))
        check_float("min_relevance", self.min_relevance, low=0.0, high=1.0)
        check_choice("order_by", self.order_by, ("for_minus_against", "for"))
        check_int("proposal_max_tokens", self.proposal_max_tokens, low=1)
        if self.dedup_similarity is not None:
            check_float("dedup_similarity", self.dedup_similarity, low=-1.0, high=1.0)
        check_float("dedup_agreement", self.dedup_agreement, low=0.0, high=1.0)


@dataclass
class ICAIResult:
    """Everything :func:`run_icai` computed (tables are pandas DataFrames)."""

    constitution: Constitution
    proposals: Any
    """Stage 1 table (:func:`propose_principles`)."""
    clusters: Any
    """``principle``, ``cluster`` per proposed principle."""
    candidates: list[str]
    """Stage 3 output (+ ``extra_candidates``): the principles voted on, indexed like ``counts``."""
    votes: Any
    """Stage 4 raw votes."""
    counts: Any
    """Per-candidate vote counts (:func:`count_votes`)."""
    kept: Any
    """Stage 5 output (:func:`filter_principles`)."""
    stats: dict[str, Any] = field(default_factory=dict)
    probe_counts: Any = None
    """Vote counts of the ``probes`` given to :func:`run_icai` (voted with the candidates, never kept)."""


def run_icai(
    pairs: pd.DataFrame,
    backend: LLMBackend,
    embed: Callable[[list[str]], np.ndarray],
    config: ICAIConfig | None = None,
    *,
    seed: int = 0,
    probes: Sequence[str] = (),
    log: Callable[[str], None] | None = None,
) -> ICAIResult:
    """The full ICAI algorithm (Section 3): propose → cluster → deduplicate → vote → filter → constitution.

    Args:
        pairs: preference pairs (validated here with :func:`validate_pairs`; ties dropped).
        backend: the LLM for proposal and voting (wrap it in :class:`~iclr25_icai.CachedBackend` to resume).
        embed: ``fn(list[str]) -> (n, dim)`` for both clusterings (an :class:`~iclr25_icai.Embedder`).
        config: :class:`ICAIConfig` (defaults: the paper's).
        seed: derives every random choice (KMeans, sampling per cluster, flips and shuffles).
        probes: principles voted on together with the candidates but never eligible for the constitution (a
            diagnostic: e.g. a hypothesised rule and its inverse); their counts are in ``probe_counts``.

    Returns:
        :class:`ICAIResult`. An empty constitution (no principle proposed or none passing the filter) is a valid
        result, reported in ``stats``, not an error.

    Raises:
        ValueError: invalid pairs (see :func:`validate_pairs`) or config.
    """
    import pandas as pd

    cfg = config or ICAIConfig()
    say = log or (lambda _msg: None)
    pairs = validate_pairs(pairs)
    say(f"proposing principles for {len(pairs)} pairs")
    proposals = propose_principles(
        pairs,
        backend,
        num_principles=cfg.num_principles_per_pair,
        max_tokens=cfg.proposal_max_tokens,
        prefill=cfg.prefill,
    )
    proposed = [p for p in proposals["principle"] if p]
    stats: dict[str, Any] = {
        "pairs": len(pairs),
        "proposal_failures": int((~proposals["reply_ok"]).sum()),
        "principles_proposed": len(proposed),
        "principles_distinct": len(set(proposed)),
    }
    if proposed:
        labels = cluster_principles(proposed, embed, cfg.n_clusters, seed=seed)
        candidates = deduplicate_principles(proposed, labels, seed=seed)
    else:
        labels = np.zeros(0, dtype=np.int64)
        candidates = []
    clusters = pd.DataFrame({"principle": proposed, "cluster": labels})
    candidates += [p for p in cfg.extra_candidates if p not in candidates]
    stats["candidates"] = len(candidates)
    say(f"voting on {len(candidates)} candidate principles")
    voted = candidates + [p for p in dict.fromkeys(probes) if p not in candidates]
    raw, merged = vote(
        pairs,
        voted,
        backend,
        reannotations=cfg.reannotations,
        merge=cfg.merge,
        mode=cfg.vote_mode,
        flips=cfg.flips,
        options=cfg.vote_options,
        seed=seed + 1,
    )
    counts_all = count_votes(merged, voted)
    counts = counts_all.iloc[: len(candidates)]
    probe_counts = counts_all[counts_all["principle"].isin(list(probes))]
    own = raw[raw["principle"] < len(candidates)]
    stats["invalid_votes"] = int((own["answer"] == "invalid").sum())
    kept = filter_principles(
        counts,
        max_principles=cfg.max_principles,
        min_relevance=cfg.min_relevance,
        require_majority_true=cfg.require_majority_true,
        require_majority_valid=cfg.require_majority_valid,
        require_majority_relevant=cfg.require_majority_relevant,
        order_by=cfg.order_by,
        embed=embed,
        seed=seed,
        votes=merged[merged["principle"] < len(candidates)],
        dedup_similarity=cfg.dedup_similarity,
        dedup_agreement=cfg.dedup_agreement,
    )
    constitution = Constitution(tuple(kept["principle"]))
    stats["near_duplicates_merged"] = len(kept.attrs.get("merged_into", {}))
    stats["constitution_size"] = len(constitution.principles)
    return ICAIResult(constitution, proposals, clusters, candidates, raw, counts, kept, stats, probe_counts)
