"""Hyper-Connections (Zhu et al., ICLR 2025, arXiv 2409.19606) for PyTorch modules and Hugging Face decoders."""

from iclr25_hyper_connections._hf import (
    SUPPORTED_MODEL_TYPES,
    HyperConnectedDecoderLayer,
    apply_hyper_connections,
    hyper_connections_of,
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
from iclr25_shared import distribution_version

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
    "parallel_arrangement",
    "param_groups",
    "reduce_streams",
    "sequential_arrangement",
]
__version__ = distribution_version("iclr25-hyper-connections")
