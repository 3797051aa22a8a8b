"""``bench``: seconds per coalition of each retraining strategy, timed interleaved in one run
(:func:`iclr25_shared.bench.interleaved`), the per-subset ratio split into its causes, and the projected cost."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_diffusion_shapley._experiment import IMAGE_SHAPE, _classifier, _setup, _strategy
from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_diffusion_shapley.cli import BenchConfig


def _bench_model(c: Any, ctx: RunContext, classifier: Any) -> dict[str, Any]:
    """The interleaved timings of one model: training arms (per coalition) and sampling arms."""
    import copy
    import itertools

    from iclr25_diffusion_shapley._diffusion import parameter_count, sample_images
    from iclr25_diffusion_shapley._shapley import sample_shapley_kernel
    from iclr25_shared.bench import interleaved

    setup = _setup(c, ctx, c.seed, classifier=classifier)
    n = setup.data.num_contributors
    masks = sample_shapley_kernel(n, c.subsets, seed=c.seed)
    t0 = time.perf_counter()
    full_model = _strategy("retrain", c, setup, c.seed).fit(np.ones(n, bool))
    t_full = time.perf_counter() - t0
    retrain = _strategy("retrain", c, setup, c.seed)
    sft = _strategy("sparse-ft", c, setup, c.seed, full_model)
    sft.prepare()
    unlearn = _strategy("unlearn-ga", c, setup, c.seed, full_model)

    def cycling(fit: Any) -> Any:
        it = itertools.cycle(masks)  # each arm runs once per round: all arms train on the same coalition
        return lambda: fit(next(it))

    def dense_ft(mask: np.ndarray) -> Any:  # sparse-FT's recipe on the unpruned model: the steps' share alone
        return sft._train(copy.deepcopy(full_model), setup.data.select(mask), c.ft_steps)

    arms = {
        "retrain": cycling(retrain.fit),
        "dense fine-tune": cycling(dense_ft),
        "sparse-ft": cycling(sft.fit),
        "unlearn-ga": cycling(unlearn.fit),
        "sample (dense)": lambda: sample_images(
            full_model,
            c.num_samples,
            image_shape=IMAGE_SHAPE,
            steps=c.sampling_steps,
            scheduler=setup.scheduler,
        ),
        "sample (pruned)": lambda: sample_images(
            sft.base,
            c.num_samples,
            image_shape=IMAGE_SHAPE,
            steps=c.sampling_steps,
            scheduler=setup.scheduler,
        ),
    }
    run = interleaved(
        arms,
        repeats=c.repeats,
        warmup=1,
        device=setup.device,
        threads=ctx.threads or None,
        progress=lambda it: ctx.progress(it, desc=f"{c.model} rounds"),
    )
    return {
        "run": run,
        "t_full": t_full,
        "setup": sft.setup_seconds,
        "params": (parameter_count(full_model), parameter_count(sft.base)),
    }


def _arm_rows(
    model: str, c: Any, run: Any, steps: dict[str, int], params: tuple[int, int]
) -> list[dict[str, Any]]:
    """One row per timed arm: median seconds, ms per training step and the speed-up against its reference arm."""
    p_dense, p_pruned = params
    rows = []
    for arm in run.times:
        sampling = arm.startswith("sample")
        est = run.speedup(arm, "sample (dense)" if sampling else "retrain")
        rows.append(
            {
                "model": model,
                "arm": arm,
                "steps": f"{c.sampling_steps} DDIM x {c.num_samples} images" if sampling else steps[arm],
                "median s": run.median(arm),
                "ms per step": "" if sampling or not steps[arm] else 1000 * run.median(arm) / steps[arm],
                "vs": "sample (dense)" if sampling else "retrain",
                "speed-up": est.value,
                "95% interval": f"[{est.low:.3g}, {est.high:.3g}]",
                "params": p_pruned if arm in ("sparse-ft", "sample (pruned)") else p_dense,
            }
        )
    return rows


def _split_rows(model: str, c: Any, run: Any, params: tuple[int, int]) -> list[dict[str, Any]]:
    """The per-subset ratio retrain / sparse-FT split into fewer steps and the pruned network, and their product."""
    p_dense, p_pruned = params
    total = run.speedup("sparse-ft", "retrain")
    by_steps = run.speedup("dense fine-tune", "retrain")
    by_net = run.speedup("sparse-ft", "dense fine-tune")
    split = []
    for cause, est, held in (
        ("per subset: retrain / sparse-FT", total, "coalition, data, batch, lr; not steps, not network"),
        (
            f"steps: retrain ({c.retrain_steps}) / dense fine-tune ({c.ft_steps})",
            by_steps,
            f"network (dense, {p_dense} params); steps differ ({c.retrain_steps / max(c.ft_steps, 1):.2f}x)",
        ),
        (
            f"pruned network: dense / pruned fine-tune, {c.ft_steps} steps each",
            by_net,
            f"steps, data, batch; network {p_dense} vs {p_pruned} params ({c.pruning_ratio:.0%} channels pruned)",
        ),
    ):
        split.append(
            {
                "model": model,
                "ratio": cause,
                "median": est.value,
                "95% interval": f"[{est.low:.3g}, {est.high:.3g}]",
                "held equal": held,
            }
        )
    split.append(
        {
            "model": model,
            "ratio": "check: steps x pruned network",
            "median": by_steps.value * by_net.value,
            "95% interval": "",
            "held equal": "product of the two medians (close to, not exactly, the median of the per-round product)",
        }
    )
    return split


def _projection_rows(model: str, cfg: BenchConfig, got: dict[str, Any]) -> list[dict[str, Any]]:
    """Projected total cost of exact Shapley and KernelSHAP per number of contributors, from the medians."""
    run = got["run"]
    rt = run.median("retrain") + run.median("sample (dense)")
    sf = run.median("sparse-ft") + run.median("sample (pruned)")
    return [
        {
            "model": model,
            "contributors": n_c,
            "exact Shapley by retraining (s)": (2**n_c) * rt,
            f"KernelSHAP m={cfg.kernel_samples} + retrain (s)": (cfg.kernel_samples + 2) * rt,
            f"KernelSHAP m={cfg.kernel_samples} + sparse-FT (s)": got["t_full"]
            + got["setup"]
            + (cfg.kernel_samples + 2) * sf,
        }
        for n_c in cfg.project_contributors
    ]


def _one_off_row(model: str, c: Any, got: dict[str, Any]) -> dict[str, Any]:
    """The one-off costs, timed once: training on everyone, and pruning + fine-tuning."""
    return {
        "model": model,
        "arm": "one-off: theta* on everyone / prune + fine-tune",
        "steps": f"{c.retrain_steps} / {c.prune_steps}",
        "median s": f"{got['t_full']:.3g} / {got['setup']:.3g}",
        "ms per step": "",
        "vs": "",
        "speed-up": "",
        "95% interval": "timed once",
        "params": "",
    }


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Seconds per coalition of retraining, sparsified fine-tuning (and the same fine-tuning on the unpruned model)
    and gradient-ascent unlearning, interleaved on the same coalitions; the per-subset ratio split into steps and
    pruned network; the projected cost of exact Shapley vs KernelSHAP as the number of contributors grows."""
    from dataclasses import replace

    from iclr25_shared.errors import InputError

    if ctx.world.is_distributed:
        raise InputError("bench times one process; run it without torchrun / accelerate launch")
    steps = {
        "retrain": cfg.retrain_steps,
        "dense fine-tune": cfg.ft_steps,
        "sparse-ft": cfg.ft_steps,
        "unlearn-ga": cfg.unlearn_steps,
    }
    rows, split, proj, raw = [], [], [], {}
    classifier = _classifier(cfg.data_root, cfg.classifier_images)
    for model in cfg.models:
        c = replace(cfg, model=model)
        got = _bench_model(c, ctx, classifier)
        raw[model] = got["run"].as_dict()
        rows.extend(_arm_rows(model, c, got["run"], steps, got["params"]))
        split.extend(_split_rows(model, c, got["run"], got["params"]))
        proj.extend(_projection_rows(model, cfg, got))
        rows.append(_one_off_row(model, c, got))
    return Result(
        metrics={"subsets_cycled": cfg.subsets, "repeats": cfg.repeats, "threads": cfg.threads, "bench": raw},
        tables={
            "seconds per coalition (interleaved rounds, same coalition per round)": rows,
            "per-subset ratio split into its two causes": split,
            "projected total cost (from the measured medians)": proj,
        },
        notes=[
            "timings: iclr25_shared.bench.interleaved (one warm-up round, then rounds in rotated order; medians and "
            "95 % bootstrap intervals of the per-round speed-up); machine state in metrics.bench.<model>.env",
            "dense fine-tune = sparse-FT's fine-tuning (same steps, data, batch, lr) on the unpruned theta*: "
            "retrain/dense isolates the steps, dense/sparse-FT the pruned network's time per step",
            "projection = medians x number of coalitions (+ one-off training, pruning and fine-tuning for "
            "sparse-FT); arithmetic, not a measurement",
        ],
    )
