"""``iclr25-vl-interp``: logit lens, internal confidence, localisation maps and the ProjectAway edit for LLaVA-family
VLMs (arXiv:2410.02762). Config dataclasses and ``main`` only; the work is in ``_lens_command.py``, ``_edit_command.py``,
``_reproduce.py`` and ``_bench.py`` (what lens and edit share in ``_loading.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from iclr25_shared import inputs
from iclr25_shared.checks import check_choice, check_float, check_int
from iclr25_shared.cli import CommonOptions, run

__all__ = [
    "COMMANDS",
    "DEFAULT",
    "PROG",
    "BenchConfig",
    "EditConfig",
    "LensConfig",
    "ReproduceConfig",
    "main",
]

PROG = "iclr25-vl-interp"
DEFAULT = "lens"


@dataclass(frozen=True, kw_only=True)
class LensConfig(CommonOptions):
    """Internal confidence c_o of object words over the image tokens, per layer, with spatial maps.

    --model is a local Hugging Face LLaVA-family folder (processor + weights, read with local_files_only) and
    --image an image file. Without --model a tiny random-weight LLaVA runs (a smoke test: its numbers mean nothing)."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {"model": inputs.hf_model(), "image": inputs.image()}

    model: Path | None = None
    """Local HF model folder (config, weights, processor); none = the tiny random smoke model."""
    image: Path | None = None
    """Image file (required with --model)."""
    prompt: str = "Describe the image in detail."
    """User prompt placed after the image (with --model, through the processor's chat template when it has one)."""
    objects: tuple[str, ...] = ("cat", "dog")
    """Object words to score (multi-token words: max over their tokens)."""
    final_norm: bool = True
    """Apply the LM's final norm before the unembedding (--no-final-norm: raw residual, as the official notebooks)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Dtype of the weights: auto = the checkpoint's own (config.json; float16 for llava-hf/llava-1.5-7b-hf, and
    float32 for the tiny smoke model), else float32, bfloat16 or float16. The weights load straight onto --device
    (with accelerate installed)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("dtype", self.dtype, ("auto", "float32", "bfloat16", "float16"))
        if not self.objects:
            raise ValueError("objects must name at least one object word, got ()")
        if self.model is None and self.image is not None:
            raise ValueError("image needs model: pass --model <local HF LLaVA folder> with --image")
        if self.model is not None and self.image is None:
            raise ValueError("model needs image: pass --image <file> with --model")


@dataclass(frozen=True, kw_only=True)
class EditConfig(LensConfig):
    """ProjectAway: remove the objects' text directions from the image tokens, then caption before and after."""

    image_layer: int = 2
    """Hidden-state index l_I in [1, L] edited on the image rows (official code's hooked layer + 1)."""
    text_layer: int = 1
    """Hidden-state index l_T in [0, L] of the object word's last token that gives the direction t."""
    alpha: float = 1.5
    """Edit strength (>= 0; 1 = exactly orthogonal to t)."""
    max_new_tokens: int = 12
    """Greedy caption length (>= 1)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("image_layer", self.image_layer, low=1)
        check_int("text_layer", self.text_layer, low=0)
        check_float("alpha", self.alpha, low=0.0)
        check_int("max_new_tokens", self.max_new_tokens, low=1, high=4096)


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """The paper's claims on a VLM composed offline (EfficientNet-Lite0 -> trained projector -> SmolLM2, first
    --lm-layers layers kept) captioning Fashion-MNIST composites: c_o AUROC per layer, localisation, ProjectAway."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {
        "data_root": inputs.fashion_mnist_folder(splits=("train", "test"))
    }
    OUTPUTS: ClassVar[Mapping[str, inputs.Input]] = {"cache": inputs.output_folder()}

    size: Literal["tiny", "quick", "full", "gpu"] = "quick"
    """tiny (a smoke run, ~1 min), quick (minutes on 2 CPU cores), full, or gpu (40x quick's training samples, 2x
    its evaluation composites: about a minute on one GPU, with --device cuda)."""
    seeds: int = 5
    """Held-out composite sets (seeds of the composites; the projector is trained once, --train-seed), >= 1."""
    train_seed: int = 0
    """Seed of the training composites and of the projector initialisation."""
    cache: Path | None = None
    """Folder for the EfficientNet features and the trained projector (default: the iclr25 user cache)."""
    data_root: Path | None = None
    """Folder holding the Fashion-MNIST IDX .gz files (default: Debian's /usr/share/datasets/fashion-mnist or the
    iclr25 cache, fetched with `apt-get download dataset-fashion-mnist` when missing)."""
    lm_layers: int | None = None
    """Override the preset's number of SmolLM2 decoder layers kept (1..30; quick: 4)."""
    steps: int | None = None
    """Override the preset's projector training steps (>= 1)."""
    full_vocab: bool = False
    """Train and decode with the softmax over the full vocabulary (default: over the caption tokens only)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("seeds", self.seeds, low=1, high=100)
        check_int("train_seed", self.train_seed, low=0)
        if self.lm_layers is not None:
            check_int("lm_layers", self.lm_layers, low=1, high=30)
        if self.steps is not None:
            check_int("steps", self.steps, low=1)


@dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions):
    """Per-forward overhead of the logit lens and of the ProjectAway hook, as ratios to a plain forward pass."""

    repeats: int = 20
    """Timed repetitions per point (the median is reported, >= 1)."""
    sizes: tuple[Literal["tiny", "small"], ...] = ("tiny", "small")
    """Random-weight LLaVA sizes: tiny (3 layers, d=32, 16 image tokens), small (8 layers, d=256, 144 tokens)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("repeats", self.repeats, low=1)
        if not self.sizes:
            raise ValueError("sizes must name at least one of tiny, small, got ()")


COMMANDS = {
    "lens": (LensConfig, "iclr25_vl_interp._lens_command:lens"),
    "edit": (EditConfig, "iclr25_vl_interp._edit_command:edit"),
    "reproduce": (ReproduceConfig, "iclr25_vl_interp._reproduce:reproduce"),
    "bench": (BenchConfig, "iclr25_vl_interp._bench:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-vl-interp``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
