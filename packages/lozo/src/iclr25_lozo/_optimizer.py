"""Zeroth-order optimizers: LOZO / LOZO-M (low-rank, lazy) and MeZO (full Gaussian), as ``torch.optim.Optimizer``.

Both estimate the gradient from two forward passes with a shared random direction Z (SPSA):

    c = (L(X + eps Z) - L(X - eps Z)) / (2 eps)

MeZO (Malladi et al., 2023) draws Z ~ N(0, I) for every parameter and steps X <- X - lr c Z. LOZO (Chen et al.,
ICLR 2025, arXiv 2410.07698, §3) draws, for every parameter with ndim >= 2 viewed as an m x n matrix, Z = U V^T with
U in R^{m x r} redrawn every step and V in R^{n x r} redrawn every ``interval`` steps (lazy sampling), and steps

    X <- X - lr c U V^T / r,

so within one period X - X_0 = B V^T stays in the r-dimensional row space of V (subspace optimisation). Parameters
with fewer than 2 dims get MeZO's full Gaussian direction. LOZO-M (``momentum > 0``) keeps the momentum compressed,
M in R^{m x r}: M <- beta M + (1 - beta) c U / r and X <- X - lr M V^T; when V is redrawn the old momentum is moved
to the new subspace, M <- beta M V_old^T V_new / n + (1 - beta) c U / r (paper Alg. 2).

No direction is stored: U and z are regenerated from per-(step, parameter) seeds; V (n x r per matrix) and the
LOZO-M momentum (m x r) are the only state.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["LOZO", "MeZO", "ZerothOrderOptimizer", "decay_param_groups"]

Closure = Callable[[], Any]

_NORM_TYPES: tuple[type[nn.Module], ...] = (
    nn.LayerNorm,
    nn.GroupNorm,
    nn.LocalResponseNorm,
    nn.modules.batchnorm._NormBase,
    *((nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ()),
)


# Largest float32 temporary (elements) when a low-rank term is added to a float16/bfloat16 matrix.
_LOW_PRECISION_BLOCK = 1 << 20


def _is_norm(module: nn.Module) -> bool:
    # torch's own norm layers, plus model-specific norm classes (LlamaRMSNorm, T5LayerNorm, ...), by type.
    return isinstance(module, _NORM_TYPES) or any(
        cls.__name__.endswith(("Norm", "LayerNorm", "RMSNorm"))
        for cls in type(module).__mro__
        if cls is not nn.Module
    )


def decay_param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Split a model's trainable parameters into a decayed and a non-decayed group, by module type.

    Parameters of normalisation modules (torch's LayerNorm/GroupNorm/BatchNorm/RMSNorm and any module class whose
    name ends in ``Norm``, such as ``LlamaRMSNorm``) and all 1-D parameters (biases) get no weight decay; every
    other trainable parameter gets ``weight_decay``. Shared (tied) parameters appear once.

    Returns:
        ``[{"params": decayed, "weight_decay": weight_decay}, {"params": others, "weight_decay": 0.0}]`` without
        empty groups.
    """
    decayed: list[nn.Parameter] = []
    others: list[nn.Parameter] = []
    seen: set[int] = set()
    for module in model.modules():
        for param in module.parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))
            (others if _is_norm(module) or param.ndim < 2 else decayed).append(param)
    groups = [{"params": decayed, "weight_decay": weight_decay}, {"params": others, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def _check_number(
    name: str,
    value: Any,
    *,
    low: float,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    integer: bool = False,
) -> None:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise TypeError(f"{name} must be {'an int' if integer else 'a number'}, got {type(value).__name__}")
    bad = not math.isfinite(value) or (value <= low if low_open else value < low)
    bad = bad or (high is not None and (value >= high if high_open else value > high))
    if bad:
        lo = f"{'(' if low_open else '['}{low}"
        hi = f"{high}{')' if high_open else ']'}" if high is not None else "inf)"
        raise ValueError(f"{name} must be in {lo}, {hi}, got {value!r}")


def _seed(*key: int) -> int:
    """A well-mixed 63-bit seed from integer keys (numpy SeedSequence), stable across runs and platforms."""
    return int(np.random.SeedSequence([int(k) for k in key]).generate_state(1, np.uint64)[0] >> np.uint64(1))


class ZerothOrderOptimizer(torch.optim.Optimizer):
    """Shared machinery of the two-point zeroth-order optimizers (do not use directly).

    ``step(closure)`` runs ``closure`` twice under ``torch.no_grad()`` (at X + eps Z and X - eps Z), restores X,
    and applies the update. A non-finite two-point difference (e.g. fp16 overflow) skips the update; the skip is
    counted in :attr:`skipped_steps`.

    Restoring X. ``restore="in_place"`` adds eps Z, then -2 eps Z, then eps Z to the weights: exact up to one
    rounding per add, which is ~1e-7 relative in float32 but ~1 ulp per step in bfloat16/float16 (the weights
    drift even at lr = 0; a RuntimeWarning says so). ``restore="exact"`` (the default when an ``nn.Module`` with
    float16/bfloat16 parameters is passed) perturbs each module's own parameters in a forward pre-hook and copies
    them back in its forward hook, so the weights after the two forwards are bit-identical to before, each
    forward sees round(X +- eps Z) computed from X itself, and the extra memory is one copy of the parameters of
    the module currently running (the largest single module, e.g. the embedding), not of the model.

    Data parallelism (``data_parallel=True``, torch.distributed already initialised, e.g. by ``torchrun`` or
    ``accelerate launch``; gloo on CPU, NCCL on GPU). Every rank runs the closure on its own shard; the two losses
    are averaged over ``process_group`` (default: the world) with one all-reduce of two float64 scalars per step,
    and since every direction is regenerated from the shared seed, every rank applies the same update: the
    replicas stay identical without sending weights or gradients. With equal shard sizes and mean losses this is
    the single-process step on the concatenated batch. At construction the ranks check (two all-reduces) that
    they agree on seed, step, parameter count and a weight checksum, and raise ``ValueError`` if not.
    """

    _STREAM_DIRECTION = 0  # U (LOZO) or z (MeZO / 1-D parameters), redrawn every step
    _STREAM_SUBSPACE = 1  # V, redrawn every `interval` steps

    def __init__(
        self,
        params: Iterable[Any] | nn.Module,
        lr: float,
        *,
        eps: float,
        momentum: float,
        weight_decay: float,
        seed: int,
        restore: str = "auto",
        data_parallel: bool = False,
        process_group: Any = None,
    ) -> None:
        _check_number("lr", lr, low=0.0)
        if restore not in ("auto", "exact", "in_place"):
            raise ValueError(f"restore must be one of 'auto', 'exact', 'in_place', got {restore!r}")
        model = params if isinstance(params, nn.Module) else None
        if restore == "exact" and model is None:
            raise ValueError(
                "restore='exact' needs the model: pass the nn.Module as params (its forward hooks perturb one "
                "module at a time)"
            )
        _check_number("eps", eps, low=0.0, low_open=True)
        _check_number("momentum", momentum, low=0.0, high=1.0, high_open=True)
        _check_number("weight_decay", weight_decay, low=0.0)
        _check_number("seed", seed, low=0, integer=True)
        if isinstance(params, nn.Module):
            params = decay_param_groups(params, weight_decay)
        params = list(params)
        flat = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]
        if not any(isinstance(p, torch.Tensor) and p.requires_grad for p in flat):
            raise ValueError(
                f"{type(self).__name__}: no trainable parameters (empty list, or every parameter has "
                "requires_grad=False)"
            )
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})
        for index, p, _ in self._trainable():
            if p.numel() == 0:
                raise ValueError(
                    f"{type(self).__name__}: parameter {index} has shape {tuple(p.shape)} with a zero-size "
                    "dimension; drop it from the optimizer (it has nothing to train)"
                )
        low = [tuple(p.shape) for _, p, _ in self._trainable() if p.dtype in (torch.float16, torch.bfloat16)]
        if restore == "auto":
            restore = "exact" if model is not None and low else "in_place"
        if restore == "in_place" and low:
            warnings.warn(
                f"{type(self).__name__}: {len(low)} float16/bfloat16 parameter(s) (e.g. shape {low[0]}) are "
                "perturbed and restored in place, which rounds: they drift by ~1 ulp per step even at lr = 0. "
                "Pass the nn.Module as params for an exact restore (restore='exact')",
                RuntimeWarning,
                stacklevel=3,
            )
        self.restore = restore
        self._owners: list[tuple[nn.Module, list[tuple[int, torch.Tensor]]]] = []
        if restore == "exact":
            index_of = {id(p): index for index, p, _ in self._trainable()}
            for module in model.modules():
                own = [(index_of[id(p)], p) for p in module.parameters(recurse=False) if id(p) in index_of]
                if own:
                    self._owners.append((module, own))
        self.restore_bytes_peak = 0
        self.eps = float(eps)
        self.momentum = float(momentum)
        self.seed = int(seed)
        self.global_step = 0
        self.skipped_steps = 0
        self._warned_low_precision = False
        if not isinstance(data_parallel, bool):
            raise TypeError(f"data_parallel must be True or False, got {data_parallel!r}")
        self.data_parallel = data_parallel
        self.process_group = process_group
        if data_parallel:
            self._check_replicas()

    # -- data parallelism ---------------------------------------------------------------------------------------
    def _comm_device(self) -> torch.device:
        import torch.distributed as dist

        if dist.get_backend(self.process_group) == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def _check_replicas(self) -> None:
        """Refuse to start unless every rank holds the same seed, step and weights (checked once, at init)."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                f"{type(self).__name__}(data_parallel=True) needs torch.distributed initialised first "
                "(torchrun / accelerate launch, then dist.init_process_group)"
            )
        checksum = sum(float(p.detach().double().sum()) for _, p, _ in self._trainable())
        mine = torch.tensor(
            [float(self.seed), float(self.global_step), float(len(self._trainable())), checksum],
            dtype=torch.float64,
            device=self._comm_device(),
        )
        low, high = mine.clone(), mine.clone()
        dist.all_reduce(low, op=dist.ReduceOp.MIN, group=self.process_group)
        dist.all_reduce(high, op=dist.ReduceOp.MAX, group=self.process_group)
        for name, a, b in zip(("seed", "global_step", "number of parameters", "weight checksum"), low, high):
            if float(a) != float(b):
                raise ValueError(
                    f"{type(self).__name__}(data_parallel=True): ranks disagree on {name} ({float(a)!r} vs "
                    f"{float(b)!r}); every rank must start from the same weights and seed"
                )

    def _average_over_ranks(self, loss_plus: float, loss_minus: float) -> tuple[float, float]:
        """The two losses averaged over the process group: one all-reduce of two float64 scalars per step."""
        import torch.distributed as dist

        losses = torch.tensor([loss_plus, loss_minus], dtype=torch.float64, device=self._comm_device())
        dist.all_reduce(losses, op=dist.ReduceOp.SUM, group=self.process_group)
        losses /= dist.get_world_size(self.process_group)
        return float(losses[0]), float(losses[1])

    # -- parameters -------------------------------------------------------------------------------------------
    def _trainable(self) -> list[tuple[int, torch.Tensor, dict[str, Any]]]:
        out = []
        index = 0
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    out.append((index, p, group))
                index += 1
        return out

    def _generator(self, p: torch.Tensor, *key: int) -> torch.Generator:
        gen = torch.Generator(device=p.device)
        gen.manual_seed(_seed(self.seed, *key))
        return gen

    @staticmethod
    def _compute_dtype(p: torch.Tensor) -> torch.dtype:
        return torch.float64 if p.dtype == torch.float64 else torch.float32

    def _gaussian(self, p: torch.Tensor, shape: tuple[int, ...], *key: int) -> torch.Tensor:
        # Drawn in fp32 whatever the parameter's dtype (so directions do not depend on the model's precision), and
        # used in the parameter's precision when that is higher (float64), in float32 otherwise.
        z = torch.randn(shape, generator=self._generator(p, *key), device=p.device, dtype=torch.float32)
        return z.to(self._compute_dtype(p))

    # -- to be provided by subclasses ---------------------------------------------------------------------------
    def _begin_step(self) -> None:
        """Hook run before the perturbation (LOZO redraws V here)."""

    def _direction(self, index: int, p: torch.Tensor) -> torch.Tensor:
        """The step's direction Z for parameter ``p`` (same shape, fp32), regenerated from seeds."""
        raise NotImplementedError

    def _update(self, index: int, p: torch.Tensor, group: dict[str, Any], c: float) -> None:
        raise NotImplementedError

    def _skip(self, index: int, p: torch.Tensor) -> None:
        """Hook run instead of :meth:`_update` on a skipped step (non-finite c): X is left as it is."""

    # -- the two-point step -------------------------------------------------------------------------------------
    def _perturb(self, params: list[tuple[int, torch.Tensor, dict[str, Any]]], scale: float) -> None:
        for index, p, _ in params:
            self._add_direction(index, p, scale)

    def _evaluate_per_module(self, closure: Closure, scale: float) -> float:
        """Run the closure with X + scale Z seen by every module, restoring X bit for bit (``restore='exact'``).

        A forward pre-hook on each module that owns trainable parameters copies them, adds ``scale * Z`` in
        place, and its forward hook copies the saved values back; so at any moment only the parameters of the
        modules currently running are perturbed, and the extra memory is one copy of the largest running
        module's own parameters (tracked in :attr:`restore_bytes_peak`). Tied parameters are perturbed
        identically in every module that owns them (Z is regenerated from seeds). Whatever is still perturbed
        when the closure raises is restored before the exception propagates. A forward that reads a parameter
        outside its owning module's forward sees it unperturbed: use ``restore='in_place'`` for such models.
        """
        active: dict[int, list[Any]] = {}  # id(p) -> [depth, saved copy, p]

        def held() -> int:
            return sum(entry[1].numel() * entry[1].element_size() for entry in active.values())

        def pre_hook(own: list[tuple[int, torch.Tensor]]) -> Callable[..., None]:
            def hook(module: nn.Module, args: Any) -> None:
                for index, p in own:
                    entry = active.get(id(p))
                    if entry is not None:  # re-entrant call, or a tied parameter already perturbed
                        entry[0] += 1
                        continue
                    active[id(p)] = [1, p.detach().clone(), p]
                    self._add_direction(index, p, scale)
                self.restore_bytes_peak = max(self.restore_bytes_peak, held())

            return hook

        def post_hook(own: list[tuple[int, torch.Tensor]]) -> Callable[..., None]:
            def hook(module: nn.Module, args: Any, output: Any) -> None:
                for _, p in own:
                    entry = active.get(id(p))
                    if entry is None:
                        continue
                    entry[0] -= 1
                    if entry[0] == 0:
                        p.copy_(entry[1])
                        del active[id(p)]

            return hook

        handles = []
        try:
            for module, own in self._owners:
                handles.append(module.register_forward_pre_hook(pre_hook(own)))
                handles.append(module.register_forward_hook(post_hook(own)))
            return self._evaluate(closure)
        finally:
            for handle in handles:
                handle.remove()
            for _, saved, p in active.values():
                p.copy_(saved)
            active.clear()

    def _add_direction(self, index: int, p: torch.Tensor, scale: float) -> None:
        """X <- X + scale * Z for this step's direction Z of parameter ``p``."""
        p.add_((self._direction(index, p) * scale).to(p.dtype))

    def _evaluate(self, closure: Closure) -> float:
        loss = closure()
        if loss is None:
            raise TypeError("the closure returned None; it must return the loss (a scalar) of a forward pass")
        if isinstance(loss, torch.Tensor):
            if loss.numel() != 1:
                raise ValueError(
                    f"the closure must return a scalar loss, got a tensor of shape {tuple(loss.shape)}"
                )
            if loss.dtype in (torch.float16, torch.bfloat16) and not self._warned_low_precision:
                self._warned_low_precision = True
                warnings.warn(
                    f"the closure returned a {loss.dtype} loss: the two-point difference may round to zero; "
                    "compute the loss in float32 (e.g. logits.float())",
                    RuntimeWarning,
                    stacklevel=3,
                )
            return float(loss.detach().double().item())
        if isinstance(loss, np.ndarray) and loss.size == 1 and np.issubdtype(loss.dtype, np.number):
            return float(loss.reshape(()))
        if isinstance(loss, numbers.Real) and not isinstance(loss, (bool, np.bool_)):
            return float(loss)  # int, float and numpy scalars (np.float32, np.int64, ...)
        raise TypeError(f"the closure must return a scalar tensor or number, got {type(loss).__name__}")

    @torch.no_grad()
    def step(self, closure: Closure | None = None) -> torch.Tensor:  # type: ignore[override]
        """One zeroth-order step.

        Args:
            closure: a function that runs a forward pass and returns the scalar loss (no backward). It is called
                twice, under ``torch.no_grad()``.

        Returns:
            The mean of the two measured losses (float64 scalar tensor); NaN/inf when the step was skipped.

        Raises:
            TypeError: no closure, or it returned None / a non-number.
            ValueError: the closure returned a tensor with more than one element.

        The closure may return a scalar tensor, a Python number, a numpy scalar or a one-element numpy array.
        """
        if closure is None or not callable(closure):
            raise TypeError(
                f"{type(self).__name__}.step needs a closure that returns the loss of a forward pass"
            )
        params = self._trainable()
        self._begin_step()
        eps = self.eps
        if self.restore == "exact":
            loss_plus = self._evaluate_per_module(closure, eps)
            loss_minus = self._evaluate_per_module(closure, -eps)
        else:
            self._perturb(params, eps)
            try:
                loss_plus = self._evaluate(closure)
            except BaseException:
                self._perturb(params, -eps)  # X is restored even when the closure raises
                raise
            self._perturb(params, -2 * eps)
            try:
                loss_minus = self._evaluate(closure)
            finally:
                self._perturb(params, eps)
        if self.data_parallel:
            loss_plus, loss_minus = self._average_over_ranks(loss_plus, loss_minus)
        c = (loss_plus - loss_minus) / (2 * eps)
        self.last_projected_grad = c
        if math.isfinite(c):
            for index, p, group in params:
                self._update(index, p, group, c)
        else:
            self.skipped_steps += 1
            for index, p, _ in params:
                self._skip(index, p)
        self.global_step += 1
        return torch.tensor(0.5 * (loss_plus + loss_minus), dtype=torch.float64)

    def zero_grad(self, set_to_none: bool = True) -> None:  # nothing to zero: no gradients are formed
        return None

    # -- checkpointing -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["zeroth_order"] = {
            "global_step": self.global_step,
            "skipped_steps": self.skipped_steps,
            "seed": self.seed,
            "eps": self.eps,
            "momentum": self.momentum,
            **self._extra_state(),
        }
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        extra = state_dict.pop("zeroth_order", None)
        if extra is None:
            raise ValueError(f"not a {type(self).__name__} state dict: the 'zeroth_order' entry is missing")
        super().load_state_dict(state_dict)
        # torch casts floating state to the parameter's dtype on load; the momentum is kept in float32 (or float64)
        # whatever the parameter's dtype, so put the saved buffers back unrounded for a bit-identical resume.
        saved_ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        for saved_id, p in zip(saved_ids, params):
            buf = state_dict["state"].get(saved_id, {}).get("momentum_buffer")
            if buf is not None:
                self.state[p]["momentum_buffer"] = buf.detach().clone().to(device=p.device)
        self.global_step = int(extra["global_step"])
        self.skipped_steps = int(extra["skipped_steps"])
        self.seed = int(extra["seed"])
        self.eps = float(extra["eps"])
        self.momentum = float(extra["momentum"])
        self._load_extra_state(extra)

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _load_extra_state(self, extra: dict[str, Any]) -> None:
        return None

    # -- shared update pieces ------------------------------------------------------------------------------------
    def _decay(self, p: torch.Tensor, group: dict[str, Any]) -> None:
        if group["weight_decay"]:
            p.mul_(1.0 - group["lr"] * group["weight_decay"])

    def _full_update(self, index: int, p: torch.Tensor, group: dict[str, Any], c: float) -> None:
        """MeZO update with an optional full-size momentum buffer: X <- X - lr (c z) or X <- X - lr m."""
        z = self._gaussian(p, tuple(p.shape), self._STREAM_DIRECTION, self.global_step, index)
        self._decay(p, group)
        if self.momentum == 0.0:
            p.add_((z * (-group["lr"] * c)).to(p.dtype))
            return
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = c * z
        else:
            state["momentum_buffer"] = (
                self.momentum * state["momentum_buffer"] + (c * (1.0 - self.momentum)) * z
            )
        p.add_((state["momentum_buffer"] * -group["lr"]).to(p.dtype))


