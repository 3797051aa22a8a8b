"""``iclr25-infomax``: select a coreset, reproduce the data-pruning comparison, benchmark the solver."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from iclr25_shared.cli import CommonOptions, check_choice, check_range, run

__all__ = ["BenchConfig", "ReproduceConfig", "SelectConfig", "main"]

PROG = "iclr25-infomax"
_SCORE_METHODS = ("el2n", "margin", "forgetting", "ssp")
_SELECTORS = (
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


def _log(quiet: bool) -> Any:
    def log(msg: str) -> None:
        if not quiet:
            print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    return log


def _check_file(name: str, path: Path | None) -> None:
    if path is not None and not Path(path).is_file():
        raise ValueError(f"--{name}: file {str(path)!r} does not exist")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SelectConfig(CommonOptions):
    """Select a coreset from your features and scores (default: the sklearn digits, scored by EL2N)."""

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
    init: str = "greedy"
    """Solver start: greedy (default) or score (top-p by score, the paper's start)."""
    indices_out: Path | None = None
    """Write the selected indices here (.npy). With --out ending in .npy, that path is used instead."""
    threads: int = 1
    """torch CPU threads for the scoring MLP (0 = torch's default); 1 is fastest on a busy machine."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("features", "scores", "labels"):
            _check_file(name, getattr(self, name))
        check_choice("score_method", self.score_method, _SCORE_METHODS)
        check_choice("direction", self.direction, ("hard_first", "easy_first"))
        check_choice("method", self.method, _SELECTORS)
        check_choice("init", self.init, ("score", "greedy"))
        check_range("budget", self.budget, low=0.0, low_inclusive=False)
        if self.budget > 1 and not float(self.budget).is_integer():
            raise ValueError(f"budget above 1 must be a whole count, got {self.budget!r}")
        check_range("alpha", self.alpha, low=0.0)
        check_range("k", self.k, low=1)
        check_range("iterations", self.iterations, low=1)
        check_range("partitions", self.partitions, low=1)
        check_range("threads", self.threads, low=0)
        if self.features is None and (self.scores is not None or self.labels is not None):
            raise ValueError("--scores/--labels need --features (the default digits data brings its own)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """Data pruning on Fashion-MNIST: every method at 5–50 % kept, same classifier, >= 3 seeds."""

    budgets: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3, 0.5)
    """Fractions of the training set to keep."""
    seeds: int = 3
    """Seeds per (method, budget): classifier init and the random / CCS / k-center selections."""
    methods: tuple[str, ...] = (
        "random",
        "hard_first",
        "easy_first",
        "ccs",
        "kcenter",
        "facility_location",
        "greedy",
        "infomax",
        "infomax_hp",
    )
    """Selectors to compare."""
    alpha: float = 1.0
    """InfoMax redundancy weight α (also used by greedy)."""
    k: int = 10
    """Neighbours per sample in the kNN graph."""
    iterations: int = 100
    """Maximum InfoMax solver steps."""
    num_train: int = 60_000
    """Training images used (a seeded subset when below 60 000)."""
    num_test: int = 10_000
    """Test images used (a seeded subset when below 10 000)."""
    score_epochs: int = 4
    """Epochs of the scoring MLP (EL2N is averaged over them)."""
    score_hidden: tuple[int, ...] = (256, 64)
    """Hidden widths of the scoring MLP; the last is the feature dimension."""
    train_steps: int = 300
    """Adam steps of the coreset classifier (the same at every budget)."""
    hidden: int = 128
    """Hidden width of the coreset classifier (MLP 784-hidden-10)."""
    batch_size: int = 128
    """Mini-batch size of the coreset classifier."""
    lr: float = 1e-3
    """Adam learning rate of the coreset classifier."""
    threads: int = 1
    """torch CPU threads (0 = torch's default); 1 is fastest on a busy 2-core machine."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.budgets:
            raise ValueError("budgets must list at least one fraction")
        for b in self.budgets:
            check_range("budgets", b, low=0.0, high=1.0, low_inclusive=False)
        check_range("seeds", self.seeds, low=1)
        if not self.methods:
            raise ValueError("methods must list at least one selector")
        for m in self.methods:
            check_choice("methods", m, _SELECTORS)
        check_range("alpha", self.alpha, low=0.0)
        check_range("k", self.k, low=1)
        check_range("iterations", self.iterations, low=1)
        check_range("num_train", self.num_train, low=100, high=60_000)
        check_range("num_test", self.num_test, low=10, high=10_000)
        check_range("score_epochs", self.score_epochs, low=1)
        check_range("train_steps", self.train_steps, low=1)
        check_range("hidden", self.hidden, low=1)
        check_range("batch_size", self.batch_size, low=1)
        check_range("lr", self.lr, low=0.0, low_inclusive=False)
        check_range("threads", self.threads, low=0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions):
    """Selection time and memory at N = 10⁴…10⁶ (InfoMax vs greedy vs facility location) and quality vs MILP."""

    sizes: tuple[int, ...] = (10_000, 100_000, 1_000_000)
    """Numbers of samples N."""
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
    """Random small instances."""
    threads: int = 0
    """faiss threads (0 = faiss's default)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.sizes:
            raise ValueError("sizes must list at least one N")
        for n in self.sizes:
            check_range("sizes", n, low=self.k + 1)
        check_range("dim", self.dim, low=1)
        check_range("k", self.k, low=1)
        check_range("budget", self.budget, low=0.0, high=1.0, low_inclusive=False)
        check_range("alpha", self.alpha, low=0.0)
        check_range("iterations", self.iterations, low=1)
        check_range("small_n", self.small_n, low=2, high=400)
        check_range("small_p", self.small_p, low=1, high=self.small_n)
        check_range("small_k", self.small_k, low=1, high=self.small_n - 1)
        check_range("small_trials", self.small_trials, low=1)
        check_range("threads", self.threads, low=0)
        check_choice("graph", self.graph, ("knn", "random"))


def _versions() -> dict[str, str]:
    from iclr25_shared.results import package_versions

    return package_versions(["iclr25-infomax", "scipy", "scikit-learn", "faiss-cpu", "torch"])


def _load(path: Path, name: str) -> Any:
    import numpy as np

    try:
        return np.load(path, allow_pickle=False)
    except ValueError as exc:
        raise ValueError(f"--{name}: {path} is not a plain .npy array ({exc})") from None


def select_cmd(cfg: SelectConfig) -> int:
    import numpy as np

    from iclr25_infomax._experiment import select_by
    from iclr25_infomax._scores import importance_scores
    from iclr25_infomax._similarity import knn_similarity
    from iclr25_infomax._solver import objective, solve
    from iclr25_infomax._validate import as_features, as_scores, resolve_budget
    from iclr25_shared.results import RunRecord

    log = _log(cfg.quiet)
    labels = None
    if cfg.features is None:
        from iclr25_shared.data import digits

        images, labels = digits()
        features = images.reshape(len(images), -1)
        source = "sklearn digits (1 797 × 64 pixels)"
    else:
        features = as_features(_load(cfg.features, "features"), name="features")
        source = str(cfg.features)
        if cfg.labels is not None:
            labels = _load(cfg.labels, "labels")
    n = features.shape[0]
    if cfg.scores is not None:
        scores = as_scores(_load(cfg.scores, "scores"), name="scores")
        if scores.size != n:
            raise ValueError(
                f"--scores has {scores.size} entries but --features has {n} rows; they must match"
            )
        if cfg.direction == "easy_first":
            scores = -scores
    else:
        if labels is None and cfg.score_method != "ssp":
            raise ValueError(
                f"--score-method {cfg.score_method} needs --labels (or pass --scores, or use ssp)"
            )
        if labels is not None and np.shape(labels) != (n,):
            raise ValueError(f"--labels has shape {np.shape(labels)} but --features has {n} rows")
        log(f"computing {cfg.score_method} scores for {n} samples")
        if cfg.threads:
            import torch

            torch.set_num_threads(cfg.threads)
        scores = importance_scores(
            cfg.score_method,
            labels=labels,
            features=features,
            direction=cfg.direction,
            seed=cfg.seed,
            device=cfg.device,
        )
    if not cfg.k < n:
        raise ValueError(f"k must be < N = {n} (the number of samples), got {cfg.k}")
    budget: int | float = int(cfg.budget) if cfg.budget > 1 else float(cfg.budget)
    p = resolve_budget(budget, n)
    if cfg.partitions > p:
        raise ValueError(f"partitions must be <= budget ({p}), got {cfg.partitions}")
    t0 = time.perf_counter()
    K = knn_similarity(features, k=cfg.k)
    t_knn = time.perf_counter() - t0
    t0 = time.perf_counter()
    if cfg.method == "infomax":
        res = solve(
            scores,
            K,
            p,
            alpha=cfg.alpha,
            iterations=cfg.iterations,
            partitions=cfg.partitions,
            seed=cfg.seed,
            init=cfg.init,
        )
        idx = res.indices
    else:
        idx = np.sort(
            select_by(
                cfg.method, p, scores=scores, similarity=K, features=features, alpha=cfg.alpha, seed=cfg.seed
            )
        )
    t_sel = time.perf_counter() - t0
    value = objective(idx, scores, K, alpha=cfg.alpha)
    log(
        f"selected {idx.size} of {n} with {cfg.method} in {t_sel:.2f}s (kNN {t_knn:.2f}s); objective {value:.4f}"
    )
    target = cfg.indices_out
    folder = cfg.out
    if cfg.out is not None and str(cfg.out).endswith(".npy"):
        target, folder = cfg.out, None
    if folder is not None and target is None:
        target = Path(folder) / "indices.npy"
    if target is not None:
        _save_npy(Path(target), idx)
        log(f"wrote {target}")
    if folder is not None:
        RunRecord(
            command=f"{PROG} select",
            config=cfg,
            device="cpu",
            versions=_versions(),
            metrics={"num_samples": n, "num_selected": int(idx.size), "objective": value, "source": source},
            timings={"knn_graph": t_knn, "select": t_sel},
        ).save(folder)
    if target is None and folder is None:
        print(" ".join(map(str, idx.tolist())))
    return 0


def _save_npy(path: Path, array: Any) -> None:
    import os
    import tempfile

    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".npy")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.save(fh, array)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _finish(name: str, cfg: Any, result: dict[str, Any]) -> int:
    from iclr25_shared.results import RunRecord, markdown_table

    record = RunRecord(
        command=f"{PROG} {name}",
        config=cfg,
        metrics=result["metrics"],
        tables=result["tables"],
        timings=result["timings"],
        notes=result["notes"],
        device=str(result.get("device", "cpu")),
        versions=_versions(),
    )
    if cfg.out is not None:
        record.save(cfg.out)
    for title, rows in result["tables"].items():
        print(f"\n## {title}\n\n{markdown_table(rows)}")
    return 0


def reproduce_cmd(cfg: ReproduceConfig) -> int:
    from iclr25_infomax._experiment import reproduce_run

    t0 = time.perf_counter()
    result = reproduce_run(cfg, _log(cfg.quiet))
    result["timings"]["total"] = time.perf_counter() - t0
    return _finish("reproduce", cfg, result)


def bench_cmd(cfg: BenchConfig) -> int:
    from iclr25_infomax._experiment import bench_run

    return _finish("bench", cfg, bench_run(cfg, _log(cfg.quiet)))


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``iclr25-infomax``; returns the exit code (0 ok, 1 failure, 2 bad input, 130 interrupted)."""
    from iclr25_infomax import __version__

    return run(
        PROG,
        {
            "select": (SelectConfig, select_cmd),
            "reproduce": (ReproduceConfig, reproduce_cmd),
            "bench": (BenchConfig, bench_cmd),
        },
        argv,
        default="select",
        description="InfoMax coreset selection (Tan et al., ICLR 2025, arXiv:2506.01701): keep the samples that "
        "maximise importance minus kNN redundancy.",
        version=__version__,
    )
