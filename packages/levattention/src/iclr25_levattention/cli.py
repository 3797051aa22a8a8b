"""``iclr25-levattention``: find heavy attention entries, reproduce the paper's claims, benchmark.

iclr25-levattention find --q Q.npy --k K.npy --eps 0.05 --p 2
iclr25-levattention reproduce --out runs/levattention
iclr25-levattention bench --out runs/levattention-bench
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from iclr25_levattention import __version__
from iclr25_shared.cli import CommonOptions, check_choice, check_range, run

PROG = "iclr25-levattention"


# ------------------------------------------------------------------------------------------------------------------
# find
# ------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class FindConfig(CommonOptions):
    """Every attention weight >= eps of rownormalise(|Q K^T|^p), via the universal set of keys."""

    q: Path | None = None
    """Queries: a .npy file of shape (n_q, d). Omitted: the same as --k."""
    k: Path | None = None
    """Keys: a .npy file of shape (n, d). Omitted (with --q omitted): the 1 797 sklearn digits, PCA to d = 8."""
    eps: float = 0.05
    """Threshold in (0, 1]: report entries A_ij >= eps."""
    p: int = 2
    """Exponent of f(x) = |x|^p; a positive even integer (the exact routine)."""
    chunk_size: int = 1024
    """Queries processed at a time."""
    show: int = 10
    """How many of the largest entries to print."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("eps", self.eps, low=0.0, high=1.0, low_inclusive=False)
        if self.p < 2 or self.p % 2:
            raise ValueError(
                f"p must be a positive even integer (2, 4, ...) for find (exact routine), got {self.p}; "
                "for other p use the library's lewis_weights (approximate)"
            )
        check_range("chunk_size", self.chunk_size, low=1)
        check_range("show", self.show, low=0)
        if self.q is not None and self.k is None:
            raise ValueError("--q was given without --k; pass the keys with --k FILE")


def _load_npy(flag: str, path: Path) -> np.ndarray:
    if not path.is_file():
        raise FileNotFoundError(f"{flag}: file {str(path)!r} does not exist")
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as exc:
        raise ValueError(f"{flag}: {path} is not a plain .npy array ({exc})") from None


def _digits_pca(d: int = 8) -> np.ndarray:
    from sklearn.decomposition import PCA

    from iclr25_shared.data import digits

    images, _ = digits()
    return PCA(n_components=d, random_state=0).fit_transform(
        images.reshape(len(images), -1).astype(np.float64)
    )


def find(cfg: FindConfig) -> int:
    from iclr25_levattention._heavy import heavy_entries
    from iclr25_shared.results import RunRecord, package_versions

    if cfg.k is None:
        K = _digits_pca()
        Q, source = K, "sklearn digits, PCA to d = 8 (queries = keys)"
    else:
        K = _load_npy("--k", cfg.k)
        Q = K if cfg.q is None else _load_npy("--q", cfg.q)
        source = f"q={cfg.q or cfg.k}, k={cfg.k}"
    start = time.perf_counter()
    result = heavy_entries(Q, K, cfg.eps, cfg.p, chunk_size=cfg.chunk_size)
    seconds = time.perf_counter() - start
    d = K.shape[1]
    print(f"source: {source}")
    print(f"n_queries={Q.shape[0]} n_keys={K.shape[0]} d={d} p={cfg.p} eps={cfg.eps}")
    print(
        f"|U| = {result.universal_set.size} (bound rank/eps = {result.bound:.1f}, d^(p/2)/eps = "
        f"{d ** (cfg.p / 2) / cfg.eps:.1f}); heavy entries: {len(result)}; "
        f"degenerate rows: {result.degenerate_rows.size}; {seconds:.3f} s"
    )
    order = np.argsort(-result.values, kind="stable")[: cfg.show]
    rows = [
        {"i": int(result.rows[t]), "j": int(result.cols[t]), "A_ij": float(result.values[t])} for t in order
    ]
    for r in rows:
        print(f"  A[{r['i']}, {r['j']}] = {r['A_ij']:.6f}")
    if cfg.out is not None:
        record = RunRecord(
            command=f"{PROG} find",
            config=cfg,
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
            versions=package_versions(["iclr25-levattention", "scipy"]),
        )
        _save_npz(
            cfg.out / "heavy_entries.npz",
            rows=result.rows,
            cols=result.cols,
            values=result.values,
            universal_set=result.universal_set,
        )
        record.save(cfg.out)
        print(f"wrote {cfg.out}")
    return 0


