"""``iclr25-lozo``: LOZO (ICLR 2025, arXiv:2410.07698), low-rank zeroth-order fine-tuning of language models with
forward passes only. Default: SmolLM2-135M-Instruct fine-tuned on Wikipedia topic classification; ``--task
sentiment`` uses the human-rated movie-review sentences (the SST-2 setting of the paper).

Config dataclasses and ``main`` only; the work is in ``_finetune.py``, ``_reproduce.py`` and ``_bench.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from iclr25_shared import inputs
from iclr25_shared.checks import check_choice, check_float, check_int
from iclr25_shared.cli import CommonOptions, run

__all__ = ["COMMANDS", "DEFAULT", "PROG", "BenchConfig", "FinetuneConfig", "ReproduceConfig", "main"]

PROG = "iclr25-lozo"
DEFAULT = "finetune"

Optimizer = Literal["lozo", "lozo-m", "mezo", "adam"]
OPTIMIZERS = ("lozo", "lozo-m", "mezo", "adam")
Task = Literal["wiki", "sentiment"]


def _check_sdist(path: Path, label: str) -> None:
    from iclr25_lozo._data import check_sentiment_file

    check_sentiment_file(path, label)


_INPUTS: Mapping[str, inputs.Input] = {
    "data_path": inputs.custom(_check_sdist, kind="vader_sdist"),
    "model": inputs.model_ref(),
}
"""The user's files, checked by the runner before the command is imported (a model path: a Hugging Face folder
with weights, or a .gguf file; --data-path: the vaderSentiment sdist holding the ratings file)."""


@dataclass(frozen=True, kw_only=True)
class FinetuneConfig(CommonOptions):
    """Fine-tune a causal LM with LOZO (forward passes only) on Wikipedia topic classification (or movie-review
    sentiment); print zero-shot and fine-tuned accuracy."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = _INPUTS

    task: Task = "wiki"
    """wiki (11 Wikipedia topics) or sentiment (movie-review sentences, positive/negative, SST-2 style)."""
    data_path: str = ""
    """sentiment only: vaderSentiment-3.3.2.tar.gz (default: <iclr25 cache>/vader-sentiment/)."""
    neutral_margin: float = 0.5
    """sentiment only: sentences with a mean rating in [-margin, margin] (scale -4..4) are dropped."""

    model: str = "smollm2-135m-instruct"
    """'smollm2-135m-instruct' (packaged), a local folder or .gguf, a Hub id, or 'tiny' (random 2-layer Llama)."""
    optimizer: Optimizer = "lozo"
    """lozo, lozo-m (LOZO with momentum), mezo (baseline), or adam (first-order, with backward)."""
    steps: int = 150
    """Optimizer steps (each zeroth-order step is two forward passes); 150 keeps the default run under 10 minutes
    on 2 cores (measured; package README)."""
    lr: float = 3e-5
    """Learning rate."""
    eps: float = 1e-3
    """Zeroth-order perturbation scale."""
    rank: int = 2
    """LOZO rank r."""
    interval: int = 50
    """LOZO lazy-sampling interval nu (steps between redraws of V)."""
    momentum: float = 0.9
    """LOZO-M momentum beta (used by lozo-m only)."""
    weight_decay: float = 0.0
    """Weight decay (norm layers and biases excluded)."""
    shots: int = 16
    """Training examples per class (k-shot)."""
    eval_per_class: int = 20
    """Held-out evaluation examples per class."""
    batch_size: int = 8
    """Examples per step."""
    max_text_tokens: int = 24
    """Each text is cut to this many tokens before it goes into the prompt."""
    lora: bool = False
    """Zeroth-order (or Adam) on LoRA adapters only (peft), the base model frozen."""
    lora_rank: int = 8
    """LoRA rank when --lora is set."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Model weights' dtype (the loss is always computed in float32)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("steps", self.steps, low=1)
        check_float("lr", self.lr, low=0.0)
        check_float("eps", self.eps, low=0.0, low_inclusive=False)
        check_int("rank", self.rank, low=1)
        check_int("interval", self.interval, low=1)
        check_float("momentum", self.momentum, low=0.0, high=1.0, high_inclusive=False)
        check_float("weight_decay", self.weight_decay, low=0.0)
        check_int("shots", self.shots, low=1)
        check_int("eval_per_class", self.eval_per_class, low=1)
        check_int("batch_size", self.batch_size, low=1)
        check_int("max_text_tokens", self.max_text_tokens, low=4)
        check_int("lora_rank", self.lora_rank, low=1)
        from iclr25_lozo._data import check_task_data  # the options only; no file is read here

        check_task_data(self.task, self.data_path, self.neutral_margin)


# --size presets of reproduce (options that differ from the quick defaults)
REPRODUCE_SIZES: dict[str, dict[str, int]] = {
    "gpu": {"lm_steps": 200, "seeds": 5, "val_per_class": 32, "test_per_class": 200},
}


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """The paper's comparison at small scale: MeZO vs LOZO vs LOZO-M vs first-order Adam at equal forward-pass
    budgets on SmolLM2 (k-shot movie-review sentiment by default), each with its own learning-rate grid (and beta
    for LOZO-M) chosen on a validation split of the tuning seed (--seed), then --seeds seeds at the chosen setting
    with paired differences; --digits adds the digits-MLP comparison."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = _INPUTS

    size: Literal["quick", "gpu"] = "quick"
    """quick (the defaults below: 20 steps, 5 seeds, 50 test examples per class) or gpu (200 steps, 5 seeds, 32
    validation and 200 test examples per class: 10x the steps, ~13x the zeroth-order steps of the whole run, 4x the
    test set; about a minute on one H200, never run on a GPU). Options given explicitly keep their value."""
    model: str = "smollm2-135m-instruct"
    """Model (see finetune --model); 'tiny' for a smoke run."""
    lm_task: Task = "sentiment"
    """sentiment (movie-review sentences, SST-2 style) or wiki (11 Wikipedia topics)."""
    data_path: str = ""
    """sentiment only: vaderSentiment-3.3.2.tar.gz (default: <iclr25 cache>/vader-sentiment/)."""
    neutral_margin: float = 0.5
    """sentiment only: sentences with a mean rating in [-margin, margin] (scale -4..4) are dropped."""
    shots: int = 16
    """k: training examples per class (the paper: 16 and 512)."""
    val_per_class: int = 16
    """Validation examples per class (used to choose each method's learning rate)."""
    test_per_class: int = 50
    """Test examples per class (reported)."""
    max_text_tokens: int = 16
    """Each text is cut to this many tokens before it goes into the prompt."""
    batch_size: int = 8
    """Examples per step."""
    lm_steps: int = 20
    """Zeroth-order steps per run (2 forward passes each); Adam gets 2/3 as many (same forward-pass budget)."""
    seeds: int = 5
    """Seeds at each method's chosen setting: --seed (the tuning seed, reused) and the next ones."""
    methods: tuple[str, ...] = ("mezo", "lozo", "lozo-m", "adam")
    """Which optimizers to compare."""
    mezo_lrs: tuple[float, ...] = (3e-5, 1e-4, 3e-4)
    """MeZO's learning-rate grid."""
    lozo_lrs: tuple[float, ...] = (3e-5, 1e-4, 3e-4)
    """LOZO's learning-rate grid."""
    lozo_m_lrs: tuple[float, ...] = (3e-5, 1e-4, 3e-4)
    """LOZO-M's learning-rate grid (crossed with --betas)."""
    betas: tuple[float, ...] = (0.5, 0.9)
    """LOZO-M's momentum grid."""
    adam_lrs: tuple[float, ...] = (3e-6, 1e-5, 3e-5)
    """Adam's (first-order reference) learning-rate grid."""
    eps: float = 1e-3
    """Perturbation scale of every zeroth-order method (paper default)."""
    rank: int = 2
    """LOZO rank r (paper default)."""
    interval: int = 50
    """LOZO lazy-sampling interval (steps between redraws of V; paper default)."""
    skip_lm: bool = False
    """Skip the language-model part."""
    digits: bool = False
    """Also run the digits-MLP comparison (same protocol: grid on the tuning seed, then --seeds seeds)."""
    digits_steps: int = 3000
    """Zeroth-order steps for the digits MLP."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_float("eps", self.eps, low=0.0, low_inclusive=False)
        check_int("rank", self.rank, low=1)
        check_int("interval", self.interval, low=1)
        check_int("shots", self.shots, low=1)
        check_int("val_per_class", self.val_per_class, low=1)
        check_int("test_per_class", self.test_per_class, low=1)
        check_int("max_text_tokens", self.max_text_tokens, low=4)
        check_int("batch_size", self.batch_size, low=1)
        check_int("digits_steps", self.digits_steps, low=3)
        check_int("lm_steps", self.lm_steps, low=3)
        check_int("seeds", self.seeds, low=1)
        if not self.methods:
            raise ValueError(f"methods must name at least one of {', '.join(OPTIMIZERS)}")
        for m in self.methods:
            check_choice("methods", m, OPTIMIZERS)
        for name in ("mezo_lrs", "lozo_lrs", "lozo_m_lrs", "adam_lrs", "betas"):
            values = getattr(self, name)
            if not values:
                raise ValueError(f"{name} must hold at least one value")
            for v in values:
                if name == "betas":
                    check_float(name, v, low=0.0, high=1.0, high_inclusive=False)
                else:
                    check_float(name, v, low=0.0, low_inclusive=False)
        if self.skip_lm and not self.digits:
            raise ValueError("skip_lm with digits off leaves nothing to run; drop --skip-lm or add --digits")
        if not self.skip_lm:
            from iclr25_lozo._data import check_task_data  # the options only; no file is read here

            check_task_data(self.lm_task, self.data_path, self.neutral_margin)

    def resolved(self) -> ReproduceConfig:
        """This config with the ``--size`` preset applied to the options still at their quick default."""
        if self.size == "quick":
            return self
        quick = {f.name: f.default for f in dataclasses.fields(self)}
        changes = {k: v for k, v in REPRODUCE_SIZES[self.size].items() if getattr(self, k) == quick[k]}
        return dataclasses.replace(self, **changes)

    def lr_grid(self, method: str) -> list[tuple[float, float]]:
        """``(lr, beta)`` pairs tried for ``method`` (beta is 0 except for lozo-m)."""
        if method == "lozo-m":
            return [(lr, b) for b in self.betas for lr in self.lozo_m_lrs]
        lrs = {"mezo": self.mezo_lrs, "lozo": self.lozo_lrs, "adam": self.adam_lrs}[method]
        return [(lr, 0.0) for lr in lrs]


@dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions):
    """Peak memory and time per step of LOZO, MeZO and first-order Adam, each as a ratio to one inference forward
    pass of the same model and batch (each method measured in a fresh process of this run)."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {"model": inputs.model_ref()}

    model: str = "smollm2-135m-instruct"
    """Model to measure (see finetune --model)."""
    batch_size: int = 8
    """Sequences per batch."""
    seq_len: int = 64
    """Tokens per sequence."""
    repeats: int = 7
    """Timed rounds of the interleaved timing (every method and one inference forward per round, rotating order;
    medians and bootstrap intervals of the per-round ratios), and timed steps of each memory worker."""
    methods: tuple[str, ...] = ("lozo", "lozo-m", "mezo", "adam")
    """Which optimizers to measure."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Model weights' dtype (float16/bfloat16 use the exact per-module perturb-and-restore)."""
    distributed: bool = False
    """Also time data-parallel LOZO against DDP + Adam under torch.distributed.run (gloo on CPU) and count the
    bytes each all-reduces per step, at every process count in --processes (same global batch)."""
    processes: tuple[int, ...] = (1, 2)
    """Process counts for --distributed (each must divide --batch-size)."""
    low_rank_add: bool = False
    """Also time the float16/bfloat16 low-rank add on the CPU: one pass of X + U V^T (r = 2) over every matrix of
    the model, as one ``addmm_`` in the matrix's dtype against the float32-widened row blocks LOZO uses, with the
    CPU's own instruction set and with oneDNN limited to AVX2 (each in a fresh process, interleaved)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("batch_size", self.batch_size, low=1)
        check_int("seq_len", self.seq_len, low=2)
        check_int("repeats", self.repeats, low=1)
        for n in self.processes:
            check_int("processes", n, low=1, high=64)
            if self.batch_size % n:
                raise ValueError(f"processes: {n} does not divide batch_size={self.batch_size}")
        if self.distributed and not self.processes:
            raise ValueError("processes must hold at least one process count with --distributed")
        if not self.methods and not self.distributed and not self.low_rank_add:
            raise ValueError(f"methods must name at least one of {', '.join(OPTIMIZERS)}")
        for m in self.methods:
            check_choice("methods", m, OPTIMIZERS)


COMMANDS = {
    "finetune": (FinetuneConfig, "iclr25_lozo._finetune:finetune"),
    "reproduce": (ReproduceConfig, "iclr25_lozo._reproduce:reproduce"),
    "bench": (BenchConfig, "iclr25_lozo._bench:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console script ``iclr25-lozo``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
