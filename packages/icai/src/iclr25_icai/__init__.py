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

from iclr25_shared import distribution_version, lazy_exports

_LAZY = {
    "CachedBackend": "_backends",
    "ChoiceBackend": "_backends",
    "EndpointUnavailable": "_backends",
    "LLMBackend": "_backends",
    "LocalChatBackend": "_backends",
    "OpenAICompatibleBackend": "_backends",
    "RETRY_STATUS": "_backends",
    "ScriptedBackend": "_backends",
    "is_retryable": "_backends",
    "status_code_of": "_backends",
    "Embedder": "_embed",
    "EndpointEmbedder": "_embed",
    "MiniLMEmbedder": "_embed",
    "TfidfEmbedder": "_embed",
    "read_alpacaeval": "_formats",
    "read_arena": "_formats",
    "read_pairs": "_formats",
    "Constitution": "_icai",
    "ICAIConfig": "_icai",
    "ICAIResult": "_icai",
    "VOTE_KINDS": "_icai",
    "cluster_principles": "_icai",
    "count_votes": "_icai",
    "deduplicate_principles": "_icai",
    "filter_principles": "_icai",
    "merge_near_duplicates": "_icai",
    "merge_reannotations": "_icai",
    "parse_principles": "_icai",
    "parse_votes": "_icai",
    "propose_principles": "_icai",
    "reconstruct": "_icai",
    "reconstruct_many": "_icai",
    "run_icai": "_icai",
    "validate_pairs": "_icai",
    "vote": "_icai",
    "RULES": "_synthetic",
    "SETTINGS": "_synthetic",
    "feature_oracle": "_synthetic",
    "make_planted_pairs": "_synthetic",
    "matches_rule": "_synthetic",
}

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

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
