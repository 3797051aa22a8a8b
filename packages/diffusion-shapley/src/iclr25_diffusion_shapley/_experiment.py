"""What the CLI runs: ``attribute`` (Shapley values of contributors for one property), ``reproduce`` (exact
Shapley by retraining every coalition vs sparsified-FT KernelSHAP and the baselines, several seeds) and ``bench``
(seconds per coalition of each retraining strategy, measured in one run).

Each command takes ``(cfg, ctx)`` and returns an :class:`iclr25_shared.cli.Result`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_diffusion_shapley.cli import AttributeConfig, BenchConfig, ReproduceConfig

IMAGE_SHAPE = (1, 14, 14)


def parse_groups(specs: tuple[str, ...]) -> tuple[tuple[int, ...], ...]:
    """``("0,1", "2,3")`` → ``((0, 1), (2, 3))``; the checks live in ``cli._check_contributors``."""
    return tuple(tuple(int(c) for c in s.split(",") if c.strip()) for s in specs)


# ------------------------------------------------------------------------------------------------------------
# shared set-up
# ------------------------------------------------------------------------------------------------------------


@dataclass
class Setup:
    data: Any
    classifier: Any
    make_model: Any
    scheduler: Any
    device: Any


def _classifier(root: Any, num_train: int = 2000) -> Any:
    """Logistic regression on Fashion-MNIST *test*-split pixels (disjoint from the contributors' images)."""
    from iclr25_diffusion_shapley._properties import PixelClassifier, downsample
    from iclr25_shared.data import fashion_mnist

    x, y = fashion_mnist("test", root=root, label="--data-root")
    x = downsample(x[:num_train].astype(np.float32) / 255.0, 2) * 2.0 - 1.0
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore"
        )  # lbfgs "max_iter reached": the judge only needs to be fixed, not optimal
        return PixelClassifier(max_iter=200).fit(x[:, None], y[:num_train])


def _setup(cfg: Any, ctx: RunContext, seed: int, *, classifier: Any = None) -> Setup:
    import torch

    from iclr25_diffusion_shapley._diffusion import MLPDenoiser, make_scheduler, make_unet
    from iclr25_diffusion_shapley._properties import fashion_mnist_contributors

    device = ctx.torch_device()
    groups = parse_groups(cfg.contributors)
    data = fashion_mnist_contributors(
        groups, per_class=cfg.per_class, root=cfg.data_root, seed=seed, label="--data-root"
    )
    model_kind, hidden = cfg.model, cfg.hidden

    def make_model(s: int) -> Any:
        torch.manual_seed(s)
        if model_kind == "unet":
            return make_unet(IMAGE_SHAPE[1], channels=(16, 32)).to(device)
        return MLPDenoiser(IMAGE_SHAPE, hidden=hidden, depth=3).to(device)

    clf = classifier if classifier is not None else _classifier(cfg.data_root, cfg.classifier_images)
    return Setup(data, clf, make_model, make_scheduler(1000, cfg.prediction_type), device)


def _properties(name: str, setup: Setup) -> dict[str, Any]:
    from iclr25_diffusion_shapley._properties import (
        class_entropy,
        class_share,
        frechet_pixel_distance,
        pixel_diversity,
    )

    if name.startswith("share:"):
        return {name: class_share(setup.classifier, int(name.split(":", 1)[1]))}
    make = {
        "entropy": lambda: class_entropy(setup.classifier, 10),
        "fid": lambda: frechet_pixel_distance(setup.data.images, dims=16),
        "diversity": lambda: pixel_diversity,
    }
    return {name: make[name]()}


def _strategy(kind: str, cfg: Any, setup: Setup, seed: int, full_model: Any = None) -> Any:
    from iclr25_diffusion_shapley._diffusion import GradientAscentUnlearn, Retrain, SparsifiedFineTune

    common = dict(
        data=setup.data,
        make_model=setup.make_model,
        batch_size=cfg.batch_size,
        seed=seed,
        scheduler=setup.scheduler,
        device=setup.device,
    )
    if kind == "retrain":
        return Retrain(**common, lr=cfg.lr, steps=cfg.retrain_steps)
    if kind == "sparse-ft":
        return SparsifiedFineTune(
            **common,
            lr=cfg.lr,
            full_model=full_model,
            pruning_ratio=cfg.pruning_ratio,
            prune_steps=cfg.prune_steps,
            steps=cfg.ft_steps,
        )
    return GradientAscentUnlearn(**common, lr=cfg.unlearn_lr, full_model=full_model, steps=cfg.unlearn_steps)


