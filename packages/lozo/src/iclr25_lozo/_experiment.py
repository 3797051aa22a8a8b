"""What the commands share: the optimizer for a method name, the training loop, the data, the label-word task,
the model loader and the loss plot. The commands live in ``_finetune.py``, ``_reproduce.py`` and ``_bench.py``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from iclr25_lozo._optimizer import LOZO, MeZO
from iclr25_lozo._task import (
    SENTIMENT_LABEL_WORDS,
    SENTIMENT_TEMPLATE,
    WIKI_LABEL_WORDS,
    WIKI_TEMPLATE,
    LabelWordTask,
)
from iclr25_lozo.cli import OPTIMIZERS
from iclr25_shared.cli import progress
from iclr25_shared.results import save_figure

__all__ = ["make_optimizer", "train_steps"]


def make_optimizer(
    name: str,
    model: nn.Module,
    *,
    lr: float,
    eps: float,
    rank: int,
    interval: int,
    momentum: float,
    weight_decay: float,
    seed: int,
) -> torch.optim.Optimizer:
    """The optimizer ``name`` over ``model``'s trainable parameters (weight decay grouped by module type)."""
    if name == "lozo":
        return LOZO(model, lr=lr, eps=eps, rank=rank, interval=interval, weight_decay=weight_decay, seed=seed)
    if name == "lozo-m":
        return LOZO(
            model,
            lr=lr,
            eps=eps,
            rank=rank,
            interval=interval,
            momentum=momentum,
            weight_decay=weight_decay,
            seed=seed,
        )
    if name == "mezo":
        return MeZO(model, lr=lr, eps=eps, weight_decay=weight_decay, seed=seed)
    if name == "adam":
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("adam: no trainable parameters")
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}; got {name!r}")


def train_steps(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: Any,
    draw_batch: Any,
    steps: int,
    *,
    quiet: bool,
    desc: str,
) -> dict[str, Any]:
    """Run ``steps`` optimizer steps; zeroth-order optimizers get a closure, others a backward pass.

    Returns:
        ``losses`` (per step), ``forward_passes``, ``seconds``, ``skipped_steps``.
    """
    zeroth_order = isinstance(optimizer, (LOZO, MeZO))
    losses: list[float] = []
    forwards = 0
    start = time.perf_counter()
    for _ in progress(range(steps), total=steps, desc=desc, quiet=quiet):
        batch = draw_batch()
        if zeroth_order:
            loss = optimizer.step(lambda b=batch: loss_fn(b))
            forwards += 2
        else:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(batch)
            loss.backward()
            optimizer.step()
            forwards += 3  # one forward plus a backward counted as two forward-equivalents
        losses.append(float(loss.detach()) if torch.is_tensor(loss) else float(loss))
    return {
        "losses": losses,
        "forward_passes": forwards,
        "seconds": time.perf_counter() - start,
        "skipped_steps": getattr(optimizer, "skipped_steps", 0),
    }


def _load_data(task: str, data_path: str = "", neutral_margin: float = 0.5) -> Any:
    """The task's labelled texts (:class:`iclr25_shared.data.TextClassification`).

    Raises:
        InputError: ``data_path`` (``--data-path``) is not the vaderSentiment sdist.
        DatasetUnavailable: the default source is missing (the message gives the fetch command).
    """
    if task == "sentiment":
        from iclr25_lozo._data import movie_review_sentiment

        return movie_review_sentiment(data_path or None, neutral_margin=neutral_margin, label="--data-path")
    from iclr25_shared.data import wiki_summaries

    return wiki_summaries()


def _label_task(task: str, tokenizer: Any, classes: list[str], max_text_tokens: int) -> LabelWordTask:
    words, template = (
        (SENTIMENT_LABEL_WORDS, SENTIMENT_TEMPLATE)
        if task == "sentiment"
        else (WIKI_LABEL_WORDS, WIKI_TEMPLATE)
    )
    return LabelWordTask(
        tokenizer, classes, label_words=dict(words), template=template, max_text_tokens=max_text_tokens
    )


def _load_lm(model: str, task: str, data: Any, device: Any, dtype: str, seed: int) -> Any:
    from iclr25_lozo._models import load_model

    words = SENTIMENT_LABEL_WORDS if task == "sentiment" else WIKI_LABEL_WORDS
    return load_model(
        model, texts=data.texts, label_words=list(words.values()), device=device, dtype=dtype, seed=seed
    )


def _plot_losses(curves: dict[str, list[float]], path: Path, title: str, xlabel: str = "step") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, ys in curves.items():
        ys = np.asarray(ys, dtype=float)
        window = max(1, len(ys) // 20)
        smooth = np.convolve(ys, np.ones(window) / window, mode="valid") if len(ys) >= window else ys
        ax.plot(np.arange(len(smooth)) + window - 1, smooth, label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("training loss (moving average)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)
