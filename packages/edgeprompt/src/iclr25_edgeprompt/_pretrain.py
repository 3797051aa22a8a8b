"""Self-supervised pre-training of the backbone: GraphCL, SimGRACE and edge prediction.

The paper takes its backbones from these strategies (its checkpoints; the official repository has no
pre-training code). Our implementations follow the original papers at small scale:

- **GraphCL** (You et al., NeurIPS 2020, arXiv:2010.13902): two views per graph by edge dropping and node-feature
  masking (``aug_ratio`` each), a 2-layer projection head, NT-Xent between the views' pooled embeddings (temperature
  ``tau``), negatives = the other graphs of the batch.
- **SimGRACE** (Xia et al., WWW 2022, arXiv:2202.03104): the second view is the same graph through a copy of the
  encoder whose weights are perturbed by ``eta * N(0, std(W)^2)``; NT-Xent as above.
- **Edge prediction** (the EdgePred-GPPT/GraphPrompt objective): node embeddings, dot-product scores, binary
  cross-entropy of each existing edge against one random node pair from the same graph.

All randomness comes from a ``torch.Generator`` seeded with ``seed``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader
from torch_geometric.nn import global_mean_pool

from iclr25_edgeprompt._backbone import GNNEncoder
from iclr25_shared.checks import check_choice, check_float, check_int

__all__ = ["STRATEGIES", "PretrainSettings", "nt_xent", "pretrain"]

STRATEGIES = ("graphcl", "simgrace", "edgepred")


@dataclass(frozen=True, kw_only=True)
class PretrainSettings:
    """Settings of :func:`pretrain`.

    Attributes:
        strategy: graphcl, simgrace or edgepred.
        epochs: passes over the graphs.
        lr: Adam learning rate.
        batch_size: graphs per step (contrastive negatives come from the batch).
        tau: NT-Xent temperature (GraphCL: 0.2).
        aug_ratio: GraphCL edge-drop and feature-mask ratio (0.2).
        eta: SimGRACE weight-perturbation scale (1.0).
    """

    strategy: str = "graphcl"
    epochs: int = 50
    lr: float = 1e-3
    batch_size: int = 64
    tau: float = 0.2
    aug_ratio: float = 0.2
    eta: float = 1.0

    def __post_init__(self) -> None:
        check_choice("strategy", self.strategy, STRATEGIES)
        for name in ("epochs", "batch_size"):
            check_int(name, getattr(self, name), low=1)
        if self.strategy != "edgepred" and self.batch_size < 2:
            raise ValueError(f"batch_size must be >= 2 for contrastive pre-training, got {self.batch_size}")
        check_float("lr", self.lr, low=0.0, low_inclusive=False)
        check_float("tau", self.tau, low=0.0, low_inclusive=False)
        check_float("aug_ratio", self.aug_ratio, low=0.0, high=1.0, high_inclusive=False)
        check_float("eta", self.eta, low=0.0)


def nt_xent(z1: Tensor, z2: Tensor, tau: float) -> Tensor:
    """NT-Xent of GraphCL: row ``i`` of ``z1`` and ``z2`` are positives; other rows of ``z2`` are negatives.

    Shapes: ``z1, z2 [B, d]`` → scalar. Cosine similarities divided by ``tau``; symmetrised over both directions.
    """
    z1, z2 = F.normalize(z1, dim=-1), F.normalize(z2, dim=-1)
    sim = z1 @ z2.t() / tau
    target = torch.arange(z1.size(0), device=z1.device)
    return 0.5 * (F.cross_entropy(sim, target) + F.cross_entropy(sim.t(), target))


def _augment(batch: Batch, ratio: float, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Edge dropping + node-feature masking (each ``ratio``) of a batched graph → (x, edge_index)."""
    keep = torch.rand(batch.edge_index.size(1), generator=gen) >= ratio
    mask = torch.rand(batch.num_nodes, generator=gen) < ratio
    x = batch.x.clone()
    x[mask.to(x.device)] = 0.0
    return x, batch.edge_index[:, keep.to(batch.edge_index.device)]