class _Evaluator:
    """Evaluates coalitions once each with one strategy; keeps every property's value and the timings."""

    def __init__(self, strategy: Any, props: dict[str, Any], cfg: Any, n: int) -> None:
        from iclr25_diffusion_shapley._diffusion import DiffusionGame

        self.props, self.n = props, n
        self.game = DiffusionGame(
            strategy,
            lambda images: 0.0,
            IMAGE_SHAPE,
            num_samples=cfg.num_samples,
            sampling_steps=cfg.sampling_steps,
            sample_seed=10_000 + cfg.seed,
        )
        self.values: dict[tuple[int, ...], dict[str, float]] = {}
        self.train_seconds: dict[tuple[int, ...], float] = {}
        self.sample_seconds: dict[tuple[int, ...], float] = {}
        self.samples: dict[tuple[int, ...], np.ndarray] = {}

    def job(self, mask: np.ndarray) -> tuple[dict[str, float], float, float, np.ndarray | None]:
        """One coalition, from scratch: ``(property values, train s, sample s, samples of the full coalition)``.
        Depends only on the coalition (every coalition trains from the run's seed), so it can run on any rank."""
        mask = np.asarray(mask, dtype=bool)
        key = tuple(np.flatnonzero(mask).tolist())
        images = self.game.samples_for(mask)
        train_s, sample_s = self.game._last
        vals = {}
        for name, fn in self.props.items():
            v = float(fn(images))
            if not math.isfinite(v):
                raise ValueError(f"property {name} is {v} for coalition {list(key)}; it must be finite")
            vals[name] = v
        return vals, train_s, sample_s, images if len(key) == self.n else None

    def _store(self, key: tuple[int, ...], out: tuple[dict[str, float], float, float, Any]) -> None:
        self.values[key], self.train_seconds[key], self.sample_seconds[key], images = out
        if images is not None:
            self.samples[key] = images

    def evaluate_all(self, masks: Any, progress: Any = None) -> None:
        """Evaluate every coalition of ``masks`` not yet evaluated, as a job farm over the ranks of the process
        group (:func:`iclr25_shared.distributed.farm`; a loop in one process). Each distinct coalition is one job,
        in the order of ``masks``; every rank ends with every value, so the estimators that follow run the same
        arithmetic on every rank."""
        from iclr25_shared.distributed import farm

        todo: dict[tuple[int, ...], np.ndarray] = {}
        for m in masks:
            m = np.asarray(m, dtype=bool)
            key = tuple(np.flatnonzero(m).tolist())
            if key not in self.values and key not in todo:
                todo[key] = m
        results = farm(list(todo.values()), self.job, progress=progress)
        for key, out in zip(todo, results):
            self._store(key, out)

    def __call__(self, mask: np.ndarray) -> dict[str, float]:
        mask = np.asarray(mask, dtype=bool)
        key = tuple(np.flatnonzero(mask).tolist())
        if key not in self.values:
            self._store(key, self.job(mask))
        return self.values[key]

    def game_for(self, prop: str):
        return lambda mask: self(mask)[prop]

    def per_subset_train_seconds(self) -> float:
        keys = [k for k in self.train_seconds if len(k) > 0]
        return float(np.mean([self.train_seconds[k] for k in keys])) if keys else math.nan


def _join(ctx: RunContext) -> Any:
    """Join the launcher's process group (torchrun / accelerate launch; a no-op in one process): the coalitions are
    then farmed over the ranks. Returns the :class:`iclr25_shared.distributed.World`."""
    from iclr25_shared.distributed import check_same, init_process_group

    here = init_process_group(ctx.torch_device())
    if here.is_distributed:
        check_same(repr(ctx.config), "configuration")
        ctx.log.info(f"rank {here.rank} of {here.world_size}: coalitions are farmed over the ranks")
    return here


def _same_model(model: Any, what: str) -> None:
    """Refuse to go on when the ranks trained different ``model``s (every rank trains the shared models itself,
    from the same seed; a difference would make the farmed values depend on the rank)."""
    import hashlib

    from iclr25_shared.distributed import check_same, world

    if not world().is_distributed:
        return
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    check_same(h.hexdigest(), what)


