"""Denoising-task-difficulty curriculum for training diffusion models (Kim et al., ICLR 2025, arXiv:2403.10348).

Timesteps are grouped into clusters ``C_1`` (lowest t, hardest) … ``C_N`` (highest t, easiest); training starts on
the easiest cluster and adds harder ones when the loss stops improving, then trains on all timesteps. Drop-in for a
diffusers loop: replace ``torch.randint(0, T, (B,))`` by ``sampler.sample(B, generator)`` and call
``sampler.update(loss)`` after each step.

The public names are imported lazily (PEP 562), so ``import iclr25_diffusion_curriculum`` and ``--help`` do not
import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iclr25_shared import distribution_version, lazy_exports

__version__ = distribution_version("iclr25-diffusion-curriculum")

_EXPORTS = {
    "TimestepClusters": "_clusters",
    "SCHEMES": "_clusters",
    "PatiencePacer": "_pacer",
    "FixedPacer": "_pacer",
    "CurriculumSampler": "_sampler",
    "ORDERS": "_sampler",
    "min_snr_weights": "_weighting",
    "snr_from_alphas_cumprod": "_weighting",
    "cluster_loss_curves": "_analysis",
    "convergence_steps": "_analysis",
}

__all__ = [
    "ORDERS",
    "SCHEMES",
    "CurriculumSampler",
    "FixedPacer",
    "PatiencePacer",
    "TimestepClusters",
    "__version__",
    "cluster_loss_curves",
    "convergence_steps",
    "min_snr_weights",
    "snr_from_alphas_cumprod",
]

if TYPE_CHECKING:
    from iclr25_diffusion_curriculum._analysis import cluster_loss_curves, convergence_steps
    from iclr25_diffusion_curriculum._clusters import SCHEMES, TimestepClusters
    from iclr25_diffusion_curriculum._pacer import FixedPacer, PatiencePacer
    from iclr25_diffusion_curriculum._sampler import ORDERS, CurriculumSampler
    from iclr25_diffusion_curriculum._weighting import min_snr_weights, snr_from_alphas_cumprod

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
