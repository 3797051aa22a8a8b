"""``iclr25-diffusion-curriculum``: easy-to-hard timestep curriculum for diffusion training (Kim et al., ICLR 2025,
arXiv:2403.10348): train a small diffusers UNet with uniform / curriculum / reverse timestep sampling, reproduce the
comparison on Fashion-MNIST, and measure the sampler's overhead. Config dataclasses and ``main`` only; the work is
in ``_train.py``, ``_reproduce.py`` and ``_bench.py``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from iclr25_diffusion_curriculum._runs import check_runs_folder
from iclr25_shared import inputs
from iclr25_shared.checks import check_choice, check_float, check_int
from iclr25_shared.cli import CommonOptions, run

__all__ = ["COMMANDS", "DEFAULT", "PROG", "BenchConfig", "ReproduceConfig", "TrainConfig", "main"]

PROG = "iclr25-diffusion-curriculum"
DEFAULT = "train"


@dataclass(frozen=True, kw_only=True)
class _CurriculumOptions(CommonOptions):
    num_train_timesteps: int = 1000
    """T of the DDPM scheduler."""
    num_clusters: int = 10
    """N, the number of timestep clusters (= curriculum stages)."""
    patience: int = 20
    """τ: consecutive non-improving loss updates before the next stage."""
    max_steps_per_stage: int | None = 50
    """Cap on training steps per stage (None: no cap)."""
    ema: float = 0.9
    """Smoothing of the loss the pacer watches, in [0, 1)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("num_train_timesteps", self.num_train_timesteps, low=1)
        check_int("num_clusters", self.num_clusters, low=1, high=self.num_train_timesteps)
        check_int("patience", self.patience, low=1)
        if self.max_steps_per_stage is not None:
            check_int("max_steps_per_stage", self.max_steps_per_stage, low=1)
        check_float("ema", self.ema, low=0.0, high=1.0, high_inclusive=False)

    @staticmethod
    def _check_unet(channels: tuple[int, ...], image_size: int) -> None:
        """UNet widths are positive multiples of 8 (GroupNorm, 8 groups); the side divides by the down-sampling."""
        if not channels or any(c < 8 or c % 8 for c in channels):
            raise ValueError(f"channels must be positive multiples of 8, got {channels}")
        factor = 2 ** (len(channels) - 1)
        if image_size % factor:
            raise ValueError(
                f"image_size must be divisible by {factor} for {len(channels)} UNet levels, got {image_size}"
            )


