"""Reproduction on Fashion-MNIST (uniform vs curriculum vs reverse) and the sampler-overhead benchmark."""

from __future__ import annotations

import dataclasses
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
from iclr25_shared.inputs import validating
from iclr25_shared.results import save_figure

__all__ = [
    "FEATURE_SEED",
    "FeatureNet",
    "bench",
    "classifier_fid",
    "feature_net_accuracy",
    "feature_stats",
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
        ema_decay=cfg.weight_ema,
        sync_every=cfg.sync_every,
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
            model if tlog.ema_model is None else tlog.ema_model,
            scheduler,
            cfg.num_samples,
            num_inference_steps=cfg.num_inference_steps,
            seed=cfg.seed,
            device=device,
        )
        model.save_pretrained(ctx.path("unet"))
        if tlog.ema_model is not None:
            tlog.ema_model.save_pretrained(ctx.path("unet_ema"))
        scheduler.save_pretrained(ctx.path("scheduler"))
        ctx.save_json("sampler_state.json", sampler.state_dict())
        save_grid(samples, ctx.path("samples.png"))
        ema_note = ", unet_ema/ (EMA weights; samples.png uses them)" if tlog.ema_model is not None else ""
        notes.append(
            f"model: unet/ (diffusers UNet2DModel){ema_note}, scheduler/, sampler_state.json, samples.png"
        )
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
def feature_net_accuracy(
    net: FeatureNet, images: torch.Tensor, labels: torch.Tensor, device: torch.device
) -> float:
    """Top-1 accuracy of the feature classifier on ``(images, labels)``."""
    preds = torch.cat(
        [net(images[s : s + 1000].to(device)).argmax(1).cpu() for s in range(0, len(images), 1000)]
    )
    return float((preds == labels).float().mean())


@torch.no_grad()
def feature_stats(
    net: FeatureNet, images: torch.Tensor, device: torch.device
) -> tuple[np.ndarray, np.ndarray]:
    """Mean ``(64,)`` and covariance ``(64, 64)`` (float64) of :meth:`FeatureNet.features` over ``images``."""
    feats = torch.cat(
        [net.features(images[s : s + 1000].to(device)).cpu() for s in range(0, len(images), 1000)]
    )
    f = feats.double().numpy()
    return f.mean(0), np.cov(f, rowvar=False)


def classifier_fid(
    net: FeatureNet, images: torch.Tensor, ref: tuple[np.ndarray, np.ndarray], device: torch.device
) -> float:
    """Fréchet distance (``iclr25_shared.metrics.frechet_distance``) between ``images`` and the reference feature
    statistics ``ref = (mean, cov)``, in :class:`FeatureNet`'s 64-d feature space (Heusel et al. 2017, Eq. 6, with
    this classifier in place of Inception)."""
    from iclr25_shared.metrics import frechet_distance

    mu, sigma = feature_stats(net, images, device)
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
    """``reproduce``: uniform vs curriculum (vs reverse) on Fashion-MNIST at equal steps, several paired seeds.

    Every method of a seed starts from the same UNet initialisation and sees the same images, noise and
    evaluation inputs; evaluations use the EMA weights. Reports, per checkpoint, the paired difference
    (method − uniform) of FID and held-out loss with a 95 % t-interval, "steps to reach uniform's final value"
    and the evaluation noise of both metrics (the same model scored on fresh noise / samples). ``--combine``
    summarises the per-seed records of earlier runs instead of training.
    """
    device = ctx.torch_device()
    seed_everything(cfg.seed)
    start_all = time.perf_counter()
    cfg = cfg.effective()
    if cfg.combine:
        runs, meta = _load_runs(cfg)
        # the summary uses the settings the runs were made with, not this command line's
        saved = {k: tuple(v) if isinstance(v, list) else v for k, v in meta["config"].items()}
        with validating(
            "--combine"
        ):  # settings from the user's runs.json: unknown or invalid ones are theirs
            cfg = dataclasses.replace(cfg, **saved)
        grids: dict[str, torch.Tensor] = {}
        timings: dict[str, float] = {}
    else:
        runs, meta, grids, timings = _train_runs(cfg, ctx, device)
    summary = _summarise(cfg, runs, meta)
    written = _write_plots(ctx, cfg, summary, grids) if ctx.writes else []
    timings = timings | {"total_s": time.perf_counter() - start_all}
    notes = summary["notes"] + ([f"plots: {', '.join(written)}"] if written else [])
    ctx.save_json("runs.json", {"meta": meta, "runs": runs})
    return Result(metrics=summary["metrics"], tables=summary["tables"], timings=timings, notes=notes)


