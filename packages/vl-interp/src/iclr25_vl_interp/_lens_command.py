"""``lens``: the internal confidence of object words over the image tokens, per layer, with spatial maps, on a local
HF LLaVA-family model (or the tiny random smoke model)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from iclr25_shared.cli import Result, RunContext
from iclr25_vl_interp._lens import internal_confidence, localization_map
from iclr25_vl_interp._loading import dtype_name, load_model, word_ids

if TYPE_CHECKING:
    from iclr25_vl_interp.cli import LensConfig

__all__ = ["lens"]


def _rows(objects, token_ids, tok, conf, maps) -> tuple[list[dict[str, Any]], Any]:
    try:
        grid = localization_map(maps)
    except ValueError:
        grid = None
    rows = []
    for o, word in enumerate(objects):
        flat = int(maps[o].argmax())
        layer, pos = divmod(flat, maps.shape[2])
        row = {
            "object": word,
            "tokens": " ".join(tok.convert_ids_to_tokens(token_ids[o])),
            "c_o": round(float(conf[o]), 6),
            "best_layer": layer,
            "best_image_token": pos,
        }
        if grid is not None:
            row["best_cell_rc"] = f"{pos // grid.shape[2]},{pos % grid.shape[2]}"
        rows.append(row)
    return rows, grid


def _save_maps(ctx: RunContext, name: str, objects: tuple[str, ...], maps: Any, grid: Any) -> None:
    ctx.save_array(f"{name}_layer_position", maps.numpy())
    if grid is None:
        return
    ctx.save_array(f"{name}_grid", grid.numpy())
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, len(objects), figsize=(3 * len(objects), 3), squeeze=False)
    for ax, word, m in zip(axes[0], objects, grid.numpy(), strict=True):
        im = ax.imshow(m, cmap="viridis")
        ax.set_title(word)
        ax.set_xticks([])
        ax.set_yticks([])
        fig.colorbar(im, ax=ax, fraction=0.046)
    ctx.save_figure(f"{name}.png", fig)


def lens(cfg: LensConfig, ctx: RunContext) -> Result:
    """Internal confidence of each object word, its best layer and image token, and its map over the grid."""
    model, tok, inputs, label = load_model(cfg, ctx)
    token_ids = word_ids(tok, cfg.objects)
    t0 = time.perf_counter()
    conf, maps = internal_confidence(model, inputs, token_ids, apply_final_norm=cfg.final_norm)
    rows, grid = _rows(cfg.objects, token_ids, tok, conf, maps)
    _save_maps(ctx, "maps", cfg.objects, maps, grid)
    return Result(
        metrics={
            "model": label,
            "dtype": dtype_name(model),
            "layers": int(maps.shape[1]),
            "image_tokens": int(maps.shape[2]),
        },
        tables={"internal_confidence": rows},
        timings={"lens": time.perf_counter() - t0},
        notes=[
            "c_o = max over layers and image tokens of the logit-lens probability of the word (arXiv:2410.02762)"
        ],
    )