def _planned(estimate: Any, n: int) -> list[np.ndarray]:
    """The coalitions ``estimate(game)`` will ask for, found by running it on a recording game that answers 0
    (the estimators choose their coalitions from the seed alone, never from the values), plus ∅ and N."""
    seen: list[np.ndarray] = [np.zeros(n, dtype=bool), np.ones(n, dtype=bool)]

    def record(mask: np.ndarray) -> float:
        seen.append(np.asarray(mask, dtype=bool).copy())
        return 0.0

    estimate(record)
    return seen


# ------------------------------------------------------------------------------------------------------------
# attribute
# ------------------------------------------------------------------------------------------------------------


def attribute(cfg: AttributeConfig, ctx: RunContext) -> Result:
    """Attribute one global property of a DDPM trained on Fashion-MNIST contributors to those contributors."""
    from iclr25_diffusion_shapley import _shapley as sh

    t_start = time.perf_counter()
    _join(ctx)
    setup = _setup(cfg, ctx, cfg.seed)
    n = setup.data.num_contributors
    props = _properties(cfg.property, setup)
    prop = next(iter(props))
    ctx.log.info(
        f"{n} contributors {setup.data.names}, {setup.data.counts().tolist()} images; property {prop}"
    )
    full_model = None
    if cfg.method != "retrain":
        full = _strategy("retrain", cfg, setup, cfg.seed)
        ctx.log.info(f"training the model on all contributors ({cfg.retrain_steps} steps)")
        full_model = full.fit(np.ones(n, dtype=bool))
        _same_model(full_model, "model trained on all contributors")
    strategy = _strategy(cfg.method, cfg, setup, cfg.seed, full_model)
    if cfg.method == "sparse-ft":
        ctx.log.info(f"pruning ({cfg.pruning_ratio:.0%} of channels) and fine-tuning on all data")
        strategy.prepare()
        _same_model(strategy.base, "pruned and fine-tuned model")
    ev = _Evaluator(strategy, props, cfg, n)

    def estimate(g: Any) -> np.ndarray:
        if cfg.estimator == "exact":
            return sh.exact_shapley(g, n)
        if cfg.estimator == "kernel-shap":
            return sh.kernel_shap(g, n, cfg.kernel_samples, seed=cfg.seed).values
        if cfg.estimator == "banzhaf":
            return sh.banzhaf(g, n, max(cfg.kernel_samples, n + 1), seed=cfg.seed).values
        return sh.leave_one_out(g, n).values

    # every coalition the estimator needs, evaluated first as a job farm over the ranks (a loop in one process)
    ev.evaluate_all(
        _planned(estimate, n), progress=lambda it: ctx.progress(it, desc=f"{cfg.method} coalitions")
    )
    game = sh.CachedGame(ev.game_for(prop), n)
    phi = estimate(game)
    v0, v1 = game(np.zeros(n, dtype=bool)), game(np.ones(n, dtype=bool))
    rows = [
        {"contributor": name, "images": int(c), "attribution": float(p)}
        for name, c, p in zip(setup.data.names, setup.data.counts(), phi)
    ]
    ctx.save_array("attributions", phi)
    return Result(
        metrics={
            "property": prop,
            "method": cfg.method,
            "estimator": cfg.estimator,
            "v_empty": v0,
            "v_full": v1,
            "sum_attributions": float(np.sum(phi)),
            "coalitions_evaluated": game.calls,
            "train_seconds_per_coalition": ev.per_subset_train_seconds(),
        },
        tables={"attributions": rows},
        timings={"total": time.perf_counter() - t_start, "setup": getattr(strategy, "setup_seconds", 0.0)},
        notes=[
            f"v(empty) is the property of the untrained model; sum of attributions = v(N) - v(empty) = {v1 - v0:.4f}"
        ],
    )


# ------------------------------------------------------------------------------------------------------------
# reproduce
# ------------------------------------------------------------------------------------------------------------


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from iclr25_diffusion_shapley._shapley import _spearman as sp

    return sp(np.asarray(a, float), np.asarray(b, float))