class MeZO(ZerothOrderOptimizer):
    """MeZO: memory-efficient zeroth-order SGD (Malladi et al., NeurIPS 2023, arXiv 2305.17333), the baseline.

    Every trainable parameter gets a full Gaussian direction z ~ N(0, I) per step; the update is
    ``X <- X - lr * (c z + weight_decay X)`` with c the two-point projected gradient. With ``momentum > 0`` a
    full-size buffer ``m <- beta m + (1 - beta) c z`` is used (first step m = c z).

    Args:
        params: an ``nn.Module`` (weight decay then skips norm layers and biases by module type, see
            :func:`decay_param_groups`), or parameters / param groups as for any torch optimizer.
        lr: learning rate, >= 0.
        eps: perturbation scale, > 0.
        momentum: beta in [0, 1).
        weight_decay: >= 0.
        seed: base seed; every direction is a deterministic function of (seed, step, parameter index).
        restore: how X +- eps Z is undone after each forward (see :class:`ZerothOrderOptimizer`): ``"exact"``
            (needs the ``nn.Module``), ``"in_place"`` or ``"auto"`` (exact when a module with float16/bfloat16
            parameters is given).
        data_parallel: average the two losses over ``process_group`` every step (see
            :class:`ZerothOrderOptimizer`); needs torch.distributed initialised.
        process_group: the ranks that hold replicas (default: the whole world).

    Raises:
        ValueError / TypeError: a value outside the ranges above, no trainable parameters, a parameter with a
            zero-size dimension, or (``data_parallel``) ranks that do not start from the same weights and seed.
        RuntimeError: ``data_parallel=True`` without an initialised torch.distributed.
    """

    def __init__(
        self,
        params: Iterable[Any] | nn.Module,
        lr: float = 1e-6,
        *,
        eps: float = 1e-3,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        seed: int = 0,
        restore: str = "auto",
        data_parallel: bool = False,
        process_group: Any = None,
    ) -> None:
        super().__init__(
            params,
            lr,
            eps=eps,
            momentum=momentum,
            weight_decay=weight_decay,
            seed=seed,
            restore=restore,
            data_parallel=data_parallel,
            process_group=process_group,
        )

    def _direction(self, index: int, p: torch.Tensor) -> torch.Tensor:
        return self._gaussian(p, tuple(p.shape), self._STREAM_DIRECTION, self.global_step, index)

    def _update(self, index: int, p: torch.Tensor, group: dict[str, Any], c: float) -> None:
        self._full_update(index, p, group, c)


