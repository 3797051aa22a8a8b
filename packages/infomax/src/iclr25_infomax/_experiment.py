"""What the CLI runs: ``select`` (one coreset), ``reproduce`` (data pruning on Fashion-MNIST) and ``bench``
(selection time / memory / objective quality). Each command takes ``(cfg, ctx)`` and returns a
:class:`iclr25_shared.cli.Result`."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_infomax._baselines import (
    ccs_select,
    facility_location_select,
    greedy_select,
    kcenter_select,
    milp_select,
    random_select,
    topk_select,
)
from iclr25_infomax._scores import el2n_scores, train_scoring_model
from iclr25_infomax._similarity import knn_similarity
from iclr25_infomax._solver import objective, solve
from iclr25_infomax._validate import as_features, as_scores, resolve_budget
from iclr25_shared.checks import check_choice
from iclr25_shared.cli import Result, RunContext
from iclr25_shared.errors import InputError
from iclr25_shared.inputs import read_npy, validating

if TYPE_CHECKING:
    from iclr25_infomax.cli import BenchConfig, ReproduceConfig, SelectConfig

__all__ = ["METHODS", "NESTED", "bench", "classifier_accuracy", "reproduce", "select", "select_by"]

METHODS = (
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
NESTED = (
    "kcenter",
    "facility_location",
    "greedy",
)  # greedy orders: a budget's selection is a prefix of the next


def select_by(
    method: str,
    budget: int,
    *,
    scores: np.ndarray,
    similarity: Any,
    features: np.ndarray,
    alpha: float,
    seed: int,
    iterations: int = 100,
    partitions: int = 1,
) -> np.ndarray:
    """One call shape for every selector of the comparison; returns exactly ``budget`` unique indices."""
    n = scores.size
    if method == "random":
        return random_select(n, budget, seed=seed)
    if method == "hard_first":
        return topk_select(scores, budget, direction="hard_first")
    if method == "easy_first":
        return topk_select(scores, budget, direction="easy_first")
    if method == "ccs":
        return ccs_select(scores, budget, seed=seed)
    if method == "kcenter":
        return kcenter_select(features, budget, seed=seed, metric="cosine")
    if method == "facility_location":
        return facility_location_select(similarity, budget)
    if method == "greedy":
        return greedy_select(scores, similarity, budget, alpha=alpha)
    if method == "infomax":
        return solve(
            scores, similarity, budget, alpha=alpha, iterations=iterations, partitions=partitions, seed=seed
        ).indices
    if method == "infomax_hp":  # InfoMax on the pool left after CCS-style hard pruning of the hardest 10 %
        n_prune = min(int(0.1 * n), n - budget)
        pool = np.sort(np.lexsort((np.arange(n), -scores))[n_prune:])
        sub = similarity[pool][:, pool] if hasattr(similarity, "tocsr") else similarity[np.ix_(pool, pool)]
        res = solve(
            scores[pool], sub, budget, alpha=alpha, iterations=iterations, partitions=partitions, seed=seed
        )
        return pool[res.indices]
    check_choice("method", method, METHODS)
    raise AssertionError("unreachable")  # pragma: no cover


def classifier_accuracy(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    *,
    steps: int,
    hidden: int,
    batch_size: int,
    lr: float,
    seed: int,
    device: Any,
    schedule: str = "onecycle",
) -> float:
    """Train a one-hidden-layer MLP for a fixed number of Adam steps on the coreset; return test accuracy.

    Args:
        x_train: ``(n, D)`` float32 inputs; y_train: ``(n,)`` int64 labels ``0..C-1``.
        x_test, y_test: the evaluation split, same layout.
        steps: Adam steps, whatever ``n`` (mini-batches of ``min(batch_size, n)`` drawn with replacement).
        hidden: width of the hidden layer.
        lr: the peak learning rate; ``schedule="onecycle"`` (``torch.optim.lr_scheduler.OneCycleLR``) starts at
            ``lr / 25``, rises to ``lr`` over the first 20 % of the steps and anneals (cosine) to
            ``lr / (25·10⁴)``; ``"constant"`` keeps ``lr``.
        schedule: ``"onecycle"`` or ``"constant"``.

    Raises:
        ValueError: ``schedule`` not one of those.
        seed: initialisation and batch order (paired across coresets when equal).

    Returns:
        Accuracy on ``(x_test, y_test)`` in ``[0, 1]``.
    """
    import torch

    check_choice("schedule", schedule, ("onecycle", "constant"))
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(x_train.shape[1], hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, int(y_test.max()) + 1),
    ).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = (
        torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.2)
        if schedule == "onecycle" and steps > 1
        else None
    )
    X = torch.from_numpy(x_train).to(device)
    Y = torch.from_numpy(y_train).to(device)
    n = X.shape[0]
    # every step's batch indices drawn at once (the same stream as one draw per step) and copied to the device once:
    # on CUDA a per-step host-to-device copy would synchronise the host with the GPU at every step
    batches = torch.randint(0, n, (steps, min(batch_size, n)), generator=gen).to(device)
    model.train()
    for step in range(steps):
        b = batches[step]
        loss = torch.nn.functional.cross_entropy(model(X[b]), Y[b])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
    model.eval()
    with torch.no_grad():
        Xt = torch.from_numpy(x_test).to(device)
        pred = torch.cat([model(Xt[s : s + 4096]).argmax(1) for s in range(0, Xt.shape[0], 4096)])
    return float((pred.cpu().numpy() == y_test).mean())


def _save_plot(
    ctx: RunContext,
    name: str,
    budgets: Sequence[float],
    curves: dict[str, tuple[np.ndarray, np.ndarray]],
    full: float | None = None,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for method, (mean, sd) in curves.items():
        ax.errorbar(np.asarray(budgets) * 100, mean * 100, yerr=sd * 100, marker="o", capsize=3, label=method)
    if full is not None:
        ax.axhline(full * 100, color="0.4", linestyle="--", linewidth=1, label="full pool")
    ax.set_xlabel("kept (% of the training pool)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("Fashion-MNIST data pruning")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    ctx.save_figure(name, fig)


def _t_interval(diffs: np.ndarray) -> tuple[float, float, float]:
    """Mean and two-sided 95 % Student-t interval of paired differences (``nan`` half-width for one seed)."""
    from iclr25_shared.metrics import paired_t_interval

    est = paired_t_interval(diffs)
    return (est.value, est.low, est.high) if est.n >= 2 else (est.value, float("nan"), float("nan"))


def _redundancy_diagnostics(
    idx: np.ndarray, scores: np.ndarray, K: Any, alpha: float, top: np.ndarray
) -> dict:
    """What shows that the redundancy term binds for a selection ``idx`` at weight ``alpha``."""
    x = np.zeros(scores.size)
    x[idx] = 1.0
    within = float(x @ (K @ x))  # Σ_{z,s ∈ S} K_zs (ordered pairs)
    has_neighbour = np.asarray(K[idx][:, idx].getnnz(axis=1) > 0)
    return {
        "Σ_S I": round(float(scores[idx].sum()), 1),
        "α Σ_S K": round(alpha * within, 1),
        "redundancy / importance": round(alpha * within / max(float(scores[idx].sum()), 1e-12), 3),
        "kept with a kept kNN neighbour (%)": round(100 * float(has_neighbour.mean()), 1),
        "overlap with top-p by score (%)": round(100 * np.intersect1d(idx, top).size / idx.size, 1),
    }


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """Fashion-MNIST data pruning at equal coreset sizes; hyperparameters tuned on a held-out split; paired seeds.

    1. A seeded ``num_val`` images of the 60 000 training images are held out for tuning; the rest is the pool.
    2. A scoring MLP trained on the pool gives EL2N (averaged over its ``score_epochs`` epochs; larger = harder)
       and its last hidden layer as features, centred and L2-normalised; ``K`` is their cosine kNN graph.
    3. For every budget, each tunable method picks its value on the held-out split (one classifier per value):
       InfoMax and greedy their α from ``alphas``, CCS its hard-pruning rate from ``ccs_betas``.
    4. Every method's coreset trains the same classifier (``train_steps`` Adam steps, whatever the budget) with
       ``seeds`` seeds; accuracy on the 10 000 test images. Differences are paired by seed.
    """
    from iclr25_shared.data import fashion_mnist

    log = ctx.log.info
    cfg = cfg.sized()
    if cfg.size != "quick":
        log(
            f"size {cfg.size}: pool {cfg.num_train}, {cfg.seeds} seeds, {cfg.score_epochs} scoring epochs, "
            f"{cfg.train_steps} steps of {cfg.batch_size}"
        )
    t_start = time.perf_counter()
    device = ctx.torch_device()
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    xtr, ytr = fashion_mnist("train")
    xte, yte = fashion_mnist("test")
    rng = np.random.default_rng(cfg.seed)
    perm = rng.permutation(xtr.shape[0])
    val_idx = np.sort(perm[: cfg.num_val])
    pool_idx = np.sort(perm[cfg.num_val : cfg.num_val + cfg.num_train])
    if cfg.num_test < xte.shape[0]:
        keep = np.sort(rng.choice(xte.shape[0], cfg.num_test, replace=False))
        xte, yte = xte[keep], yte[keep]
    mean, std = 0.2860, 0.3530  # Fashion-MNIST pixel statistics

    def prep(images: np.ndarray) -> np.ndarray:
        return ((images.reshape(len(images), -1).astype(np.float32) / 255.0) - mean) / std

    def pooled(images: np.ndarray) -> np.ndarray:  # the coreset classifier's input: f×f average-pooled pixels
        f = cfg.pool
        if f == 1:
            return prep(images)
        n_img, h, w = images.shape
        small = images[:, : h - h % f, : w - w % f].astype(np.float32)
        small = small.reshape(n_img, h // f, f, w // f, f).mean(axis=(2, 4))
        return prep(small)

    x_score, y_pool = prep(xtr[pool_idx]), ytr[pool_idx].astype(np.int64)
    x_pool = pooled(xtr[pool_idx])
    x_val, y_val = pooled(xtr[val_idx]), ytr[val_idx].astype(np.int64)
    x_test, y_test = pooled(xte), yte.astype(np.int64)
    timings["load"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    log(f"scoring model: MLP {cfg.score_hidden} for {cfg.score_epochs} epochs on {len(x_score)} images")
    run = train_scoring_model(
        x_score,
        y_pool,
        epochs=cfg.score_epochs,
        hidden=tuple(cfg.score_hidden),
        seed=cfg.seed,
        device=str(device),
        quiet=cfg.quiet,
    )
    scores = el2n_scores(run.logits, y_pool)  # averaged over the recorded epochs; larger = harder
    feats = run.features.astype(np.float64)
    feats -= feats.mean(axis=0)  # centred, then cosine (knn_similarity L2-normalises)
    features = feats.astype(np.float32)
    timings["scoring_model"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    K = knn_similarity(features, k=cfg.k, metric="cosine")
    timings["knn_graph"] = time.perf_counter() - t0
    n = scores.size
    edge = K.data
    graph = {
        "edges": int(K.nnz // 2),
        "K per edge: mean": round(float(edge.mean()), 3),
        "K per edge: 10 % / 50 % / 90 %": " / ".join(f"{q:.3f}" for q in np.quantile(edge, [0.1, 0.5, 0.9])),
        "EL2N: mean / max": f"{scores.mean():.3f} / {scores.max():.3f}",
        "scoring model: pool accuracy (last epoch)": round(float(run.correct[-1].mean()), 4),
    }
    log(f"kNN graph: {graph}")

    train_kw = dict(
        steps=cfg.train_steps,
        hidden=cfg.hidden,
        batch_size=cfg.batch_size,
        lr=cfg.lr,
        device=device,
        schedule=cfg.schedule,
    )
    trained: dict[tuple[bytes, str, int], float] = {}  # identical coresets (e.g. two α, same set) train once

    def accuracy(idx: np.ndarray | None, split: str, seed: int) -> float:
        key = (
            b"full" if idx is None else hashlib.sha1(np.sort(idx).tobytes(), usedforsecurity=False).digest(),
            split,
            seed,
        )
        if key not in trained:
            xs, ys = (x_pool, y_pool) if idx is None else (x_pool[idx], y_pool[idx])
            xe, ye = (x_val, y_val) if split == "val" else (x_test, y_test)
            trained[key] = classifier_accuracy(xs, ys, xe, ye, seed=seed, **train_kw)
        return trained[key]

    # -- diagnostic first: the schedule on the full pool (what every coreset is measured against) ----------
    t0 = time.perf_counter()
    full = []
    for s in range(cfg.seeds):
        full.append(accuracy(None, "test", 1000 + s))
        log(f"full pool ({n}), seed {s}: test accuracy {100 * full[-1]:.2f} %")
    timings["full_pool_training"] = time.perf_counter() - t0
    counts = [resolve_budget(b, n) for b in cfg.budgets]
    grids: dict[str, tuple[float, ...]] = {
        "infomax": cfg.alphas,
        "infomax_hp": cfg.alphas,
        "greedy": cfg.alphas,
        "ccs": cfg.ccs_betas,
    }
    cache: dict[tuple[str, int, float, int], np.ndarray] = {}
    select_time: dict[str, float] = {}

    def pick(method: str, c: int, value: float, seed: int) -> np.ndarray:
        key = (method, c, value, seed if method in ("random", "ccs") else 0)
        if key not in cache:
            ts = time.perf_counter()
            if method == "kcenter":  # one traversal, nested: a budget's set is a prefix of the largest
                order = kcenter_select(features, max(counts), seed=0, metric="cosine")
                for cc in counts:
                    cache[("kcenter", cc, value, 0)] = np.sort(order[:cc])
            elif method == "ccs":
                cache[key] = ccs_select(scores, c, hard_prune=value, seed=seed)
            elif method in ("infomax", "greedy", "infomax_hp", "facility_location"):
                cache[key] = np.sort(
                    select_by(
                        method,
                        c,
                        scores=scores,
                        similarity=K,
                        features=features,
                        alpha=value,
                        seed=0,
                        iterations=cfg.iterations,
                    )
                )
            else:
                cache[key] = np.sort(
                    select_by(method, c, scores=scores, similarity=K, features=features, alpha=0.0, seed=seed)
                )
            select_time[method] = select_time.get(method, 0.0) + time.perf_counter() - ts
        return cache[key]

    # -- tuning on the held-out split -------------------------------------------------------------------
    t0 = time.perf_counter()
    chosen: dict[tuple[str, int], float] = {}
    tuning_rows = []
    for c, b in zip(counts, cfg.budgets):
        for method in cfg.methods:
            grid = grids.get(method)
            if grid is None:
                chosen[(method, c)] = 0.0
                continue
            vals = {}
            for value in grid:
                idx = pick(method, c, value, 0)
                vals[value] = accuracy(idx, "val", 10_000 + c)
            best = max(grid, key=lambda v: (vals[v], -grid.index(v)))
            chosen[(method, c)] = best
            tuning_rows.append(
                {
                    "kept": f"{b:.0%}",
                    "method": method,
                    "validation accuracy (%) per grid value": ", ".join(
                        f"{'β' if method == 'ccs' else 'α'}={v:g}: {100 * a:.2f}" for v, a in vals.items()
                    ),
                    "chosen": best,
                }
            )
            log(f"{b:.0%} {method}: validation accuracy {vals}; chosen {best}")
    timings["tuning"] = time.perf_counter() - t0

    # -- final: test accuracy, seeds paired ----------------------------------------------------------------
    t0 = time.perf_counter()
    acc: dict[tuple[str, int, int], float] = {}
    jobs = [(m, c, s) for c in counts for m in cfg.methods for s in range(cfg.seeds)]
    for m, c, s in ctx.progress(jobs, total=len(jobs), desc="coreset training"):
        idx = pick(m, c, chosen[(m, c)], s)
        acc[(m, c, s)] = accuracy(idx, "test", 1000 + s)
        log(f"{m} at {c} kept, seed {s}: test accuracy {100 * acc[(m, c, s)]:.2f} %")
    timings["coreset_training"] = time.perf_counter() - t0
    timings.update({f"select_{m}": v for m, v in select_time.items()})

    rows = []
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for m in cfg.methods:
        row: dict[str, Any] = {"method": m}
        mus, sds = [], []
        for b, c in zip(cfg.budgets, counts):
            vals = np.array([acc[(m, c, s)] for s in range(cfg.seeds)])
            mu, sd = float(vals.mean()), float(vals.std(ddof=1)) if vals.size > 1 else 0.0
            mus.append(mu)
            sds.append(sd)
            tag = f" ({'β' if m == 'ccs' else 'α'}={chosen[(m, c)]:g})" if m in grids else ""
            row[f"{b:.0%}"] = f"{100 * mu:.2f} ± {100 * sd:.2f}{tag}"
        rows.append(row)
        curves[m] = (np.array(mus), np.array(sds))
    full_mu, full_sd = float(np.mean(full)), float(np.std(full, ddof=1)) if len(full) > 1 else 0.0
    rows.append(
        {
            "method": "full pool",
            **{f"{b:.0%}": f"{100 * full_mu:.2f} ± {100 * full_sd:.2f}" for b in cfg.budgets},
        }
    )

    paired = []
    if "infomax" in cfg.methods:
        for other in [m for m in cfg.methods if m != "infomax"]:
            row = {"InfoMax −": other}
            for b, c in zip(cfg.budgets, counts):
                d = np.array([acc[("infomax", c, s)] - acc[(other, c, s)] for s in range(cfg.seeds)]) * 100
                mu, lo, hi = _t_interval(d)
                row[f"{b:.0%}"] = f"{mu:+.2f} [{lo:+.2f}, {hi:+.2f}]"
            paired.append(row)

    top = {c: topk_select(scores, c) for c in counts}
    diagnostics = []
    class_rows = []
    for c, b in zip(counts, cfg.budgets):
        for m in cfg.methods:
            idx = pick(m, c, chosen[(m, c)], 0)
            if m in ("infomax", "greedy", "infomax_hp"):
                a = chosen[(m, c)]
                diagnostics.append(
                    {
                        "kept": f"{b:.0%}",
                        "method": f"{m} (α={a:g})",
                        "objective": round(objective(idx, scores, K, alpha=a), 2),
                        **_redundancy_diagnostics(idx, scores, K, a, top[c]),
                    }
                )
            per_class = np.bincount(y_pool[idx], minlength=10)
            class_rows.append(
                {
                    "kept": f"{b:.0%}",
                    "method": m,
                    "min / max per class": f"{per_class.min()} / {per_class.max()}",
                    "counts (classes 0–9)": " ".join(map(str, per_class.tolist())),
                    "misclassified by the scoring model (%)": round(
                        100 * float((~run.correct[-1][idx]).mean()), 1
                    ),
                }
            )
        if "infomax" in cfg.methods:
            a = chosen[("infomax", c)]
            gidx = np.sort(greedy_select(scores, K, c, alpha=a))
            diagnostics.append(
                {
                    "kept": f"{b:.0%}",
                    "method": f"greedy at InfoMax's α={a:g}",
                    "objective": round(objective(gidx, scores, K, alpha=a), 2),
                    **_redundancy_diagnostics(gidx, scores, K, a, top[c]),
                }
            )
    _save_plot(ctx, "accuracy_vs_budget.png", cfg.budgets, curves, full=full_mu)
    metrics = {
        "num_pool": int(n),
        "num_val": len(y_val),
        "num_test": len(y_test),
        "full_pool_accuracy": round(full_mu, 4),
        "full_pool_accuracy_per_seed": [round(a, 4) for a in full],
        **graph,
    }
    notes = [
        "Scores: EL2N of a small MLP averaged over its training epochs (larger = harder); features: its last hidden "
        "layer, centred, cosine kNN graph (clipped >= 0). One scoring run (seed); the coreset classifier and the "
        "random / CCS selections vary with the seed.",
        f"Coreset classifier: MLP {x_pool.shape[1]}-{cfg.hidden}-10 on {cfg.pool}×{cfg.pool} average-pooled pixels, "
        f"{cfg.train_steps} Adam steps of batch {cfg.batch_size}, peak learning rate {cfg.lr:g}, "
        f"{cfg.schedule} schedule. Training budget convention: the same number of steps at every budget and on "
        "the full pool (CCS's protocol, arXiv:2210.15809), not the same epochs. "
        "α (InfoMax, greedy) and β (CCS) chosen per budget on the "
        f"{len(y_val)} held-out images; test accuracy on {len(y_test)} test images.",
        "Paired differences: per seed, same classifier initialisation and batch order; mean [95 % t-interval].",
        "Paper's claim (Fig. 1, §4): at small selection ratios InfoMax beats random and score-only selection.",
    ]
    timings["total"] = time.perf_counter() - t_start
    return Result(
        tables={
            "test accuracy (%) mean ± SD over seeds": rows,
            "paired differences (pp), InfoMax − baseline": paired,
            "validation accuracy (%) of the tuning grid": tuning_rows,
            "redundancy diagnostics (does the α term bind?)": diagnostics,
            "per-class counts of the chosen sets": class_rows,
        },
        metrics=metrics,
        notes=notes,
        timings=timings,
    )


def _random_graph(n: int, k: int, rng: np.random.Generator) -> Any:
    """k random neighbours per sample, weights in [0.5, 1), symmetrised by max, zero diagonal (bench only)."""
    import scipy.sparse as sp

    rows = np.repeat(np.arange(n), k)
    cols = rng.integers(0, n, size=n * k)
    A = sp.csr_matrix((rng.uniform(0.5, 1.0, size=n * k), (rows, cols)), shape=(n, n))
    from ._similarity import without_diagonal

    return without_diagonal(A.maximum(A.T))


def _infomax_indices(
    scores: np.ndarray, K: Any, p: int, alpha: float, iterations: int, init: str
) -> np.ndarray:
    return solve(scores, K, p, alpha=alpha, iterations=iterations, init=init).indices


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Time / peak memory of InfoMax vs greedy vs facility location at growing N, and objective quality."""
    from iclr25_shared.bench import interleaved
    from iclr25_shared.device import PeakMemory, Timer

    log = ctx.log.info

    rows, raw = [], {}
    for n in cfg.sizes:
        rng = np.random.default_rng(cfg.seed)
        if cfg.graph == "random":
            with Timer() as t_knn:
                K = _random_graph(n, cfg.k, rng)
        else:
            centres = rng.normal(size=(max(10, n // 1000), cfg.dim)).astype(np.float32)
            feats = centres[rng.integers(len(centres), size=n)]
            feats += 0.5 * rng.normal(size=(n, cfg.dim)).astype(np.float32)
        scores = rng.random(n)
        if cfg.graph == "knn":
            with Timer() as t_knn:
                K = knn_similarity(feats, k=cfg.k, threads=cfg.threads or None)
        p = resolve_budget(cfg.budget, n)
        row: dict[str, Any] = {"N": n, "knn_s": round(t_knn.seconds, 2), "nnz_per_N": round(K.nnz / n, 1)}
        results: dict[str, tuple[float, float, float]] = {}
        runners: dict[str, Callable[[], np.ndarray]] = {
            "infomax": partial(_infomax_indices, scores, K, p, cfg.alpha, cfg.iterations, "relaxed"),
            "greedy": partial(greedy_select, scores, K, p, alpha=cfg.alpha),
        }
        if n <= cfg.max_score_init_n:
            runners["infomax_score_init"] = partial(
                _infomax_indices, scores, K, p, cfg.alpha, cfg.iterations, "score"
            )
        if n <= cfg.max_facility_n:
            runners["facility_location"] = partial(facility_location_select, K, p)
        for name, fn in runners.items():  # one call each: peak memory and the objective; also the warm-up
            with PeakMemory() as mem:
                idx = fn()
            results[name] = (0.0, mem.peak_bytes / 2**20, objective(idx, scores, K, alpha=cfg.alpha))
        rounds = cfg.repeats if n <= 50_000 else max(3, cfg.repeats // 2)
        run = interleaved(runners, repeats=rounds, warmup=0, threads=ctx.threads or None)
        raw[str(n)] = run.as_dict()
        for name in runners:
            results[name] = (run.median(name), *results[name][1:])
            log(f"N={n} {name}: {run.median(name):.2f}s, peak +{results[name][1]:.0f} MiB")
        row["infomax_s"] = round(results["infomax"][0], 3)
        row["infomax_MiB"] = round(results["infomax"][1], 1)
        row["K_MiB"] = round((K.data.nbytes + K.indices.nbytes + K.indptr.nbytes) / 2**20, 1)
        ratio = run.ratio("infomax", "greedy")
        row["time_vs_greedy"] = round(ratio.value, 2)
        row["interval"] = f"[{ratio.low:.3g}, {ratio.high:.3g}]"
        # every row has every column (None where a method was skipped at this N), so tables render as one
        row["time_vs_FL"] = row["interval_FL"] = None
        if "facility_location" in results:
            ratio = run.ratio("infomax", "facility_location")
            row["time_vs_FL"] = round(ratio.value, 3)
            row["interval_FL"] = f"[{ratio.low:.3g}, {ratio.high:.3g}]"
        row["objective_vs_greedy"] = round(results["infomax"][2] / results["greedy"][2], 4)
        row["score_init_time_vs_greedy"] = row["score_init_objective_vs_greedy"] = None
        if "infomax_score_init" in results:
            row["score_init_time_vs_greedy"] = round(run.ratio("infomax_score_init", "greedy").value, 2)
            row["score_init_objective_vs_greedy"] = round(
                results["infomax_score_init"][2] / results["greedy"][2], 4
            )
        row["rounds"] = rounds
        row["held_equal"] = (
            "the same K, scores, budget p and alpha; not equal: the objective reached (columns)"
        )
        rows.append(row)

    quality = _quality_vs_optimum(cfg, log)
    return Result(
        tables={"selection": rows, "quality_vs_milp": quality},
        metrics={
            "win_rate_vs_greedy_where_redundancy_binds": _win_rate(quality),
            "bench": raw,
        },
        notes=[
            "Features: a Gaussian mixture (seeded), d and k as configured; scores uniform in [0, 1).",
            "Peak memory is the process's peak RSS growth during one call (CPU), above what was allocated before; "
            "that call is also each method's warm-up.",
            f"Time: iclr25_shared.bench.interleaved, wall seconds, {cfg.repeats} rounds (half, at least 3, above "
            "N = 50 000), methods rotated each round; ratios are medians of per-round ratios with a 95 % bootstrap "
            "interval over rounds. Selection is numpy/scipy on the host whatever --device says.",
            "Small instances: gap = (optimum − objective) / |optimum| over random instances per row (MILP optimum, "
            "HiGHS); win/tie/loss compares each method's objective with greedy's on the same instance. "
            "'Redundancy binds' = the rows with α >= 0.3, where greedy is off the optimum on some instance.",
        ],
    )


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
    from iclr25_infomax._similarity import knn_similarity
    from iclr25_infomax._solver import objective, solve

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


def _small_instance(kind: str, n: int, k: int, seed: int) -> tuple[np.ndarray, Any]:
    """Scores uniform in [0, 1) and K from 8-d Gaussian features: a cosine kNN graph, or all clipped cosines."""
    rng = np.random.default_rng(10_000 + seed)
    feats = rng.normal(size=(n, 8)).astype(np.float32)
    scores = rng.random(n)
    if kind == "knn":
        return scores, knn_similarity(feats, k=k)
    f = feats / np.linalg.norm(feats, axis=1, keepdims=True)
    K = np.clip(f @ f.T, 0.0, None).astype(np.float64)
    np.fill_diagonal(K, 0.0)
    return scores, K


def _quality_vs_optimum(cfg: BenchConfig, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Objective of each solver against the exact MILP optimum and against greedy, over an α grid."""
    variants: dict[str, dict[str, Any]] = {
        "infomax (relaxed + exchanges, default)": {},
        "infomax (greedy start + exchanges)": {"init": "greedy"},
        "infomax (score start + exchanges)": {"init": "score"},
        "infomax (score start, gradient phase only)": {"init": "score", "refine": False},
    }
    instances = [("knn", cfg.small_n, cfg.small_p, cfg.small_k), ("dense", cfg.dense_n, cfg.dense_p, 0)]
    quality = []
    for kind, n_small, p_small, k_small in instances:
        for alpha in cfg.alphas:
            values: dict[str, list[float]] = {name: [] for name in [*variants, "greedy"]}
            optima = []
            for s in range(cfg.small_trials):
                scores, K = _small_instance(kind, n_small, k_small, s)
                optima.append(objective(milp_select(scores, K, p_small, alpha=alpha), scores, K, alpha=alpha))
                for name, kw in variants.items():
                    values[name].append(solve(scores, K, p_small, alpha=alpha, **kw).objective)
                greedy = greedy_select(scores, K, p_small, alpha=alpha)
                values["greedy"].append(objective(greedy, scores, K, alpha=alpha))
            opt = np.asarray(optima)
            greedy_vals = np.asarray(values["greedy"])
            label = f"{kind} N={n_small}, p={p_small}" + (f", k={k_small}" if kind == "knn" else "")
            for name, vals in values.items():
                v = np.asarray(vals)
                gap = (opt - v) / np.maximum(np.abs(opt), 1e-12)
                tol = 1e-9 * np.maximum(1.0, np.abs(opt))
                row = {
                    "instance": label,
                    "α": alpha,
                    "method": name,
                    "gap mean (%)": round(100 * float(gap.mean()), 2),
                    "gap max (%)": round(100 * float(gap.max()), 2),
                    "optimal": f"{int(np.sum(opt - v <= tol))}/{v.size}",
                }
                if name != "greedy":
                    row["win/tie/loss vs greedy"] = (
                        f"{int(np.sum(v > greedy_vals + tol))}/{int(np.sum(np.abs(v - greedy_vals) <= tol))}/"
                        f"{int(np.sum(v < greedy_vals - tol))}"
                    )
                quality.append(row)
            log(f"small instances {label} α={alpha}: done")
    return quality


def _win_rate(quality: list[dict[str, Any]]) -> str:
    """Strict wins of the default solver over greedy, summed over the rows with α >= 0.3."""
    wins = total = losses = 0
    for row in quality:
        if row["method"].endswith("default)") and row["α"] >= 0.3:
            w, t, lo = (int(v) for v in row["win/tie/loss vs greedy"].split("/"))
            wins, total, losses = wins + w, total + w + t + lo, losses + lo
    return f"{wins}/{total} strictly better, {losses} worse"
