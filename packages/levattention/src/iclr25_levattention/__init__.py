"""LevAttention (ICLR 2025): the universal set of keys for |x|^p attention, and a top-k leverage attention layer.

Exact routines (numpy, float64; p even):

- :func:`leverage_scores`, :func:`sensitivities`: rank-revealing leverage scores / tensor-power f-sensitivity bounds.
- :func:`universal_set`: U = {j : σ_j ≥ eps}, |U| ≤ d^{p/2}/eps, containing every heavy column for every Q.
- :func:`heavy_entries`: every A_ij ≥ eps exactly, in O(n d² + n |U| d) time, never forming n × n.
- :class:`StreamingUniversalSet`: the same from a key stream in workspace independent of n.
- :func:`brute_force_heavy_entries`: the chunked O(n² d) baseline.

Approximate: :func:`lewis_weights` (ℓ_p Lewis weights for other p; no guarantee).

Torch: :class:`LevAttention` (each query attends to the top-k leverage keys per head and example),
:func:`leverage_scores_torch`, :func:`select_top_keys`, and the small ViT used by the reproduction
(:class:`ViT`).

Reference: Kannan, Bhattacharyya, Kacham, Woodruff, "LevAttention: Time, Space and Streaming Efficient Algorithm
for Heavy Attentions", ICLR 2025, arXiv:2410.05462.
"""

from iclr25_levattention._heavy import HeavyEntries, brute_force_heavy_entries, heavy_entries, universal_set
from iclr25_levattention._leverage import (
    leverage_scores,
    lewis_weights,
    sensitivities,
    symmetric_tensor_features,
    tensor_dim,
)
from iclr25_levattention._streaming import StreamingUniversalSet
from iclr25_shared import distribution_version

__version__ = distribution_version("iclr25-levattention")

__all__ = [
    "HeavyEntries",
    "LevAttention",
    "StreamingUniversalSet",
    "ViT",
    "__version__",
    "brute_force_heavy_entries",
    "heavy_entries",
    "leverage_scores",
    "leverage_scores_torch",
    "lewis_weights",
    "select_top_keys",
    "sensitivities",
    "symmetric_tensor_features",
    "tensor_dim",
    "universal_set",
]

_TORCH = {"LevAttention", "leverage_scores_torch", "select_top_keys", "ViT"}


def __getattr__(name: str):
    # torch is imported only when the layer is used, so the numpy routines import fast.
    if name in _TORCH:
        if name == "ViT":
            from iclr25_levattention import _vit

            return _vit.ViT
        from iclr25_levattention import _layer

        return getattr(_layer, name)
    raise AttributeError(f"module 'iclr25_levattention' has no attribute {name!r}")
