"""LANTERN: relaxed speculative decoding for visual autoregressive models (ICLR 2025, arXiv:2410.03355).

Visual AR models spread probability thinly over many near-identical image tokens, so standard speculative
decoding rejects most drafts. LANTERN accepts a drafted token ``x`` with probability ``min(1, p̃_x(x) / q(x))``,
where ``p̃_x`` moves onto ``x`` the target mass of its nearest latent neighbours (by codebook distance) as long as
the moved mass stays within a total-variation budget ``δ``. ``δ = 0`` is standard (lossless) speculative sampling.

    from iclr25_lantern import latent_proximity, Relaxation, speculative_generate, HFDecoder
    relax = Relaxation(neighbours=latent_proximity(codebook, k=100), delta=0.2)
    out = speculative_generate(HFDecoder(target), HFDecoder(drafter), prefix, max_new_tokens=256, relax=relax)

Nothing heavy is imported at ``import iclr25_lantern``; torch is imported by the functions that use it, and the
model classes (``TokenTransformer``, ``VQVAE``, ``FeatureCNN``) load lazily.
"""

from iclr25_lantern._decoding import (
    CachedDecoder,
    FunctionDecoder,
    GenerationOutput,
    HFDecoder,
    autoregressive_generate,
    layer_prefix_drafter,
    speculative_generate,
)
from iclr25_lantern._relaxed import (
    LogitsProcessor,
    Relaxation,
    acceptance_probability,
    greedy_accept,
    latent_proximity,
    one_step_law,
    relaxed_acceptance,
    relaxed_target_mass,
    residual_distribution,
)
from iclr25_shared import distribution_version, lazy_exports

__all__ = [
    "VQVAE",
    "CachedDecoder",
    "FeatureCNN",
    "FunctionDecoder",
    "GenerationOutput",
    "HFDecoder",
    "LogitsProcessor",
    "Relaxation",
    "TokenTransformer",
    "TransformerConfig",
    "__version__",
    "acceptance_probability",
    "autoregressive_generate",
    "greedy_accept",
    "latent_proximity",
    "layer_prefix_drafter",
    "one_step_law",
    "relaxed_acceptance",
    "relaxed_target_mass",
    "residual_distribution",
    "speculative_generate",
]
__version__ = distribution_version("iclr25-lantern")

_LAZY = dict.fromkeys(("FeatureCNN", "TokenTransformer", "TransformerConfig", "VQVAE"), "_models")

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
