"""``train``: train one variant on the Wikipedia summaries; its loss curve and final validation loss."""

from __future__ import annotations

from typing import TYPE_CHECKING

from iclr25_hyper_connections import _experiment as ex
from iclr25_hyper_connections._variants import Variant
from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_hyper_connections.cli import TrainConfig

__all__ = ["train"]


def train(cfg: TrainConfig, ctx: RunContext) -> Result:
    """Train one variant; its loss curve and final validation loss (nats/token)."""
    device = ex._setup(cfg, ctx)
    variant = Variant.parse(cfg.variant)
    corpus = ex.load_corpus(cfg.tokenizer, max_docs=cfg.max_docs)
    ex._check_fits(corpus, cfg.context, cfg.max_docs)
    ctx.log.info(
        f"{variant.name}: {len(corpus.train):,} train / {len(corpus.val):,} val tokens ({cfg.tokenizer}), {device}"
    )
    res = ex.train_lm(
        corpus,
        ex._spec(cfg),
        variant,
        seed=cfg.seed,
        device=device,
        progress=lambda it: ctx.progress(it, total=cfg.steps, desc=variant.name),
        **ex._train_kwargs(cfg),
    )
    ctx.log.info(
        f"{variant.name}: final validation loss {res.final_val_loss:.4f} nats/token, {res.num_params:,} parameters"
    )
    return Result(
        metrics={
            "variant": variant.name,
            "final_val_loss": res.final_val_loss,
            "num_params": res.num_params,
            "layer_similarity": res.layer_similarity,
        },
        tables={"loss curve": res.curve},
        timings={"train": res.seconds},
    )
