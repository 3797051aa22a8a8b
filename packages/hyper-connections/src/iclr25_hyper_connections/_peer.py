"""The peer implementation, ``hyper-connections`` on PyPI (lucidrains), wired into the same Hugging Face decoder.

Used only to compare against it (numerical agreement, step time, activation memory); nothing in the package
depends on it. Install with ``pip install hyper-connections`` (tested with 0.4.11).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from iclr25_hyper_connections._hf import HyperConnectedDecoderLayer, _decoder_layers
from iclr25_hyper_connections._hyper_connection import HyperConnection

__all__ = ["PeerDecoderLayer", "apply_peer_hyper_connections", "copy_connection_weights", "peer_version"]


def peer_version() -> str:
    """The installed ``hyper-connections`` version; ``ImportError`` naming the install command when missing."""
    try:
        from importlib.metadata import version

        import hyper_connections  # noqa: F401
    except ImportError:
        raise ImportError("the peer package is missing: pip install hyper-connections") from None
    return version("hyper-connections")


class PeerDecoderLayer(nn.Module):
    """A pre-norm decoder layer whose residual connections are the peer's ``HyperConnections`` modules.

    The peer keeps the streams in the batch axis, ``(batch·n, seq, dim)`` with the stream index fastest; its
    branch input is ``(batch, seq, dim)``, so the attention's keyword arguments (masks, rotary tables) still fit.
    """

    def __init__(
        self, layer: nn.Module, hcs: list[nn.Module], expand: Any, reduce: Any, first: bool, last: bool
    ):
        super().__init__()
        self.layer, self.hcs = layer, nn.ModuleList(hcs)
        self.expand, self.reduce, self.first, self.last = expand, reduce, first, last

    def forward(self, hidden_states: Tensor, **kwargs: Any) -> Tensor:
        layer = self.layer
        x = self.expand(hidden_states) if self.first else hidden_states
        h0, add = self.hcs[0](x)
        out = layer.self_attn(hidden_states=layer.input_layernorm(h0), **kwargs)
        x = add(out[0] if isinstance(out, tuple) else out)
        h0, add = self.hcs[1](x)
        x = add(layer.mlp(layer.post_attention_layernorm(h0)))
        return self.reduce(x) if self.last else x


def apply_peer_hyper_connections(
    model: nn.Module, *, expansion_rate: int = 4, tanh: bool = True
) -> nn.Module:
    """Rewire a Llama-style model with the peer's dynamic hyper-connections, in place (``layer_index`` ``2k``,
    ``2k+1`` as in :func:`apply_hyper_connections`, so both start from the same stream)."""
    peer_version()
    from hyper_connections import get_init_and_expand_reduce_stream_functions

    init, expand, reduce = get_init_and_expand_reduce_stream_functions(
        expansion_rate, dim=model.config.hidden_size, disable=False
    )
    layers = _decoder_layers(model)
    last = len(layers) - 1
    for i, layer in enumerate(layers):
        hcs = [init(layer_index=2 * i + j, tanh=tanh) for j in (0, 1)]
        layers[i] = PeerDecoderLayer(layer, hcs, expand, reduce, i == 0, i == last)
    return model


@torch.no_grad()
def copy_connection_weights(ours: nn.Module, peer: nn.Module) -> int:
    """Copy every static and dynamic connection weight of ``ours`` into the peer model; returns the modules copied.

    The matrices have the same layout in both (``static_alpha = [A_m A_r]`` ``(n, n+1)``, ``static_beta``,
    ``dynamic_alpha_fn`` ``(dim, n+1)``, ``dynamic_beta_fn``, the two scales); the peer's RMSNorm gain ``γ`` (it
    uses ``γ + 1``) is set from our RMSNorm weight minus 1 when ours uses ``norm="rmsnorm"``.
    """
    mine = [m for m in ours.modules() if isinstance(m, HyperConnection)]
    theirs = [
        hc for layer in _decoder_layers(peer) if isinstance(layer, PeerDecoderLayer) for hc in layer.hcs
    ]
    if len(mine) != len(theirs):
        raise ValueError(
            f"models differ: {len(mine)} hyper-connections here, {len(theirs)} in the peer model"
        )
    for a, b in zip(mine, theirs):
        b.static_alpha.copy_(a.static_alpha)
        b.static_beta.copy_(a.static_beta)
        b.dynamic_alpha_fn.copy_(a.dynamic_alpha_fn)
        b.dynamic_beta_fn.copy_(a.dynamic_beta_fn)
        b.dynamic_alpha_scale.copy_(a.dynamic_alpha_scale.reshape(()))
        b.dynamic_beta_scale.copy_(a.dynamic_beta_scale.reshape(()))
        if isinstance(a.norm, nn.RMSNorm) and a.norm.weight is not None:
            b.norm.gamma.copy_(a.norm.weight - 1)
    return len(mine)


def _is_ours(layer: nn.Module) -> bool:
    return isinstance(layer, HyperConnectedDecoderLayer)
