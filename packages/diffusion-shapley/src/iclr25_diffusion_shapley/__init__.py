"""Shapley values of data contributors for a global property of a diffusion model, made affordable by sparsified
fine-tuning (Lu, Lin, Kim, Lee, "An Efficient Framework for Crediting Data Contributors of Diffusion Models",
ICLR 2025, arXiv:2407.03153).

Estimators work on any game ``v(mask) -> float`` (numpy only): :func:`exact_shapley`, :func:`kernel_shap` (the
constrained closed form, exact efficiency), :func:`banzhaf`, :func:`leave_one_out`, :func:`datamodel`, and the
evaluation :func:`lds`. The diffusion side (torch, diffusers, torch-pruning) turns a retraining strategy
(:class:`Retrain`, :class:`SparsifiedFineTune`, :class:`GradientAscentUnlearn`) and a global property into such a
game (:class:`DiffusionGame`)::

    from iclr25_diffusion_shapley import kernel_shap, exact_shapley
    phi = kernel_shap(lambda m: float(m[0] and m[1]) + m[2], 3, num_samples=64).values   # (3,), sums to v(N)-v(∅)

Every public name loads on first use (PEP 562), so `import iclr25_diffusion_shapley` (and its CLI's start) imports no numpy.
"""

from iclr25_shared import distribution_version, lazy_exports

_LAZY = {
    "AttributionResult": "_shapley",
    "CachedGame": "_shapley",
    "all_subsets": "_shapley",
    "banzhaf": "_shapley",
    "banzhaf_from_samples": "_shapley",
    "banzhaf_from_table": "_shapley",
    "datamodel": "_shapley",
    "datamodel_from_samples": "_shapley",
    "exact_shapley": "_shapley",
    "kernel_shap": "_shapley",
    "kernel_shap_from_samples": "_shapley",
    "lds": "_shapley",
    "lds_interval": "_shapley",
    "leave_one_out": "_shapley",
    "sample_datamodel_subsets": "_shapley",
    "sample_shapley_kernel": "_shapley",
    "shapley_from_table": "_shapley",
    "shapley_kernel_size_probabilities": "_shapley",
    "subset_table": "_shapley",
    "ContributorData": "_diffusion",
    "DiffusionGame": "_diffusion",
    "GradientAscentUnlearn": "_diffusion",
    "MLPDenoiser": "_diffusion",
    "Retrain": "_diffusion",
    "SparsifiedFineTune": "_diffusion",
    "make_contributors": "_diffusion",
    "make_scheduler": "_diffusion",
    "make_unet": "_diffusion",
    "parameter_count": "_diffusion",
    "prune_model": "_diffusion",
    "sample_images": "_diffusion",
    "train_denoiser": "_diffusion",
    "PixelClassifier": "_properties",
    "class_entropy": "_properties",
    "class_share": "_properties",
    "fashion_mnist_contributors": "_properties",
    "frechet_pixel_distance": "_properties",
    "pixel_diversity": "_properties",
    "pixel_similarity_attribution": "_properties",
    "size_only_attribution": "_properties",
}

__all__ = [
    "AttributionResult",
    "CachedGame",
    "__version__",
    "all_subsets",
    "banzhaf",
    "banzhaf_from_samples",
    "banzhaf_from_table",
    "datamodel",
    "datamodel_from_samples",
    "exact_shapley",
    "kernel_shap",
    "kernel_shap_from_samples",
    "lds",
    "lds_interval",
    "leave_one_out",
    "sample_datamodel_subsets",
    "sample_shapley_kernel",
    "shapley_from_table",
    "shapley_kernel_size_probabilities",
    "subset_table",
    *sorted(_LAZY),
]
__version__ = distribution_version("iclr25-diffusion-shapley")

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
