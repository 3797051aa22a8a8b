"""``find``: the universal set of a key matrix (and the heavy entries of a query matrix against it)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from iclr25_levattention._checks import as_matrix
from iclr25_levattention._heavy import heavy_entries
from iclr25_shared.cli import Result, RunContext
from iclr25_shared.inputs import read_npy, validating

if TYPE_CHECKING:
    from iclr25_levattention.cli import FindConfig

__all__ = ["find"]


def _digits_pca(d: int = 8) -> np.ndarray:
    from sklearn.decomposition import PCA

    from iclr25_shared.data import digits

    images, _ = digits()
    return PCA(n_components=d, random_state=0).fit_transform(
        images.reshape(len(images), -1).astype(np.float64)
    )


def find(cfg: FindConfig, ctx: RunContext) -> Result:
    """``find``: every A_ij >= eps of one (Q, K) pair, via the universal set."""
    if cfg.k is None:
        K = _digits_pca()
        Q, source = K, "sklearn digits, PCA to d = 8 (queries = keys)"
    else:
        K = read_npy(cfg.k, label="--k", ndim=2, finite=False)
        Q = K if cfg.q is None else read_npy(cfg.q, label="--q", ndim=2, finite=False)
        with validating("--q/--k"):  # the library's own checks name Q and K (shape, d, finiteness)
            K = as_matrix("K", K)
            Q = as_matrix("Q", Q, d=K.shape[1])
        source = f"q={cfg.q or cfg.k}, k={cfg.k}"
    start = time.perf_counter()
    result = heavy_entries(Q, K, cfg.eps, cfg.p, chunk_size=cfg.chunk_size)
    seconds = time.perf_counter() - start
    d = K.shape[1]
    order = np.argsort(-result.values, kind="stable")[: cfg.show]
    rows = [
        {"i": int(result.rows[t]), "j": int(result.cols[t]), "A_ij": float(result.values[t])} for t in order
    ]
    print(f"source: {source}")
    print(f"n_queries={Q.shape[0]} n_keys={K.shape[0]} d={d} p={cfg.p} eps={cfg.eps}")
    print(
        f"|U| = {result.universal_set.size} (bound rank/eps = {result.bound:.1f}, d^(p/2)/eps = "
        f"{d ** (cfg.p / 2) / cfg.eps:.1f}); heavy entries: {len(result)}; "
        f"degenerate rows: {result.degenerate_rows.size}; {seconds:.3f} s"
    )
    if ctx.writes:
        np.savez(
            ctx.path("heavy_entries.npz"),
            rows=result.rows,
            cols=result.cols,
            values=result.values,
            universal_set=result.universal_set,
        )
    return Result(
        metrics={
            "n_queries": Q.shape[0],
            "n_keys": K.shape[0],
            "d": d,
            "universal_set_size": int(result.universal_set.size),
            "bound_rank_over_eps": result.bound,
            "heavy_entries": len(result),
            "degenerate_rows": int(result.degenerate_rows.size),
        },
        tables={"largest entries": rows},
        timings={"heavy_entries": seconds},
        notes=[
            f"source: {source}",
            "all entries are in heavy_entries.npz (rows, cols, values, universal_set)",
        ],
    )
