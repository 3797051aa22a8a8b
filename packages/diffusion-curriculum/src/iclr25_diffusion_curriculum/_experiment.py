"""Reproduction on Fashion-MNIST (uniform vs curriculum vs reverse) and the sampler-overhead benchmark."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from iclr25_diffusion_curriculum._analysis import cluster_loss_curves, convergence_steps
from iclr25_diffusion_curriculum._clusters import TimestepClusters
from iclr25_diffusion_curriculum._pacer import PatiencePacer
from iclr25_diffusion_curriculum._sampler import CurriculumSampler
from iclr25_diffusion_curriculum._training import (
    generate,
    heldout_loss,
    load_images,
    make_unet,
    save_grid,
    train_diffusion,
)
from iclr25_shared.cli import Result, RunContext
from iclr25_shared.device import seed_everything
from iclr25_shared.results import save_figure

__all__ = [
    "FeatureNet",
    "bench",
    "make_sampler",
    "plot_difficulty",
    "reproduce",
    "train",
    "train_feature_net",
]

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


# ----------------------------------------------------------------------------------------------------------------
# train
# ----------------------------------------------------------------------------------------------------------------


def train(cfg: Any, ctx: RunContext) -> Result:
    """``train``: fit a small UNet2DModel + DDPMScheduler with the chosen timestep sampler.

    With ``--out``: ``unet/`` and ``scheduler/`` (diffusers ``from_pretrained`` folders), ``sampler_state.json``, a
    DDIM ``samples.png`` grid, and for ``--sampler uniform`` the difficulty analysis (``difficulty.png`` + table).
    """
    from diffusers import DDPMScheduler

    device = ctx.torch_device()
    seed_everything(cfg.seed)
    images, _ = load_images(cfg.dataset, "train", cfg.size)
    model = make_unet(cfg.size, cfg.channels)
    scheduler = DDPMScheduler(num_train_timesteps=cfg.num_train_timesteps)
    sampler = make_sampler(
        cfg.sampler,
        num_train_timesteps=cfg.num_train_timesteps,
        num_clusters=cfg.num_clusters,
        patience=cfg.patience,
        max_steps_per_stage=cfg.max_steps_per_stage,
        ema=cfg.ema,
        timestep_range=cfg.timestep_range,
    )
    ctx.log.info(f"{cfg.dataset}: {images.shape[0]} images at {cfg.size}px; {sampler!r}; device {device}")
    start = time.perf_counter()
    tlog = train_diffusion(
        model,
        scheduler,
        images,
        sampler,
        steps=cfg.steps,
        batch_size=cfg.batch_size,
        lr=cfg.lr,
        generator=torch.Generator().manual_seed(cfg.seed),
        device=device,
        snr_gamma=cfg.snr_gamma,
        progress=lambda it: ctx.progress(it, total=cfg.steps, desc=f"train ({cfg.sampler})"),
    )
    seconds = time.perf_counter() - start
    tail = max(1, cfg.steps // 10)
    metrics = {
        "final_loss_last10pct": float(np.mean(tlog.losses[-tail:])),
        "first_loss": float(tlog.losses[0]),
        "final_stage": sampler.stage,
        "num_stages": sampler.num_stages,
        "skipped_nonfinite_steps": tlog.skipped,
        "stage_schedule": [list(r) for r in sampler.stage_schedule()],
    }
    tables: dict[str, list[dict[str, Any]]] = {}
    if cfg.sampler == "uniform":  # the paper's difficulty analysis needs every cluster throughout the run
        bins = min(12, cfg.steps)
        ends, curves = cluster_loss_curves(
            tlog.sample_steps, tlog.sample_timesteps, tlog.sample_losses, sampler.clusters, num_bins=bins
        )
        conv = convergence_steps(ends, curves)
        b = sampler.clusters.boundaries.tolist()
        tables["Difficulty analysis (per timestep cluster)"] = [
            {
                "cluster": f"C{i + 1} t∈[{b[i]},{b[i + 1] - 1}]",
                "first-window loss": float(curves[0, i]),
                "last-window loss": float(curves[-1, i]),
                "steps to 90% of drop": float(conv[i]),
            }
            for i in range(sampler.num_stages)
        ]
        if ctx.writes:
            plot_difficulty(ends, curves, ctx.path("difficulty.png"))
    notes = []
    if ctx.writes:
        samples = generate(
            model,
            scheduler,
            cfg.num_samples,
            num_inference_steps=cfg.num_inference_steps,
            seed=cfg.seed,
            device=device,
        )
        model.save_pretrained(ctx.path("unet"))
        scheduler.save_pretrained(ctx.path("scheduler"))
        ctx.save_json("sampler_state.json", sampler.state_dict())
        save_grid(samples, ctx.path("samples.png"))
        notes.append("model: unet/ (diffusers UNet2DModel), scheduler/, sampler_state.json, samples.png")
    return Result(metrics=metrics, tables=tables, timings={"train_s": seconds}, notes=notes)


# ----------------------------------------------------------------------------------------------------------------
# FID features: a small Fashion-MNIST classifier trained in the run
# ----------------------------------------------------------------------------------------------------------------


class FeatureNet(torch.nn.Module):
    """MLP classifier ``H·W → 256 → 64 → 10``; :meth:`features` is the 64-d pre-activation of the second layer."""

    def __init__(self, image_size: int) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Flatten(),
            torch.nn.Linear(image_size * image_size, 256),
            torch.nn.ReLU(),
            torch.nn.Linear(256, 64),
        )
        self.head = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(64, 10))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def train_feature_net(
    images: torch.Tensor, labels: torch.Tensor, *, seed: int, epochs: int = 3, device: torch.device
) -> FeatureNet:
    """Train :class:`FeatureNet` with Adam (batch 256) for ``epochs`` epochs."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    net = FeatureNet(images.shape[-1]).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    for _ in range(epochs):
        perm = torch.randperm(images.shape[0], generator=g)
        for s in range(0, images.shape[0], 256):
            idx = perm[s : s + 256]
            loss = torch.nn.functional.cross_entropy(net(images[idx].to(device)), labels[idx].to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return net.eval()


@torch.no_grad()
def _stats(net: FeatureNet, images: torch.Tensor, device: torch.device) -> tuple[np.ndarray, np.ndarray]:
    feats = torch.cat(
        [net.features(images[s : s + 1000].to(device)).cpu() for s in range(0, len(images), 1000)]
    )
    f = feats.double().numpy()
    return f.mean(0), np.cov(f, rowvar=False)


def _fid(
    net: FeatureNet, images: torch.Tensor, ref: tuple[np.ndarray, np.ndarray], device: torch.device
) -> float:
    from iclr25_shared.metrics import frechet_distance

    mu, sigma = _stats(net, images, device)
    return frechet_distance(mu, sigma, ref[0], ref[1])


# ----------------------------------------------------------------------------------------------------------------
# reproduce
# ----------------------------------------------------------------------------------------------------------------


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


def reproduce(cfg: Any, ctx: RunContext) -> Result:
    """``reproduce``: uniform vs curriculum vs reverse on Fashion-MNIST at equal steps (see the package README)."""
    from diffusers import DDPMScheduler

    device = ctx.torch_device()
    seed_everything(cfg.seed)
    start_all = time.perf_counter()
    cfg = cfg.effective()
    log = ctx.log.info

    train_x, train_y = load_images("fashion-mnist", "train", cfg.image_size)
    test_x, _ = load_images("fashion-mnist", "test", cfg.image_size)
    heldout = test_x[: cfg.heldout_images]
    log(f"data: Fashion-MNIST train {tuple(train_x.shape)}, test {tuple(test_x.shape)} at {cfg.image_size}px")

    t0 = time.perf_counter()
    feat_net = train_feature_net(train_x, train_y, seed=cfg.seed, device=device)
    with torch.no_grad():
        acc = float(
            (
                feat_net(test_x.to(device)).argmax(1).cpu()
                == load_images("fashion-mnist", "test", cfg.image_size)[1]
            )
            .float()
            .mean()
        )
    ref = _stats(feat_net, test_x, device)
    fid_floor = _fid(
        feat_net,
        test_x[torch.randperm(len(test_x), generator=torch.Generator().manual_seed(1))][
            : cfg.num_fid_samples
        ],
        ref,
        device,
    )
    log(
        f"feature net: test accuracy {acc:.3f}; FID of {cfg.num_fid_samples} real test images vs test set {fid_floor:.3f}"
    )
    timings = {"feature_net_s": time.perf_counter() - t0}

    checkpoints = sorted(
        {max(1, round(cfg.steps * (i + 1) / cfg.num_checkpoints)) for i in range(cfg.num_checkpoints)}
    )
    eval_clusters = TimestepClusters(cfg.num_train_timesteps, cfg.num_clusters, "uniform")
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in METHODS}
    grids: dict[str, torch.Tensor] = {}
    uniform_logs = []
    for r in range(cfg.num_seeds):
        seed = cfg.seed + r
        for method in METHODS:
            torch.manual_seed(seed)  # same UNet initialisation for all three methods of a seed
            model = make_unet(cfg.image_size, cfg.channels)
            scheduler = DDPMScheduler(num_train_timesteps=cfg.num_train_timesteps)
            sampler = make_sampler(
                method,
                num_train_timesteps=cfg.num_train_timesteps,
                num_clusters=cfg.num_clusters,
                patience=cfg.patience,
                max_steps_per_stage=cfg.max_steps_per_stage,
                ema=cfg.ema,
            )
            curve: list[dict[str, float]] = []

            def on_step(
                k: int,
                net: torch.nn.Module,
                curve: list = curve,
                scheduler: Any = scheduler,
                seed: int = seed,
            ) -> None:
                if k in checkpoints:
                    samples = generate(
                        net,
                        scheduler,
                        cfg.num_fid_samples,
                        num_inference_steps=cfg.num_inference_steps,
                        seed=10_000 + seed,
                        device=device,
                    )
                    per_cluster = heldout_loss(
                        net, scheduler, heldout, eval_clusters, seed=20_000 + seed, device=device
                    )
                    curve.append(
                        {
                            "step": k,
                            "fid": _fid(feat_net, samples, ref, device),
                            "heldout_loss": float(per_cluster @ eval_clusters.mass().numpy()),
                            "per_cluster": per_cluster.tolist(),
                        }
                    )

            t1 = time.perf_counter()
            tlog = train_diffusion(
                model,
                scheduler,
                train_x,
                sampler,
                steps=cfg.steps,
                batch_size=cfg.batch_size,
                lr=cfg.lr,
                generator=torch.Generator().manual_seed(seed),
                device=device,
                snr_gamma=cfg.snr_gamma,
                on_step=on_step,
                progress=lambda it, m=method, s=seed: ctx.progress(it, total=cfg.steps, desc=f"{m} seed {s}"),
            )
            elapsed = time.perf_counter() - t1
            final = curve[-1]
            reached = [k for k, s in tlog_stage_starts(tlog.stages)]
            all_stages_at = next(
                (k for k, s in tlog_stage_starts(tlog.stages) if s == cfg.num_clusters), None
            )
            runs[method].append(
                {
                    "seed": seed,
                    "curve": curve,
                    "final_fid": final["fid"],
                    "final_heldout": final["heldout_loss"],
                    "per_cluster": final["per_cluster"],
                    "seconds": elapsed,
                    "stage_starts": reached,
                    "all_clusters_from_step": all_stages_at,
                }
            )
            log(
                f"{method:>10} seed {seed}: FID {final['fid']:.3f}  held-out loss {final['heldout_loss']:.4f}  "
                f"(all clusters from step {all_stages_at}; {elapsed:.0f}s)"
            )
            if method == "uniform":
                uniform_logs.append(tlog)
            if r == 0:
                grids[method] = generate(
                    model,
                    scheduler,
                    64,
                    num_inference_steps=cfg.num_inference_steps,
                    seed=30_000,
                    device=device,
                )
    res = _summarise(cfg, runs, grids, uniform_logs, eval_clusters, checkpoints, acc, fid_floor, timings)
    written = res["write_artifacts"](ctx) if ctx.writes else []
    res["timings"]["total_s"] = time.perf_counter() - start_all
    notes = res["notes"] + ([f"plots: {', '.join(written)}"] if written else [])
    return Result(metrics=res["metrics"], tables=res["tables"], timings=res["timings"], notes=notes)


