"""The GNN backbone (GCN or GIN) whose layers accept edge prompts, and its checkpoint format.

A checkpoint is two files: ``<stem>.pt``, the backbone's plain ``state_dict`` (load it with
``torch.load(path, weights_only=True)``), and ``<stem>.json``, the constructor arguments plus metadata.
"""

from __future__ import annotations

import dataclasses
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
from iclr25_shared.errors import InputError

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
        dropout: dropout after each layer (inactive in eval mode, i.e. during prompt tuning).
        relu_messages: GIN only: ReLU on each message, the paper's form (see EdgePromptGINConv).
        batch_norm: a BatchNorm1d after every layer, the official graph-task layout
            (conv → BatchNorm → ReLU → dropout; the last layer without ReLU). ``None`` (default) = True for GIN,
            False for GCN, as in the official code (github.com/xbfu/EdgePrompt, ``graph/model.py``,
            ``node/model.py``). False gives the layout of checkpoints saved before this option existed
            (conv → ReLU → dropout, no dropout after the last layer).
        train_eps: GIN only: learn ε (official: a parameter initialised at 0); False keeps it a fixed 0 buffer.
            The state dict is the same either way (key ``eps``).

    Raises:
        ValueError / TypeError: a field outside its allowed values (named in the message).
    """

    conv: str = "gcn"
    in_channels: int
    hidden_channels: int = 128
    num_layers: int = 2
    dropout: float = 0.5
    relu_messages: bool = True
    batch_norm: bool | None = None
    train_eps: bool = True

    def __post_init__(self) -> None:
        check_choice("conv", self.conv, CONVS)
        for name in ("in_channels", "hidden_channels", "num_layers"):
            check_int(name, getattr(self, name), low=1)
        check_float("dropout", self.dropout, low=0.0, high=1.0, high_inclusive=False)
        for name in ("relu_messages", "train_eps"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.batch_norm is None:
            object.__setattr__(self, "batch_norm", self.conv == "gin")
        elif not isinstance(self.batch_norm, bool):
            raise TypeError(f"batch_norm must be a bool or None, got {self.batch_norm!r}")


class GNNEncoder(nn.Module):
    """A stack of prompt-aware GCN or GIN layers and mean pooling, laid out as the official code builds them.

    Layer ``l``: ``h = conv_l(h, edge_index, edge_prompt_l)``, then (``batch_norm``) ``BatchNorm1d``, then ReLU
    (all but the last layer), then dropout. GIN layers use the MLP Linear-BatchNorm-ReLU-Linear and a learnable ε
    (``train_eps``). With ``batch_norm=False`` the layout is conv → ReLU → dropout between layers (the last layer
    has no activation), the layout of this package's earlier checkpoints.

    Shapes:
        ``forward(x [N, in], edge_index [2, E], prompt=None) -> [N, hidden]``;
        ``embed(x, edge_index, batch [N] or None, prompt=None) -> [B, hidden]`` (mean over each graph's nodes).

    ``prompt`` is an edge prompt (:class:`EdgePrompt`, :class:`EdgePromptPlus`: queried per layer with that layer's
    input and message edges) or a node prompt (:class:`GPF`, :class:`GPFPlus`: applied to ``x`` once), or None.

    Raises (forward):
        ValueError: ``x`` is not ``[N, in_channels]`` or has NaN/inf entries; ``edge_index`` is not ``[2, E]``
            integer or has an entry outside ``[0, N)``.

    References:
        arXiv:2503.00750 §5.1 (GIN, 5 layers, hidden 128 for graph tasks; GCN, 2 layers for node tasks).
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
                self.convs.append(
                    EdgePromptGINConv(mlp, train_eps=config.train_eps, relu_messages=config.relu_messages)
                )
        if config.batch_norm:
            self.batch_norms = nn.ModuleList(nn.BatchNorm1d(config.hidden_channels) for _ in dims)
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
        _check_inputs(x, edge_index, self.config.in_channels)
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
            if self.config.batch_norm:
                h = self.batch_norms[layer](h)
                h = self.dropout(torch.relu(h) if layer < last else h)
            elif layer < last:
                h = self.dropout(torch.relu(h))
        return h

    def embed(
        self,
        x: Tensor,
        edge_index: Tensor,
        batch: Tensor | None = None,
        prompt: nn.Module | None = None,
        num_graphs: int | None = None,
    ) -> Tensor:
        """Mean-pooled graph embeddings ``[B, hidden]`` (one graph when ``batch`` is None).

        ``num_graphs`` (``Batch.num_graphs``): B, so that pooling need not read ``batch.max()`` back from the device.
        """
        return global_mean_pool(self(x, edge_index, prompt), batch, size=num_graphs)


def _check_inputs(x: Tensor, edge_index: Tensor, in_channels: int) -> None:
    """Node features ``[N, in_channels]`` finite; ``edge_index`` ``[2, E]`` integer with entries in ``[0, N)``.

    Shapes and dtypes are checked on every device; the values (finite features, node ids in range) only on the CPU:
    on a GPU they would read the tensors back to the host at every forward pass (one synchronisation per layer
    stack call). :meth:`PromptTuner.fit` checks every training graph's values once, on the CPU, before it moves
    them; out-of-range ids on CUDA still stop the index kernels with a device-side assertion.
    """
    if not isinstance(x, Tensor) or x.dim() != 2 or x.size(-1) != in_channels:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"GNNEncoder: expected node features x of shape [N, {in_channels}], got {shape}")
    if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.size(0) != 2:
        shape = tuple(edge_index.shape) if isinstance(edge_index, Tensor) else type(edge_index).__name__
        raise ValueError(f"GNNEncoder: edge_index must have shape [2, E], got {shape}")
    if edge_index.dtype.is_floating_point or edge_index.dtype == torch.bool:
        raise ValueError(f"GNNEncoder: edge_index must hold integer node ids, got dtype {edge_index.dtype}")
    if x.device.type == "cpu":
        check_values(x, edge_index)


