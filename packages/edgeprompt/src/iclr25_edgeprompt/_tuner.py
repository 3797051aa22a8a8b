"""Prompt tuning with a truly frozen backbone.

:class:`PromptTuner` keeps the backbone in ``eval()`` mode with ``requires_grad=False`` for the whole run (dropout
off, BatchNorm running statistics untouched), and optimises only the prompt and the linear head with Adam on the
cross-entropy of the head's *logits*. The official code (github.com/xbfu/EdgePrompt, ``downstream_task.py``) leaves the backbone in train mode, so its
"frozen" GNN drifts; ProG's port also puts the GNN's parameters in the optimiser and ends the head in a Softmax
(github.com/sheldonresearch/ProG, ``prompt_graph/prompt/EdgePrompt.py`` and its tasker). Neither happens here.

References:
    arXiv:2503.00750 §5.1 (only prompts and a linear classifier are trained; Adam, lr 1e-3).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader

from iclr25_edgeprompt._backbone import GNNEncoder, check_values
from iclr25_edgeprompt._prompt import (
    DEFAULT_INIT,
    GPF,
    EdgePrompt,
    EdgePromptPlus,
    GPFPlus,
    NodePrompt,
    PromptModule,
)
from iclr25_shared.checks import check_float, check_int

__all__ = ["PROMPTS", "PromptTuner", "TuneSettings", "make_prompt"]

PROMPTS = ("none", "gpf", "gpf-plus", "edgeprompt", "edgeprompt+")


def make_prompt(
    name: str, backbone: GNNEncoder, *, num_anchors: int = 5, num_basis: int = 10, init: str = DEFAULT_INIT
) -> nn.Module | None:
    """Build the prompt ``name`` sized for ``backbone``.

    Args:
        name: one of ``none`` (classifier only), ``gpf``, ``gpf-plus``, ``edgeprompt``, ``edgeprompt+``.
        backbone: fixes the dims (per-layer input dims for edge prompts, input dim for node prompts).
        num_anchors: anchors per layer for EdgePrompt+.
        num_basis: basis prompts for GPF-plus.
        init: prompt initialisation, ``glorot``, ``zero`` or ``small`` (:func:`init_prompt`).

    Raises:
        ValueError: unknown ``name``.
    """
    if name == "none":
        return None
    if name == "gpf":
        return GPF(backbone.config.in_channels, init=init)
    if name == "gpf-plus":
        return GPFPlus(backbone.config.in_channels, num_basis, init=init)
    if name == "edgeprompt":
        return EdgePrompt(backbone.config.num_layers, backbone.layer_dims, init=init)
    if name == "edgeprompt+":
        return EdgePromptPlus(backbone.config.num_layers, backbone.layer_dims, num_anchors, init=init)
    raise ValueError(f"prompt must be one of {', '.join(PROMPTS)}; got {name!r}")


@dataclass(frozen=True, kw_only=True)
class TuneSettings:
    """Optimisation settings of :meth:`PromptTuner.fit` (official defaults: Adam, lr 1e-3, wd 0, batch 32).

    Attributes:
        epochs: passes over the training graphs.
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        batch_size: graphs per step.
    """

    epochs: int = 100
    lr: float = 1e-3
    weight_decay: float = 0.0
    batch_size: int = 32

    def __post_init__(self) -> None:
        check_int("epochs", self.epochs, low=1)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)
        check_float("weight_decay", self.weight_decay, low=0.0)
        check_int("batch_size", self.batch_size, low=1)


class PromptTuner(nn.Module):
    """A frozen backbone, a prompt and a linear head; ``forward(batch) -> logits [B, C]``.

    Construction freezes ``backbone`` in place: ``eval()`` and ``requires_grad_(False)``. ``train()`` on the tuner
    switches the prompt and head only; the backbone stays in eval mode.

    Args:
        backbone: a :class:`GNNEncoder` (pre-trained).
        prompt: an edge prompt (EdgePrompt, EdgePromptPlus), a node prompt (GPF, GPFPlus), or None (classifier only).
        head: maps the pooled ``[B, hidden]`` embedding to ``[B, C]`` logits; usually ``nn.Linear(hidden, C)``. It
            must not end in a softmax: the loss is cross-entropy on logits.

    Raises:
        TypeError: ``backbone`` is not a GNNEncoder, ``prompt`` is not a prompt module, ``head`` not a Module.
        ValueError: the prompt's dims do not match the backbone's (per-layer input dims for edge prompts, input
            feature dim for node prompts), or the head contains a Softmax.

    References:
        arXiv:2503.00750 §4 and §5.1.
    """

    def __init__(self, backbone: GNNEncoder, prompt: nn.Module | None, head: nn.Module) -> None:
        super().__init__()
        if not isinstance(backbone, GNNEncoder):
            raise TypeError(f"backbone must be a GNNEncoder, got {type(backbone).__name__}")
        if prompt is not None and not isinstance(prompt, (PromptModule, NodePrompt)):
            raise TypeError(
                f"prompt must be an edge prompt, a node prompt or None; got {type(prompt).__name__}"
            )
        if not isinstance(head, nn.Module):
            raise TypeError(f"head must be an nn.Module, got {type(head).__name__}")
        if isinstance(prompt, PromptModule) and prompt.dims != backbone.layer_dims:
            raise ValueError(
                f"prompt dims {prompt.dims} do not match the backbone's layer input dims {backbone.layer_dims} "
                f"({backbone.config.num_layers} layers)"
            )
        if isinstance(prompt, NodePrompt) and prompt.in_channels != backbone.config.in_channels:
            raise ValueError(
                f"node prompt in_channels={prompt.in_channels} does not match the backbone's input dim "
                f"{backbone.config.in_channels}"
            )
        if any(isinstance(m, (nn.Softmax, nn.LogSoftmax)) for m in head.modules()):
            raise ValueError(
                "head must output logits (no Softmax/LogSoftmax): the loss is cross-entropy on logits"
            )
        backbone.eval()
        backbone.requires_grad_(False)
        self.backbone = backbone
        self.prompt = prompt
        self.head = head

    def train(self, mode: bool = True) -> PromptTuner:
        super().train(mode)
        self.backbone.eval()
        return self

    def trainable_parameters(self) -> list[nn.Parameter]:
        """The prompt's and the head's parameters (never the backbone's)."""
        params = list(self.head.parameters())
        if self.prompt is not None:
            params = list(self.prompt.parameters()) + params
        return params

    def embed(self, batch: Data | Batch) -> Tensor:
        """Mean-pooled prompted embeddings ``[B, hidden]``."""
        b = getattr(batch, "batch", None)
        return self.backbone.embed(
            batch.x, batch.edge_index, b, self.prompt, num_graphs=batch.num_graphs if b is not None else None
        )

    def forward(self, batch: Data | Batch) -> Tensor:
        return self.head(self.embed(batch))

    def fit(
        self,
        graphs: Sequence[Data],
        settings: TuneSettings | None = None,
        *,
        seed: int = 0,
        callback: Callable[[int, float], None] | None = None,
        cache_embeddings: bool = True,
    ) -> list[float]:
        """Train prompt + head on ``graphs`` (each with ``y [1]``); return the mean loss of each epoch.

        Shuffling uses a ``torch.Generator`` seeded with ``seed``. ``callback(epoch, loss)`` runs after each epoch.
        Without a prompt (classifier only) and with ``cache_embeddings``, the frozen backbone embeds every graph
        once and the head trains on those fixed embeddings, in the same batches and order (the same optimisation,
        without re-running the GNN each step).

        Raises:
            ValueError: ``graphs`` is empty or a label is outside the head's classes.
        """
        settings = settings or TuneSettings()
        if len(graphs) == 0:
            raise ValueError("graphs is empty: nothing to train on")
        device = next(self.backbone.parameters()).device
        params = self.trainable_parameters()
        optimizer = torch.optim.Adam(params, lr=settings.lr, weight_decay=settings.weight_decay)
        if self.prompt is None and cache_embeddings:
            return self._fit_head(graphs, settings, optimizer, seed, callback)
        loader = DataLoader(
            list(graphs),
            batch_size=settings.batch_size,
            shuffle=True,
            generator=torch.Generator().manual_seed(seed),
        )
        # Labels and (off the CPU) node values are checked once here, on the host, so the steps below read nothing
        # back from the device: the loss is summed on the device and read once per epoch.
        with torch.no_grad():
            classes = self.head(torch.zeros(1, self.backbone.out_channels, device=device)).size(-1)
        top = max(int(g.y.max()) for g in graphs)
        if top >= classes:
            raise ValueError(f"label {top} is outside the head's {classes} classes")
        if device.type != "cpu":
            for g in graphs:
                check_values(g.x, g.edge_index)
        history = []
        self.train()
        for epoch in range(settings.epochs):
            total, count = torch.zeros((), device=device), 0
            for batch in loader:
                batch = batch.to(device, non_blocking=True)
                loss = F.cross_entropy(self(batch), batch.y.view(-1))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                total += loss.detach() * batch.num_graphs
                count += batch.num_graphs
            history.append(float(total) / count)
            if callback is not None:
                callback(epoch, history[-1])
        self.eval()
        return history

    def _fit_head(
        self,
        graphs: Sequence[Data],
        settings: TuneSettings,
        optimizer: torch.optim.Optimizer,
        seed: int,
        callback: Callable[[int, float], None] | None,
    ) -> list[float]:
        """Classifier-only training on embeddings computed once (same batches as the DataLoader path)."""
        device = next(self.backbone.parameters()).device
        self.eval()
        with torch.no_grad():
            parts = [
                (self.embed(b.to(device)), b.y.view(-1).to(device))
                for b in DataLoader(list(graphs), batch_size=256)
            ]
        emb = torch.cat([e for e, _ in parts])
        labels = torch.cat([y for _, y in parts])
        if int(labels.max()) >= int(self.head(emb[:1]).size(-1)):
            raise ValueError(f"label {int(labels.max())} is outside the head's classes")
        gen = torch.Generator().manual_seed(seed)
        history = []
        self.train()
        n = emb.size(0)
        for epoch in range(settings.epochs):
            total = torch.zeros((), device=device)
            # Per epoch a DataLoader draws its worker base seed from the generator, then its RandomSampler draws
            # one permutation per full pass plus one (empty slice) at the end; drawing the same keeps the
            # batches identical to the uncached path.
            torch.empty((), dtype=torch.int64).random_(generator=gen)
            order = torch.randperm(n, generator=gen).to(device)
            torch.randperm(n, generator=gen)
            for lo in range(0, n, settings.batch_size):
                idx = order[lo : lo + settings.batch_size]
                loss = F.cross_entropy(self.head(emb[idx]), labels[idx])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                total += loss.detach() * idx.numel()
            history.append(float(total) / n)
            if callback is not None:
                callback(epoch, history[-1])
        self.eval()
        return history

    @torch.no_grad()
    def predict(self, graphs: Iterable[Data], batch_size: int = 256) -> Tensor:
        """Predicted class ids ``[n]`` (long, on CPU)."""
        self.eval()
        device = next(self.backbone.parameters()).device
        preds = [self(b.to(device)).argmax(-1).cpu() for b in DataLoader(list(graphs), batch_size=batch_size)]
        return torch.cat(preds) if preds else torch.empty(0, dtype=torch.long)

    def accuracy(self, graphs: Sequence[Data], batch_size: int = 256) -> float:
        """Fraction of ``graphs`` whose prediction equals ``y``."""
        labels = torch.cat([g.y.view(-1) for g in graphs])
        return float((self.predict(graphs, batch_size) == labels).float().mean())
