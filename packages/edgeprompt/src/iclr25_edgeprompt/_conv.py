"""Prompt-aware message passing: GCN and GIN layers that add a prompt vector to every message.

Both layers subclass PyG's own layer (same parameter names, same state dict), and without a prompt they compute
exactly what the parent computes, so a backbone trained with plain :class:`torch_geometric.nn.GCNConv` /
:class:`torch_geometric.nn.GINConv` loads into them and gives the same outputs.

References:
    Fu, He & Li, "Edge Prompt Tuning for Graph Neural Networks", ICLR 2025, arXiv:2503.00750, §4.1 (edge prompts
    inside message passing) and the GCN/GIN instantiations of its message function.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch_geometric.nn import GCNConv, GINConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.typing import OptPairTensor, OptTensor
from torch_geometric.utils import add_remaining_self_loops

__all__ = ["EdgePromptGCNConv", "EdgePromptGINConv", "PromptArg"]

#: An edge prompt: a tensor ``[E_msg, d]`` aligned with :meth:`prompt_edge_index`, a ``[1, d]`` tensor broadcast to
#: every edge, or a callable that receives that message edge index ``[2, E_msg]`` and returns such a tensor.
PromptArg = Tensor | Callable[[Tensor], Tensor] | None


def _check_edge_index(edge_index: object, layer: str) -> Tensor:
    if not isinstance(edge_index, Tensor):
        raise TypeError(
            f"{layer}: edge_index must be a LongTensor [2, E]; got {type(edge_index).__name__} "
            "(SparseTensor adjacency is not supported)"
        )
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"{layer}: edge_index must have shape [2, E], got {tuple(edge_index.shape)}")
    return edge_index


def _resolve_prompt(prompt: PromptArg, edge_index: Tensor, dim: int, layer: str) -> Tensor:
    value = prompt(edge_index) if callable(prompt) else prompt
    if not isinstance(value, Tensor):
        raise TypeError(
            f"{layer}: edge_prompt must be a Tensor or a callable returning one, got {type(value).__name__}"
        )
    num_edges = edge_index.size(1)
    if value.dim() != 2 or value.size(0) not in (1, num_edges) or value.size(1) != dim:
        raise ValueError(
            f"{layer}: edge_prompt must have shape [1, {dim}] or [{num_edges}, {dim}] (one row per message edge, "
            f"self-loops included), got {tuple(value.shape)}"
        )
    return value


class EdgePromptGCNConv(GCNConv):
    r"""GCN layer with an optional prompt on every message (EdgePrompt, GCN form).

    .. math::
        h_i' = \sum_{j \in \mathcal N(i) \cup \{i\}} \frac{w_{ji}}{\sqrt{\hat d_i \hat d_j}}\, W (h_j + p_{ji}) + b

    The prompt is added to the source features *before* the bias-free linear map, on every message edge, the
    self-loops included. Without ``edge_prompt`` this computes exactly what :class:`torch_geometric.nn.GCNConv`
    computes (same normalisation, same operation order; tested bit for bit). Constructor arguments are GCNConv's.

    Shapes:
        x ``[N, in_channels]`` float; edge_index ``[2, E]`` long; edge_weight ``[E]`` or None;
        edge_prompt ``[E_msg, in_channels]`` or ``[1, in_channels]`` (see :meth:`prompt_edge_index`) → ``[N, out]``.

    Raises:
        ValueError: the prompt's shape does not match the message edges or ``in_channels``.
        TypeError: ``edge_index`` is not a tensor (SparseTensor adjacency is not supported), or the prompt is not
            a tensor.

    References:
        arXiv:2503.00750, §4.1 (edge prompts added to messages; GCN instantiation).
    """

    # Arguments of the generated ``propagate`` (PyG compiles it from this dict).
    propagate_type = {"x": Tensor, "edge_weight": OptTensor, "prompt": OptTensor}  # noqa: RUF012

    def __init__(self, in_channels: int, out_channels: int, **kwargs) -> None:
        if kwargs.get("cached"):
            raise ValueError("EdgePromptGCNConv: cached=True is not supported")
        super().__init__(in_channels, out_channels, **kwargs)

    def prompt_edge_index(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        """The message edges ``[2, E_msg]``, in the order the prompt rows must follow.

        With ``add_self_loops`` (the default) this is PyG's ``add_remaining_self_loops`` order: the input's
        non-loop edges in their order, then one self-loop per node ``0..N-1`` (a self-loop already in the input is
        moved to that position, not duplicated).
        """
        edge_index = _check_edge_index(edge_index, type(self).__name__)
        if self.normalize and self.add_self_loops:
            edge_index, _ = add_remaining_self_loops(edge_index, None, num_nodes=num_nodes)
        return edge_index

    def forward(  # type: ignore[override]
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_weight: Tensor | None = None,
        edge_prompt: PromptArg = None,
    ) -> Tensor:
        name = type(self).__name__
        edge_index = _check_edge_index(edge_index, name)
        if self.normalize:
            # The same normalisation call as GCNConv.forward (no caching: prompts need the edge list).
            edge_index, edge_weight = gcn_norm(
                edge_index,
                edge_weight,
                x.size(self.node_dim),
                self.improved,
                self.add_self_loops,
                self.flow,
                x.dtype,
            )
        prompt = None
        if edge_prompt is not None:
            raw = _resolve_prompt(edge_prompt, edge_index, self.in_channels, name)
            prompt = self.lin(raw)  # W p: GCNConv's linear map has no bias
        x = self.lin(x)
        out = self.propagate(edge_index, x=x, edge_weight=edge_weight, prompt=prompt)
        if self.bias is not None:
            out = out + self.bias
        return out

    def message(self, x_j: Tensor, edge_weight: Tensor | None, prompt: Tensor | None = None) -> Tensor:  # type: ignore[override]
        if prompt is not None:
            x_j = x_j + prompt
        return x_j if edge_weight is None else edge_weight.view(-1, 1) * x_j


class EdgePromptGINConv(GINConv):
    r"""GIN layer with an optional prompt on every message (EdgePrompt, GIN form).

    .. math::
        h_i' = \mathrm{MLP}\Big((1+\epsilon) h_i + \sum_{j \in \mathcal N(i)} \sigma(h_j + p_{ji})\Big)

    with :math:`\sigma = \mathrm{ReLU}` when ``relu_messages=True`` (the paper's and the official code's GIN, the
    GINE form of Hu et al. 2020) and the identity when ``relu_messages=False``. There are no self-loops; prompt rows
    follow ``edge_index``. With ``relu_messages=False`` and no prompt this is exactly
    :class:`torch_geometric.nn.GINConv` (tested bit-for-bit), so backbones trained with stock
    GINConv load with that setting. With ``relu_messages=True`` it equals GINConv whenever the layer input is
    non-negative (e.g. after a ReLU).

    Args:
        nn: the MLP, as for GINConv.
        eps: initial epsilon.
        train_eps: learn epsilon.
        relu_messages: apply ReLU to each message (paper form). Default True.

    Shapes:
        x ``[N, d]``; edge_index ``[2, E]``; edge_prompt ``[E, d]`` or ``[1, d]`` → ``[N, d_out]``.

    Raises:
        ValueError / TypeError: as :class:`EdgePromptGCNConv`.

    References:
        arXiv:2503.00750, §4.1 (GIN instantiation); Hu et al., "Strategies for Pre-training GNNs", ICLR 2020.
    """

    propagate_type = {"x": OptPairTensor, "prompt": OptTensor}  # noqa: RUF012

    def __init__(
        self,
        nn: nn.Module,
        eps: float = 0.0,
        train_eps: bool = False,
        *,
        relu_messages: bool = True,
        **kwargs,
    ) -> None:
        super().__init__(nn, eps=eps, train_eps=train_eps, **kwargs)
        self.relu_messages = relu_messages
        self.in_channels = _first_in_features(nn)

    def prompt_edge_index(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        """The message edges: ``edge_index`` itself (GIN adds no self-loops)."""
        return _check_edge_index(edge_index, type(self).__name__)

    def forward(  # type: ignore[override]
        self,
        x: Tensor,
        edge_index: Tensor,
        size: tuple[int, int] | None = None,
        edge_prompt: PromptArg = None,
    ) -> Tensor:
        edge_index = _check_edge_index(edge_index, type(self).__name__)
        prompt = None
        if edge_prompt is not None:
            prompt = _resolve_prompt(edge_prompt, edge_index, x.size(-1), type(self).__name__)
        out = self.propagate(edge_index, x=(x, x), size=size, prompt=prompt)
        out = out + (1 + self.eps) * x
        return self.nn(out)

    def message(self, x_j: Tensor, prompt: Tensor | None = None) -> Tensor:  # type: ignore[override]
        if prompt is not None:
            x_j = x_j + prompt
        return torch.relu(x_j) if self.relu_messages else x_j


def _first_in_features(module: nn.Module) -> int:
    for sub in module.modules():
        if isinstance(sub, nn.Linear):
            return sub.in_features
    raise ValueError(
        "EdgePromptGINConv: nn must contain an nn.Linear (its in_features is the layer's input dim)"
    )