def check_values(x: Tensor, edge_index: Tensor) -> None:
    """The value checks of :func:`_check_inputs` (finite features, node ids in ``[0, N)``); reads the tensors."""
    if not bool(torch.isfinite(x).all()):
        bad = ~torch.isfinite(x)
        first = tuple(int(i) for i in torch.nonzero(bad)[0])
        raise ValueError(
            f"GNNEncoder: node features x have {int(bad.sum())} non-finite entries (NaN/inf), first at {first}"
        )
    if edge_index.numel():
        low, high = int(edge_index.min()), int(edge_index.max())
        if low < 0 or high >= x.size(0):
            raise ValueError(
                f"GNNEncoder: edge_index entries must be node ids in [0, {x.size(0) - 1}] (x has {x.size(0)} "
                f"nodes), got min {low}, max {high}"
            )


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


def load_backbone(
    path: str | Path, map_location: str | torch.device = "cpu", *, label: str | None = "backbone"
) -> GNNEncoder:
    """Load a checkpoint written by :func:`save_backbone` (``path`` is the .pt or the .json).

    The .pt is read with ``weights_only=True`` (:func:`iclr25_shared.inputs.read_torch`). A ``.json`` without
    ``batch_norm`` / ``train_eps`` (written before those options existed) loads with both False, the layout it was
    trained with.

    Args:
        path: the .pt or the .json (or their stem).
        map_location: passed to ``torch.load``.
        label: the option or argument that named the checkpoint, for the messages.

    Raises:
        FileNotFoundError: the .pt or the .json is missing.
        InputError: (a ``ValueError``) either file empty or unreadable; the .pt not a state dict of finite
            tensors; the .json not valid JSON, without the architecture (``{"backbone": {...}}`` with at least
            ``conv`` and ``in_channels``) or with unknown/invalid fields; the state dict does not fit the
            architecture in the .json.
    """
    from iclr25_edgeprompt._checkpoint import checkpoint_paths, read_checkpoint

    pt, meta_path = checkpoint_paths(path)
    where = f"{label}: " if label else ""
    for p in (pt, meta_path):
        if not p.exists():
            raise FileNotFoundError(f"{where}backbone checkpoint file {str(p)!r} does not exist")
    arch, state = read_checkpoint(path, label=label, map_location=map_location)
    fields = {f.name for f in dataclasses.fields(BackboneConfig)}
    unknown = sorted(set(arch) - fields)
    if unknown:
        raise InputError(f"{where}{str(meta_path)!r} has unknown architecture fields {unknown}")
    arch = {"batch_norm": False, "train_eps": False, **arch}
    try:
        config = BackboneConfig(**arch)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}{str(meta_path)!r}: {exc}") from None
    model = GNNEncoder(config)
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise InputError(
            f"{where}{str(pt)!r}: state dict does not match the architecture in {meta_path.name}: {exc}"
        ) from None
    return model
