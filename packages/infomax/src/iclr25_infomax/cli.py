"""``iclr25-infomax``: InfoMax coreset selection (Tan et al., ICLR 2025, arXiv:2506.01701): keep the samples that
maximise importance minus kNN redundancy. Config dataclasses and ``main`` only; the work is in ``_select.py``, ``_reproduce.py`` and ``_bench.py``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import ClassVar, Literal

from iclr25_shared import inputs
from iclr25_shared.checks import check_choice, check_float, check_int
from iclr25_shared.cli import CommonOptions, run

__all__ = ["COMMANDS", "DEFAULT", "PROG", "BenchConfig", "ReproduceConfig", "SelectConfig", "main"]

PROG = "iclr25-infomax"
DEFAULT = "select"
SCORE_METHODS = ("el2n", "margin", "forgetting", "ssp")
SELECTORS = (
    "infomax",
    "greedy",
    "random",
    "hard_first",
    "easy_first",
    "ccs",
    "kcenter",
    "facility_location",
    "infomax_hp",
)
SOLVERS = ("relaxed", "greedy", "score")


@dataclass(frozen=True, kw_only=True)
class _Options(CommonOptions):
    """Options shared by every infomax subcommand."""


@dataclass(frozen=True, kw_only=True)
class SelectConfig(_Options):
    """Select a coreset from your features and scores (default: the sklearn digits, scored by EL2N).

    The selected indices are written to ``indices.npy`` in ``--out`` (printed when ``--out`` is omitted)."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {
        "features": inputs.npy(ndim=2),
        "scores": inputs.npy(ndim=1),
        "labels": inputs.npy(ndim=1),
    }

    features: Path | None = None
    """(N, d) float .npy features. Omitted: the 1 797 sklearn digits (pixels), scored from their labels."""
    scores: Path | None = None
    """(N,) float .npy importance scores, larger = more informative. Omitted: computed (see --labels)."""
    labels: Path | None = None
    """(N,) int .npy class labels: scores are computed with --score-method by training a small MLP on the features."""
    score_method: str = "el2n"
    """How to compute scores when --scores is omitted: el2n, margin, forgetting (need labels) or ssp (no labels)."""
    direction: str = "hard_first"
    """hard_first keeps high-score samples; easy_first negates the scores."""
    budget: float = 0.1
    """How many to keep: a fraction in (0, 1], or a count > 1 (e.g. 5000)."""
    method: str = "infomax"
    """infomax, greedy, random, hard_first, easy_first, ccs, kcenter, facility_location, or infomax_hp (InfoMax
    after CCS-style pruning of the hardest 10 %)."""
    alpha: float = 1.0
    """Redundancy weight α >= 0 (0 = top-p by score)."""
    k: int = 10
    """Neighbours per sample in the cosine kNN similarity graph."""
    iterations: int = 100
    """Maximum solver steps per partition."""
    partitions: int = 1
    """Random dataset partitions solved independently (1 = none)."""
    init: str = "relaxed"
    """Solver start: relaxed (annealed projected gradient on the continuous relaxation, kept only when it beats the
    greedy start; default), greedy, or score (top-p by score)."""
    relax_steps: int = 300
    """Projected-gradient steps on the relaxation (init relaxed)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("score_method", self.score_method, SCORE_METHODS)
        check_choice("direction", self.direction, ("hard_first", "easy_first"))
        check_choice("method", self.method, SELECTORS)
        check_choice("init", self.init, SOLVERS)
        check_float("budget", self.budget, low=0.0, low_inclusive=False)
        if self.budget > 1 and not float(self.budget).is_integer():
            raise ValueError(f"budget above 1 must be a whole count, got {self.budget!r}")
        check_float("alpha", self.alpha, low=0.0)
        check_int("k", self.k, low=1)
        check_int("iterations", self.iterations, low=1)
        check_int("partitions", self.partitions, low=1)
        check_int("relax_steps", self.relax_steps, low=1)
        if self.features is None and (self.scores is not None or self.labels is not None):
            raise ValueError("--scores/--labels need --features (the default digits data brings its own)")
        if (
            self.features is not None
            and self.scores is None
            and self.labels is None
            and self.score_method != "ssp"
        ):
            raise ValueError(
                f"--score-method {self.score_method} needs --labels (or pass --scores, or use ssp)"
            )


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(_Options):
    """Data pruning on Fashion-MNIST at 10–50 % kept: every method at equal coreset size, tuned on a held-out split.

    EL2N scores and centred cosine kNN features from a scoring MLP; InfoMax and greedy pick α, CCS its hard-pruning
    rate on the held-out split; the same classifier is trained on every coreset with paired seeds."""

    size: Literal["quick", "gpu"] = "quick"
    """quick: the defaults below (about 5 minutes on one CPU thread); gpu: the options left at their defaults take
    the GPU preset :data:`GPU_SIZE` (the full 55 000-image pool, 5 seeds, 2x the steps at 4x the batch; with
    --device cuda, a few minutes on one GPU: README "GPU"). Options given explicitly win over the preset."""
    budgets: tuple[float, ...] = (0.1, 0.3, 0.5)
    """Fractions of the pool to keep."""
    seeds: int = 3
    """Classifier seeds per (method, budget), paired across methods; also seeds the random / CCS selections."""
    methods: tuple[str, ...] = ("random", "hard_first", "ccs", "kcenter", "infomax")
    """Selectors to compare (``greedy`` trains too when listed; its objective is always reported)."""
    alphas: tuple[float, ...] = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
    """α grid of InfoMax and greedy, chosen per budget on the held-out split."""
    ccs_betas: tuple[float, ...] = (0.0, 0.1, 0.3)
    """Hard-pruning rates of CCS, chosen per budget on the held-out split."""
    k: int = 10
    """Neighbours per sample in the kNN graph."""
    iterations: int = 100
    """Maximum InfoMax solver steps."""
    num_val: int = 5_000
    """Training images held out for tuning (never selected from)."""
    num_train: int = 30_000
    """Pool size: training images the methods select from (a seeded subset of the rest)."""
    num_test: int = 10_000
    """Test images used (a seeded subset when below 10 000)."""
    score_epochs: int = 4
    """Epochs of the scoring MLP (EL2N is averaged over them)."""
    score_hidden: tuple[int, ...] = (256, 64)
    """Hidden widths of the scoring MLP; the last is the feature dimension."""
    train_steps: int = 1000
    """Adam steps of the coreset classifier (the same at every budget and on the full pool)."""
    hidden: int = 256
    """Hidden width of the coreset classifier (MLP pixels-hidden-10)."""
    pool: int = 1
    """The coreset classifier sees pool×pool average-pooled pixels (1: the 28×28 = 784 pixels; 2: 14×14 = 196)."""
    batch_size: int = 128
    """Mini-batch size of the coreset classifier."""
    lr: float = 3e-3
    """Peak Adam learning rate of the coreset classifier."""
    schedule: str = "onecycle"
    """Learning-rate schedule of the coreset classifier: onecycle (20 % warm-up, cosine decay) or constant."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.budgets:
            raise ValueError("budgets must list at least one fraction")
        for b in self.budgets:
            check_float("budgets", b, low=0.0, high=1.0, low_inclusive=False)
        check_int("seeds", self.seeds, low=1)
        if not self.methods:
            raise ValueError("methods must list at least one selector")
        for m in self.methods:
            check_choice("methods", m, SELECTORS)
        if not self.alphas or not self.ccs_betas:
            raise ValueError("alphas and ccs_betas must each list at least one value")
        for a in self.alphas:
            check_float("alphas", a, low=0.0)
        for b in self.ccs_betas:
            check_float("ccs_betas", b, low=0.0, high=1.0, high_inclusive=False)
        check_int("k", self.k, low=1)
        check_int("iterations", self.iterations, low=1)
        check_int("num_val", self.num_val, low=10, high=50_000)
        check_int("num_train", self.num_train, low=100, high=60_000 - self.num_val)
        check_int("num_test", self.num_test, low=10, high=10_000)
        check_int("score_epochs", self.score_epochs, low=1)
        for h in self.score_hidden:
            check_int("score_hidden", h, low=1)
        check_int("train_steps", self.train_steps, low=1)
        check_int("hidden", self.hidden, low=1)
        check_int("pool", self.pool, low=1, high=14)
        check_int("batch_size", self.batch_size, low=1)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)
        check_choice("schedule", self.schedule, ("onecycle", "constant"))
        check_choice("size", self.size, ("quick", "gpu"))

    def sized(self) -> ReproduceConfig:
        """This config with the ``--size`` preset applied to every option still at its quick default."""
        if self.size == "quick":
            return self
        defaults = {f.name: f.default for f in fields(self)}
        return replace(self, **{k: v for k, v in GPU_SIZE.items() if getattr(self, k) == defaults[k]})


