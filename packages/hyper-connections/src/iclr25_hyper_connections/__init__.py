"""Hyper-Connections (Zhu et al., ICLR 2025, arXiv 2409.19606) for PyTorch modules and Hugging Face decoders.

:class:`HyperConnection` wraps one branch (attention or FFN) of any network; :func:`apply_hyper_connections`
rewires a Hugging Face decoder (Llama, OLMo, OLMo2, Gemma, Phi-3, Qwen, ... see ``SUPPORTED_MODEL_TYPES``) so
that at initialisation it computes the same function as before; :func:`load_pretrained` loads what such a model's
``save_pretrained`` wrote.

Nothing heavy is imported by ``import iclr25_hyper_connections``: torch is imported when a public name is first
used, transformers only by the Hugging Face adapter (``apply_hyper_connections`` and friends).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iclr25_shared import distribution_version, lazy_exports

if TYPE_CHECKING:
    from iclr25_hyper_connections._hf import (
        SUPPORTED_MODEL_TYPES,
        HyperConnectedDecoderLayer,
        apply_hyper_connections,
        hyper_connections_of,
        load_pretrained,
    )
    from iclr25_hyper_connections._hyper_connection import (
        HyperConnection,
        WidthConnection,
        expand_streams,
        hyper_connection_num_params,
        parallel_arrangement,
        param_groups,
        reduce_streams,
        sequential_arrangement,
    )

_LAZY = {
    "SUPPORTED_MODEL_TYPES": "_hf",
    "HyperConnectedDecoderLayer": "_hf",
    "apply_hyper_connections": "_hf",
    "load_pretrained": "_hf",
    "hyper_connections_of": "_hyper_connection",
    "HyperConnection": "_hyper_connection",
    "WidthConnection": "_hyper_connection",
    "expand_streams": "_hyper_connection",
    "hyper_connection_num_params": "_hyper_connection",
    "parallel_arrangement": "_hyper_connection",
    "param_groups": "_hyper_connection",
    "reduce_streams": "_hyper_connection",
    "sequential_arrangement": "_hyper_connection",
}

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "HyperConnectedDecoderLayer",
    "HyperConnection",
    "WidthConnection",
    "__version__",
    "apply_hyper_connections",
    "expand_streams",
    "hyper_connection_num_params",
    "hyper_connections_of",
    "load_pretrained",
    "parallel_arrangement",
    "param_groups",
    "reduce_streams",
    "sequential_arrangement",
]
__version__ = distribution_version("iclr25-hyper-connections")

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