FEATURE_SEED = 0
"""The FID feature classifier is trained with this seed whatever ``--seed`` is, so runs of different seeds (and
``--combine``) score in one feature space."""


def _train_runs(cfg: Any, ctx: RunContext, device: torch.device) -> tuple[list, dict, dict, dict]:
    from diffusers import DDPMScheduler

    log = ctx.log.info
    train_x, train_y = load_images("fashion-mnist", "train", cfg.image_size)
    test_x, test_y = load_images("fashion-mnist", "test", cfg.image_size)
    heldout = test_x[: cfg.heldout_images]
    log(f"data: Fashion-MNIST train {tuple(train_x.shape)}, test {tuple(test_x.shape)} at {cfg.image_size}px")
    t0 = time.perf_counter()
    feat_net = train_feature_net(train_x, train_y, seed=FEATURE_SEED, device=device)
    acc = feature_net_accuracy(feat_net, test_x, test_y, device)
    ref = feature_stats(feat_net, test_x, device)
    perm = torch.randperm(len(test_x), generator=torch.Generator().manual_seed(1))
    fid_floor = classifier_fid(feat_net, test_x[perm[: cfg.num_fid_samples]], ref, device)
    log(
        f"FID feature net: MLP {cfg.image_size}²→256→64→10 classifier, Fashion-MNIST test accuracy {acc:.3f}; "
        f"FID of {cfg.num_fid_samples} real test images vs the test set (floor) {fid_floor:.3f}"
    )
    timings = {"feature_net_s": time.perf_counter() - t0}
    meta = {"feature_net_test_accuracy": acc, "fid_real_vs_real": fid_floor, "config": _run_key(cfg)}
    checkpoints = _checkpoints(cfg)
    eval_clusters = TimestepClusters(cfg.num_train_timesteps, cfg.num_clusters, "uniform")
    runs: list[dict[str, Any]] = []
    grids: dict[str, torch.Tensor] = {}
    train_s: dict[str, list[float]] = {m: [] for m in cfg.methods}

    def evaluate(net: torch.nn.Module, scheduler: Any, seed: int, sample_seed: int, noise_seed: int) -> dict:
        samples = generate(
            net,
            scheduler,
            cfg.num_fid_samples,
            num_inference_steps=cfg.num_inference_steps,
            seed=sample_seed,
            device=device,
        )
        per_cluster = heldout_loss(net, scheduler, heldout, eval_clusters, seed=noise_seed, device=device)
        return {
            "fid": classifier_fid(feat_net, samples, ref, device),
            "heldout": float(per_cluster @ eval_clusters.mass().numpy()),
            "per_cluster": per_cluster.tolist(),
        }

    for r in range(cfg.num_seeds):
        seed = cfg.seed + r
        for method in cfg.methods:
            torch.manual_seed(seed)  # same UNet initialisation for every method of a seed
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
            evals: list[dict[str, Any]] = []

            def on_step(
                k: int,
                net: torch.nn.Module,
                evals: list = evals,
                scheduler: Any = scheduler,
                seed: int = seed,
            ) -> None:
                if k in checkpoints:
                    evals.append({"step": k} | evaluate(net, scheduler, seed, 10_000 + seed, 20_000 + seed))

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
                ema_decay=cfg.weight_ema,
                sync_every=cfg.sync_every,
                on_step=on_step,
                progress=lambda it, m=method, s=seed: ctx.progress(it, total=cfg.steps, desc=f"{m} seed {s}"),
            )
            elapsed = time.perf_counter() - t1
            eval_net = tlog.ema_model if tlog.ema_model is not None else model
            # evaluation noise: the final model scored again on fresh samples / fresh held-out noise
            again = evaluate(eval_net, scheduler, seed, 40_000 + seed, 50_000 + seed)
            starts = tlog_stage_starts(tlog.stages)
            run = {
                "method": method,
                "seed": seed,
                "steps": [e["step"] for e in evals],
                "fid": [e["fid"] for e in evals],
                "heldout": [e["heldout"] for e in evals],
                "per_cluster_final": evals[-1]["per_cluster"],
                "fid_reeval": again["fid"],
                "heldout_reeval": again["heldout"],
                "all_clusters_from_step": next((k for k, s in starts if s == cfg.num_clusters), None),
                "train_s": elapsed,
            }
            if method == "uniform":
                ends, curves = cluster_loss_curves(
                    tlog.sample_steps,
                    tlog.sample_timesteps,
                    tlog.sample_losses,
                    eval_clusters,
                    num_bins=cfg.analysis_bins,
                )
                run["difficulty_bin_ends"] = ends.tolist()
                run["difficulty_curves"] = curves.tolist()
            runs.append(run)
            train_s[method].append(elapsed)
            log(
                f"{method:>10} seed {seed}: FID {run['fid'][-1]:.2f} (re-sampled {again['fid']:.2f}), held-out "
                f"loss {run['heldout'][-1]:.5f} (fresh noise {again['heldout']:.5f}); all clusters from step "
                f"{run['all_clusters_from_step']}; {elapsed:.0f}s"
            )
            if r == 0:
                grids[method] = generate(
                    eval_net,
                    scheduler,
                    64,
                    num_inference_steps=cfg.num_inference_steps,
                    seed=30_000,
                    device=device,
                )
    timings |= {f"{m}_train_s_mean": float(np.mean(v)) for m, v in train_s.items()}
    return runs, meta, grids, timings