class LOZO(ZerothOrderOptimizer):
    """LOZO / LOZO-M: low-rank zeroth-order optimizer (Chen et al., ICLR 2025, arXiv 2410.07698).

    For each trainable parameter with ndim >= 2, viewed as an m x n matrix (``m = shape[0]``, ``n`` = the product of
    the other dims), the direction is Z = U V^T with U ~ N(0,1)^{m x r} redrawn every step and V ~ N(0,1)^{n x r}
    redrawn every ``interval`` steps (steps 0, interval, 2 interval, ...). The update is

        X <- X - lr * (c U V^T / r + weight_decay X)                       (momentum = 0, LOZO)
        M <- beta M + (1 - beta) c U / r;  X <- X - lr * (M V^T + wd X)      (momentum = beta > 0, LOZO-M)

    and when V is redrawn LOZO-M first moves M to the new subspace, M <- M V_old^T V_new / n. The first LOZO-M step
    sets M = c U / r. Parameters with ndim < 2 get MeZO's full Gaussian direction and update. A skipped step
    (non-finite c, e.g. fp16 overflow) changes neither X nor M's scale, but on a redraw step M still moves to the
    new subspace (M <- M V_old^T V_new / n), so the next update stays in span(V_new) at the right scale.

    Deviation from the official code (stated, on purpose): the update is divided by ``r`` so that the estimate is
    unbiased (E[c U V^T / r] = grad for a linear loss); the official code omits it, which makes its effective
    learning rate r times larger. V is drawn from its own seed stream, so the U regenerated for the update is
    always the U used in the perturbation (the official code redraws U after V on V-resample steps, so its update
    is uncorrelated with the measured c on those steps).

    Args:
        params: an ``nn.Module`` (weight decay then skips norm layers and biases by module type), or parameters /
            param groups as for any torch optimizer (``lr`` and ``weight_decay`` may be set per group).
        lr: learning rate, >= 0.
        eps: perturbation scale, > 0 (paper default 1e-3).
        rank: r >= 1 (paper default 2). A matrix whose smaller side is below ``rank`` uses ``min(rank, m, n)``
            for itself, and a ``UserWarning`` says how many were clamped.
        interval: nu >= 1, steps between redraws of V (paper default 50; ``interval=1`` is "no lazy sampling").
        momentum: beta in [0, 1); 0 is LOZO, > 0 is LOZO-M (paper 0.9).
        weight_decay: >= 0.
        seed: base seed; U, V and z are deterministic functions of (seed, step or period, parameter index).
        restore: how X +- eps Z is undone after each forward (see :class:`ZerothOrderOptimizer`): ``"exact"``
            (needs the ``nn.Module``), ``"in_place"`` or ``"auto"`` (exact when a module with float16/bfloat16
            parameters is given).
        data_parallel: average the two losses over ``process_group`` every step (see
            :class:`ZerothOrderOptimizer`); needs torch.distributed initialised.
        process_group: the ranks that hold replicas (default: the whole world).

    Raises:
        ValueError / TypeError: a value outside the ranges above, no trainable parameters, a parameter with a
            zero-size dimension, or (``data_parallel``) ranks that do not start from the same weights and seed.
        RuntimeError: ``data_parallel=True`` without an initialised torch.distributed.

    References:
        Chen, Zhang, Cao, Yuan, Wen. "Enhancing Zeroth-order Fine-tuning for Language Models with Low-rank
        Structures." ICLR 2025, arXiv:2410.07698 (Alg. 1 LOZO, Alg. 2 LOZO-M).
    """

    def __init__(
        self,
        params: Iterable[Any] | nn.Module,
        lr: float = 1e-6,
        *,
        eps: float = 1e-3,
        rank: int = 2,
        interval: int = 50,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        seed: int = 0,
        restore: str = "auto",
        data_parallel: bool = False,
        process_group: Any = None,
    ) -> None:
        _check_number("rank", rank, low=1, integer=True)
        _check_number("interval", interval, low=1, integer=True)
        super().__init__(
            params,
            lr,
            eps=eps,
            momentum=momentum,
            weight_decay=weight_decay,
            seed=seed,
            restore=restore,
            data_parallel=data_parallel,
            process_group=process_group,
        )
        self.rank = int(rank)
        self.interval = int(interval)
        self._old_v: dict[int, torch.Tensor] = {}
        clamped = [
            tuple(p.shape)
            for _, p, _ in self._trainable()
            if p.ndim >= 2 and min(self._matrix_shape(p)) < rank
        ]
        if clamped:
            warnings.warn(
                f"LOZO: rank={rank} exceeds the smaller side of {len(clamped)} parameter(s) "
                f"(e.g. shape {clamped[0]}); each of those uses rank min(rank, m, n)",
                UserWarning,
                stacklevel=2,
            )

    @staticmethod
    def _matrix_shape(p: torch.Tensor) -> tuple[int, int]:
        return p.shape[0], p.numel() // p.shape[0]

    def rank_of(self, p: torch.Tensor) -> int:
        """The rank LOZO uses for parameter ``p`` (``min(rank, m, n)``; 0 for parameters with ndim < 2)."""
        return min(self.rank, *self._matrix_shape(p)) if p.ndim >= 2 else 0

    def _begin_step(self) -> None:
        self._old_v = {}
        if self.global_step % self.interval != 0:
            return
        period = self.global_step // self.interval
        for index, p, _ in self._trainable():
            if p.ndim < 2:
                continue
            state = self.state[p]
            if "V" in state:
                self._old_v[index] = state["V"]
            n = self._matrix_shape(p)[1]
            state["V"] = self._gaussian(p, (n, self.rank_of(p)), self._STREAM_SUBSPACE, period, index)

    def _u(self, index: int, p: torch.Tensor) -> torch.Tensor:
        m = self._matrix_shape(p)[0]
        return self._gaussian(p, (m, self.rank_of(p)), self._STREAM_DIRECTION, self.global_step, index)

    def _direction(self, index: int, p: torch.Tensor) -> torch.Tensor:
        # Only 1-D parameters take a dense direction; matrices go through _add_low_rank (U V^T is never formed).
        return self._gaussian(p, tuple(p.shape), self._STREAM_DIRECTION, self.global_step, index)

    @staticmethod
    def _add_low_rank(p: torch.Tensor, left: torch.Tensor, v: torch.Tensor) -> None:
        """X <- X + left @ v^T in place, with X viewed as m x n; no m x n temporary.

        float32/float64, and any dtype on an accelerator: one fused ``addmm_``. float16/bfloat16 on CPU: a block
        of rows at a time (at most ``_LOW_PRECISION_BLOCK`` elements, 4 MiB) is widened to float32, gets the
        float32 product added, and is rounded back once; so X becomes round(X + left v^T) exactly, on every CPU.
        On a CPU without matrix units for the dtype (e.g. oneDNN limited to AVX2) a low-precision ``addmm_`` is
        tens of times slower than these blocks (``iclr25-lozo bench --low-rank-add``; package README).
        """
        matrix = p.view(p.shape[0], -1) if p.is_contiguous() else None
        if matrix is None:  # pragma: no cover - parameters are contiguous in practice
            p.add_((left.float() @ v.T.float()).reshape(p.shape).to(p.dtype))
            return
        if p.dtype in (torch.float32, torch.float64) or p.device.type != "cpu":
            matrix.addmm_(left.to(p.dtype), v.T.to(p.dtype))
            return
        left, vt = left.float(), v.T.float().contiguous()
        rows = max(1, _LOW_PRECISION_BLOCK // matrix.shape[1])
        for start in range(0, matrix.shape[0], rows):
            block = matrix[start : start + rows]
            block.copy_(block.float().addmm_(left[start : start + rows], vt))

    def _add_direction(self, index: int, p: torch.Tensor, scale: float) -> None:
        if p.ndim < 2:
            super()._add_direction(index, p, scale)
            return
        self._add_low_rank(p, self._u(index, p) * scale, self.state[p]["V"])

    def _move_momentum(self, index: int, p: torch.Tensor) -> torch.Tensor | None:
        """The LOZO-M momentum expressed in the current V: M V_old^T V_new / n on a redraw step (paper Alg. 2)."""
        buf = self.state[p].get("momentum_buffer")
        if buf is not None and index in self._old_v:
            n = self._matrix_shape(p)[1]
            buf = buf @ (self._old_v[index].T @ self.state[p]["V"]) / n
        return buf

    def _skip(self, index: int, p: torch.Tensor) -> None:
        # A skipped step (non-finite c) adds no gradient term and does not decay M, but when V was redrawn this
        # step M must still move to the new subspace: M V^T is only meaningful with the V it was built for.
        if p.ndim >= 2 and self.momentum > 0.0:
            buf = self._move_momentum(index, p)
            if buf is not None:
                self.state[p]["momentum_buffer"] = buf

    def _update(self, index: int, p: torch.Tensor, group: dict[str, Any], c: float) -> None:
        if p.ndim < 2:
            self._full_update(index, p, group, c)
            return
        state = self.state[p]
        r = self.rank_of(p)
        v = state["V"]
        grad_u = (c / r) * self._u(index, p)  # the compressed gradient estimate: g = grad_u V^T
        self._decay(p, group)
        if self.momentum == 0.0:
            self._add_low_rank(p, grad_u * -group["lr"], v)
            return
        beta = self.momentum
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = grad_u
        else:  # when V was redrawn this step M first moves to the new subspace (paper Alg. 2)
            state["momentum_buffer"] = beta * self._move_momentum(index, p) + (1.0 - beta) * grad_u
        self._add_low_rank(p, state["momentum_buffer"] * -group["lr"], v)

    def _extra_state(self) -> dict[str, Any]:
        return {"rank": self.rank, "interval": self.interval}

    def _load_extra_state(self, extra: dict[str, Any]) -> None:
        self.rank = int(extra["rank"])
        self.interval = int(extra["interval"])
        # V is a function of (seed, period, index): regenerate it exactly instead of trusting a dtype-cast copy.
        if self.global_step > 0:
            period = (self.global_step - 1) // self.interval
            for index, p, _ in self._trainable():
                if p.ndim >= 2:
                    n = self._matrix_shape(p)[1]
                    self.state[p]["V"] = self._gaussian(
                        p, (n, self.rank_of(p)), self._STREAM_SUBSPACE, period, index
                    )

    def state_bytes(self) -> int:
        """Bytes of optimizer state: V (sum n r) plus, for LOZO-M, the compressed momentum (sum m r) and the
        full buffers of 1-D parameters."""
        return sum(
            t.numel() * t.element_size()
            for s in self.state.values()
            for t in s.values()
            if torch.is_tensor(t)
        )
