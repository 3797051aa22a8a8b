"""CALD: cross-architecture layerwise distillation (He & Garner, ICLR 2025, arXiv:2410.06846).

Convert a pretrained HF transformer (Llama or BERT family) into a linear-time model by replacing every attention
module with a Linformer or a pure-torch Mamba mixer while keeping every other weight, then fine-tune it on the
target task with layerwise hidden-state distillation from a teacher (unguided, target-, trajectory-, waypoint-
guided, or hybrid)::

    from iclr25_cald import Guidance, convert, distill
    student = convert(teacher_model, "linformer", k=64, max_seq_len=256).model
    distill(student, batches, steps=1000, guidance=Guidance("target", alpha_layer=1.0), teacher=teacher_model)

Nothing heavy is imported at ``import iclr25_cald``: the names below load torch/transformers on first use.
"""

from __future__ import annotations

from iclr25_shared import distribution_version, lazy_exports

__version__ = distribution_version("iclr25-cald")

_LAZY = {
    "convert": "_convert",
    "Conversion": "_convert",
    "ConversionReport": "_convert",
    "load_converted": "_convert",
    "load_teacher_weights": "_convert",
    "save_converted": "_convert",
    "FAMILIES": "_convert",
    "MIXERS": "_convert",
    "DEFAULT_MAX_SEQ_LEN": "_convert",
    "predicts_next_token": "_convert",
    "LinformerProjection": "_mixers",
    "MambaConfig": "_mixers",
    "MambaMixer": "_mixers",
    "MambaState": "_mixers",
    "selective_scan": "_mixers",
    "Guidance": "_distill",
    "DistillResult": "_distill",
    "STRATEGIES": "_distill",
    "distill": "_distill",
    "layerwise_loss": "_distill",
    "logits_kl": "_distill",
    "RecurrentDecoder": "_generate",
    "generate": "_generate",
}

__all__ = [*sorted(_LAZY), "__version__"]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