def _checkpoints(cfg: Any) -> list[int]:
    return sorted(
        {max(1, round(cfg.steps * (i + 1) / cfg.num_checkpoints)) for i in range(cfg.num_checkpoints)}
    )


_KEY_FIELDS = (
    "num_train_timesteps",
    "num_clusters",
    "patience",
    "max_steps_per_stage",
    "ema",
    "steps",
    "batch_size",
    "lr",
    "image_size",
    "channels",
    "snr_gamma",
    "weight_ema",
    "num_checkpoints",
    "num_fid_samples",
    "num_inference_steps",
    "heldout_images",
    "analysis_bins",
    "sync_every",
)


def _run_key(cfg: Any) -> dict[str, Any]:
    """The settings that must agree for runs to be combined (everything but seeds, methods and I/O)."""
    from iclr25_shared.results import to_jsonable

    return {k: to_jsonable(getattr(cfg, k)) for k in _KEY_FIELDS}


def _load_runs(cfg: Any) -> tuple[list, dict]:
    """Per-seed records from the ``runs.json`` of earlier runs (``--combine``); their settings must agree with
    each other (the command line's own training settings are ignored).

    Raises:
        InputError: a folder without a readable ``runs.json``, folders run with different settings, the same
            (method, seed) twice, or a method without the uniform run of each seed it pairs with.
    """
    from iclr25_diffusion_curriculum._runs import read_runs
    from iclr25_shared.errors import InputError

    runs: list[dict[str, Any]] = []
    meta: dict[str, Any] | None = None
    for folder in cfg.combine:
        record = read_runs(folder, label="--combine")
        m = record["meta"]
        if meta is None:
            meta = m
        elif m["config"] != meta["config"]:
            diff = sorted(k for k in m["config"] if m["config"][k] != meta["config"].get(k))
            raise InputError(
                f"--combine: {str(folder)!r} was run with different settings ({', '.join(diff)})"
            )
        runs.extend(record["runs"])
    seen = [(r["method"], r["seed"]) for r in runs]
    dup = sorted({x for x in seen if seen.count(x) > 1})
    if dup:
        raise InputError(f"--combine: duplicate (method, seed) runs {dup}")
    with validating("--combine"):
        _check_pairs(runs)
    assert meta is not None
    return runs, meta


def _check_pairs(runs: list[dict[str, Any]]) -> None:
    """Every method has the uniform baseline's seeds (paired differences need both).

    Raises:
        ValueError: no uniform run, or a method whose seeds differ from uniform's.
    """
    by = _by_method(runs)
    if "uniform" not in by:
        raise ValueError("reproduce needs the uniform baseline among --methods")
    seeds = sorted(by["uniform"])
    for m in by:
        if sorted(by[m]) != seeds:
            raise ValueError(f"method {m} has seeds {sorted(by[m])}, uniform has {seeds}; pairs need both")


