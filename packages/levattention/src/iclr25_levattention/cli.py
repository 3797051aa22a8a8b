"""LevAttention (ICLR 2025, arXiv:2410.05462): every attention weight >= eps of |x|^p attention via the universal
set of keys (find), the paper's claims at small scale on real data (reproduce), and the speed/memory ratios against
brute force (bench).

iclr25-levattention find --q Q.npy --k K.npy --eps 0.05 --p 2
iclr25-levattention reproduce --out runs/levattention
iclr25-levattention bench --out runs/levattention-bench
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from iclr25_shared import inputs
from iclr25_shared.checks import check_choice, check_float, check_int
from iclr25_shared.cli import CommonOptions, run

__all__ = ["COMMANDS", "DEFAULT", "PROG", "BenchConfig", "FindConfig", "ReproduceConfig", "main"]

PROG = "iclr25-levattention"
DEFAULT = "find"


@dataclass(frozen=True, kw_only=True)
class FindConfig(CommonOptions):
    """Every attention weight >= eps of rownormalise(|Q K^T|^p), via the universal set of keys."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {"q": inputs.npy(ndim=2), "k": inputs.npy(ndim=2)}

    q: Path | None = None
    """Queries: a .npy file of shape (n_q, d). Omitted: the same as --k."""
    k: Path | None = None
    """Keys: a .npy file of shape (n, d). Omitted (with --q omitted): the 1 797 sklearn digits, PCA to d = 8."""
    eps: float = 0.05
    """Threshold in (0, 1]: report entries A_ij >= eps."""
    p: int = 2
    """Exponent of f(x) = |x|^p; a positive even integer (the exact routine)."""
    chunk_size: int = 1024
    """Queries processed at a time."""
    show: int = 10
    """How many of the largest entries to print."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_float("eps", self.eps, low=0.0, high=1.0, low_inclusive=False)
        self.check_even_p(self.p, "find")
        check_int("chunk_size", self.chunk_size, low=1)
        check_int("show", self.show, low=0)
        if self.q is not None and self.k is None:
            raise ValueError("--q was given without --k; pass the keys with --k FILE")

    @staticmethod
    def check_even_p(p: int, command: str) -> None:
        """Raise unless ``p`` is a positive even integer (the exact routines' exponents)."""
        if isinstance(p, bool) or not isinstance(p, int) or p < 2 or p % 2:
            raise ValueError(
                f"p must be a positive even integer (2, 4, ...) for {command} (exact routine), got {p}; "
                "for other p use the library's lewis_weights (approximate)"
            )


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """The paper's claims at small scale on real data: (A) exactness and scaling, (B) ViT on Fashion-MNIST."""

    size: Literal["quick", "full", "tiny", "gpu"] = "quick"
    """quick: part A and part B (30 000 image passes per model and seed), the committed run (results/reproduce-quick);
    full: larger n and contexts, 15 epochs on all 60 000 training images; tiny: a seconds-long smoke test (not a
    result); gpu: quick's part A, part B trained 100x longer (with --device cuda)."""
    parts: Literal["all", "A", "B"] = "all"
    """Which parts to run."""
    lm: bool = True
    """Part A: queries/keys of SmolLM2-135M (needs the packaged model); --no-lm uses Fashion-MNIST PCA-16 instead."""
    vit_models: Literal["all", "full", "lev"] = "all"
    """Part B: which ViTs to train (full: (i) and (iii); lev: (ii)), so each fits its own run."""
    vit_epochs: int = 0
    """Part B epochs (0: the size's default)."""
    vit_train: int = 0
    """Part B training images, at most 60 000 (0: the size's default)."""
    seeds: int = 5
    """Part B training seeds (>= 1; >= 2 for an interval): seed, seed + 1, ...; (i) and (ii) share each one."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("size", self.size, ("quick", "full", "tiny", "gpu"))
        check_choice("parts", self.parts, ("all", "A", "B"))
        check_choice("vit_models", self.vit_models, ("all", "full", "lev"))
        check_int("vit_epochs", self.vit_epochs, low=0, high=1000)
        check_int("vit_train", self.vit_train, low=0, high=60000)
        check_int("seeds", self.seeds, low=1, high=100)


@dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions):
    """heavy_entries vs chunked brute force at n = 2^min_log_n ... 2^max_log_n (numpy, host): time and peak-memory
    ratios; and the LevAttention layer, top-k vs full attention, on --device."""

    min_log_n: int = 10
    """Smallest n is 2^min_log_n."""
    max_log_n: int = 15
    """Largest n is 2^max_log_n (17 takes ~10 minutes of brute force on one core)."""
    d: int = 64
    """Key/query dimension."""
    eps: float = 0.1
    """Threshold in (0, 1]."""
    p: int = 2
    """Positive even exponent."""
    chunk_size: int = 512
    """Queries per chunk, for both methods."""
    repeats: int = 5
    """Interleaved rounds per n (3 for the finder above n = 8192), after one warm-up call of each arm."""
    layer_ns: tuple[int, ...] = (256, 1024)
    """Sequence lengths of the layer bench (top-k vs full attention, forward + backward, on --device)."""
    layer_batch: int = 2
    """Batch of the layer bench."""
    layer_dim: int = 64
    """Width of the layer bench's LevAttention."""
    layer_heads: int = 4
    """Heads of the layer bench."""
    layer_top_k: int = 32
    """Keys kept per head in the layer bench (the paper's ViT setting)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("repeats", self.repeats, low=1)
        for n in self.layer_ns:
            check_int("layer_ns", n, low=2, high=65536)
        check_int("layer_batch", self.layer_batch, low=1)
        check_int("layer_heads", self.layer_heads, low=1)
        check_int("layer_dim", self.layer_dim, low=self.layer_heads)
        if self.layer_dim % self.layer_heads:
            raise ValueError(
                f"layer_dim ({self.layer_dim}) must be divisible by layer_heads ({self.layer_heads})"
            )
        check_int("layer_top_k", self.layer_top_k, low=1)
        check_int("min_log_n", self.min_log_n, low=4, high=20)
        check_int("max_log_n", self.max_log_n, low=self.min_log_n, high=20)
        check_int("d", self.d, low=1, high=4096)
        check_float("eps", self.eps, low=0.0, high=1.0, low_inclusive=False)
        FindConfig.check_even_p(self.p, "bench")
        check_int("chunk_size", self.chunk_size, low=1)


COMMANDS = {
    "find": (FindConfig, "iclr25_levattention._find:find"),
    "reproduce": (ReproduceConfig, "iclr25_levattention._reproduce:reproduce"),
    "bench": (BenchConfig, "iclr25_levattention._bench:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-levattention``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
