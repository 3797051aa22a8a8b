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

from iclr25_shared import distribution_version, lazy_exports

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

# Everything is imported on first use, so `import iclr25_levattention` (and the CLI's --help) stays light and the
# runner's --threads reaches numpy's BLAS before numpy is loaded.
_WHERE = {
    "HeavyEntries": "_heavy",
    "brute_force_heavy_entries": "_heavy",
    "heavy_entries": "_heavy",
    "universal_set": "_heavy",
    "leverage_scores": "_leverage",
    "lewis_weights": "_leverage",
    "sensitivities": "_leverage",
    "symmetric_tensor_features": "_leverage",
    "tensor_dim": "_leverage",
    "StreamingUniversalSet": "_streaming",
    "LevAttention": "_layer",
    "leverage_scores_torch": "_layer",
    "select_top_keys": "_layer",
    "ViT": "_vit",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