def _by_method(runs: list[dict[str, Any]]) -> dict[str, dict[int, dict[str, Any]]]:
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for r in runs:
        out.setdefault(r["method"], {})[r["seed"]] = r
    return out


def _fmt_ci(mean: float, lo: float, hi: float, digits: int = 2) -> str:
    return f"{mean:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]"


def _verdict(lo: float, hi: float) -> str:
    """Lower is better; the paper claims the curriculum lowers the metric (an improvement of unstated size)."""
    if hi < 0:
        return "reproduced (interval below 0)"
    if lo > 0:
        return "not reproduced (interval excludes any improvement)"
    return "inconclusive at this scale (interval contains 0)"


def _summarise(cfg: Any, runs: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    from iclr25_diffusion_curriculum._stats import paired_interval, required_seeds, steps_to_reach

    _check_pairs(runs)
    by = _by_method(runs)
    methods = [m for m in ("uniform", "curriculum", "reverse") if m in by]
    seeds = sorted(by["uniform"])
    steps = by["uniform"][seeds[0]]["steps"]
    metrics: dict[str, Any] = {
        "feature_net_test_accuracy": meta["feature_net_test_accuracy"],
        "fid_real_vs_real": meta["fid_real_vs_real"],
        "num_seeds": len(seeds),
        "seeds": seeds,
    }
    # Evaluation noise. Every final model is scored twice (checkpoint inputs and fresh samples / held-out noise):
    # sd of one evaluation = rms(second − first)/√2; for the paired Δ (method − uniform, both scored on the same
    # inputs) the same on Δ_first − Δ_second. This is the noise the metric adds at a fixed model.
    all_runs = [r for m in methods for r in by[m].values()]
    noise, noise_delta = {}, {}
    for key in ("fid", "heldout"):
        d = np.array([r[f"{key}_reeval"] - r[key][-1] for r in all_runs])
        noise[key] = float(np.sqrt(np.mean(d**2) / 2))
        dd = np.array(
            [
                (by[m][s][key][-1] - by["uniform"][s][key][-1])
                - (by[m][s][f"{key}_reeval"] - by["uniform"][s][f"{key}_reeval"])
                for m in methods
                if m != "uniform"
                for s in seeds
            ]
        )
        noise_delta[key] = float(np.sqrt(np.mean(dd**2) / 2)) if dd.size else math.nan
        metrics[f"{key}_eval_noise_sd"] = noise[key]
        metrics[f"{key}_paired_delta_eval_noise_sd"] = noise_delta[key]
    final_rows, curve_rows, reach_rows, cluster_rows = [], [], [], []
    for m in methods:
        fid_final = [by[m][s]["fid"][-1] for s in seeds]
        ho_final = [by[m][s]["heldout"][-1] for s in seeds]
        final_rows.append(
            {
                "method": m,
                "final FID mean ± sd": f"{np.mean(fid_final):.2f} ± {np.std(fid_final, ddof=1) if len(seeds) > 1 else 0:.2f}",
                "final held-out ε-MSE mean ± sd": f"{np.mean(ho_final):.5f} ± {np.std(ho_final, ddof=1) if len(seeds) > 1 else 0:.5f}",
                "all clusters in use from step (per seed)": ", ".join(
                    str(by[m][s]["all_clusters_from_step"]) for s in seeds
                ),
            }
        )
        metrics[f"{m}_final_fid_mean"] = float(np.mean(fid_final))
        full_from = [by[m][s]["all_clusters_from_step"] for s in seeds]
        metrics[f"{m}_fraction_of_steps_on_partial_ranges"] = (
            float(np.mean([cfg.steps if f is None else f for f in full_from])) / cfg.steps
        )
        metrics[f"{m}_final_heldout_mean"] = float(np.mean(ho_final))
    verdicts: dict[str, str] = {}
    for m in methods:
        if m == "uniform":
            continue
        for key, label, digits in (("heldout", "held-out ε-MSE", 5), ("fid", "FID", 2)):
            for i, k in enumerate(steps):
                d = [by[m][s][key][i] - by["uniform"][s][key][i] for s in seeds]
                mean, lo, hi = paired_interval(d)
                row = {
                    "method − uniform": m,
                    "metric": label,
                    "step": k,
                    "uniform mean": round(
                        float(np.mean([by["uniform"][s][key][i] for s in seeds])), digits + 1
                    ),
                    "paired Δ mean [95% CI]": _fmt_ci(mean, lo, hi, digits),
                    "Δ / uniform": f"{100 * mean / np.mean([by['uniform'][s][key][i] for s in seeds]):+.1f}%",
                    "sd of Δ over seeds": round(float(np.std(d, ddof=1)) if len(d) > 1 else 0.0, digits + 1),
                    "eval noise sd of Δ": round(noise_delta[key], digits + 1),
                }
                curve_rows.append(row)
                if i == len(steps) - 1 and m == "curriculum":
                    verdicts[f"{m} final {label}"] = _verdict(lo, hi)
                    metrics[f"{m}_minus_uniform_final_{key}"] = [mean, lo, hi]
                    sd = float(np.std(d, ddof=1)) if len(d) > 1 else math.nan
                    metrics[f"{m}_final_{key}_seeds_to_resolve_observed_effect"] = required_seeds(sd, mean)
            # the whole curve: mean over checkpoints of the paired Δ (a lower curve = faster convergence)
            d = [float(np.mean(np.subtract(by[m][s][key], by["uniform"][s][key]))) for s in seeds]
            mean, lo, hi = paired_interval(d)
            curve_rows.append(
                {
                    "method − uniform": m,
                    "metric": label,
                    "step": "mean over checkpoints",
                    "uniform mean": round(float(np.mean([by["uniform"][s][key] for s in seeds])), digits + 1),
                    "paired Δ mean [95% CI]": _fmt_ci(mean, lo, hi, digits),
                    "Δ / uniform": f"{100 * mean / np.mean([by['uniform'][s][key] for s in seeds]):+.1f}%",
                    "sd of Δ over seeds": round(float(np.std(d, ddof=1)) if len(d) > 1 else 0.0, digits + 1),
                    "eval noise sd of Δ": round(noise_delta[key], digits + 1),
                }
            )
            if m == "curriculum":
                verdicts[f"{m} mean over checkpoints {label}"] = _verdict(lo, hi)
                metrics[f"{m}_minus_uniform_mean_over_checkpoints_{key}"] = [mean, lo, hi]
            # steps to reach uniform's final value (per seed), paired with uniform's own steps to reach it
            cur, uni = [], []
            for s in seeds:
                target = by["uniform"][s][key][-1]
                cur.append(steps_to_reach(steps, by[m][s][key], target))
                uni.append(steps_to_reach(steps, by["uniform"][s][key], target))
            reached = [c is not None for c in cur]
            row = {
                "method": m,
                "metric": label,
                "uniform: steps to its own final (per seed)": ", ".join(f"{u:.0f}" for u in uni),
                "method: steps to uniform's final (per seed)": ", ".join(
                    "not reached" if c is None else f"{c:.0f}" for c in cur
                ),
            }
            if all(reached):
                d = [c - u for c, u in zip(cur, uni, strict=True)]
                mean, lo, hi = paired_interval(d)
                row["paired Δ steps [95% CI]"] = _fmt_ci(mean, lo, hi, 0)
                if m == "curriculum":
                    verdicts[f"{m} steps to uniform's final {label}"] = _verdict(lo, hi)
                metrics[f"{m}_minus_uniform_steps_to_final_{key}"] = [mean, lo, hi]
            else:
                row["paired Δ steps [95% CI]"] = (
                    f"not reached by step {steps[-1]} in {reached.count(False)}/{len(seeds)} seeds"
                )
                if m == "curriculum":
                    verdicts[f"{m} steps to uniform's final {label}"] = (
                        f"not reached in {reached.count(False)}/{len(seeds)} seeds (no interval; the curriculum is "
                        "slower there)"
                    )
            reach_rows.append(row)
    clusters = TimestepClusters(cfg.num_train_timesteps, cfg.num_clusters, "uniform")
    b = clusters.boundaries.tolist()
    for i in range(clusters.num_clusters):
        row = {"cluster": f"C{i + 1} t∈[{b[i]},{b[i + 1] - 1}]"}
        for m in methods:
            row[m] = round(float(np.mean([by[m][s]["per_cluster_final"][i] for s in seeds])), 6)
        cluster_rows.append(row)
    uni_runs = [by["uniform"][s] for s in seeds if "difficulty_curves" in by["uniform"][s]]
    difficulty_rows = []
    bin_ends = curves = None
    if uni_runs:
        bin_ends = np.asarray(uni_runs[0]["difficulty_bin_ends"])
        curves = np.mean([np.asarray(r["difficulty_curves"]) for r in uni_runs], axis=0)
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
    metrics["verdicts"] = verdicts
    notes = [
        f"FID = Fréchet distance in the 64-d feature space of an MLP classifier ({cfg.image_size}²→256→64→10) trained "
        f"on Fashion-MNIST (seed {FEATURE_SEED}; test accuracy {meta['feature_net_test_accuracy']:.3f}); not "
        "comparable to Inception FID.",
        f"real-vs-real FID floor at {cfg.num_fid_samples} samples: {meta['fid_real_vs_real']:.3f}.",
        f"evaluation noise (same model, fresh samples / noise; sd of one evaluation): FID {noise['fid']:.3f}, "
        f"held-out loss {noise['heldout']:.6f}; of a paired Δ: FID {noise_delta['fid']:.3f}, held-out loss "
        f"{noise_delta['heldout']:.6f}.",
        "Δ = method − uniform on the same seed (lower is better); 95% Student-t interval over seeds.",
        "Paper (arXiv:2403.10348, abstract, §5): the curriculum improves FID and converges faster than uniform "
        "timestep sampling.",
    ] + [f"verdict: {k}: {v}" for k, v in verdicts.items()]
    return {
        "metrics": metrics,
        "tables": {
            "Final results (EMA weights)": final_rows,
            "Paired difference to uniform per checkpoint": curve_rows,
            "Steps to reach uniform's final value": reach_rows,
            "Held-out ε-MSE per timestep cluster at the end (mean over seeds)": cluster_rows,
            "Difficulty analysis of the uniform runs": difficulty_rows,
        },
        "notes": notes,
        "curves": {
            m: {key: np.array([by[m][s][key] for s in seeds]) for key in ("fid", "heldout")} for m in methods
        },
        "steps": steps,
        "difficulty": (bin_ends, curves),
    }


def _write_plots(
    ctx: RunContext, cfg: Any, summary: dict[str, Any], grids: dict[str, torch.Tensor]
) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    bin_ends, curves = summary["difficulty"]
    if curves is not None:
        plot_difficulty(bin_ends, curves, ctx.path("difficulty.png"))
        written.append("difficulty.png")
    steps = summary["steps"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, key, label in zip(axes, ("fid", "heldout"), ("FID (classifier features)", "held-out ε-MSE")):
        for m, c in summary["curves"].items():
            mean = c[key].mean(0)
            ax.plot(steps, mean, marker="o", label=m)
            if c[key].shape[0] > 1:
                ax.fill_between(steps, c[key].min(0), c[key].max(0), alpha=0.15)
        ax.set(
            xlabel="training step",
            ylabel=label,
            yscale="log",
            title="Fashion-MNIST (EMA weights; band = seed range)",
        )
        ax.legend()
    fig.tight_layout()
    ctx.save_figure("convergence.png", fig, bbox_inches="tight")
    written.append("convergence.png")
    for method, imgs in grids.items():
        save_grid(imgs, ctx.path(f"samples_{method}.png"))
        written.append(f"samples_{method}.png")
    return written


def tlog_stage_starts(stages: np.ndarray) -> list[tuple[int, int]]:
    """``[(step, stage)]`` at each step where the stage changes (step 0 included)."""
    out = [(0, int(stages[0]))]
    for k in range(1, len(stages)):
        if stages[k] != stages[k - 1]:
            out.append((k, int(stages[k])))
    return out


# ----------------------------------------------------------------------------------------------------------------
# bench
# ----------------------------------------------------------------------------------------------------------------


def bench(cfg: Any, ctx: RunContext) -> Result:
    """``bench``: time a training step and the curriculum sampler's per-step work (sample + update) in one run."""
    from diffusers import DDPMScheduler

    from iclr25_shared.bench import interleaved

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

    def uniform_step() -> None:
        train_step(torch.randint(0, cfg.num_train_timesteps, (cfg.batch_size,), generator=gen).to(device))

    def curriculum_step() -> None:
        sampler.update(train_step(sampler.sample(cfg.batch_size, gen, device=device)))

    # Whole training steps, interleaved: the same model, batch, optimiser and loss read-back per step; only where
    # the timesteps come from differs (and the pacer update).
    steps_run = interleaved(
        {"uniform": uniform_step, "curriculum": curriculum_step},
        repeats=cfg.steps,
        warmup=cfg.warmup,
        device=device,
        threads=ctx.threads or None,
    )
    # The sampler's own work apart from the step: blocks of sampler_calls calls, interleaved with torch.randint.
    reps = cfg.sampler_calls
    losses = np.random.default_rng(cfg.seed).uniform(0.5, 1.0, reps)

    def curriculum_calls() -> None:
        for i in range(reps):
            sampler.sample(cfg.batch_size, gen, device=device)
            sampler.update(float(losses[i]))

    def uniform_calls() -> None:
        for _ in range(reps):
            torch.randint(0, cfg.num_train_timesteps, (cfg.batch_size,), generator=gen).to(device)

    calls_run = interleaved(
        {"randint": uniform_calls, "sample+update": curriculum_calls},
        repeats=cfg.repeats,
        warmup=1,
        device=device,
        threads=ctx.threads or None,
    )
    step_s = steps_run.median("uniform")
    cur_s, base_s = calls_run.median("sample+update") / reps, calls_run.median("randint") / reps
    step_ratio = steps_run.ratio("curriculum", "uniform")
    call_ratio = calls_run.ratio("sample+update", "randint")
    log(
        f"training step {step_s * 1e3:.2f} ms (curriculum/uniform {step_ratio.value:.3f}); curriculum "
        f"sample+update {cur_s * 1e6:.1f} µs; torch.randint {base_s * 1e6:.1f} µs"
    )
    held_steps = (
        "the same UNet, batch, optimiser and one loss read-back per step; not equal: the timesteps drawn"
    )
    held_calls = f"{reps} calls per round, batch {cfg.batch_size}; no training"
    rows = [
        {
            "what": "training step, uniform t (UNet fwd+bwd+Adam)",
            "median per step (µs)": step_s * 1e6,
            "ratio": 1.0,
            "interval": "",
            "rounds": cfg.steps,
            "held equal": held_steps,
        },
        {
            "what": "training step, curriculum t (sample + step + pacer update)",
            "median per step (µs)": steps_run.median("curriculum") * 1e6,
            "ratio": step_ratio.value,
            "interval": f"[{step_ratio.low:.4g}, {step_ratio.high:.4g}]",
            "rounds": cfg.steps,
            "held equal": held_steps,
        },
        {
            "what": "uniform: torch.randint",
            "median per step (µs)": base_s * 1e6,
            "ratio": 1.0,
            "interval": "",
            "rounds": cfg.repeats,
            "held equal": held_calls,
        },
        {
            "what": "curriculum: sampler.sample + sampler.update",
            "median per step (µs)": cur_s * 1e6,
            "ratio": call_ratio.value,
            "interval": f"[{call_ratio.low:.3g}, {call_ratio.high:.3g}]",
            "rounds": cfg.repeats,
            "held equal": held_calls,
        },
    ]
    return Result(
        metrics={
            "step_ms": step_s * 1e3,
            "curriculum_step_vs_uniform_step": step_ratio.value,
            "curriculum_step_vs_uniform_step_interval": [step_ratio.low, step_ratio.high],
            "curriculum_sampler_us": cur_s * 1e6,
            "uniform_randint_us": base_s * 1e6,
            "sampler_vs_randint_ratio": call_ratio.value,
            "overhead_fraction_of_step": (cur_s - base_s) / step_s,
            "sampler_fraction_of_step": cur_s / step_s,
            "below_1_percent": bool(cur_s / step_s < 0.01),
            "bench": {"steps": steps_run.as_dict(), "sampler_calls": calls_run.as_dict()},
        },
        tables={"per_step": rows},
        notes=[
            f"iclr25_shared.bench.interleaved on {device}: training steps {cfg.warmup} warm-up + {cfg.steps} rounds "
            f"(one uniform and one curriculum step per round, order rotated); sampler calls 1 warm-up + "
            f"{cfg.repeats} rounds of {reps} calls each; ratios are medians of per-round ratios with a 95 % "
            "bootstrap interval over rounds"
        ],
    )
