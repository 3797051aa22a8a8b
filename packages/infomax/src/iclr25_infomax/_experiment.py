"""What the commands share: the selectors by name (``select_by``), the coreset classifier and the plot helper."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_infomax._baselines import (
    ccs_select,
    facility_location_select,
    greedy_select,
    kcenter_select,
    random_select,
    topk_select,
)
from iclr25_infomax._solver import solve
from iclr25_shared.checks import check_choice
from iclr25_shared.cli import RunContext

if TYPE_CHECKING:
    pass

__all__ = ["METHODS", "NESTED", "classifier_accuracy", "select_by"]

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
