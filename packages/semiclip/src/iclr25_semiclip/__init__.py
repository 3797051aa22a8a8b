"""SemiCLIP: semi-supervised CLIP adaptation by enforcing semantic and trapezoidal consistency (ICLR 2025).

Gan, Ye, Zhang and Wei (OpenReview 97D725GJtQ) adapt CLIP with few image–text pairs and many unlabelled images:
concepts mined from the labelled captions supervise the image tower (stage 1), then each unlabelled image gets
top-k concept pseudo-labels and a learnable surrogate caption, and a trapezoidal consistency loss regularises the
geometry of labelled and selected surrogate pairs (stage 2).

Public API (torch is imported only when a torch-based name is first used)::

    from iclr25_semiclip import trapezoidal_consistency_loss, mine_concepts
    l_in, l_cross = trapezoidal_consistency_loss(image_emb, text_emb)  # (N, D) unit-norm each
    concepts = mine_concepts(captions, min_count=5)
"""

from __future__ import annotations

from iclr25_shared import distribution_version, lazy_exports

_LAZY = {
    "STOPWORDS": "_concepts",
    "concept_multi_hot": "_concepts",
    "mine_concepts": "_concepts",
    "words": "_concepts",
    "clip_contrastive_loss": "_losses",
    "normalize_multi_hot": "_losses",
    "select_top_fraction": "_losses",
    "soft_cross_entropy": "_losses",
    "topk_uniform_targets": "_losses",
    "trapezoidal_consistency_loss": "_losses",
    "ImageTower": "_model",
    "SemiCLIPHead": "_model",
    "SurrogateCaptions": "_model",
    "TextTower": "_model",
    "load_image_tower": "_model",
    "load_text_tower": "_model",
    "strong_view": "_model",
    "Features": "_stages",
    "Settings": "_stages",
    "evaluate": "_stages",
    "retrieval_recall": "_stages",
    "store_concept_logits": "_stages",
    "train_stage1": "_stages",
    "train_stage2": "_stages",
}

__all__ = ["STOPWORDS", "__version__", "concept_multi_hot", "mine_concepts", "words", *sorted(_LAZY)]
__version__ = distribution_version("iclr25-semiclip")

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