def tlog_stage_starts(stages: np.ndarray) -> list[tuple[int, int]]:
    """``[(step, stage)]`` at each step where the stage changes (step 0 included)."""
    out = [(0, int(stages[0]))]
    for k in range(1, len(stages)):
        if stages[k] != stages[k - 1]:
            out.append((k, int(stages[k])))
    return out


def _mean_std(values: list[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0


def _summarise(
    cfg, runs, grids, uniform_logs, clusters, checkpoints, acc, fid_floor, timings
) -> dict[str, Any]:
    metrics: dict[str, Any] = {"feature_net_test_accuracy": acc, "fid_real_vs_real": fid_floor}
    summary_rows, curve_rows, cluster_rows = [], [], []
    uniform_final = {run["seed"]: run["final_fid"] for run in runs["uniform"]}
    for method, rs in runs.items():
        fid_m, fid_s = _mean_std([r["final_fid"] for r in rs])
        loss_m, loss_s = _mean_std([r["final_heldout"] for r in rs])
        to_reach = []
        for r in rs:
            target = uniform_final[r["seed"]]
            hit = next((c["step"] for c in r["curve"] if c["fid"] <= target), None)
            to_reach.append(hit)
        reached = [h for h in to_reach if h is not None]
        summary_rows.append(
            {
                "method": method,
                "final FID (mean)": fid_m,
                "FID std": fid_s,
                "held-out loss (mean)": loss_m,
                "loss std": loss_s,
                "steps to uniform's final FID (per seed)": ", ".join(
                    "not reached" if h is None else str(h) for h in to_reach
                ),
                "all clusters from step": ", ".join(str(r["all_clusters_from_step"]) for r in rs),
            }
        )
        metrics[f"{method}_final_fid_mean"] = fid_m
        metrics[f"{method}_final_heldout_loss_mean"] = loss_m
        metrics[f"{method}_steps_to_uniform_final_fid_mean"] = (
            float(np.mean(reached)) if len(reached) == len(rs) else None
        )
        for i, step in enumerate(checkpoints):
            curve_rows.append(
                {
                    "method": method,
                    "step": step,
                    "FID (mean)": float(np.mean([r["curve"][i]["fid"] for r in rs])),
                    "held-out loss (mean)": float(np.mean([r["curve"][i]["heldout_loss"] for r in rs])),
                }
            )
    b = clusters.boundaries.tolist()
    for i in range(clusters.num_clusters):
        row: dict[str, Any] = {"cluster": f"C{i + 1} t∈[{b[i]},{b[i + 1] - 1}]"}
        for method, rs in runs.items():
            row[method] = float(np.mean([r["per_cluster"][i] for r in rs]))
        cluster_rows.append(row)

    steps = np.concatenate([lg.sample_steps for lg in uniform_logs])
    ts = np.concatenate([lg.sample_timesteps for lg in uniform_logs])
    ls = np.concatenate([lg.sample_losses for lg in uniform_logs])
    bin_ends, curves = cluster_loss_curves(steps, ts, ls, clusters, num_bins=cfg.analysis_bins)
    conv = convergence_steps(bin_ends, curves, fraction=0.9)
    difficulty_rows = [
        {
            "cluster": cluster_rows[i]["cluster"],
            "first-window loss": float(curves[0, i]),
            "last-window loss": float(curves[-1, i]),
            "steps to 90% of drop": float(conv[i]),
        }
        for i in range(clusters.num_clusters)
    ]
    valid = np.isfinite(conv)
    if valid.sum() >= 3 and np.ptp(conv[valid]) > 0:
        from scipy.stats import spearmanr

        rho = spearmanr(np.arange(clusters.num_clusters)[valid], conv[valid]).statistic
        metrics["difficulty_spearman_cluster_vs_convergence_step"] = float(rho)

    def write_plots(ctx: RunContext) -> list[str]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        written = []
        plot_difficulty(bin_ends, curves, ctx.path("difficulty.png"))
        written.append("difficulty.png")
        fig, ax = plt.subplots(figsize=(5, 3.8))
        for method in METHODS:
            rows = [r for r in curve_rows if r["method"] == method]
            ax.plot([r["step"] for r in rows], [r["FID (mean)"] for r in rows], marker="o", label=method)
        ax.set(
            xlabel="training step", ylabel="FID (classifier features)", yscale="log", title="Fashion-MNIST"
        )
        ax.legend()
        fig.tight_layout()
        ctx.save_figure("fid_curve.png", fig, bbox_inches="tight")
        written.append("fid_curve.png")
        for method, imgs in grids.items():
            save_grid(imgs, ctx.path(f"samples_{method}.png"))
            written.append(f"samples_{method}.png")
        return written

    notes = [
        "FID = Fréchet distance in the 64-d feature space of an MLP classifier trained on Fashion-MNIST in this run "
        f"(test accuracy {acc:.3f}); not comparable to Inception FID.",
        f"real-vs-real floor at {cfg.num_fid_samples} samples: {fid_floor:.3f}.",
        "Paper's expectation: curriculum converges faster with equal or better final FID; reverse no better.",
    ]
    return {
        "metrics": metrics,
        "tables": {
            "Final results (mean over seeds)": summary_rows,
            "FID and held-out loss during training": curve_rows,
            "Held-out ε-MSE per timestep cluster at the end": cluster_rows,
            "Difficulty analysis of the uniform runs": difficulty_rows,
        },
        "notes": notes,
        "timings": timings
        | {f"{m}_train_s_mean": float(np.mean([r["seconds"] for r in rs])) for m, rs in runs.items()},
        "write_artifacts": write_plots,
        "runs": runs,
    }


# ----------------------------------------------------------------------------------------------------------------
# bench
# ----------------------------------------------------------------------------------------------------------------


def bench(cfg: Any, ctx: RunContext) -> Result:
    """``bench``: time a training step and the curriculum sampler's per-step work (sample + update) in one run."""
    from diffusers import DDPMScheduler

    from iclr25_shared.device import Timer

    device = ctx.torch_device()
    seed_everything(cfg.seed)
    log = ctx.log.info

    x = torch.randn(
        cfg.batch_size, 1, cfg.image_size, cfg.image_size, generator=torch.Generator().manual_seed(cfg.seed)
    )
    torch.manual_seed(cfg.seed)
    model = make_unet(cfg.image_size, cfg.channels).to(device)
    scheduler = DDPMScheduler(num_train_timesteps=cfg.num_train_timesteps)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sampler = make_sampler(
        "curriculum",
        num_train_timesteps=cfg.num_train_timesteps,
        num_clusters=cfg.num_clusters,
        patience=cfg.patience,
        max_steps_per_stage=None,
        ema=0.99,
    )
    gen = torch.Generator().manual_seed(cfg.seed)
    x = x.to(device)

    def train_step(t: torch.Tensor) -> float:
        noise = torch.randn(x.shape, generator=gen).to(device)
        pred = model(scheduler.add_noise(x, noise, t), t).sample
        loss = (pred - noise).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss.detach())

    for _ in range(cfg.warmup):
        train_step(torch.randint(0, cfg.num_train_timesteps, (cfg.batch_size,), generator=gen).to(device))
    with Timer(device) as step_timer:
        for _ in range(cfg.steps):
            train_step(torch.randint(0, cfg.num_train_timesteps, (cfg.batch_size,), generator=gen).to(device))
    step_s = step_timer.seconds / cfg.steps

    reps = cfg.sampler_calls
    losses = np.random.default_rng(cfg.seed).uniform(0.5, 1.0, reps)
    with Timer(device) as cur_timer:
        for i in range(reps):
            sampler.sample(cfg.batch_size, gen, device=device)
            sampler.update(float(losses[i]))
    with Timer(device) as base_timer:
        for _ in range(reps):
            torch.randint(0, cfg.num_train_timesteps, (cfg.batch_size,), generator=gen).to(device)
    cur_s, base_s = cur_timer.seconds / reps, base_timer.seconds / reps
    overhead = (cur_s - base_s) / step_s
    log(
        f"training step {step_s * 1e3:.2f} ms; curriculum sample+update {cur_s * 1e6:.1f} µs; "
        f"torch.randint {base_s * 1e6:.1f} µs; overhead {100 * overhead:.4f}% of a step"
    )
    rows = [
        {
            "what": "training step (UNet fwd+bwd+Adam)",
            "time per step (µs)": step_s * 1e6,
            "fraction of a step": 1.0,
        },
        {
            "what": "uniform: torch.randint",
            "time per step (µs)": base_s * 1e6,
            "fraction of a step": base_s / step_s,
        },
        {
            "what": "curriculum: sampler.sample + sampler.update",
            "time per step (µs)": cur_s * 1e6,
            "fraction of a step": cur_s / step_s,
        },
    ]
    return Result(
        metrics={
            "step_ms": step_s * 1e3,
            "curriculum_sampler_us": cur_s * 1e6,
            "uniform_randint_us": base_s * 1e6,
            "sampler_vs_randint_ratio": cur_s / base_s if base_s > 0 else math.inf,
            "overhead_fraction_of_step": overhead,
            "sampler_fraction_of_step": cur_s / step_s,
            "below_1_percent": bool(cur_s / step_s < 0.01),
        },
        tables={"Per-step cost": rows},
    )