def _one_seed(cfg: ReproduceConfig, ctx: RunContext, seed: int, classifier: Any) -> dict[str, Any]:
    from iclr25_diffusion_shapley import _shapley as sh
    from iclr25_diffusion_shapley._properties import pixel_similarity_attribution, size_only_attribution

    setup = _setup(cfg, ctx, seed, classifier=classifier)
    n = setup.data.num_contributors
    props: dict[str, Any] = {}
    for p in cfg.properties:
        props.update(_properties(p, setup))
    masks = sh.all_subsets(n)

    # exact game: retrain on every coalition (the full coalition first, to reuse its model)
    retrain = _strategy("retrain", cfg, setup, seed)
    ev_rt = _Evaluator(retrain, props, cfg, n)
    t0 = time.perf_counter()
    full_model = retrain.fit(np.ones(n, dtype=bool))
    _same_model(full_model, f"seed {seed}: model trained on all contributors")
    # every coalition is one job of a farm over the ranks (a loop in one process)
    ev_rt.evaluate_all(
        masks[::-1],
        progress=lambda it: ctx.progress(it, desc=f"seed {seed}: retrain {len(masks)} coalitions"),
    )
    t_retrain_all = time.perf_counter() - t0
    tables = {p: np.array([ev_rt(m)[p] for m in masks]) for p in props}

    kernel_masks = sh.sample_shapley_kernel(n, cfg.kernel_samples, seed=seed)
    held = masks[
        (masks.sum(1) > 0) & (masks.sum(1) < n)
    ]  # every non-trivial coalition = the alpha=0.5 support

    evs = {}
    for kind in ("sparse-ft", "unlearn-ga"):
        strat = _strategy(kind, cfg, setup, seed, full_model)
        if kind == "sparse-ft":
            strat.prepare()
            _same_model(strat.base, f"seed {seed}: pruned and fine-tuned model")
        ev = _Evaluator(strat, props, cfg, n)
        ev.evaluate_all(
            [np.zeros(n, bool), np.ones(n, bool), *kernel_masks],
            progress=lambda it, kind=kind: ctx.progress(it, desc=f"seed {seed}: {kind}"),
        )
        evs[kind] = ev

    pixel = pixel_similarity_attribution(
        ev_rt.samples[tuple(range(n))], setup.data.images, setup.data.owners, n, reduce="mean"
    )
    out: dict[str, Any] = {"seed": seed, "props": {}}
    for p in props:
        table = tables[p]
        exact = sh.shapley_from_table(table)
        phis = {
            "exact (retrain all 2^n)": exact,
            "kernelshap + sparse-FT": _ks(evs["sparse-ft"], kernel_masks, p),
            "kernelshap + unlearn-GA": _ks(evs["unlearn-ga"], kernel_masks, p),
            "kernelshap + retrain (same m)": sh.kernel_shap_from_samples(
                kernel_masks, np.array([ev_rt(m)[p] for m in kernel_masks]), table[0], table[-1]
            ),
            "leave-one-out (retrain)": table[-1] - np.array([table[(2**n - 1) ^ (1 << i)] for i in range(n)]),
            "pixel similarity": pixel,
            "size only": size_only_attribution(n),
        }
        held_vals = np.array([ev_rt(m)[p] for m in held])
        res = {}
        for name, phi in phis.items():
            res[name] = {
                "spearman_vs_exact": math.nan if name == "size only" else _spearman(phi, exact),
                "lds": _safe_lds(phi, held, held_vals),
                "phi": np.asarray(phi).tolist(),
            }
        out["props"][p] = {
            "methods": res,
            "exact": exact.tolist(),
            "v_empty": table[0],
            "v_full": table[-1],
            "v_first_alone": table[1],
            "efficiency_gap_sparse_ft": float(
                np.sum(phis["kernelshap + sparse-FT"])
                - (evs["sparse-ft"](np.ones(n, bool))[p] - evs["sparse-ft"](np.zeros(n, bool))[p])
            ),
        }
    out["seconds"] = {
        "retrain_per_subset": ev_rt.per_subset_train_seconds(),
        "sparse_ft_per_subset": evs["sparse-ft"].per_subset_train_seconds(),
        "unlearn_ga_per_subset": evs["unlearn-ga"].per_subset_train_seconds(),
        "sample_per_subset": float(np.mean(list(ev_rt.sample_seconds.values()))),
        "sparse_ft_setup": evs["sparse-ft"].game.strategy.setup_seconds,
        "retrain_all_coalitions": t_retrain_all,
    }
    out["names"] = list(setup.data.names)
    out["kernel_distinct"] = len({tuple(np.flatnonzero(m)) for m in kernel_masks})
    return out


