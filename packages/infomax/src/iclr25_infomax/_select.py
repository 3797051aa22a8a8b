"""``select``: one coreset from user files."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_infomax._similarity import knn_similarity
from iclr25_infomax._solver import objective, solve
from iclr25_infomax._validate import as_features, as_scores, resolve_budget
from iclr25_shared.cli import Result, RunContext
from iclr25_shared.errors import InputError
from iclr25_shared.inputs import read_npy, validating

if TYPE_CHECKING:
    from iclr25_infomax.cli import SelectConfig

from iclr25_infomax._experiment import select_by

__all__ = ["select"]


def _check_labels(labels: np.ndarray, n: int) -> np.ndarray:
    """``(n,)`` integer class ids ``>= 0`` with at least two classes, as int64.

    Raises:
        ValueError / TypeError: otherwise (the message says what is wrong).
    """
    if labels.dtype == bool or not np.issubdtype(labels.dtype, np.integer):
        raise TypeError(f"labels must be integer class ids, got dtype {labels.dtype}")
    if labels.shape != (n,):
        raise ValueError(f"labels has shape {labels.shape} but --features has {n} rows; they must match")
    if labels.min() < 0:
        raise ValueError(f"labels must be >= 0, got min {labels.min()}")
    if int(labels.max()) < 1:
        raise ValueError("labels must hold at least 2 classes")
    return labels.astype(np.int64)


def select(cfg: SelectConfig, ctx: RunContext) -> Result:
    """One coreset from the user's features / scores (or the sklearn digits); indices saved as ``indices.npy``."""
    from iclr25_infomax._scores import importance_scores

    labels = None
    if cfg.features is None:
        from iclr25_shared.data import digits

        images, labels = digits()
        features = images.reshape(len(images), -1)
        source = "sklearn digits (1 797 × 64 pixels)"
    else:
        raw = read_npy(cfg.features, label="--features", ndim=2)
        with validating(f"--features {str(cfg.features)!r}"):
            features = as_features(raw, name="features")
        source = str(cfg.features)
        if cfg.labels is not None:
            labels = read_npy(cfg.labels, label="--labels", ndim=1)
    n = features.shape[0]
    if (
        cfg.labels is not None
    ):  # one label per row of --features (checked even when --scores makes them unused)
        with validating(f"--labels {str(cfg.labels)!r}"):
            labels = _check_labels(labels, n)
    if cfg.scores is not None:
        raw = read_npy(cfg.scores, label="--scores", ndim=1)
        with validating(f"--scores {str(cfg.scores)!r}"):
            scores = as_scores(raw, name="scores")
        if scores.size != n:
            raise InputError(
                f"--scores has {scores.size} entries but --features has {n} rows; they must match"
            )
        if cfg.direction == "easy_first":
            scores = -scores
    else:
        if labels is None and cfg.score_method != "ssp":  # also refused by SelectConfig
            raise InputError(
                f"--score-method {cfg.score_method} needs --labels (or pass --scores, or use ssp)"
            )
    # the options checked against the data's size: user input, not a failure of the method
    if not cfg.k < n:
        raise InputError(f"--k: k must be < N = {n} (the number of samples), got {cfg.k}")
    budget: int | float = int(cfg.budget) if cfg.budget > 1 else float(cfg.budget)
    with validating("--budget"):
        p = resolve_budget(budget, n)
    if cfg.partitions > p:
        raise InputError(f"--partitions: partitions must be <= budget ({p}), got {cfg.partitions}")
    if cfg.scores is None:
        ctx.log.info(f"computing {cfg.score_method} scores for {n} samples")
        device = ctx.torch_device()
        scores = importance_scores(
            cfg.score_method,
            labels=labels,
            features=features,
            direction=cfg.direction,
            seed=cfg.seed,
            device=str(device),
        )
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
            relax_steps=cfg.relax_steps,
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
    ctx.log.info(
        f"selected {idx.size} of {n} with {cfg.method} in {t_sel:.2f}s (kNN {t_knn:.2f}s); objective {value:.4f}"
    )
    metrics: dict[str, Any] = {
        "num_samples": n,
        "num_selected": int(idx.size),
        "objective": value,
        "source": source,
    }
    if ctx.writes:
        ctx.save_array("indices", idx)
    else:
        metrics["indices"] = " ".join(map(str, idx.tolist()))
    return Result(metrics=metrics, timings={"knn_graph": t_knn, "select": t_sel})
