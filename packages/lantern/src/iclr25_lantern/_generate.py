"""`generate`: LANTERN on Fashion-MNIST VQ tokens or SmolLM2 text."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from iclr25_lantern.cli import GENERATE_CODEBOOK
from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_lantern.cli import GenerateConfig
from iclr25_lantern._common import (
    Size,
    _check_k,
    _decode_images,
    _load_models,
    _quality,
    _train_models,
    text_rows,
)


def generate(cfg: GenerateConfig, ctx: RunContext) -> Result:
    """Generate with LANTERN on Fashion-MNIST VQ tokens (default) or SmolLM2 text."""
    relaxed = cfg.k > 0 and (cfg.lam > 1.0 if cfg.lam else cfg.delta > 0.0)
    if cfg.temperature == 0.0 and relaxed:
        ctx.log.warning(
            "temperature 0 (greedy) with LANTERN: greedy decoding degrades AR image quality (jadohu/LANTERN#6); "
            "temperature 1 is recommended"
        )
    if cfg.model == "smollm2":
        return _generate_text(cfg, ctx)
    import torch

    from iclr25_lantern._relaxed import LogitsProcessor, Relaxation, latent_proximity

    processor = LogitsProcessor(temperature=cfg.temperature, top_k=cfg.top_k, cfg_scale=cfg.cfg_scale)
    device = ctx.torch_device()
    torch.manual_seed(cfg.seed)
    if cfg.models is not None:
        models = _load_models(cfg.models, device)
    else:
        ctx.log.info("training tiny Fashion-MNIST models (pass --models DIR from `reproduce --out` to skip)")
        size = Size(3000, 150, (64, 2, 2), 250, (32, 1, 2), 150, 100, 0, 0, ())
        models = _train_models(size, GENERATE_CODEBOOK, cfg.data, cfg.seed, ctx, device)
    _check_k(cfg.k, models["vq"].codebook_size, " of the codebook in --models")
    table = latent_proximity(models["vq"].codebook.detach(), cfg.k) if cfg.k else None
    relax = Relaxation(neighbours=table, delta=cfg.delta, lam=cfg.lam or None)
    labels = torch.arange(cfg.samples) % 10
    toks, stats = _decode_images(models, labels, cfg.seed, method="sd", relax=relax, gamma=cfg.gamma,
                                 processor=processor)  # fmt: skip
    imgs, conf, _ = _quality(models, toks, labels)
    ctx.save_array("tokens", toks.numpy())
    ctx.save_array("images", imgs.numpy())
    if ctx.writes:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        cols = min(10, cfg.samples)
        rows = math.ceil(cfg.samples / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(cols, rows), squeeze=False)
        for i, ax in enumerate(axes.flat):
            if i < cfg.samples:
                ax.imshow(imgs[i].numpy(), cmap="gray", vmin=0, vmax=1)
            ax.axis("off")
        ctx.save_figure("samples.png", fig, dpi=100)
    metrics = {
        "mean_accepted_length": stats["tau"],
        "acceptance_rate": stats["acceptance"],
        "tokens_per_s": stats["tokens_per_s"],
        "classifier_confidence": float(conf.mean()),
    }
    return Result(metrics=metrics, timings={"decode": stats["seconds"]})


def _generate_text(cfg: GenerateConfig, ctx: RunContext) -> Result:
    from iclr25_lantern._relaxed import LogitsProcessor
    from iclr25_shared.models import load_causal_lm

    processor = LogitsProcessor(temperature=cfg.temperature, top_k=cfg.top_k)
    device = ctx.torch_device()
    lm = load_causal_lm(device=device)
    rows = text_rows(lm, [cfg.prompt], [(cfg.k, cfg.delta, cfg.lam or None)], processor=processor,
                     gamma=cfg.gamma, max_new_tokens=cfg.max_new_tokens, draft_layers=cfg.draft_layers,
                     samples=cfg.samples, seed=cfg.seed, log=ctx.log)  # fmt: skip
    return Result(tables={"text": rows["rows"]}, notes=rows["texts"])