GPU_SIZE = {"num_train": 55_000, "seeds": 5, "score_epochs": 8, "train_steps": 2000, "batch_size": 512}
"""``reproduce --size gpu``: 1.8x the pool, 5 seeds instead of 3, 8 scoring epochs, 2 000 classifier steps of 512
(8x the samples per classifier): about 20x quick's classifier work (README "GPU" has the time estimate)."""


@dataclass(frozen=True, kw_only=True)
class BenchConfig(_Options):
    """Selection time and memory at N = 10⁴…10⁶ (InfoMax vs greedy vs facility location) and quality vs MILP."""

    sizes: tuple[int, ...] = (10_000, 100_000)
    """Numbers of samples N (10⁶ takes minutes per round: pass it explicitly)."""
    repeats: int = 5
    """Interleaved timing rounds per N (half, at least 3, above N = 50 000), after one warm-up call per method."""
    dim: int = 64
    """Feature dimension d."""
    k: int = 10
    """Neighbours per sample."""
    budget: float = 0.1
    """Fraction kept."""
    alpha: float = 1.0
    """Redundancy weight α."""
    iterations: int = 100
    """Maximum InfoMax solver steps."""
    max_facility_n: int = 1_000_000
    """Skip facility location above this N."""
    max_score_init_n: int = 200_000
    """Skip the score-start InfoMax variant above this N."""
    graph: str = "knn"
    """knn: faiss kNN graph of the features; random: k random neighbours per sample with weights in [0.5, 1)
    (same sparsity, no graph build: times the selection alone at large N)."""
    small_n: int = 40
    """Small-instance size for the exact MILP comparison."""
    small_p: int = 10
    """Small-instance budget."""
    small_k: int = 5
    """Small-instance kNN neighbours."""
    small_trials: int = 10
    """Random small instances per (graph, α)."""
    dense_n: int = 24
    """Small dense-K instance size (all clipped cosine similarities)."""
    dense_p: int = 6
    """Small dense-K instance budget."""
    alphas: tuple[float, ...] = (0.1, 0.3, 1.0, 3.0)
    """Redundancy weights α of the small-instance comparison."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.sizes:
            raise ValueError("sizes must list at least one N")
        check_int("repeats", self.repeats, low=1)
        for n in self.sizes:
            check_int("sizes", n, low=self.k + 1)
        check_int("dim", self.dim, low=1)
        check_int("k", self.k, low=1)
        check_float("budget", self.budget, low=0.0, high=1.0, low_inclusive=False)
        check_float("alpha", self.alpha, low=0.0)
        check_int("iterations", self.iterations, low=1)
        check_int("max_facility_n", self.max_facility_n, low=0)
        check_int("max_score_init_n", self.max_score_init_n, low=0)
        check_int("small_n", self.small_n, low=2, high=400)
        check_int("small_p", self.small_p, low=1, high=self.small_n)
        check_int("small_k", self.small_k, low=1, high=self.small_n - 1)
        check_int("small_trials", self.small_trials, low=1)
        check_int("dense_n", self.dense_n, low=2, high=60)
        check_int("dense_p", self.dense_p, low=1, high=self.dense_n)
        if not self.alphas:
            raise ValueError("alphas must list at least one α")
        for a in self.alphas:
            check_float("alphas", a, low=0.0)
        check_choice("graph", self.graph, ("knn", "random"))


COMMANDS = {
    "select": (SelectConfig, "iclr25_infomax._select:select"),
    "reproduce": (ReproduceConfig, "iclr25_infomax._reproduce:reproduce"),
    "bench": (BenchConfig, "iclr25_infomax._bench:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-infomax``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
