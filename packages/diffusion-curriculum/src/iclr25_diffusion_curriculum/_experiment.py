"""What ``train`` and ``reproduce`` share: the timestep sampler for a method name and the difficulty plot. The
commands live in ``_train.py``, ``_reproduce.py`` and ``_bench.py``; the FID features in ``_fid.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr25_diffusion_curriculum._clusters import TimestepClusters
from iclr25_diffusion_curriculum._pacer import PatiencePacer
from iclr25_diffusion_curriculum._sampler import CurriculumSampler
from iclr25_shared.results import save_figure

__all__ = ["METHODS", "make_sampler", "plot_difficulty"]

METHODS = ("uniform", "curriculum", "reverse")


def make_sampler(
    order: str,
    *,
    num_train_timesteps: int,
    num_clusters: int,
    patience: int,
    max_steps_per_stage: int | None,
    ema: float,
    timestep_range: tuple[int, int] | None = None,
) -> CurriculumSampler:
    """A sampler for ``order`` in uniform / curriculum / reverse with uniform clusters over ``timestep_range``
    (default ``[0, T)``)."""
    clusters = TimestepClusters(num_train_timesteps, num_clusters, "uniform", timestep_range=timestep_range)
    if order == "uniform":
        return CurriculumSampler(clusters, order="uniform")
    pacer = PatiencePacer(patience=patience, max_steps_per_stage=max_steps_per_stage, ema=ema)
    return CurriculumSampler(clusters, pacer, order=order)  # type: ignore[arg-type]


def plot_difficulty(bin_ends: np.ndarray, curves: np.ndarray, path: Path) -> Path:
    """Plot per-cluster loss curves (raw, log scale) and normalised ones (1 at the first window, 0 at the last)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = curves.shape[1]
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    cmap = plt.get_cmap("viridis")
    for i in range(n):
        c = curves[:, i]
        color = cmap(i / max(1, n - 1))
        ax[0].plot(bin_ends, c, color=color, label=f"C{i + 1}")
        with np.errstate(invalid="ignore", divide="ignore"):
            ax[1].plot(bin_ends, (c - c[-1]) / (c[0] - c[-1]), color=color)
    ax[0].set(
        yscale="log",
        xlabel="training step",
        ylabel="ε-MSE (uniform-t run)",
        title="loss per timestep cluster",
    )
    ax[1].set(
        xlabel="training step",
        ylabel="(L − L_end)/(L_start − L_end)",
        title=f"normalised: C1 = low t … C{n} = high t",
    )
    ax[0].legend(fontsize=6, ncol=2)
    fig.tight_layout()
    save_figure(fig, path, bbox_inches="tight")
    return path
