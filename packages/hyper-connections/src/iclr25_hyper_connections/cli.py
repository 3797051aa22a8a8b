"""``iclr25-hyper-connections``: train, reproduce and bench hyper-connections (Zhu et al., ICLR 2025, arXiv
2409.19606) against residual connections on Wikipedia text. Config dataclasses and ``main`` only; the work is in
``_train.py``, ``_reproduce.py``, ``_bench.py`` and ``_peer.py`` (shared parts in ``_experiment.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from iclr25_hyper_connections._variants import MAX_EXPANSION_RATE, check_variant
from iclr25_shared import inputs
from iclr25_shared.checks import check_float, check_int
from iclr25_shared.cli import CommonOptions, run

__all__ = [
    "COMMANDS",
    "DEFAULT",
    "PROG",
    "BenchConfig",
    "PeerConfig",
    "ReproduceConfig",
    "TrainConfig",
    "main",
]

PROG = "iclr25-hyper-connections"
DEFAULT = "reproduce"


@dataclass(frozen=True, kw_only=True)
class _TrainingOptions(CommonOptions):
    """Model size and optimisation shared by train and reproduce."""

    tokenizer: Literal["bytes", "smollm2"] = "bytes"
    """Tokenise the Wikipedia summaries as UTF-8 bytes (vocab 256) or with SmolLM2's tokenizer (vocab 49 152)."""
    dim: int = 64
    """Hidden size d of the decoder."""
    num_layers: int = 4
    """Decoder layers (each has an attention and an FFN branch, i.e. two hyper-connections)."""
    num_heads: int = 4
    """Attention heads (must divide dim)."""
    context: int = 64
    """Tokens per training window."""
    steps: int = 300
    """Optimizer steps."""
    batch_size: int = 16
    """Windows per step."""
    lr: float = 3e-3
    """Peak AdamW learning rate (linear warm-up, cosine decay to 10 %)."""
    weight_decay: float = 0.1
    """AdamW weight decay (not applied to static HC weights, biases and norms)."""
    warmup: int = 30
    """Warm-up steps."""
    eval_every: int = 50
    """Evaluate on a quarter of the validation windows every this many steps."""
    eval_batches: int = 16
    """Validation batches (of batch_size windows) for the final loss."""
    max_docs: int | None = None
    """Use only this many documents (after a fixed shuffle); all 9 033 when omitted."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("dim", "num_layers", "num_heads", "context", "steps", "batch_size", "eval_every"):
            check_int(name, getattr(self, name), low=1)
        check_int("eval_batches", self.eval_batches, low=1)
        check_int("warmup", self.warmup, low=0)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)
        check_float("weight_decay", self.weight_decay, low=0.0)
        if self.dim % self.num_heads:
            raise ValueError(f"num_heads must divide dim; got dim={self.dim}, num_heads={self.num_heads}")
        if (self.dim // self.num_heads) % 2:
            raise ValueError(
                f"dim / num_heads must be even (rotary embeddings); got {self.dim // self.num_heads}"
            )
        if self.max_docs is not None:
            check_int("max_docs", self.max_docs, low=2)


@dataclass(frozen=True, kw_only=True)
class TrainConfig(_TrainingOptions):
    """Pre-train a small decoder LM with residual or hyper-connections on Wikipedia summaries."""

    variant: str = "dhc4"
    """residual, dhc<n> (dynamic HC) or shc<n> (static HC), n = expansion rate (1, 2, 4, 8 ...); add -notanh for
    the w/o-tanh ablation, e.g. dhc4-notanh."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_variant("variant", self.variant)


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """Pre-train residual vs SHC/DHC decoders from scratch over >= 5 seeds, each with its own tuned learning rate.

    The paper's headline comparison (its OLMo pre-training runs, arXiv 2409.19606) at small scale on real text: a 12-block decoder on
    the Wikipedia summaries; every variant gets the learning rate that did best on a tuning seed (seed + 1000,
    not one of the reported seeds); the reported seeds give every variant the same initial weights and batches,
    so the loss differences are paired. Primary comparison: DHCx4 − residual final validation loss (95 %
    t-interval, verdict against the paper's −0.030); the other token counts and variants are secondary (Holm), the
    paper's Fig. 3 representation-collapse probe exploratory. Options left unset take the --size preset."""

    OUTPUTS: ClassVar[Mapping[str, inputs.Input]] = {"cache": inputs.output_folder()}

    size: Literal["quick", "full", "gpu"] = "quick"
    """quick (residual vs DHCx4, d=32, 80 steps, 2 learning rates, 1 tuning seed), full (residual, SHCx4, DHCx4;
    d=32, 160 steps, 3 learning rates, 2 tuning seeds; DHCx1/x2 through --variants) or gpu (quick's comparison at
    d=128, 300 steps of 32 x 128 tokens: 15x quick's tokens per run; about a minute on one H200)."""
    variants: tuple[str, ...] | None = None
    """Variants to compare (the first one is the reference for the differences); default: the size preset."""
    num_seeds: int = 5
    """Reported seeds seed, seed+1, ...; each gives every variant the same initial weights and batches."""
    lrs: tuple[float, ...] | None = None
    """Learning-rate grid tried for every variant on the tuning seed (one value: no tuning)."""
    tuning_seeds: int | None = None
    """Seeds (seed+1000, seed+1001, ...) each learning rate is trained on for tuning; the rate with the lowest mean
    validation loss is kept (preset: 1 quick, 2 full; one seed misranked close rates, package README)."""
    checkpoints: int = 3
    """Token counts at which the paired differences are reported (evenly spaced; the last is the end)."""
    tokenizer: Literal["bytes", "smollm2"] = "bytes"
    """Tokenise the Wikipedia summaries as UTF-8 bytes (vocab 256) or with SmolLM2's tokenizer (vocab 49 152)."""
    dim: int | None = None
    """Hidden size d (preset: 32)."""
    num_layers: int | None = None
    """Decoder blocks (preset: 12; each has an attention and an FFN sub-layer)."""
    num_heads: int | None = None
    """Attention heads (preset: 4)."""
    context: int | None = None
    """Tokens per training window (preset: 64)."""
    steps: int | None = None
    """Optimizer steps per run (preset: 80 quick, 160 full)."""
    batch_size: int | None = None
    """Windows per step (preset: 16)."""
    warmup: int | None = None
    """Warm-up steps (preset: 10 % of steps)."""
    weight_decay: float = 0.1
    """AdamW weight decay (not applied to static HC weights, biases and norms)."""
    eval_every: int | None = None
    """Quick validation every this many steps for the curves (preset: steps / 10)."""
    eval_batches: int = 16
    """Validation batches (of batch_size windows) for the reported losses."""
    max_docs: int | None = None
    """Use only this many documents (after a fixed shuffle); all 9 033 when omitted."""
    cache: Path | None = None
    """Folder keeping every finished training run (one JSON each); rerunning with the same settings reuses them,
    so a long reproduction can be split over several invocations (an interrupted one loses only its current run)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("num_seeds", self.num_seeds, low=1)
        check_int("checkpoints", self.checkpoints, low=1)
        if self.tuning_seeds is not None:
            check_int("tuning_seeds", self.tuning_seeds, low=1)
        check_int("eval_batches", self.eval_batches, low=1)
        check_float("weight_decay", self.weight_decay, low=0.0)
        for name in ("dim", "num_layers", "num_heads", "context", "steps", "batch_size", "eval_every"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), low=1)
        if self.warmup is not None:
            check_int("warmup", self.warmup, low=0)
        if self.max_docs is not None:
            check_int("max_docs", self.max_docs, low=2)
        if self.variants is not None:
            if not self.variants:
                raise ValueError("variants must name at least one variant")
            names = [check_variant("variants", v).name for v in self.variants]
            if len(set(names)) != len(names):
                raise ValueError(f"variants must be distinct, got {list(self.variants)}")
        if self.lrs is not None:
            if not self.lrs:
                raise ValueError("lrs must list at least one learning rate")
            for lr in self.lrs:
                check_float("lrs", lr, low=0.0, low_inclusive=False)
        dim, heads = self.dim or 32, self.num_heads or 4
        if dim % heads or (dim // heads) % 2:
            raise ValueError(
                f"num_heads must divide dim into an even head size; got dim={dim}, num_heads={heads}"
            )


@dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions):
    """Step time, activation memory and parameter overhead of HCxn vs residual, as ratios measured in one run."""

    dim: int = 256
    """Hidden size d."""
    num_layers: int = 4
    """Decoder layers."""
    num_heads: int = 4
    """Attention heads."""
    context: int = 128
    """Tokens per sequence."""
    batch_size: int = 8
    """Sequences per step."""
    vocab_size: int = 256
    """Vocabulary size of the benchmark model (random tokens)."""
    expansion_rates: tuple[int, ...] = (1, 2, 4)
    """Expansion rates n to compare against the residual baseline."""
    dynamic: bool = True
    """Dynamic (DHC) or static (SHC) hyper-connections."""
    fused: bool = False
    """Use the fused width connection (dynamic HC only)."""
    repeats: int = 7
    """Timed rounds (one training step of every variant each, in rotating order); medians reported."""
    warmup_steps: int = 2
    """Untimed rounds first."""
    processes: tuple[int, ...] = ()
    """Also time data-parallel (DDP) training steps of residual and the largest expansion rate, one
    torch.distributed.run launch per process count (e.g. --processes 1 2; each must divide --batch-size)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("dim", "num_layers", "num_heads", "context", "batch_size", "vocab_size", "repeats"):
            check_int(name, getattr(self, name), low=1)
        check_int("warmup_steps", self.warmup_steps, low=0)
        if self.dim % self.num_heads or (self.dim // self.num_heads) % 2:
            raise ValueError(
                f"num_heads must divide dim into an even head size; got dim={self.dim}, num_heads={self.num_heads}"
            )
        for n in self.processes:
            check_int("processes", n, low=1, high=64)
            if self.batch_size % n:
                raise ValueError(f"processes: {n} does not divide batch_size={self.batch_size}")
        if not self.expansion_rates:
            raise ValueError("expansion_rates must list at least one rate")
        if self.fused and not self.dynamic:
            raise ValueError("fused needs dynamic hyper-connections (drop --no-dynamic or --fused)")
        for n in self.expansion_rates:
            check_int("expansion_rates", n, low=1, high=MAX_EXPANSION_RATE)


@dataclass(frozen=True, kw_only=True)
class PeerConfig(CommonOptions):
    """This package beside the peer implementation (hyper-connections on PyPI) on the same decoder, in one run.

    Reports whether the two agree numerically (at the eq. 14 initialisation and with random connection weights),
    and step time and activation memory as ratios. Needs `pip install hyper-connections`."""

    dim: int = 256
    """Hidden size d."""
    num_layers: int = 4
    """Decoder layers."""
    num_heads: int = 4
    """Attention heads."""
    context: int = 128
    """Tokens per sequence."""
    batch_size: int = 8
    """Sequences per step."""
    vocab_size: int = 256
    """Vocabulary size (random tokens)."""
    expansion_rate: int = 4
    """Expansion rate n of both implementations (dynamic HC)."""
    repeats: int = 7
    """Timed rounds (one training step of every model each, rotating order); medians reported."""
    warmup_steps: int = 2
    """Untimed rounds first."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("dim", "num_layers", "num_heads", "context", "batch_size", "vocab_size", "repeats"):
            check_int(name, getattr(self, name), low=1)
        check_int("warmup_steps", self.warmup_steps, low=0)
        check_int("expansion_rate", self.expansion_rate, low=1, high=MAX_EXPANSION_RATE)
        if self.dim % self.num_heads or (self.dim // self.num_heads) % 2:
            raise ValueError(
                f"num_heads must divide dim into an even head size; got dim={self.dim}, num_heads={self.num_heads}"
            )


COMMANDS = {
    "train": (TrainConfig, "iclr25_hyper_connections._train:train"),
    "reproduce": (ReproduceConfig, "iclr25_hyper_connections._reproduce:reproduce"),
    "bench": (BenchConfig, "iclr25_hyper_connections._bench:bench"),
    "peer": (PeerConfig, "iclr25_hyper_connections._peer:peer"),
}


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-hyper-connections``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
