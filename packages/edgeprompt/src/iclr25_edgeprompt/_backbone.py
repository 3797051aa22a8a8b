"""The GNN backbone (GCN or GIN) whose layers accept edge prompts, and its checkpoint format.

A checkpoint is two files: ``<stem>.pt``, the backbone's plain ``state_dict`` (load it with
``torch.load(path, weights_only=True)``), and ``<stem>.json``, the constructor arguments plus metadata.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.nn import global_mean_pool

from iclr25_edgeprompt._conv import EdgePromptGCNConv, EdgePromptGINConv
from iclr25_edgeprompt._prompt import NodePrompt, PromptModule
from iclr25_shared.checks import check_choice, check_float, check_int

__all__ = ["BackboneConfig", "GNNEncoder", "load_backbone", "save_backbone"]

CONVS = ("gcn", "gin")


@dataclass(frozen=True, kw_only=True)
class BackboneConfig:
    """Architecture of a :class:`GNNEncoder`.

    Attributes:
        conv: "gcn" (the paper's node-task backbone) or "gin" (graph-task backbone).
        in_channels: input node-feature dim.
        hidden_channels: width of every layer's output.
        num_layers: message-passing layers (paper: 2 for GCN, 5 for GIN).
        dropout: dropout between layers (inactive in eval mode, i.e. during prompt tuning).
        relu_messages: GIN only: ReLU on each message, the paper's form (see EdgePromptGINConv).
    """

    conv: str = "gcn"
    in_channels: int
    hidden_channels: int = 128
    num_layers: int = 2
    dropout: float = 0.5
    relu_messages: bool = True

    def __post_init__(self) -> None:
        check_choice("conv", self.conv, CONVS)
        for name in ("in_channels", "hidden_channels", "num_layers"):
            check_int(name, getattr(self, name), low=1)
        check_float("dropout", self.dropout, low=0.0, high=1.0, high_inclusive=False)


class GNNEncoder(nn.Module):
    """A stack of prompt-aware GCN or GIN layers with ReLU + dropout between layers and mean pooling.

    GIN layers use the MLP Linear-BatchNorm-ReLU-Linear. The last layer has no activation.

    Shapes:
        ``forward(x [N, in], edge_index [2, E], prompt=None) -> [N, hidden]``;
        ``embed(x, edge_index, batch [N] or None, prompt=None) -> [B, hidden]`` (mean over each graph's nodes).

    ``prompt`` is an edge prompt (:class:`EdgePrompt`, :class:`EdgePromptPlus`: queried per layer with that layer's
    input and message edges) or a node prompt (:class:`GPF`, :class:`GPFPlus`: applied to ``x`` once), or None.
    """

    def __init__(self, config: BackboneConfig | None = None, **kwargs: Any) -> None:
        super().__init__()
        if config is None:
            config = BackboneConfig(**kwargs)
        elif kwargs:
            raise TypeError("GNNEncoder: pass either a BackboneConfig or keyword arguments, not both")
        self.config = config
        dims = self.layer_dims
        self.convs = nn.ModuleList()
        for d_in in dims:
            if config.conv == "gcn":
                self.convs.append(EdgePromptGCNConv(d_in, config.hidden_channels))
            else:
                mlp = nn.Sequential(
                    nn.Linear(d_in, config.hidden_channels),
                    nn.BatchNorm1d(config.hidden_channels),
                    nn.ReLU(),
                    nn.Linear(config.hidden_channels, config.hidden_channels),
                )
                self.convs.append(EdgePromptGINConv(mlp, relu_messages=config.relu_messages))
        self.dropout = nn.Dropout(config.dropout)

    @property
    def layer_dims(self) -> list[int]:
        """Input dim of each message-passing layer: ``[in_channels, hidden, ..., hidden]``."""
        c = self.config
        return [c.in_channels] + [c.hidden_channels] * (c.num_layers - 1)

    @property
    def out_channels(self) -> int:
        return self.config.hidden_channels

    def forward(self, x: Tensor, edge_index: Tensor, prompt: nn.Module | None = None) -> Tensor:
        if x.dim() != 2 or x.size(-1) != self.config.in_channels:
            raise ValueError(
                f"GNNEncoder: expected node features [N, {self.config.in_channels}], got {tuple(x.shape)}"
            )
        if isinstance(prompt, NodePrompt):
            x = prompt(x)
        elif prompt is not None and not isinstance(prompt, PromptModule):
            raise TypeError(
                f"prompt must be an edge prompt, a node prompt or None; got {type(prompt).__name__}"
            )
        if isinstance(prompt, PromptModule) and prompt.dims != self.layer_dims:
            raise ValueError(
                f"prompt dims {prompt.dims} do not match the backbone's layer input dims {self.layer_dims}"
            )
        h = x
        last = len(self.convs) - 1
        for layer, conv in enumerate(self.convs):
            edge_prompt = None
            if isinstance(prompt, PromptModule):
                edge_prompt = _LayerPrompt(prompt, layer, h)
            h = conv(h, edge_index, edge_prompt=edge_prompt)
            if layer < last:
                h = self.dropout(torch.relu(h))
        return h

    def embed(
        self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None, prompt: nn.Module | None = None
    ) -> Tensor:
        """Mean-pooled graph embeddings ``[B, hidden]`` (one graph when ``batch`` is None)."""
        return global_mean_pool(self(x, edge_index, prompt), batch)


class _LayerPrompt:
    """Binds (prompt, layer, layer input) so the conv can ask for prompts on its own message edges."""

    def __init__(self, prompt: PromptModule, layer: int, h: Tensor) -> None:
        self.prompt, self.layer, self.h = prompt, layer, h

    def __call__(self, edge_index: Tensor) -> Tensor:
        return self.prompt(self.layer, self.h, edge_index)


def save_backbone(model: GNNEncoder, path: str | Path, **metadata: Any) -> Path:
    """Write ``<stem>.pt`` (plain state dict) and ``<stem>.json`` (config + ``metadata``); return the .pt path.

    Both go through :func:`iclr25_shared.results.atomic_write_bytes` / ``atomic_write_text`` (a unique temporary
    file renamed into place), so an interrupted save leaves the old files intact.
    """
    from iclr25_shared.results import atomic_write_bytes, atomic_write_text, to_jsonable

    pt = Path(path).with_suffix(".pt")
    pt.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buffer)
    atomic_write_bytes(pt, buffer.getvalue())
    meta = {"backbone": asdict(model.config), "metadata": to_jsonable(metadata)}
    atomic_write_text(pt.with_suffix(".json"), json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return pt


def load_backbone(path: str | Path, map_location: str | torch.device = "cpu") -> GNNEncoder:
    """Load a checkpoint written by :func:`save_backbone` (``path`` is the .pt or the .json).

    Raises:
        FileNotFoundError: the .pt or .json file is missing.
        ValueError: the state dict does not fit the architecture in the .json.
    """
    pt = Path(path).with_suffix(".pt")
    meta_path = pt.with_suffix(".json")
    for p in (pt, meta_path):
        if not p.is_file():
            raise FileNotFoundError(f"backbone checkpoint file {str(p)!r} does not exist")
    meta = json.loads(meta_path.read_text())
    model = GNNEncoder(BackboneConfig(**meta["backbone"]))
    state = torch.load(pt, map_location=map_location, weights_only=True)
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise ValueError(
            f"{pt}: state dict does not match the architecture in {meta_path.name}: {exc}"
        ) from None
    return model
