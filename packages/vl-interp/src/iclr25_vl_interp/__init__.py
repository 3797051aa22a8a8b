"""Interpreting and Editing Vision-Language Representations to Mitigate Hallucinations (ICLR 2025, arXiv:2410.02762).

Logit lens over the image-token hidden states of Hugging Face LLaVA-family models, the internal confidence ``c_o``
of object words and its spatial maps over the image-token grid, the ProjectAway edit as a removable forward hook,
and CHAIR-style hallucination metrics::

    from iclr25_vl_interp import ProjectAway, internal_confidence, object_token_ids, text_direction

    conf, maps = internal_confidence(model, inputs, [object_token_ids(tok, "cat")])
    t = text_direction(model, tok("cat", return_tensors="pt").input_ids, layer=2)
    with ProjectAway(model, [t], layer=20, alpha=1.5):
        out = model.generate(**inputs)

torch and transformers are imported only when a function that needs them runs.
"""

from iclr25_shared import distribution_version, lazy_exports

__all__ = [
    "ChairScores",
    "ProjectAway",
    "VLMParts",
    "__version__",
    "capture_hidden_states",
    "chair",
    "image_token_mask",
    "internal_confidence",
    "lens_logits",
    "localization_map",
    "logit_lens",
    "mentioned_objects",
    "object_token_ids",
    "project_away",
    "text_direction",
    "vlm_parts",
]
__version__ = distribution_version("iclr25-vl-interp")

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ChairScores": "_chair",
        "chair": "_chair",
        "mentioned_objects": "_chair",
        "ProjectAway": "_edit",
        "project_away": "_edit",
        "text_direction": "_edit",
        "VLMParts": "_lens",
        "capture_hidden_states": "_lens",
        "image_token_mask": "_lens",
        "internal_confidence": "_lens",
        "lens_logits": "_lens",
        "localization_map": "_lens",
        "logit_lens": "_lens",
        "object_token_ids": "_lens",
        "vlm_parts": "_lens",
    },
)
