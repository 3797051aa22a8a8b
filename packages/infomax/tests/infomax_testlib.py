"""Independent reference implementations used by the tests (brute force, dense kNN, instances)."""

from __future__ import annotations

import itertools

import numpy as np


def dense_objective(idx: np.ndarray, scores: np.ndarray, K: np.ndarray, alpha: float) -> float:
    """Reference objective on a dense K, written independently of the package: Σ I − α Σ_{z,s∈S} K_zs."""
    idx = np.asarray(idx)
    return float(scores[idx].sum() - alpha * K[np.ix_(idx, idx)].sum())


def brute_force(scores: np.ndarray, K: np.ndarray, p: int, alpha: float) -> tuple[float, tuple[int, ...]]:
    """Exhaustive optimum over all p-subsets (tiny N only)."""
    best, arg = -np.inf, ()
    for comb in itertools.combinations(range(scores.size), p):
        c = np.asarray(comb)
        v = scores[c].sum() - alpha * K[np.ix_(c, c)].sum()
        if v > best:
            best, arg = v, comb
    return float(best), arg


def dense_cosine_knn(features: np.ndarray, k: int) -> np.ndarray:
    """Reference kNN cosine graph with numpy: clip >= 0, keep each row's k largest off-diagonal, symmetrise by max."""
    f = features / np.linalg.norm(features, axis=1, keepdims=True)
    S = np.clip(f @ f.T, 0.0, 1.0)
    np.fill_diagonal(S, -np.inf)
    A = np.zeros_like(S)
    for i in range(S.shape[0]):
        nb = np.argsort(-S[i], kind="stable")[:k]
        A[i, nb] = S[i, nb]
    np.fill_diagonal(S, 0.0)
    return np.maximum(A, A.T)


def random_instance(seed: int, n: int, d: int = 4, k: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features, scores, dense K) of a random instance with a kNN cosine K built by the numpy reference."""
    rng = np.random.default_rng(seed)
    feats = rng.normal(size=(n, d))
    scores = rng.random(n)
    return feats, scores, dense_cosine_knn(feats, k)