@dataclass(frozen=True, kw_only=True)
class TrainConfig(_CurriculumOptions):
    """Train a small diffusers UNet2DModel + DDPMScheduler with a uniform, curriculum or reverse timestep sampler."""

    dataset: Literal["fashion-mnist", "digits"] = "fashion-mnist"
    """Real images: Fashion-MNIST (shared loader) or scikit-learn's 8×8 digits."""
    sampler: Literal["uniform", "curriculum", "reverse"] = "curriculum"
    """Timestep sampling: uniform (baseline), curriculum (easy/high t first), reverse (hard/low t first, control)."""
    steps: int = 500
    """Optimizer steps."""
    batch_size: int = 64
    """Images per step."""
    lr: float = 2e-3
    """Adam learning rate."""
    image_size: int | None = None
    """Image side in pixels (default 16 for fashion-mnist, 8 for digits)."""
    channels: tuple[int, ...] = (16, 32, 32)
    """UNet block widths (multiples of 8; one down-sampling per extra level)."""
    snr_gamma: float | None = None
    """Min-SNR-γ loss weighting (e.g. 5.0); None trains with the plain ε-MSE."""
    timestep_range: tuple[int, int] | None = None
    """Train only on timesteps BEGIN … END-1 (0 <= BEGIN < END <= T); the clusters split this range."""
    num_samples: int = 64
    """Images in the saved sample grid."""
    num_inference_steps: int = 50
    """DDIM steps for the samples."""
    weight_ema: float | None = None
    """Also keep an exponential moving average of the weights with this decay (saved as unet_ema/, used for the
    samples); None: no EMA."""
    sync_every: int = 1
    """Steps between loss read-backs from the device (1: the pacer sees every loss before the next step)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("dataset", self.dataset, ("fashion-mnist", "digits"))
        check_choice("sampler", self.sampler, ("uniform", "curriculum", "reverse"))
        check_int("steps", self.steps, low=1)
        check_int("batch_size", self.batch_size, low=1)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)
        if self.image_size is not None:
            check_int("image_size", self.image_size, low=4, high=64)
        self._check_unet(self.channels, self.size)
        if self.snr_gamma is not None:
            check_float("snr_gamma", self.snr_gamma, low=0.0, low_inclusive=False)
        if self.timestep_range is not None:
            from iclr25_diffusion_curriculum._clusters import TimestepClusters

            TimestepClusters(self.num_train_timesteps, self.num_clusters, timestep_range=self.timestep_range)
        check_int("num_samples", self.num_samples, low=1, high=1024)
        if self.weight_ema is not None:
            check_float("weight_ema", self.weight_ema, low=0.0, high=1.0, high_inclusive=False)
        check_int("sync_every", self.sync_every, low=1)
        check_int("num_inference_steps", self.num_inference_steps, low=1, high=self.num_train_timesteps)

    @property
    def size(self) -> int:
        return (
            self.image_size if self.image_size is not None else (16 if self.dataset == "fashion-mnist" else 8)
        )


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(_CurriculumOptions):
    """Uniform vs curriculum (vs reverse) on Fashion-MNIST at equal steps, paired over seeds, EMA weights evaluated.

    Every method of a seed shares the UNet initialisation, images, noise and evaluation inputs. At each checkpoint:
    FID (classifier features) and held-out ε-MSE of the EMA weights; compared with uniform through
    iclr25_shared.stats (primary: final FID, curriculum / uniform - 1; secondary and exploratory comparisons), plus
    "steps to reach uniform's final value" and the measured evaluation noise of both metrics. --full is the long setting; --combine summarises earlier runs (e.g. one seed each) without training."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {
        "combine": inputs.folder(
            expected="a results folder of `reproduce --out` (with runs.json)", check=check_runs_folder
        )
    }

    steps: int = 400
    """Training steps per run (equal for every method)."""
    patience: int = 8
    """τ: consecutive non-improving loss updates before the next stage."""
    max_steps_per_stage: int | None = 10
    """Cap on training steps per stage (None: no cap); N−1 stages × cap bounds the curriculum phase."""
    num_seeds: int = 5
    """Seeds per method (seed, seed+1, …); the pairs give the intervals."""
    methods: tuple[Literal["uniform", "curriculum", "reverse"], ...] = ("uniform", "curriculum")
    """Timestep samplers to compare (uniform, the baseline, is required; reverse = hard-first control)."""
    batch_size: int = 64
    """Images per step."""
    lr: float = 2e-3
    """Adam learning rate."""
    image_size: int = 16
    """Fashion-MNIST is resized to this side (28 is native)."""
    channels: tuple[int, ...] = (8, 16, 16)
    """UNet block widths."""
    snr_gamma: float | None = None
    """Min-SNR-γ weighting for every method (orthogonality check); None: plain ε-MSE."""
    weight_ema: float | None = 0.99
    """Decay of the exponential moving average of the weights that is evaluated (None: the raw weights)."""
    sync_every: int = 1
    """Steps between loss read-backs from the device (1: the pacer sees every loss before the next step)."""
    num_checkpoints: int = 6
    """Evaluations (FID, held-out loss) spread evenly over training."""
    num_fid_samples: int = 200
    """Generated images per FID evaluation."""
    num_inference_steps: int = 10
    """DDIM steps for generation."""
    heldout_images: int = 200
    """Test images for the held-out loss (each noised once per cluster)."""
    analysis_bins: int = 12
    """Step windows of the difficulty analysis."""
    combine: tuple[Path, ...] = ()
    """Result folders of earlier reproduce runs with the same settings (other seeds) to summarise, without training."""
    full: bool = False
    """The long setting; replaces the options still at their quick defaults by FULL (see the README)."""
    size: Literal["quick", "gpu"] = "quick"
    """quick: the defaults; gpu: the options still at their quick defaults take GPU (5x the steps at 4x the batch,
    4 seeds, 5x the pacer's patience and stage cap, larger FID and held-out sets; for --device cuda, a few minutes
    on one GPU: README "GPU"). Not with --full."""

    FULL: ClassVar[dict[str, Any]] = {
        "steps": 1200,
        "num_checkpoints": 8,
        "num_seeds": 4,
        "weight_ema": 0.995,
        "patience": 20,
        "max_steps_per_stage": 30,
        "num_fid_samples": 500,
        "heldout_images": 500,
    }

    GPU: ClassVar[dict[str, Any]] = {
        "steps": 2000,
        "batch_size": 256,
        "num_seeds": 4,
        "patience": 40,
        "max_steps_per_stage": 50,
        "weight_ema": 0.998,
        "num_checkpoints": 8,
        "num_fid_samples": 1000,
        "heldout_images": 1000,
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("size", self.size, ("quick", "gpu"))
        if self.full and self.size != "quick":
            raise ValueError(f"--full and --size {self.size} are two presets; give one")
        check_int("steps", self.steps, low=1)
        check_int("num_seeds", self.num_seeds, low=1)
        if not self.methods or "uniform" not in self.methods or len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods must list uniform and no duplicates, got {list(self.methods)}")
        if len(self.methods) < 2:
            raise ValueError(
                "methods must list uniform and at least one of curriculum, reverse to compare with it"
            )
        for m in self.methods:
            check_choice("methods", m, ("uniform", "curriculum", "reverse"))
        check_int("batch_size", self.batch_size, low=1)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)
        check_int("image_size", self.image_size, low=4, high=64)
        self._check_unet(self.channels, self.image_size)
        if self.snr_gamma is not None:
            check_float("snr_gamma", self.snr_gamma, low=0.0, low_inclusive=False)
        if self.weight_ema is not None:
            check_float("weight_ema", self.weight_ema, low=0.0, high=1.0, high_inclusive=False)
        check_int("sync_every", self.sync_every, low=1)
        check_int("num_checkpoints", self.num_checkpoints, low=2, high=self.steps)
        check_int("num_fid_samples", self.num_fid_samples, low=10)
        check_int("num_inference_steps", self.num_inference_steps, low=1, high=self.num_train_timesteps)
        check_int("heldout_images", self.heldout_images, low=1, high=10_000)
        check_int("analysis_bins", self.analysis_bins, low=2, high=self.steps)

    def effective(self) -> ReproduceConfig:
        """The config actually run: with ``--full`` (``--size gpu``), each option still at its quick default takes
        its FULL (GPU) value (options given explicitly are kept)."""
        if not self.full and self.size == "quick":
            return self
        preset = self.FULL if self.full else self.GPU
        quick = {f.name: f.default for f in dataclasses.fields(self)}
        changes = {k: v for k, v in preset.items() if getattr(self, k) == quick[k]}
        return dataclasses.replace(self, full=False, size="quick", **changes)


