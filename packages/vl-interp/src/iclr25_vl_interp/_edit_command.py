"""``edit``: ProjectAway on the object words of a local HF LLaVA-family model (or the tiny random smoke model);
captions and internal confidence before and after the edit."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

from iclr25_shared.cli import Result, RunContext, UsageError
from iclr25_vl_interp._lens import internal_confidence, vlm_parts
from iclr25_vl_interp._loading import dtype_name, load_model, word_ids

if TYPE_CHECKING:
    from iclr25_vl_interp.cli import EditConfig

__all__ = ["edit"]


def _mentions(text: str, word: str) -> int:
    return len(re.findall(r"\b" + re.escape(word.lower()) + r"(?:e?s)?\b", text.lower()))


def edit(cfg: EditConfig, ctx: RunContext) -> Result:
    """ProjectAway on the objects: captions and internal confidence before and after the edit."""
    import torch

    from iclr25_vl_interp._edit import ProjectAway, text_direction

    model, tok, inputs, label = load_model(cfg, ctx)
    parts = vlm_parts(model)
    L = parts.num_layers
    if cfg.image_layer > L:
        raise UsageError(f"image_layer must be an integer in [1, {L}] for this model, got {cfg.image_layer}")
    if cfg.text_layer > L:
        raise UsageError(f"text_layer must be an integer in [0, {L}] for this model, got {cfg.text_layer}")
    token_ids = word_ids(tok, cfg.objects)
    bos = getattr(tok, "bos_token_id", None)
    device = inputs["input_ids"].device
    dirs = []
    for ids in token_ids:
        prompt = ([bos] if bos is not None else []) + list(ids)
        dirs.append(text_direction(model, torch.tensor([prompt], device=device), layer=cfg.text_layer))

    def caption() -> str:
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=cfg.max_new_tokens, do_sample=False)
        return tok.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)

    t0 = time.perf_counter()
    conf0, _ = internal_confidence(model, inputs, token_ids)
    cap0 = caption()
    with ProjectAway(model, dirs, layer=cfg.image_layer, alpha=cfg.alpha) as hook:
        conf1, _ = internal_confidence(model, inputs, token_ids)
        cap1 = caption()
        edited = hook.edited_rows
    rows = [
        {
            "object": w,
            "c_o_before": round(float(conf0[o]), 6),
            "c_o_after": round(float(conf1[o]), 6),
            "mentions_before": _mentions(cap0, w),
            "mentions_after": _mentions(cap1, w),
        }
        for o, w in enumerate(cfg.objects)
    ]
    return Result(
        metrics={
            "model": label,
            "dtype": dtype_name(model),
            "caption_before": cap0,
            "caption_after": cap1,
            "edited_image_rows_lens_and_prefill": edited,
        },
        tables={"project_away": rows},
        timings={"edit": time.perf_counter() - t0},
        notes=[
            f"ProjectAway l_I={cfg.image_layer}, l_T={cfg.text_layer}, alpha={cfg.alpha} (arXiv:2410.02762 Sec. 5.1)"
        ],
    )
