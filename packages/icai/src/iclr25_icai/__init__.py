"""Inverse Constitutional AI (Findeis et al., ICLR 2025, arXiv:2406.06560): compress pairwise preferences into a
short list of principles (a constitution) that an LLM annotator uses to reconstruct the labels.

The five stages are functions over a pandas table of pairs (``text_a``, ``text_b``, ``preferred_text``, optional
``input``): :func:`propose_principles` → :func:`cluster_principles` → :func:`deduplicate_principles` → :func:`vote`
(+ :func:`count_votes`) → :func:`filter_principles`; :func:`run_icai` chains them and :func:`reconstruct` measures
how well an annotator prompted with the constitution reproduces the labels. LLMs plug in through a small protocol
(:class:`LLMBackend`): :class:`OpenAICompatibleBackend` (vLLM, llama.cpp, Ollama, OpenAI), :class:`LocalChatBackend`
(SmolLM2 or any transformers chat model; scores "A" vs "B" by next-token log-probability), :class:`ScriptedBackend`;
:class:`CachedBackend` makes any of them resumable::

    from iclr25_icai import CachedBackend, OpenAICompatibleBackend, TfidfEmbedder, run_icai, reconstruct
    llm = CachedBackend(OpenAICompatibleBackend("my-model", base_url="http://127.0.0.1:8000/v1"), "calls.jsonl")
    result = run_icai(pairs_df, llm, TfidfEmbedder())
    print(result.constitution, reconstruct(result.constitution, pairs_df, llm)["agree"].mean())

Nothing heavy is imported at ``import iclr25_icai``: pandas, sklearn, torch, transformers and httpx load inside the
functions that use them.
"""

from iclr25_icai._backends import (
    RETRY_STATUS,
    CachedBackend,
    ChoiceBackend,
    EndpointUnavailable,
    LLMBackend,
    LocalChatBackend,
    OpenAICompatibleBackend,
    ScriptedBackend,
    is_retryable,
    status_code_of,
)
from iclr25_icai._embed import Embedder, EndpointEmbedder, MiniLMEmbedder, TfidfEmbedder
from iclr25_icai._formats import read_alpacaeval, read_arena, read_pairs
from iclr25_icai._icai import (
    VOTE_KINDS,
    Constitution,
    ICAIConfig,
    ICAIResult,
    cluster_principles,
    count_votes,
    deduplicate_principles,
    filter_principles,
    merge_near_duplicates,
    merge_reannotations,
    parse_principles,
    parse_votes,
    propose_principles,
    reconstruct,
    reconstruct_many,
    run_icai,
    validate_pairs,
    vote,
)
from iclr25_icai._synthetic import RULES, SETTINGS, feature_oracle, make_planted_pairs, matches_rule
from iclr25_shared import distribution_version

__all__ = [
    "RETRY_STATUS",
    "RULES",
    "SETTINGS",
    "VOTE_KINDS",
    "CachedBackend",
    "ChoiceBackend",
    "Constitution",
    "Embedder",
    "EndpointEmbedder",
    "EndpointUnavailable",
    "ICAIConfig",
    "ICAIResult",
    "LLMBackend",
    "LocalChatBackend",
    "MiniLMEmbedder",
    "OpenAICompatibleBackend",
    "ScriptedBackend",
    "TfidfEmbedder",
    "__version__",
    "cluster_principles",
    "count_votes",
    "deduplicate_principles",
    "feature_oracle",
    "filter_principles",
    "is_retryable",
    "make_planted_pairs",
    "matches_rule",
    "merge_near_duplicates",
    "merge_reannotations",
    "parse_principles",
    "parse_votes",
    "propose_principles",
    "read_alpacaeval",
    "read_arena",
    "read_pairs",
    "reconstruct",
    "reconstruct_many",
    "run_icai",
    "status_code_of",
    "validate_pairs",
    "vote",
]
__version__ = distribution_version("iclr25-icai")