@dataclass(frozen=True, kw_only=True)
class BenchConfig(_CurriculumOptions):
    """Per-step overhead of the curriculum sampler (sample + pacer update) against a training step and torch.randint."""

    steps: int = 20
    """Interleaved rounds of one uniform and one curriculum training step."""
    warmup: int = 3
    """Untimed training steps of each kind first."""
    sampler_calls: int = 2000
    """Sampler calls per round of the sampler-only comparison."""
    repeats: int = 7
    """Rounds of the sampler-only comparison (sampler.sample + update vs torch.randint)."""
    batch_size: int = 64
    """Batch size."""
    image_size: int = 16
    """Image side."""
    channels: tuple[int, ...] = (8, 16, 16)
    """UNet block widths."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("steps", self.steps, low=1)
        check_int("warmup", self.warmup, low=0)
        check_int("sampler_calls", self.sampler_calls, low=1)
        check_int("repeats", self.repeats, low=1)
        check_int("batch_size", self.batch_size, low=1)
        check_int("image_size", self.image_size, low=4, high=64)
        self._check_unet(self.channels, self.image_size)


COMMANDS = {
    "train": (TrainConfig, "iclr25_diffusion_curriculum._train:train"),
    "reproduce": (ReproduceConfig, "iclr25_diffusion_curriculum._reproduce:reproduce"),
    "bench": (BenchConfig, "iclr25_diffusion_curriculum._bench:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-diffusion-curriculum``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