def _save_npz(path: Path, **arrays: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".npz")
    os.close(fd)
    try:
        np.savez(tmp, **arrays)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# ------------------------------------------------------------------------------------------------------------------
# reproduce
# ------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """The paper's claims at small scale on real data: (A) exactness and scaling, (B) ViT on Fashion-MNIST."""

    size: Literal["quick", "full", "tiny"] = "quick"
    """quick: under 10 minutes on 2 CPU cores; full: larger n, the full Fashion-MNIST training set; tiny: a
    seconds-long smoke test (not a result)."""
    parts: Literal["all", "A", "B"] = "all"
    """Which parts to run."""
    lm: bool = True
    """Part A: include queries/keys of SmolLM2-135M (needs the packaged model); --no-lm uses only Fashion-MNIST."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("size", self.size, ("quick", "full", "tiny"))
        check_choice("parts", self.parts, ("all", "A", "B"))


def reproduce(cfg: ReproduceConfig) -> int:
    import torch

    from iclr25_levattention import _experiment as ex
    from iclr25_shared.device import resolve_device, seed_everything
    from iclr25_shared.results import RunRecord, markdown_table, package_versions

    device = resolve_device(cfg.device)
    seed_everything(cfg.seed)
    size = ex.SIZES[cfg.size]
    record = RunRecord(
        command=f"{PROG} reproduce",
        config=cfg,
        device=str(device),
        versions=package_versions(["iclr25-levattention", "torch", "scipy", "scikit-learn", "transformers"]),
    )
    figures: dict[str, Path] = {}
    say = (lambda *_: None) if cfg.quiet else (lambda msg: print(msg, flush=True))
    total = time.perf_counter()

    if cfg.parts in ("all", "A"):
        start = time.perf_counter()
        sources: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if cfg.lm:
            say("A: loading SmolLM2-135M and capturing queries/keys ...")
            sources.update(
                ex.smollm2_qk(
                    num_tokens=size.lm_tokens,
                    seq_len=size.lm_seq_len,
                    layers=size.lm_layers,
                    heads=size.lm_heads,
                    device=device,
                )
            )
        record.timings["A: data"] = time.perf_counter() - start
        fashion = ex.fashion_pca(size.fashion_n, d=16, seed=cfg.seed)
        fashion_name = f"Fashion-MNIST PCA-16 (n={size.fashion_n})"
        rows = []
        for name, (Q, K) in sources.items():
            say(f"A: {name}")
            rows += ex.exactness_rows(name, Q, K, 2)
        for name, (Q, K) in sources.items():
            # One sequence (a real context): n = seq_len; here the heavy entries exist, but n < d/eps, so U is
            # large (p = 4: D = 2080 > n, every key is in U) -- exactness, not selectivity, is what this shows.
            say(f"A: {name}, one sequence of {size.lm_seq_len} tokens, p = 2 and 4")
            for p in (2, 4):
                rows += ex.exactness_rows(
                    f"{name}, one sequence", Q[: size.lm_seq_len], K[: size.lm_seq_len], p
                )
        if sources and size.lm_p4_tokens:
            name = next(iter(sources))
            Q, K = sources[name]
            say(f"A: {name}, p = 4 on the first {size.lm_p4_tokens} tokens")
            rows += ex.exactness_rows(name, Q[: size.lm_p4_tokens], K[: size.lm_p4_tokens], 4)
        for p in (2, 4):
            say(f"A: {fashion_name}, p = {p}")
            rows += ex.exactness_rows(fashion_name, fashion, fashion, p)
        record.tables["A: exactness (universal set vs brute force)"] = rows
        record.metrics["A: min recall"] = min(r["recall"] for r in rows)
        record.metrics["A: total false positives"] = sum(r["false pos"] for r in rows)
        record.metrics["A: |U| within rank/eps"] = all(r["|U|"] <= r["rank/eps"] for r in rows)
        record.metrics["A: |U| within d^(p/2)/eps"] = all(r["|U|"] <= r["d^(p/2)/eps"] for r in rows)

        say("A: scaling")
        scaling = []
        if sources:
            name = list(sources)[-1]
            scaling += ex.scaling_rows(name, *sources[name], size.scaling_lm)
        big = ex.fashion_pca(max(size.scaling_fashion), d=16, seed=cfg.seed)
        scaling += ex.scaling_rows("Fashion-MNIST PCA-16", big, big, size.scaling_fashion)
        record.tables["A: CPU time vs n (p = 2, eps = 0.05, one BLAS thread)"] = scaling
        for src in dict.fromkeys(r["source"] for r in scaling):
            sub = [r for r in scaling if r["source"] == src]
            if len(sub) >= 2:
                record.metrics[f"A: log-log slope ours [{src}]"] = round(
                    ex.loglog_slope(sub, "cpu ours (s)"), 2
                )
                record.metrics[f"A: log-log slope brute [{src}]"] = round(
                    ex.loglog_slope(sub, "cpu brute (s)"), 2
                )
        if cfg.out is not None:
            figures["scaling"] = ex.plot_scaling(
                scaling, cfg.out / "scaling.png", "heavy entries: time vs n (p=2, eps=0.05)"
            )

        record.timings["A"] = time.perf_counter() - start

    if cfg.parts in ("all", "B"):
        start = time.perf_counter()
        say("B: ViT on Fashion-MNIST")
        xtr, ytr, xte, yte = ex.fashion_tensors(size.vit_train, size.vit_test, cfg.seed)
        torch.manual_seed(cfg.seed)
        full = ex.make_vit(top_k=None)
        losses_full = ex.train_vit(
            full, xtr, ytr, epochs=size.vit_epochs, seed=cfg.seed, device=device, quiet=cfg.quiet
        )
        acc_full = ex.evaluate(full, xte, yte, device=device)
        torch.manual_seed(cfg.seed)
        lev = ex.make_vit(top_k=size.vit_top_k)
        losses_lev = ex.train_vit(
            lev, xtr, ytr, epochs=size.vit_epochs, seed=cfg.seed, device=device, quiet=cfg.quiet
        )
        acc_lev = ex.evaluate(lev, xte, yte, device=device)
        full.set_top_k(size.vit_top_k)
        acc_inf = ex.evaluate(full, xte, yte, device=device)
        full.set_top_k(None)
        tokens = full.num_tokens
        vit_rows = [
            {
                "model": "(i) full softmax",
                "keys per query": tokens,
                **_acc(acc_full),
                "final train loss": losses_full[-1],
            },
            {
                "model": f"(ii) LevAttention top-{size.vit_top_k}, from scratch",
                "keys per query": size.vit_top_k,
                **_acc(acc_lev),
                "final train loss": losses_lev[-1],
            },
            {
                "model": f"(iii) (i) + top-{size.vit_top_k} at inference",
                "keys per query": size.vit_top_k,
                **_acc(acc_inf),
                "final train loss": None,
            },
        ]
        for r in vit_rows:
            r["% of full"] = 100.0 * r["accuracy"] / acc_full.value
        record.tables["B: ViT on Fashion-MNIST"] = vit_rows
        record.metrics["B: (ii)/(i) accuracy ratio"] = acc_lev.value / acc_full.value
        record.metrics["B: (iii)/(i) accuracy ratio"] = acc_inf.value / acc_full.value
        record.metrics["B: paper claim (ii) >= 0.9 (i) holds"] = acc_lev.value >= 0.9 * acc_full.value
        record.metrics["B: paper claim (iii) < (ii) holds"] = acc_inf.value < acc_lev.value
        if cfg.out is not None:
            figures["vit"] = ex.plot_vit(vit_rows, cfg.out / "vit.png")
        record.notes.append(
            f"B: ViT with {tokens} tokens ({', '.join(f'{k}={v}' for k, v in ex.VIT_KW.items())}), "
            f"{size.vit_epochs} epochs on {size.vit_train} training "
            f"images, tested on {size.vit_test}; same seed and initialisation for (i) and (ii)."
        )
        record.timings["B"] = time.perf_counter() - start

    record.timings["total"] = time.perf_counter() - total
    record.notes += [f"figure {k}: {v.name}" for k, v in figures.items()]
    for name, rows in record.tables.items():
        if not cfg.quiet:
            print(f"\n## {name}\n\n{markdown_table(rows)}")
    if not cfg.quiet:
        print("\n" + "\n".join(f"{k}: {v}" for k, v in record.metrics.items()))
    if cfg.out is not None:
        record.save(cfg.out)
        print(f"wrote {cfg.out}")
    return 0


def _acc(est) -> dict:
    return {"accuracy": est.value, "ci low": est.low, "ci high": est.high, "n test": est.n}


# ------------------------------------------------------------------------------------------------------------------
# bench
# ------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions):
    """heavy_entries vs chunked brute force at n = 2^min_log_n ... 2^max_log_n: time and peak-memory ratios."""

    min_log_n: int = 10
    """Smallest n is 2^min_log_n."""
    max_log_n: int = 16
    """Largest n is 2^max_log_n."""
    d: int = 64
    """Key/query dimension."""
    eps: float = 0.1
    """Threshold in (0, 1]."""
    p: int = 2
    """Positive even exponent."""
    chunk_size: int = 512
    """Queries per chunk, for both methods."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("min_log_n", self.min_log_n, low=4, high=20)
        check_range("max_log_n", self.max_log_n, low=self.min_log_n, high=20)
        check_range("d", self.d, low=1, high=4096)
        check_range("eps", self.eps, low=0.0, high=1.0, low_inclusive=False)
        if self.p < 2 or self.p % 2:
            raise ValueError(f"p must be a positive even integer (2, 4, ...) for bench, got {self.p}")
        check_range("chunk_size", self.chunk_size, low=1)


