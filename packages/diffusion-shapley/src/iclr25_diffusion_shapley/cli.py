"""``iclr25-diffusion-shapley``: Shapley values of data contributors for a global property of a diffusion model,
made affordable by sparsified fine-tuning (Lu, Lin, Kim, Lee, ICLR 2025, arXiv:2407.03153). Default: a small DDPM
on Fashion-MNIST with contributors = pairs of classes. Config dataclasses and ``main`` only; the work is in
``_attribute.py``, ``_reproduce.py`` and ``_bench.py`` (what they share in ``_experiment.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import ClassVar, Literal

from iclr25_diffusion_shapley._checks import FIVE_PAIRS, PROPERTIES, check_contributors
from iclr25_shared import inputs
from iclr25_shared.checks import check_choice, check_float, check_int
from iclr25_shared.cli import CommonOptions, run

__all__ = [
    "COMMANDS",
    "DEFAULT",
    "GPU_SIZE",
    "PROG",
    "AttributeConfig",
    "BenchConfig",
    "ReproduceConfig",
    "main",
]

PROG = "iclr25-diffusion-shapley"
DEFAULT = "attribute"


@dataclass(frozen=True, kw_only=True)
class _Game(CommonOptions):
    """Options shared by every command: data, model, training and sampling."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {"data_root": inputs.fashion_mnist_folder()}

    contributors: tuple[str, ...] = FIVE_PAIRS
    """Contributors as groups of Fashion-MNIST classes, one comma-separated group per contributor (>= 2 groups;
    classes 0..9, disjoint)."""
    per_class: int = 300
    """Training images per class (drawn with the seed)."""
    data_root: Path | None = None
    """Folder with the four Fashion-MNIST IDX .gz files, train and t10k (default: Debian's dataset-fashion-mnist,
    else the user cache)."""
    prediction_type: Literal["sample", "epsilon"] = "sample"
    """What the network predicts: the clean image (sample; much better samples after a few hundred steps) or
    the noise (epsilon, the DDPM default)."""
    model: Literal["mlp", "unet"] = "mlp"
    """mlp (residual MLP denoiser; CPU-cheap) or unet (diffusers UNet2DModel, channels 16/32)."""
    hidden: int = 256
    """Hidden width of the MLP."""
    batch_size: int = 128
    """Images per training step."""
    lr: float = 2e-3
    """Adam learning rate for retraining and fine-tuning."""
    retrain_steps: int = 150
    """Training steps of a model trained from scratch on a coalition."""
    pruning_ratio: float = 0.5
    """Structured pruning ratio for sparsified fine-tuning, in [0, 1)."""
    prune_steps: int = 150
    """Fine-tuning steps of the pruned model on all data (once)."""
    ft_steps: int = 30
    """Sparsified fine-tuning steps per coalition."""
    unlearn_steps: int = 10
    """Gradient-ascent unlearning steps per coalition (baseline)."""
    unlearn_lr: float = 1e-4
    """Learning rate of gradient-ascent unlearning."""
    num_samples: int = 256
    """Images generated per model to measure the property."""
    sampling_steps: int = 20
    """DDIM sampling steps."""
    kernel_samples: int = 20
    """Shapley-kernel coalitions drawn by KernelSHAP (besides the empty and the full one)."""
    classifier_images: int = 2000
    """Fashion-MNIST test-split images the property's classifier is trained on."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_contributors(self.contributors)
        check_int("per_class", self.per_class, low=1, high=6000)
        check_int("hidden", self.hidden, low=4)
        check_int("batch_size", self.batch_size, low=1)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)
        check_int("retrain_steps", self.retrain_steps, low=1)
        check_float("pruning_ratio", self.pruning_ratio, low=0.0, high=1.0, high_inclusive=False)
        check_int("prune_steps", self.prune_steps, low=0)
        check_int("ft_steps", self.ft_steps, low=0)
        check_int("unlearn_steps", self.unlearn_steps, low=0)
        check_float("unlearn_lr", self.unlearn_lr, low=0.0, low_inclusive=False)
        check_int("num_samples", self.num_samples, low=2)
        check_int("sampling_steps", self.sampling_steps, low=1)
        check_int("kernel_samples", self.kernel_samples, low=1)
        check_int("classifier_images", self.classifier_images, low=20, high=10000)


@dataclass(frozen=True, kw_only=True)
class AttributeConfig(_Game):
    """Attribute a global property of a DDPM to its data contributors (Shapley values by default with
    sparsified fine-tuning + KernelSHAP); prints one attribution per contributor."""

    property: str = "entropy"
    """entropy (of the predicted-class histogram), fid (pixel-PCA Fréchet distance to the data), diversity, or
    share:<class> (fraction of samples classified as that class)."""
    method: Literal["sparse-ft", "retrain", "unlearn-ga"] = "sparse-ft"
    """How v(S) is obtained: sparsified fine-tuning, retraining from scratch, or gradient-ascent unlearning."""
    estimator: Literal["kernel-shap", "exact", "banzhaf", "loo"] = "kernel-shap"
    """kernel-shap, exact (all 2^n coalitions), banzhaf (least squares on uniform coalitions), loo."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("property", self.property, PROPERTIES)


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(_Game):
    """The paper's claim at small scale: exact Shapley by retraining every coalition vs sparsified-FT KernelSHAP,
    unlearning KernelSHAP, leave-one-out, pixel similarity and subset size (Spearman to exact, LDS on held-out
    coalitions retrained separately, seconds)."""

    size: Literal["quick", "gpu"] = "quick"
    """quick: the defaults (about 8 minutes on one CPU thread); gpu: the options left at their quick defaults take
    the preset GPU_SIZE (3.3x the images, 4x the batch, 2x the steps, 4x the samples; a few minutes on one GPU with
    --device cuda, an estimate: README "GPU"). Options given explicitly win over the preset."""
    seeds: int = 5
    """Independent seeds (data subsample, initialisation, kernel draws)."""
    properties: tuple[str, ...] = ("entropy", "share:0")
    """Global properties measured on the same generated samples."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("size", self.size, ("quick", "gpu"))
        check_int("seeds", self.seeds, low=1)
        if not self.properties:
            raise ValueError(f"properties must name at least one of {', '.join(PROPERTIES)}")
        for p in self.properties:
            check_choice("properties", p, PROPERTIES)

    def sized(self) -> ReproduceConfig:
        """This config with the ``--size`` preset applied to every option still at its quick default."""
        if self.size == "quick":
            return self
        defaults = {f.name: f.default for f in fields(self)}
        return replace(self, **{k: v for k, v in GPU_SIZE.items() if getattr(self, k) == defaults[k]})


GPU_SIZE = {
    "per_class": 1000,
    "batch_size": 512,
    "retrain_steps": 300,
    "prune_steps": 300,
    "ft_steps": 60,
    "num_samples": 1024,
}
"""``reproduce --size gpu``: 1 000 images per class (3.3x), batch 512 (4x) and twice the steps of every strategy:
13x the training images seen per coalition of quick, 4x the generated samples. Estimate (README "GPU"): a few
minutes on one H200."""


@dataclass(frozen=True, kw_only=True)
class BenchConfig(_Game):
    """Seconds per coalition of retraining vs sparsified fine-tuning (and unlearning), timed interleaved on the same
    coalitions (iclr25_shared.bench), the per-subset ratio split into its two causes (fewer steps; the pruned
    network's time per step), and the projected cost of exact Shapley vs KernelSHAP as contributors grow."""

    models: tuple[Literal["mlp", "unet"], ...] = ("mlp", "unet")
    """Models to time."""
    subsets: int = 3
    """Shapley-kernel coalitions the rounds cycle through (every arm trains on the same coalition in a round)."""
    repeats: int = 5
    """Timed rounds per model (every arm once per round, order rotated; after one warm-up round)."""
    project_contributors: tuple[int, ...] = (5, 10, 20)
    """Numbers of contributors for the cost projection."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("subsets", self.subsets, low=1)
        check_int("repeats", self.repeats, low=1)
        if not self.models:
            raise ValueError("models must name at least one of mlp, unet")
        for n in self.project_contributors:
            check_int("project_contributors", n, low=2, high=60)


COMMANDS = {
    "attribute": (AttributeConfig, "iclr25_diffusion_shapley._attribute:attribute"),
    "reproduce": (ReproduceConfig, "iclr25_diffusion_shapley._reproduce:reproduce"),
    "bench": (BenchConfig, "iclr25_diffusion_shapley._bench:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console script ``iclr25-diffusion-shapley``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
