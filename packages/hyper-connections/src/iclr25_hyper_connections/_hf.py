"""Rewire a Hugging Face Llama-family decoder so both residual additions of every layer go through hyper-connections.

The decoder layer of Llama, Mistral, Qwen2 and Qwen3 is the same pre-norm block::

    h = h + self_attn(input_layernorm(h))
    h = h + mlp(post_attention_layernorm(h))

:func:`apply_hyper_connections` replaces each layer by a :class:`HyperConnectedDecoderLayer` that keeps the original
sub-modules (so pretrained weights are untouched) and routes each branch through a :class:`HyperConnection`.
The first layer expands the hidden state to ``n`` streams ``(batch, seq, n, dim)``; the last one sums them, so the
model's final norm and LM head see ``(batch, seq, dim)`` as before.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from iclr25_hyper_connections._hyper_connection import (
    HyperConnection,
    NormSpec,
    _check_int,
    expand_streams,
    hyper_connections_of,
    reduce_streams,
)

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "HyperConnectedDecoderLayer",
    "apply_hyper_connections",
    "hyper_connections_of",
]

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
_LAYER_PARTS = ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm")

try:  # transformers >= 4.52: lets model.gradient_checkpointing_enable() reach the wrapped layers
    from transformers.modeling_layers import GradientCheckpointingLayer as _LayerBase
except ImportError:  # pragma: no cover - older transformers
    _LayerBase = nn.Module  # type: ignore[assignment,misc]


class HyperConnectedDecoderLayer(_LayerBase):  # type: ignore[misc,valid-type]
    """A pre-norm decoder layer whose two residual connections are hyper-connections (paper Algorithm 3).

    Args:
        layer: the original decoder layer (its ``self_attn``, ``mlp``, ``input_layernorm`` and
            ``post_attention_layernorm`` are reused, not copied).
        attn_hc, mlp_hc: the hyper-connections of the attention and FFN branches.
        expand_input: this is the first layer; expand ``(batch, seq, dim)`` to ``n`` streams on entry.
        reduce_output: this is the last layer; sum the streams to ``(batch, seq, dim)`` on exit.

    Shapes:
        input/output ``(batch, seq, dim)`` at the ends of the stack, ``(batch, seq, n, dim)`` in between.
    """

    def __init__(
        self,
        layer: nn.Module,
        attn_hc: HyperConnection,
        mlp_hc: HyperConnection,
        *,
        expand_input: bool,
        reduce_output: bool,
        reduce: str = "sum",
    ) -> None:
        super().__init__()
        self.layer = layer
        self.attn_hc = attn_hc
        self.mlp_hc = mlp_hc
        self.expand_input = expand_input
        self.reduce_output = reduce_output
        self.reduce = reduce

    @property
    def expansion_rate(self) -> int:
        return self.attn_hc.expansion_rate

    def forward(self, hidden_states: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if args:
            raise TypeError(
                "HyperConnectedDecoderLayer takes the hidden states positionally and everything else by keyword "
                f"(got {len(args)} extra positional argument(s))"
            )
        layer = self.layer
        streams = expand_streams(hidden_states, self.expansion_rate) if self.expand_input else hidden_states

        h0, residual, beta = self.attn_hc.width_connection(streams)
        attn_out = layer.self_attn(hidden_states=layer.input_layernorm(h0), **kwargs)
        attn_out = attn_out[0] if isinstance(attn_out, tuple) else attn_out
        streams = self.attn_hc.depth_connection(residual, attn_out, beta)

        h0, residual, beta = self.mlp_hc.width_connection(streams)
        streams = self.mlp_hc.depth_connection(residual, layer.mlp(layer.post_attention_layernorm(h0)), beta)
        if not self.reduce_output:
            return streams
        out = reduce_streams(streams)
        return out / self.expansion_rate if self.reduce == "mean" else out


def _decoder_layers(model: nn.Module) -> nn.ModuleList:
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if config is None or model_type not in SUPPORTED_MODEL_TYPES:
        what = f"model_type {model_type!r}" if config is not None else f"{type(model).__name__} (no .config)"
        raise ValueError(
            f"apply_hyper_connections supports Hugging Face decoder models with model_type in "
            f"{', '.join(SUPPORTED_MODEL_TYPES)} (pre-norm layers with self_attn/mlp/input_layernorm/"
            f"post_attention_layernorm); got {what}"
        )
    inner = getattr(model, "model", None)  # *ForCausalLM wraps the bare *Model
    base = inner if isinstance(inner, nn.Module) and hasattr(inner, "layers") else model
    layers = getattr(base, "layers", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        raise ValueError(f"{type(model).__name__} has no non-empty `layers` ModuleList to rewire")
    return layers


def apply_hyper_connections(
    model: nn.Module,
    *,
    expansion_rate: int = 4,
    dynamic: bool = True,
    tanh: bool = True,
    norm: NormSpec = "layernorm",
    trainable: bool = True,
    reduce: str = "sum",
) -> nn.Module:
    """Replace every residual connection of a Llama-family decoder by a hyper-connection, in place.

    Each decoder layer ``k`` gets two :class:`HyperConnection` modules, ``layer_index = 2k`` (attention) and
    ``2k + 1`` (FFN), initialised as in eq. 14, so **at initialisation the model computes the same logits** (up to
    the final RMSNorm's ``eps`` acting on ``n·h`` instead of ``h``, a relative change below ~1e-6 in practice):
    a pretrained model can continue training with hyper-connections. New modules take the dtype and device of
    the layer's parameters.

    Args:
        model: a ``transformers`` model whose ``config.model_type`` is one of ``llama, mistral, qwen2, qwen3``
            (``*ForCausalLM`` or the bare ``*Model``). SmolLM2 is ``llama``.
        expansion_rate: ``n >= 1``.
        dynamic, tanh, norm, trainable: see :class:`HyperConnection`.
        reduce: ``"sum"`` (the paper) or ``"mean"`` of the streams before the final norm. The final RMSNorm makes
            them the same function except for its ``eps`` (``RMSNorm_eps(n·h) = RMSNorm_{eps/n²}(h)``); ``"mean"``
            gives logits identical to the original model at init even for tiny, randomly initialised models.

    Returns:
        The same ``model`` object (modified in place).

    Raises:
        ValueError: unsupported architecture (the message names the supported ones), ``expansion_rate < 1``,
            or the model already has hyper-connections.
        TypeError: ``expansion_rate`` is not an int.

    Notes:
        Intermediate ``output_hidden_states`` are not recorded for the rewired layers (they are no longer the
        model's decoder-layer class); use forward hooks on ``input_layernorm`` to read each layer's input ``h_0``.
        Save with ``torch.save(model.state_dict())`` and reload by applying again, then ``load_state_dict``.

    References:
        arXiv 2409.19606, §2 and Appendix J (Algorithm 3, the transformer with hyper-connections).
    """
    n = _check_int("expansion_rate", expansion_rate, low=1)
    if reduce not in ("sum", "mean"):
        raise ValueError(f"reduce must be one of sum, mean; got {reduce!r}")
    if hyper_connections_of(model):
        raise ValueError(
            "model already has hyper-connections; apply_hyper_connections must be applied only once"
        )
    layers = _decoder_layers(model)
    for i, layer in enumerate(layers):
        missing = [p for p in _LAYER_PARTS if not isinstance(getattr(layer, p, None), nn.Module)]
        if missing:
            raise ValueError(
                f"decoder layer {i} ({type(layer).__name__}) lacks {', '.join(missing)}; only pre-norm layers with "
                f"{', '.join(_LAYER_PARTS)} are supported"
            )
    dim = int(model.config.hidden_size)
    last = len(layers) - 1
    for i, layer in enumerate(layers):
        ref = next(layer.parameters(), None)
        dtype = ref.dtype if ref is not None else torch.float32
        device = ref.device if ref is not None else torch.device("cpu")
        hcs = [
            HyperConnection(
                dim,
                expansion_rate=n,
                layer_index=2 * i + j,
                dynamic=dynamic,
                tanh=tanh,
                norm=norm,
                trainable=trainable,
            ).to(device=device, dtype=dtype)
            for j in (0, 1)
        ]
        layers[i] = HyperConnectedDecoderLayer(
            layer, hcs[0], hcs[1], expand_input=i == 0, reduce_output=i == last, reduce=reduce
        )
    model.config.hyper_connections = {
        "expansion_rate": n,
        "dynamic": bool(dynamic),
        "tanh": bool(tanh),
        "reduce": reduce,
    }
    return model