def _safe_lds(phi: np.ndarray, masks: np.ndarray, values: np.ndarray) -> float:
    """LDS, or NaN where it is undefined (constant predicted sums or values); reported as such."""
    from iclr25_diffusion_shapley._shapley import lds

    try:
        return lds(phi, masks, values)
    except ValueError:
        return math.nan


def _ks(ev: _Evaluator, kernel_masks: np.ndarray, prop: str) -> np.ndarray:
    from iclr25_diffusion_shapley._shapley import kernel_shap_from_samples

    n = kernel_masks.shape[1]
    vals = np.array([ev(m)[prop] for m in kernel_masks])
    return kernel_shap_from_samples(
        kernel_masks, vals, ev(np.zeros(n, bool))[prop], ev(np.ones(n, bool))[prop]
    )


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """Exact Shapley (retrain every coalition) vs sparsified-FT KernelSHAP and baselines, ``cfg.seeds`` seeds."""
    from iclr25_shared.metrics import paired_t_interval

    t_start = time.perf_counter()
    cfg = cfg.sized()  # --size gpu: the preset for the options left at their quick defaults
    _join(ctx)
    classifier = _classifier(cfg.data_root, cfg.classifier_images)
    runs = []
    for k in range(cfg.seeds):
        seed = cfg.seed + k
        ctx.log.info(f"seed {seed} ({k + 1}/{cfg.seeds})")
        runs.append(_one_seed(cfg, ctx, seed, classifier))
        for p, d in runs[-1]["props"].items():  # logged as it goes, so a cut-short run still shows its seeds
            ctx.log.info(
                f"seed {seed} {p}: exact phi {np.round(d['exact'], 4).tolist()}; "
                + "; ".join(
                    f"{k}: rho={v['spearman_vs_exact']:.3f} LDS={v['lds']:.3f}"
                    for k, v in d["methods"].items()
                )
            )
        ctx.log.info(f"seed {seed} seconds: {runs[-1]['seconds']}")
        ctx.save_json(f"seed_{seed}.json", runs[-1])

    tables: dict[str, list[dict[str, Any]]] = {}
    metrics: dict[str, Any] = {}
    for p in runs[0]["props"]:
        methods = list(runs[0]["props"][p]["methods"])
        rows = []
        for name in methods:
            sp = np.array([r["props"][p]["methods"][name]["spearman_vs_exact"] for r in runs])
            ld = np.array([r["props"][p]["methods"][name]["lds"] for r in runs])
            rows.append(
                {
                    "method": name,
                    "spearman(phi, exact) mean": float(np.nanmean(sp)) if np.isfinite(sp).any() else math.nan,
                    "per seed": ", ".join(f"{x:.2f}" for x in sp),
                    "LDS x100 mean": 100 * float(np.nanmean(ld)) if np.isfinite(ld).any() else math.nan,
                    "LDS per seed": ", ".join(f"{100 * x:.0f}" for x in ld),
                }
            )
        tables[f"{p}: attribution quality ({len(runs)} seeds)"] = rows
        sft = np.array([r["props"][p]["methods"]["kernelshap + sparse-FT"]["lds"] for r in runs])
        diffs = []
        for base in ("size only", "pixel similarity", "kernelshap + unlearn-GA", "leave-one-out (retrain)"):
            b = np.array([r["props"][p]["methods"][base]["lds"] for r in runs])
            d = 100 * (sft - b)
            d = d[np.isfinite(d)]
            if d.size == 0:
                continue
            est = paired_t_interval(d)
            diffs.append(
                {
                    "LDS x100: sparse-FT minus": base,
                    "mean": est.value,
                    "95% CI low": est.low,
                    "95% CI high": est.high,
                    "seeds": est.n,
                }
            )
        tables[f"{p}: paired LDS differences"] = diffs
        sp_sft = np.array(
            [r["props"][p]["methods"]["kernelshap + sparse-FT"]["spearman_vs_exact"] for r in runs]
        )
        sp_sft = sp_sft[np.isfinite(sp_sft)]
        sp_est = paired_t_interval(sp_sft) if sp_sft.size > 1 else None
        metrics[f"{p}.spearman_sparse_ft_vs_exact"] = (
            sp_est.as_dict() if sp_est else (float(sp_sft[0]) if sp_sft.size else math.nan)
        )
        metrics[f"{p}.efficiency_gap_sparse_ft_max"] = max(
            abs(r["props"][p]["efficiency_gap_sparse_ft"]) for r in runs
        )
        ex = [np.array(r["props"][p]["exact"]) for r in runs]
        cross = [_spearman(ex[i], ex[j]) for i in range(len(ex)) for j in range(i + 1, len(ex))]
        metrics[f"{p}.exact_phi_cross_seed_spearman"] = float(np.mean(cross)) if cross else math.nan
        tables[f"{p}: exact Shapley values per seed (diagnostic: signal)"] = [
            {
                "seed": r["seed"],
                "v(empty)": r["props"][p]["v_empty"],
                "v(N)": r["props"][p]["v_full"],
                "v(first contributor alone)": r["props"][p]["v_first_alone"],
                **{nm: round(v, 4) for nm, v in zip(r["names"], r["props"][p]["exact"])},
            }
            for r in runs
        ]
    secs = {k: np.array([r["seconds"][k] for r in runs]) for k in runs[0]["seconds"]}
    tables["wall time (seconds, mean over seeds)"] = [
        {"what": k, "seconds": float(v.mean())} for k, v in secs.items()
    ]
    metrics["speedup_train_per_subset_retrain_over_sparse_ft"] = float(
        np.mean(secs["retrain_per_subset"] / secs["sparse_ft_per_subset"])
    )
    metrics["speedup_per_subset_incl_sampling"] = float(
        np.mean(
            (secs["retrain_per_subset"] + secs["sample_per_subset"])
            / (secs["sparse_ft_per_subset"] + secs["sample_per_subset"])
        )
    )
    metrics["kernel_samples"] = cfg.kernel_samples
    metrics["size"] = cfg.size
    if cfg.size != "quick":
        from iclr25_diffusion_shapley.cli import GPU_SIZE

        metrics["sized_options"] = {k: getattr(cfg, k) for k in GPU_SIZE}
    metrics["distinct_kernel_coalitions_per_seed"] = [r["kernel_distinct"] for r in runs]
    metrics["lds_setting"] = (
        f"Spearman x100 over all {2 ** len(cfg.contributors) - 2} non-trivial coalitions (= the support of the "
        f"alpha=0.5 datamodel distribution), retrained values; {len(runs)} seeds"
    )
    return Result(
        metrics=metrics,
        tables=tables,
        timings={"total": time.perf_counter() - t_start},
        notes=[
            "exact = Shapley values from retraining on all 2^n coalitions (ground truth); KernelSHAP rows use "
            f"{cfg.kernel_samples} Shapley-kernel draws; v(empty) = property of the untrained model.",
            "paired differences are across seeds (each seed: its own data subsample, initialisation and draws).",
        ],
    )


# ------------------------------------------------------------------------------------------------------------
# bench
# ------------------------------------------------------------------------------------------------------------


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
        run, (p_dense, p_pruned) = got["run"], got["params"]
        raw[model] = run.as_dict()
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
        total = run.speedup("sparse-ft", "retrain")
        by_steps = run.speedup("dense fine-tune", "retrain")
        by_net = run.speedup("sparse-ft", "dense fine-tune")
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
        rt = run.median("retrain") + run.median("sample (dense)")
        sf = run.median("sparse-ft") + run.median("sample (pruned)")
        for n_c in cfg.project_contributors:
            proj.append(
                {
                    "model": model,
                    "contributors": n_c,
                    "exact Shapley by retraining (s)": (2**n_c) * rt,
                    f"KernelSHAP m={cfg.kernel_samples} + retrain (s)": (cfg.kernel_samples + 2) * rt,
                    f"KernelSHAP m={cfg.kernel_samples} + sparse-FT (s)": got["t_full"]
                    + got["setup"]
                    + (cfg.kernel_samples + 2) * sf,
                }
            )
        rows.append(
            {
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
        )
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