def _random_pairs(batch: Batch, gen: torch.Generator) -> Tensor:
    """For each edge (u, v), a random node w of u's graph: negatives ``[2, E]`` = (u, w)."""
    src = batch.edge_index[0]
    graph_of = batch.batch[src].cpu()
    ptr = batch.ptr.cpu()
    sizes = ptr[1:] - ptr[:-1]
    offset = (torch.rand(src.numel(), generator=gen) * sizes[graph_of]).long()
    return torch.stack([src, (ptr[graph_of] + offset).to(src.device)])


def pretrain(
    backbone: GNNEncoder,
    graphs: Sequence[Data],
    settings: PretrainSettings | None = None,
    *,
    seed: int = 0,
    callback: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Pre-train ``backbone`` in place on unlabelled ``graphs``; return the mean loss per epoch.

    Args:
        backbone: the encoder to train (its device is used).
        graphs: graphs with ``x`` and ``edge_index`` (labels are ignored).
        settings: strategy and optimisation settings.
        seed: seeds shuffling, augmentations, perturbations and negative sampling.
        callback: ``callback(epoch, loss)`` after each epoch.

    Raises:
        ValueError: no graphs; fewer than 2 graphs for a contrastive strategy; no edges at all.
    """
    settings = settings or PretrainSettings()
    if len(graphs) == 0:
        raise ValueError("graphs is empty: nothing to pre-train on")
    if settings.strategy != "edgepred" and len(graphs) < 2:
        raise ValueError(
            f"{settings.strategy} contrasts graphs with each other: it needs >= 2 graphs, got {len(graphs)}"
        )
    if all(g.edge_index.numel() == 0 for g in graphs):
        raise ValueError("no graph has an edge: nothing to pre-train message passing on")
    device = next(backbone.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    torch_state = torch.random.get_rng_state()
    torch.manual_seed(seed)  # parameter init of the projection head
    hidden = backbone.out_channels
    projector = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden)).to(device)
    torch.random.set_rng_state(torch_state)
    params = list(backbone.parameters())
    if settings.strategy != "edgepred":
        params += list(projector.parameters())
    optimizer = torch.optim.Adam(params, lr=settings.lr)
    loader = DataLoader(
        list(graphs), batch_size=settings.batch_size, shuffle=True, generator=gen, drop_last=False
    )
    backbone.train()
    history = []
    for epoch in range(settings.epochs):
        total, count = 0.0, 0
        for batch in loader:
            if settings.strategy != "edgepred" and batch.num_graphs < 2:
                continue
            batch = batch.to(device)
            if settings.strategy == "graphcl":
                x1, e1 = _augment(batch, settings.aug_ratio, gen)
                x2, e2 = _augment(batch, settings.aug_ratio, gen)
                z1 = projector(global_mean_pool(backbone(x1, e1), batch.batch))
                z2 = projector(global_mean_pool(backbone(x2, e2), batch.batch))
                loss = nt_xent(z1, z2, settings.tau)
            elif settings.strategy == "simgrace":
                z1 = projector(global_mean_pool(backbone(batch.x, batch.edge_index), batch.batch))
                perturbed = {
                    name: (
                        p + settings.eta * p.std() * torch.randn(p.shape, generator=gen).to(device)
                    ).detach()
                    if p.numel() > 1
                    else p.detach()
                    for name, p in backbone.named_parameters()
                }
                buffers = {name: b.clone() for name, b in backbone.named_buffers()}
                h2 = torch.func.functional_call(
                    backbone, {**perturbed, **buffers}, (batch.x, batch.edge_index)
                )
                z2 = projector(global_mean_pool(h2, batch.batch)).detach()
                loss = nt_xent(z1, z2, settings.tau)
            else:
                if batch.edge_index.size(1) == 0:
                    continue
                h = backbone(batch.x, batch.edge_index)
                pos = batch.edge_index
                neg = _random_pairs(batch, gen)
                scores = torch.cat([(h[pos[0]] * h[pos[1]]).sum(-1), (h[neg[0]] * h[neg[1]]).sum(-1)])
                target = torch.cat([torch.ones(pos.size(1)), torch.zeros(neg.size(1))]).to(device)
                loss = F.binary_cross_entropy_with_logits(scores, target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * batch.num_graphs
            count += batch.num_graphs
        history.append(total / max(count, 1))
        if callback is not None:
            callback(epoch, history[-1])
    backbone.eval()
    return history
