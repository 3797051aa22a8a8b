"""What the commands share: the data, the judge, the models, the retraining strategies, the coalition evaluator
farmed over ranks and the coalitions an estimator will ask for. The commands are ``attribute`` in ``_attribute.py``,
``reproduce`` in ``_reproduce.py`` and ``bench`` in ``_bench.py``; each takes ``(cfg, ctx)`` and returns an
:class:`iclr25_shared.cli.Result`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from iclr25_shared.cli import RunContext

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

    def __init__(
        self, strategy: Any, props: dict[str, Any], cfg: Any, n: int, sample_seed: int | None = None
    ) -> None:
        from iclr25_diffusion_shapley._diffusion import DiffusionGame

        self.props, self.n = props, n
        self.game = DiffusionGame(
            strategy,
            lambda images: 0.0,
            IMAGE_SHAPE,
            num_samples=cfg.num_samples,
            sampling_steps=cfg.sampling_steps,
            sample_seed=10_000 + cfg.seed if sample_seed is None else sample_seed,
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
