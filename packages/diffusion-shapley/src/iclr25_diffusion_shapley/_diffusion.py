"""Diffusion models as value functions of data contributors: ``v(S) = F(θ_S)`` (arXiv:2407.03153, Section 3).

``θ_S`` is produced by one of three retraining strategies, all for any denoising network ``model(x, t)`` (a
diffusers ``UNet2DModel`` or the small :class:`MLPDenoiser`), trained with the DDPM loss of diffusers'
``DDPMScheduler`` and sampled with its DDIM sampler:

- :class:`Retrain` — train from scratch on the contributors in ``S`` (the exact, expensive game);
- :class:`SparsifiedFineTune` — the paper's method (Section 3.2): prune the model trained on all data with
  structured magnitude pruning (torch-pruning), fine-tune the pruned model on all data once, then for each
  ``S`` fine-tune it for a few steps on the data of ``S`` only;
- :class:`GradientAscentUnlearn` — a baseline: start from the model trained on all data and take gradient-ascent
  steps on the DDPM loss of the contributors left out of ``S``.

:class:`DiffusionGame` turns a strategy and a global property ``F`` (a function of generated samples) into the
callable ``v(mask)`` that the estimators in :mod:`iclr25_diffusion_shapley._shapley` consume.

The library defaults are the CLI's (the README's recommended setting): x0-prediction (``prediction_type="sample"``),
Adam lr 2e-3 (1e-4 for unlearning), batch 128, 150 retraining steps, 150 + 30 sparsified fine-tuning steps and 10
unlearning steps. ε-prediction after so few CPU steps gives noise-like samples whose judged class does not depend
on the coalition (the README's run 1); pass ``make_scheduler(prediction_type="epsilon")`` to get it.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from iclr25_shared.checks import check_finite, check_float, check_int, check_shape

__all__ = [
    "ContributorData",
    "DiffusionGame",
    "GradientAscentUnlearn",
    "MLPDenoiser",
    "Retrain",
    "SparsifiedFineTune",
    "make_contributors",
    "make_scheduler",
    "make_unet",
    "parameter_count",
    "predict_noise",
    "prune_model",
    "sample_images",
    "train_denoiser",
]


PREDICTION_TYPE = "sample"
"""Default of :func:`make_scheduler`: the network predicts the clean image ``x_0`` (the CLI's default)."""
LR = 2e-3
"""Default Adam learning rate of :func:`train_denoiser`, :class:`Retrain` and :class:`SparsifiedFineTune`."""
UNLEARN_LR = 1e-4
"""Default learning rate of :class:`GradientAscentUnlearn`."""

# ------------------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContributorData:
    """Training images grouped by contributor.

    Attributes:
        images: ``(N, C, H, W)`` float32 in ``[-1, 1]``.
        owners: ``(N,)`` int64, the contributor of each image, in ``0..n-1``.
        names: ``n`` contributor names.
        labels: optional ``(N,)`` int64 class labels (kept for baselines and diagnostics).

    Raises:
        ValueError: fewer than 2 contributors; a contributor with no image; shapes disagree; NaN/inf pixels;
            owners outside ``0..n-1``.
    """

    images: np.ndarray
    owners: np.ndarray
    names: tuple[str, ...]
    labels: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        n = len(self.names)
        if n < 2:
            raise ValueError(f"contributors must number at least 2, got {n}")
        sizes = check_shape("images", self.images, ("N", "C", "H", "W"))
        check_shape("owners", self.owners, ("N",), bind=sizes)
        check_finite("images", self.images)
        owners = np.asarray(self.owners)
        if owners.dtype.kind not in "iu" or owners.min() < 0 or owners.max() >= n:
            raise ValueError(f"owners must be integers in [0, {n - 1}]")
        counts = np.bincount(owners, minlength=n)
        empty = np.flatnonzero(counts == 0)
        if empty.size:
            raise ValueError(f"contributor {int(empty[0])} ({self.names[empty[0]]!r}) has no data")
        if self.labels is not None:
            check_shape("labels", self.labels, ("N",), bind=sizes)

    @property
    def num_contributors(self) -> int:
        return len(self.names)

    def counts(self) -> np.ndarray:
        """``(n,)`` images per contributor."""
        return np.bincount(self.owners, minlength=self.num_contributors)

    def select(self, mask: np.ndarray) -> np.ndarray:
        """Images of the contributors in ``mask`` (``(n,)`` bool), as ``(N_S, C, H, W)`` float32.

        Raises:
            ValueError: ``mask`` has the wrong length or selects nobody.
        """
        mask = np.asarray(mask, dtype=bool)
        check_shape("mask", mask, (self.num_contributors,))
        if not mask.any():
            raise ValueError("the empty coalition has no training data")
        return self.images[mask[self.owners]]


def make_contributors(
    images: np.ndarray,
    labels: np.ndarray,
    groups: Sequence[Sequence[int]],
    names: Sequence[str] | None = None,
) -> ContributorData:
    """Contributors = groups of classes: contributor ``j`` owns every image whose label is in ``groups[j]``.

    Args:
        images: ``(N, C, H, W)`` float32 in ``[-1, 1]``. labels: ``(N,)`` int class labels.
        groups: ``n >= 2`` disjoint, non-empty tuples of class labels.

    Raises:
        ValueError: fewer than 2 groups, an empty or overlapping group, a group with no image.
    """
    if len(groups) < 2:
        raise ValueError(f"contributors must number at least 2, got {len(groups)}")
    labels = np.asarray(labels, dtype=np.int64)
    owners = np.full(labels.shape, -1, dtype=np.int64)
    for j, g in enumerate(groups):
        if len(g) == 0:
            raise ValueError(f"contributor {j} has no classes (groups[{j}] is empty)")
        hit = np.isin(labels, np.asarray(g))
        if (owners[hit] >= 0).any():
            raise ValueError(
                f"groups overlap: a class of groups[{j}] is already owned by another contributor"
            )
        owners[hit] = j
    keep = owners >= 0
    names = tuple(names) if names is not None else tuple("+".join(map(str, g)) for g in groups)
    return ContributorData(images[keep], owners[keep], names, labels[keep])


# ------------------------------------------------------------------------------------------------------------
# models
# ------------------------------------------------------------------------------------------------------------


class MLPDenoiser(nn.Module):
    """A small denoising network (ε- or x0-prediction) for flattened images: an input layer, ``depth`` residual SiLU blocks
    ``h ← h + SiLU(W h + U e(t))`` with the sinusoidal timestep embedding ``e(t)`` injected in every block, and a
    linear output layer.

    ``forward(sample (B, C, H, W) float, timestep (B,) int) -> (B, C, H, W)``. Cheap enough on a CPU to retrain
    on every one of the ``2**n`` coalitions; :func:`make_unet` builds a diffusers UNet like the paper's.
    """

    def __init__(
        self, image_shape: tuple[int, int, int], *, hidden: int = 256, depth: int = 3, time_dim: int = 64
    ):
        super().__init__()
        check_int("hidden", hidden, low=1)
        check_int("depth", depth, low=1)
        check_int("time_dim", time_dim, low=2)
        self.image_shape = tuple(int(s) for s in image_shape)
        self.time_dim = time_dim
        dim = int(np.prod(self.image_shape))
        self.time_mlp = nn.Sequential(nn.Linear(time_dim, hidden), nn.SiLU())
        self.inp = nn.Linear(dim, hidden)
        self.blocks = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(depth))
        self.time_proj = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(depth))
        self.act = nn.SiLU()
        self.head = nn.Linear(hidden, dim)

    def forward(self, sample: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
        from diffusers.models.embeddings import get_timestep_embedding

        b = sample.shape[0]
        t = timestep.reshape(-1).expand(b) if timestep.numel() == 1 else timestep.reshape(-1)
        emb = self.time_mlp(get_timestep_embedding(t, self.time_dim).to(sample.dtype))
        h = self.inp(sample.reshape(b, -1))
        for block, proj in zip(self.blocks, self.time_proj):
            h = h + self.act(block(h) + proj(emb))
        return self.head(h).reshape(sample.shape)


def make_unet(
    image_size: int, *, channels: tuple[int, ...] = (16, 32), in_channels: int = 1, groups: int = 8
):
    """A small diffusers ``UNet2DModel`` (ResNet blocks only, no attention) for ``image_size``² images.

    Raises:
        ValueError: ``image_size`` not divisible by ``2**(len(channels) - 1)``; a channel count not divisible by
            ``groups``.
    """
    from diffusers import UNet2DModel

    check_int("image_size", image_size, low=4)
    if image_size % (2 ** (len(channels) - 1)):
        raise ValueError(f"image_size must be divisible by {2 ** (len(channels) - 1)}, got {image_size}")
    for c in channels:
        if c % groups:
            raise ValueError(f"channels must be multiples of groups={groups}, got {channels}")
    return UNet2DModel(
        sample_size=image_size,
        in_channels=in_channels,
        out_channels=in_channels,
        block_out_channels=tuple(channels),
        layers_per_block=1,
        down_block_types=("DownBlock2D",) * len(channels),
        up_block_types=("UpBlock2D",) * len(channels),
        norm_num_groups=groups,
    )


def predict_noise(model: nn.Module, sample: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
    """``model(sample, timestep)`` as a tensor (diffusers models return an object with ``.sample``)."""
    out = model(sample, timestep)
    return out.sample if hasattr(out, "sample") else out


def make_scheduler(num_train_timesteps: int = 1000, prediction_type: str = PREDICTION_TYPE):
    """diffusers ``DDPMScheduler`` with the linear β schedule of Ho et al. (2020).

    ``prediction_type``: "sample" (default; the network predicts the clean image ``x_0``: much better samples
    from a briefly trained small network) or "epsilon" (it predicts the noise, the DDPM default). Training
    (:func:`train_denoiser`) and sampling (:func:`sample_images`) follow the scheduler's setting.
    """
    from diffusers import DDPMScheduler

    check_int("num_train_timesteps", num_train_timesteps, low=2)
    if prediction_type not in ("epsilon", "sample"):
        raise ValueError(f"prediction_type must be one of epsilon, sample; got {prediction_type!r}")
    return DDPMScheduler(
        num_train_timesteps=num_train_timesteps, beta_schedule="linear", prediction_type=prediction_type
    )


def _device_of(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def train_denoiser(
    model: nn.Module,
    images: np.ndarray,
    *,
    steps: int,
    batch_size: int = 128,
    lr: float = LR,
    seed: int = 0,
    scheduler: Any = None,
    ascent: bool = False,
    max_grad_norm: float | None = 1.0,
) -> nn.Module:
    """Train ``model`` in place with the DDPM loss ``E ||ε − ε_θ(√ᾱ_t x + √(1−ᾱ_t) ε, t)||²`` (or, when the
    scheduler's ``prediction_type`` is "sample", ``E ||x − x_θ(...)||²``; Adam; minibatches drawn with replacement;
    ``t`` uniform over the scheduler's timesteps).

    With ``ascent=True`` the loss is maximised instead (gradient-ascent unlearning of ``images``).

    Args:
        model: the denoiser (ε- or x0-predictor, as the scheduler says) on the device to train on.
        images: ``(N, C, H, W)`` float32 in ``[-1, 1]``, ``N >= 1``.
        steps: optimizer steps (``>= 0``).
        batch_size: images per step (``>= 1``). lr: Adam learning rate (``> 0``). seed: minibatch/noise seed.
        scheduler: a diffusers ``DDPMScheduler`` (default :func:`make_scheduler`).
        max_grad_norm: gradient-norm clip (``None`` = no clipping).

    Returns:
        ``model`` (trained, in eval mode).

    Raises:
        ValueError: bad arguments; empty ``images``.
        FloatingPointError: the loss became NaN/inf (the step is named; the model is left as it was before it).
    """
    steps = check_int("steps", steps, low=0)
    batch_size = check_int("batch_size", batch_size, low=1)
    lr = check_float("lr", lr, low=0.0, low_inclusive=False)
    check_shape("images", images, ("N", "C", "H", "W"))
    if len(images) == 0:
        raise ValueError("images must hold at least one image")
    scheduler = scheduler if scheduler is not None else make_scheduler()
    device = _device_of(model)
    data = torch.as_tensor(np.ascontiguousarray(images), dtype=torch.float32, device=device)
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    alphas = scheduler.alphas_cumprod.to(device=device, dtype=torch.float32)
    model.train()
    predict_x0 = getattr(scheduler.config, "prediction_type", "epsilon") == "sample"
    with torch.enable_grad():  # also when called under torch.no_grad()
        _train_loop(model, opt, data, alphas, gen, steps, batch_size, ascent, max_grad_norm, predict_x0)
    model.eval()
    return model


_DRAW_CHUNK = 64
"""Steps whose random draws are made (on the CPU generator) and copied to the device at once."""


def _draws(gen, steps, batch_size, n_data, shape, num_t, device):
    """Per step: minibatch indices, noise and timesteps, drawn from the CPU generator in the same order as one
    step at a time (so CPU and CUDA runs see the same batches) and copied to ``device`` once per chunk of
    :data:`_DRAW_CHUNK` steps, not three times per step."""
    for start in range(0, steps, _DRAW_CHUNK):
        idx, noise, t = [], [], []
        for _ in range(start, min(steps, start + _DRAW_CHUNK)):
            idx.append(torch.randint(0, n_data, (batch_size,), generator=gen))
            noise.append(torch.randn((batch_size, *shape), generator=gen))
            t.append(torch.randint(0, num_t, (batch_size,), generator=gen))
        yield from zip(
            torch.stack(idx).to(device).unbind(0),
            torch.stack(noise).to(device).unbind(0),
            torch.stack(t).to(device).unbind(0),
        )


def _train_loop(model, opt, data, alphas, gen, steps, batch_size, ascent, max_grad_norm, predict_x0) -> None:
    device, num_t = data.device, alphas.numel()
    draws = _draws(gen, steps, batch_size, data.shape[0], tuple(data.shape[1:]), num_t, device)
    for step, (idx, noise, t) in enumerate(draws):
        x0 = data[idx]
        a = alphas[t].view(-1, *([1] * (x0.ndim - 1)))
        xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
        loss = torch.mean((predict_noise(model, xt, t) - (x0 if predict_x0 else noise)) ** 2)
        # the one host sync per step (CUDA): a NaN/inf loss stops before the update, the model left as it was
        if not torch.isfinite(loss):
            raise FloatingPointError(f"DDPM loss is {loss.item()} at step {step}; lower lr")
        opt.zero_grad(set_to_none=True)
        (-loss if ascent else loss).backward()
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        opt.step()


@torch.no_grad()
def sample_images(
    model: nn.Module,
    num_samples: int,
    *,
    image_shape: tuple[int, int, int],
    steps: int = 20,
    seed: int = 0,
    scheduler: Any = None,
    batch_size: int = 512,
) -> np.ndarray:
    """Generate images with deterministic DDIM (η = 0; diffusers ``DDIMScheduler`` built from the training
    scheduler's config). The same ``seed`` gives the same initial noise, so two models are compared on common
    random numbers.

    Returns:
        ``(num_samples, C, H, W)`` float32 clipped to ``[-1, 1]`` (numpy, on the CPU).

    Raises:
        ValueError: ``num_samples < 1`` or ``steps < 1``.
    """
    from diffusers import DDIMScheduler

    num_samples = check_int("num_samples", num_samples, low=1)
    steps = check_int("steps", steps, low=1)
    scheduler = scheduler if scheduler is not None else make_scheduler()
    ddim = DDIMScheduler.from_config(scheduler.config)
    ddim.set_timesteps(steps)
    device = _device_of(model)
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    model.eval()
    noise = torch.randn((num_samples, *image_shape), generator=gen)  # drawn at once: batching changes nothing
    out = []
    for start in range(0, num_samples, batch_size):
        b = min(batch_size, num_samples - start)
        x = noise[start : start + b].to(device)
        for t in ddim.timesteps:
            eps = predict_noise(model, x, torch.full((b,), int(t), device=device, dtype=torch.long))
            x = ddim.step(eps, t, x, eta=0.0).prev_sample
        out.append(x.clamp(-1, 1).float().cpu().numpy())
    return np.concatenate(out)


# ------------------------------------------------------------------------------------------------------------
# pruning
# ------------------------------------------------------------------------------------------------------------


def _output_layer(model: nn.Module) -> nn.Module:
    if isinstance(model, MLPDenoiser):
        return model.head
    if hasattr(model, "conv_out"):
        return model.conv_out
    raise TypeError(
        f"prune_model knows MLPDenoiser and diffusers UNet2DModel; for {type(model).__name__} pass ignored_layers"
    )


def prune_model(
    model: nn.Module,
    ratio: float,
    *,
    example_inputs: tuple[torch.Tensor, torch.Tensor] | None = None,
    ignored_layers: Sequence[nn.Module] | None = None,
) -> nn.Module:
    """Structured magnitude pruning (arXiv:2407.03153 Section 3.2): remove the fraction ``ratio`` of channels /
    hidden units with the smallest L2 weight norm, with their dependent layers, using torch-pruning's
    ``MagnitudePruner`` (DepGraph, one step). The output layer is never pruned, so shapes are unchanged.

    Args:
        model: the trained denoiser (left untouched; a pruned copy is returned).
        ratio: channel sparsity in ``[0, 1)``; 0 keeps every channel (the copy computes the same function).
        example_inputs: ``(sample, timestep)`` to trace the graph (default: one zero image and ``t = 1``).
        ignored_layers: layers whose outputs are kept (default: the output layer).

    Returns:
        The pruned copy, in eval mode.

    Raises:
        ValueError: ``ratio`` outside ``[0, 1)``.
        TypeError: a model type whose output layer is unknown and no ``ignored_layers`` given.
    """
    import torch_pruning as tp

    ratio = check_float("pruning_ratio", ratio, low=0.0, high=1.0, high_inclusive=False)
    pruned = copy.deepcopy(model).eval()
    device = _device_of(pruned)
    if example_inputs is None:
        shape = (
            pruned.image_shape
            if isinstance(pruned, MLPDenoiser)
            else (pruned.config.in_channels, pruned.config.sample_size, pruned.config.sample_size)
        )
        example_inputs = (
            torch.zeros((1, *shape), device=device),
            torch.ones((1,), dtype=torch.long, device=device),
        )
    ignored = list(ignored_layers) if ignored_layers is not None else [_output_layer(pruned)]
    pruner = tp.pruner.MagnitudePruner(
        pruned,
        example_inputs=example_inputs,
        importance=tp.importance.MagnitudeImportance(p=2),
        pruning_ratio=ratio,
        iterative_steps=1,
        ignored_layers=ignored,
    )
    pruner.step()
    _sync_diffusers_channels(pruned)
    return pruned.eval()


def _sync_diffusers_channels(model: nn.Module) -> None:
    """diffusers' up/down-samplers assert their stored channel count; update it after pruning."""
    try:
        from diffusers.models.downsampling import Downsample2D
        from diffusers.models.upsampling import Upsample2D
    except ImportError:  # pragma: no cover - old diffusers layout
        return
    for mod in model.modules():
        if isinstance(mod, Downsample2D | Upsample2D) and getattr(mod, "conv", None) is not None:
            mod.channels = mod.conv.in_channels
            mod.out_channels = mod.conv.out_channels


def parameter_count(model: nn.Module) -> int:
    return int(sum(p.numel() for p in model.parameters()))


# ------------------------------------------------------------------------------------------------------------
# retraining strategies
# ------------------------------------------------------------------------------------------------------------


@dataclass
class _Strategy:
    """Common fields: the data, a factory of freshly initialised models, and the optimiser settings."""

    data: ContributorData
    make_model: Callable[[int], nn.Module]
    batch_size: int = 128
    lr: float = LR
    seed: int = 0
    scheduler: Any = None
    device: str | torch.device = "cpu"

    def __post_init__(self) -> None:
        check_int("batch_size", self.batch_size, low=1)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)
        if self.scheduler is None:
            self.scheduler = make_scheduler()
        self.setup_seconds = 0.0

    def empty_model(self) -> nn.Module:
        """The model trained on no data: the initialisation (defines ``v(∅)`` for every strategy)."""
        return self.make_model(self.seed).to(self.device).eval()

    def _train(self, model: nn.Module, images: np.ndarray, steps: int, *, ascent: bool = False) -> nn.Module:
        return train_denoiser(
            model,
            images,
            steps=steps,
            batch_size=self.batch_size,
            lr=self.lr,
            seed=self.seed,
            scheduler=self.scheduler,
            ascent=ascent,
        )


@dataclass
class Retrain(_Strategy):
    """Train a fresh model (same initialisation for every coalition) for ``steps`` steps on the data of ``S``."""

    steps: int = 150
    name: str = "retrain"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("steps", self.steps, low=1)

    def fit(self, mask: np.ndarray) -> nn.Module:
        model = self.make_model(self.seed).to(self.device)
        return self._train(model, self.data.select(mask), self.steps)


@dataclass
class SparsifiedFineTune(_Strategy):
    """The paper's sparsified fine-tuning (arXiv:2407.03153 Section 3.2).

    :meth:`prepare` prunes ``full_model`` (trained on all contributors) with :func:`prune_model` at
    ``pruning_ratio`` and fine-tunes the pruned model on all data for ``prune_steps`` steps (once; its seconds
    are in ``setup_seconds``). :meth:`fit` then fine-tunes a copy for ``steps`` steps on the data of ``S``.
    """

    full_model: nn.Module | None = None
    pruning_ratio: float = 0.5
    prune_steps: int = 150
    steps: int = 30
    name: str = "sparse-ft"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.full_model is None:
            raise ValueError("full_model (the model trained on all contributors) is required")
        check_float("pruning_ratio", self.pruning_ratio, low=0.0, high=1.0, high_inclusive=False)
        check_int("prune_steps", self.prune_steps, low=0)
        check_int("steps", self.steps, low=0)
        self.base: nn.Module | None = None

    def prepare(self) -> nn.Module:
        t0 = time.perf_counter()
        pruned = prune_model(self.full_model, self.pruning_ratio)
        everyone = np.ones(self.data.num_contributors, dtype=bool)
        self.base = self._train(pruned, self.data.select(everyone), self.prune_steps)
        self.setup_seconds = time.perf_counter() - t0
        return self.base

    def fit(self, mask: np.ndarray) -> nn.Module:
        if self.base is None:
            self.prepare()
        model = copy.deepcopy(self.base)
        return self._train(model, self.data.select(mask), self.steps)


@dataclass
class GradientAscentUnlearn(_Strategy):
    """Unlearning baseline: ``steps`` gradient-ascent steps on the DDPM loss of the contributors *not* in ``S``,
    starting from ``full_model`` (the grand coalition gets ``full_model`` itself)."""

    full_model: nn.Module | None = None
    steps: int = 10
    lr: float = UNLEARN_LR
    name: str = "unlearn-ga"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.full_model is None:
            raise ValueError("full_model (the model trained on all contributors) is required")
        check_int("steps", self.steps, low=0)

    def fit(self, mask: np.ndarray) -> nn.Module:
        mask = np.asarray(mask, dtype=bool)
        model = copy.deepcopy(self.full_model)
        if mask.all():
            return model.eval()
        return self._train(model, self.data.select(~mask), self.steps, ascent=True)


# ------------------------------------------------------------------------------------------------------------
# the game
# ------------------------------------------------------------------------------------------------------------


@dataclass
class DiffusionGame:
    """``v(mask) = property_fn(samples of strategy.fit(mask))``, with ``v(∅)`` from the untrained model.

    Every call is timed: ``records`` holds ``(coalition, train_seconds, sample_seconds, value)`` per call.

    Args:
        strategy: :class:`Retrain`, :class:`SparsifiedFineTune`, :class:`GradientAscentUnlearn` or any object
            with ``fit(mask) -> model`` and ``empty_model() -> model``.
        property_fn: ``(num_samples, C, H, W)`` float32 images in ``[-1, 1]`` → float (a global property).
        num_samples: images generated per model. sampling_steps: DDIM steps. sample_seed: initial-noise seed
            (shared by all coalitions).
    """

    strategy: Any
    property_fn: Callable[[np.ndarray], float]
    image_shape: tuple[int, int, int]
    num_samples: int = 256
    sampling_steps: int = 20
    sample_seed: int = 1234
    keep_samples: bool = False
    records: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_int("num_samples", self.num_samples, low=1)
        check_int("sampling_steps", self.sampling_steps, low=1)
        self.samples: dict[tuple[int, ...], np.ndarray] = {}

    def samples_for(self, mask: np.ndarray) -> np.ndarray:
        mask = np.asarray(mask, dtype=bool)
        t0 = time.perf_counter()
        model = self.strategy.fit(mask) if mask.any() else self.strategy.empty_model()
        t1 = time.perf_counter()
        images = sample_images(
            model,
            self.num_samples,
            image_shape=self.image_shape,
            steps=self.sampling_steps,
            seed=self.sample_seed,
            scheduler=self.strategy.scheduler,
        )
        t2 = time.perf_counter()
        self._last = (t1 - t0, t2 - t1)
        return images

    def __call__(self, mask: np.ndarray) -> float:
        mask = np.asarray(mask, dtype=bool)
        images = self.samples_for(mask)
        value = float(self.property_fn(images))
        if not math.isfinite(value):
            raise ValueError(
                f"property value must be finite; for coalition {np.flatnonzero(mask).tolist()} it is {value!r}"
            )
        key = tuple(np.flatnonzero(mask).tolist())
        if self.keep_samples:
            self.samples[key] = images
        self.records.append(
            {
                "coalition": key,
                "train_seconds": self._last[0],
                "sample_seconds": self._last[1],
                "value": value,
            }
        )
        return value