def bench(cfg: BenchConfig) -> int:
    from iclr25_levattention import _experiment as ex
    from iclr25_shared.results import RunRecord, markdown_table, package_versions

    if cfg.device not in ("auto", "cpu"):
        raise ValueError(
            f"device must be cpu or auto for bench (the exact routines are numpy), got {cfg.device!r}"
        )
    ns = [2**e for e in range(cfg.min_log_n, cfg.max_log_n + 1)]
    rows = ex.bench_rows(
        ns, d=cfg.d, eps=cfg.eps, p=cfg.p, seed=cfg.seed, chunk_size=cfg.chunk_size, quiet=cfg.quiet
    )
    record = RunRecord(
        command=f"{PROG} bench",
        config=cfg,
        tables={"heavy_entries vs brute force (CPU, float64, same process)": rows},
        versions=package_versions(["iclr25-levattention", "scipy"]),
        notes=[
            "keys and queries: Gaussian rows scaled by 1 + Pareto(1.5) magnitudes (seeded)",
            "time: CPU seconds (time.process_time) with one BLAS thread for both methods, best of 3 for n <= 8192, "
            "else one run; wall seconds beside them (on a shared machine wall time is mostly waiting)",
            "memory: peak bytes allocated during the call (tracemalloc: Python + numpy buffers), inputs excluded",
        ],
    )
    last = rows[-1]
    record.metrics = {
        "time ratio (cpu) at largest n": last["time ratio (cpu)"],
        "time ratio (wall) at largest n": last["wall brute (s)"] / last["wall ours (s)"],
        "memory ratio at largest n": last["mem ratio"],
        "all entry sets equal": all(r["same entries"] for r in rows),
    }
    if len(rows) >= 2:
        record.metrics["log-log slope ours"] = ex.loglog_slope(rows, "cpu ours (s)")
        record.metrics["log-log slope brute"] = ex.loglog_slope(rows, "cpu brute (s)")
    print(markdown_table(rows))
    print("\n".join(f"{k}: {v}" for k, v in record.metrics.items()))
    if cfg.out is not None:
        record.save(cfg.out)
        print(f"wrote {cfg.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns the exit code."""
    return run(
        PROG,
        {
            "find": (FindConfig, find),
            "reproduce": (ReproduceConfig, reproduce),
            "bench": (BenchConfig, bench),
        },
        argv,
        default="find",
        description=(
            "LevAttention (ICLR 2025, arXiv:2410.05462): every attention weight >= eps of |x|^p attention via the "
            "universal set of keys (find), the paper's claims at small scale (reproduce), and the speed/memory "
            "ratios against brute force (bench)."
        ),
        version=__version__,
    )


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
