"""Ada-K allocators and the variable-k routing patch for Hugging Face MoE blocks (arXiv:2410.10456, Section 3).

Ada-K keeps the host model's router (it still decides *which* experts a token uses, and how their gate weights
are normalised) and adds, in front of every MoE block ``l``, a lightweight allocator: a linear map of the block's
input ``x_t^l`` to a softmax over the number of experts ``k in {k_min, ..., k_max}`` (Section 3.2). During PPO
training ``k`` is sampled from that policy; at inference the most probable ``k`` is used.

The patch replaces ``block.gate`` (the host's top-k router) with :class:`AdaKRouter`, which calls the host router
once per *distinct* ``k`` in the batch with its ``top_k`` set to that ``k`` and scatters the result into a padded
``(tokens, max k)`` routing table whose unused slots hold the sentinel expert id ``num_experts`` with weight 0.
Hugging Face's expert implementations skip that sentinel (the expert-parallel convention of
``transformers.integrations.moe``), so a token with ``k`` experts costs ``k`` expert evaluations, and each host's
renormalisation, scaling factor, grouped top-k and shared experts stay exactly as the host wrote them.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from iclr25_adak._dispatch import grouped_experts_forward, supports_grouped_dispatch
from iclr25_shared.checks import check_choice, check_int

__all__ = [
    "ALLOCATORS_FILE",
    "SUPPORTED_BLOCKS",
    "AdaKAllocator",
    "AdaKPatch",
    "AdaKRouter",
    "apply_adak",
    "expert_flops_per_token",
    "find_moe_blocks",
    "load_pretrained",
    "variable_k_route",
]

# (module, class name of the sparse MoE block) of the Hugging Face MoE families the patch supports.
SUPPORTED_BLOCKS: tuple[tuple[str, str], ...] = (
    ("transformers.models.mixtral.modeling_mixtral", "MixtralSparseMoeBlock"),
    ("transformers.models.qwen2_moe.modeling_qwen2_moe", "Qwen2MoeSparseMoeBlock"),
    ("transformers.models.qwen3_moe.modeling_qwen3_moe", "Qwen3MoeSparseMoeBlock"),
    ("transformers.models.olmoe.modeling_olmoe", "OlmoeSparseMoeBlock"),
    ("transformers.models.deepseek_v2.modeling_deepseek_v2", "DeepseekV2Moe"),
    ("transformers.models.deepseek_v3.modeling_deepseek_v3", "DeepseekV3MoE"),
)

Mode = Literal["sample", "argmax", "fixed"]

ALLOCATORS_FILE = "adak_allocators.safetensors"
"""What a patched model's ``save_pretrained`` writes beside the host's files: the allocators' weights, with the
:func:`apply_adak` settings and the patched block names in the file's metadata."""


def _supported_classes() -> dict[type, str]:
    found: dict[type, str] = {}
    for module_name, cls_name in SUPPORTED_BLOCKS:
        try:
            cls = getattr(importlib.import_module(module_name), cls_name)
        except (ImportError, AttributeError):
            continue
        found[cls] = cls_name
    return found


class AdaKAllocator(nn.Module):
    """The per-layer allocator ``pi_l(k | x) = softmax(W_l x + b_l)`` over ``k in {k_min, ..., k_max}``.

    Args:
        hidden_size: ``d``, width of the MoE block input.
        k_min, k_max: the smallest and largest number of experts a token may get (``1 <= k_min <= k_max``).
        init_k: the ``k`` the untrained policy prefers: ``W = 0`` and the bias is ``init_logit`` at
            ``init_k`` and 0 elsewhere, so the initial argmax policy is the host's static top-k.
        init_logit: that bias (>= 0). 0 gives the uniform policy.

    Shapes: ``forward(x)``: ``x`` ``(tokens, d)`` any float dtype -> logits ``(tokens, k_max - k_min + 1)`` in
    float32, or float64 when the allocator is float64. The parameters are created in float32 and follow the model's
    casts (``model.to(torch.bfloat16)`` casts them too); the product is always taken in at least float32.

    References:
        Yue et al., "Ada-K Routing: Boosting the Efficiency of MoE-based LLMs", ICLR 2025, arXiv:2410.10456,
        Section 3.2 (allocator: a linear layer and a softmax over the possible k).
    """

    def __init__(
        self, hidden_size: int, k_min: int, k_max: int, *, init_k: int, init_logit: float = 2.0
    ) -> None:
        super().__init__()
        hidden_size = check_int("hidden_size", hidden_size, low=1)
        k_min = check_int("k_min", k_min, low=1)
        k_max = check_int("k_max", k_max, low=k_min)
        init_k = check_int("init_k", init_k, low=k_min, high=k_max)
        self.k_min, self.k_max = k_min, k_max
        self.proj = nn.Linear(hidden_size, k_max - k_min + 1, dtype=torch.float32)
        with torch.no_grad():
            self.proj.weight.zero_()
            self.proj.bias.zero_()
            self.proj.bias[init_k - k_min] = float(init_logit)

    @property
    def num_actions(self) -> int:
        return self.k_max - self.k_min + 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(self.proj.weight.dtype, torch.float32)
        return nn.functional.linear(x.to(dtype), self.proj.weight.to(dtype), self.proj.bias.to(dtype))

    def k_values(self, device: Any = None) -> torch.Tensor:
        """``(actions,)`` int64: the ``k`` of each action index (``k = k_min + a``)."""
        return torch.arange(self.k_min, self.k_max + 1, device=device)


@contextlib.contextmanager
def _top_k(gate: nn.Module, k: int) -> Iterator[None]:
    old = gate.top_k
    gate.top_k = k
    try:
        yield
    finally:
        gate.top_k = old


def variable_k_route(
    gate: nn.Module, x: torch.Tensor, k: torch.Tensor, num_experts: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Route every token ``t`` to its own number of experts ``k[t]`` with the host router ``gate``.

    The host router (``gate(x) -> (logits, weights, indices)`` with a ``top_k`` attribute, as in every supported
    Hugging Face family) is called once per distinct value of ``k`` on the tokens that have it (a loop over at most
    ``N`` values, never over tokens), so its selection rule and weight normalisation apply unchanged. Unused slots
    get the sentinel expert id ``num_experts`` and weight 0.

    Args:
        gate: the host's top-k router module.
        x: ``(tokens, d)`` block input.
        k: ``(tokens,)`` int64, each in ``[1, num_experts]``.
        num_experts: ``N``, the sentinel id.

    Returns:
        ``logits`` ``(tokens, N)`` router logits, ``weights`` ``(tokens, max k)`` and ``indices``
        ``(tokens, max k)`` int64. When every token has the same ``k`` this is exactly ``gate(x)`` with
        ``top_k = k``.

    Raises:
        ValueError: ``k`` has the wrong shape or a value outside ``[1, num_experts]``.
    """
    return _route(gate, x, k, num_experts)[:3]


def _route(
    gate: nn.Module, x: torch.Tensor, k: torch.Tensor, num_experts: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
    """:func:`variable_k_route` and whether every token got the same ``k`` (then the table is the host's own)."""
    n = x.shape[0]
    if k.shape != (n,):
        raise ValueError(f"k must have shape ({n},) (one count per token), got {tuple(k.shape)}")
    if n == 0:
        with _top_k(gate, 1):
            return (*gate(x), True)
    lo, hi = int(k.min()), int(k.max())
    if lo < 1 or hi > num_experts:
        raise ValueError(f"k must be in [1, {num_experts}] for every token, got values in [{lo}, {hi}]")
    if lo == hi:
        with _top_k(gate, lo):
            return (*gate(x), True)
    if _is_softmax_topk_router(gate):
        return (*_softmax_topk_route(gate, x, k, hi, num_experts), False)
    logits = weights = None
    indices = torch.full((n, hi), num_experts, dtype=torch.long, device=x.device)
    for kv in torch.unique(k).tolist():
        rows = (k == kv).nonzero().squeeze(1)
        with _top_k(gate, int(kv)):
            lg, w, ix = gate(x[rows])
        if logits is None:
            logits = lg.new_empty((n, lg.shape[-1]))
            weights = w.new_zeros((n, hi))
        logits[rows] = lg
        weights[rows, :kv] = w
        indices[rows, :kv] = ix.to(torch.long)
    return logits, weights, indices, False


# routers whose forward is "linear -> softmax (float32) -> top-k -> optional renormalisation over the top-k": the
# top-k_t of a token is the first k_t of its top-(max k), so one call serves every k (transformers 5.18-5.24 sources)
_SOFTMAX_TOPK_ROUTERS: dict[str, tuple[str, bool]] = {
    # class name: (module, whether the weights are cast back to the logits' dtype)
    "MixtralTopKRouter": ("transformers.models.mixtral.modeling_mixtral", False),
    "Qwen2MoeTopKRouter": ("transformers.models.qwen2_moe.modeling_qwen2_moe", True),
    "Qwen3MoeTopKRouter": ("transformers.models.qwen3_moe.modeling_qwen3_moe", True),
    "OlmoeTopKRouter": ("transformers.models.olmoe.modeling_olmoe", True),
}


def _is_softmax_topk_router(gate: nn.Module) -> bool:
    spec = _SOFTMAX_TOPK_ROUTERS.get(type(gate).__name__)
    return (
        spec is not None
        and type(gate).__module__ == spec[0]
        and "forward" not in gate.__dict__  # not re-bound by someone else
        and isinstance(getattr(gate, "weight", None), torch.Tensor)
    )


def _softmax_topk_route(
    gate: nn.Module, x: torch.Tensor, k: torch.Tensor, hi: int, num_experts: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One call of a softmax-top-k router's arithmetic at ``top_k = hi``, each token cut to its own ``k_t``: the
    slots past ``k_t`` get the sentinel id and weight 0, and the renormalisation (Mixtral always, the others when
    ``norm_topk_prob``) sums only the first ``k_t`` values. The same selection and weights as one host call per
    distinct k (up to the order of a float32 sum of at most ``hi`` terms), without a gather and scatter per k."""
    renorm = type(gate).__name__ == "MixtralTopKRouter" or bool(getattr(gate, "norm_topk_prob", False))
    cast = _SOFTMAX_TOPK_ROUTERS[type(gate).__name__][1]
    logits = nn.functional.linear(x.reshape(-1, gate.weight.shape[-1]), gate.weight)
    probs = torch.softmax(logits, dim=-1, dtype=torch.float)
    values, indices = torch.topk(probs, hi, dim=-1)
    keep = torch.arange(hi, device=x.device)[None, :] < k[:, None]
    values = torch.where(keep, values, 0.0)
    if renorm:
        values = values / values.sum(dim=-1, keepdim=True)
    if cast:
        values = values.to(logits.dtype)
    indices = torch.where(keep, indices, num_experts)
    return logits, values, indices


@dataclass
class LayerCounters:
    """Running counts of one patched block: tokens routed and experts activated (sum of k)."""

    tokens: int = 0
    experts: int = 0

    def add(self, k: torch.Tensor) -> None:
        self.tokens += int(k.numel())
        self.experts += int(k.sum())


class AdaKRouter(nn.Module):
    """Stands in for a host MoE block's router: an :class:`AdaKAllocator` picks ``k`` per token, the host router
    (kept, frozen, as ``self.router``) picks which ``k`` experts and their weights.

    Modes: ``"argmax"`` (inference: the most probable ``k``, deterministic), ``"sample"`` (PPO rollouts: ``k``
    drawn from the policy with the patch's generator), ``"fixed"`` (every token gets ``fixed_k``: the static
    top-k baseline with the same patched code path).
    When ``record`` is on, each call appends ``(x, action, log_prob)`` (detached) for the PPO update.
    """

    def __init__(
        self, router: nn.Module, allocator: AdaKAllocator, num_experts: int, patch: AdaKPatch
    ) -> None:
        super().__init__()
        self.router = router
        self.allocator = allocator
        self.num_experts = num_experts
        self._patch = [patch]  # a list so nn.Module does not register the owner as a submodule
        self.counters = LayerCounters()
        self.records: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self.layer = 0  # its index in patch.routers
        self.variable = False  # whether the last routing table mixed several k (then grouped dispatch)

    @property
    def top_k(self) -> int:
        return self.router.top_k

    def choose_k(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """``(tokens,)`` int64 ``k`` for the block input ``x`` ``(tokens, d)``, with the action index and log-prob
        (``None`` in fixed mode)."""
        patch = self._patch[0]
        if patch.mode == "fixed":
            k = torch.full((x.shape[0],), patch.fixed_k, dtype=torch.long, device=x.device)
            return k, None, None
        with torch.no_grad():
            logits = self.allocator(x)
            logp = torch.log_softmax(logits, dim=-1)
            if patch.mode == "argmax":
                action = logits.argmax(dim=-1)
            else:
                probs = logp.exp()
                if not bool(torch.isfinite(probs).all()):
                    raise FloatingPointError(
                        "non-finite MoE block input reached the Ada-K allocator (the model produced NaN/inf)"
                    )
                noise = patch.sample_noise[self.layer] if patch.sample_noise is not None else None
                if noise is None:
                    action = torch.multinomial(probs, 1, generator=patch.generator(x.device)).squeeze(1)
                else:  # inverse CDF of given uniforms: the same draw for a token whatever batch it is in
                    if noise.shape != (x.shape[0],):
                        raise ValueError(
                            f"sample_noise[{self.layer}] has shape {tuple(noise.shape)}, the block routes"
                            f" {x.shape[0]} tokens"
                        )
                    below = probs.cumsum(dim=-1) < noise.to(probs)[:, None]
                    action = below.sum(dim=-1).clamp(max=probs.shape[-1] - 1)
            action_logp = logp.gather(1, action[:, None]).squeeze(1)
        return action + self.allocator.k_min, action, action_logp

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = hidden_states.reshape(-1, hidden_states.shape[-1])
        k, action, action_logp = self.choose_k(x)
        patch = self._patch[0]
        if patch.record and action is not None:
            self.records.append((x.detach(), action, action_logp))
        if patch.count:
            self.counters.add(k)
        logits, weights, indices, uniform = _route(self.router, x, k, self.num_experts)
        self.variable = not uniform
        return logits, weights, indices


def _install_dispatch(experts: nn.Module, router: AdaKRouter, patch: AdaKPatch) -> None:
    """Route the experts module's calls: a table that mixes several ``k`` goes to
    :func:`~iclr25_adak._dispatch.grouped_experts_forward` (when ``patch.dispatch == "grouped"``); a table with
    one ``k`` for every token (static top-K, or an allocator that chose one k) goes to the host's own kernel,
    so those outputs stay the host's bit for bit. ``AdaKPatch.remove`` uninstalls it."""
    host_forward = type(experts).forward

    def forward(
        hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        variable, router.variable = router.variable, False  # one-shot: a later call without the router (its
        # own table, or the host routers put back for saving) goes to the host kernel
        if variable and patch.dispatch == "grouped":
            return grouped_experts_forward(
                experts, hidden_states, top_k_index, top_k_weights, impl=patch.dispatch_impl
            )
        return host_forward(experts, hidden_states, top_k_index, top_k_weights)

    experts.forward = forward  # an instance attribute; remove() deletes it


def expert_flops_per_token(experts: nn.Module) -> int:
    """FLOPs of one expert on one token (2 per multiply-add), from the host experts' weight shapes.

    Gated experts (``gate_up_proj`` ``(N, 2f, d)``, ``down_proj`` ``(N, d, f)``): ``2 (2 f d + d f)``.
    """
    total = 0
    for name in ("gate_up_proj", "up_proj", "down_proj"):
        w = getattr(experts, name, None)
        if isinstance(w, torch.Tensor) and w.dim() == 3:
            total += 2 * int(w.shape[1]) * int(w.shape[2])
    if total == 0:
        raise ValueError(f"cannot count FLOPs of {type(experts).__name__}: no 3-D expert weights found")
    return total


class AdaKPatch:
    """What :func:`apply_adak` returns: the patched blocks, their allocators and routers, counters and modes.

    Attributes:
        model: the patched model.
        routers: the :class:`AdaKRouter` of each MoE block, in module order (``layers``).
        names: the module names of the patched blocks.
        host_top_k: the host's static ``K`` (``num_experts_per_tok``).
        num_experts: ``N`` experts per block.
        mode: ``"argmax"`` (default), ``"sample"`` or ``"fixed"``; ``fixed_k`` is used in fixed mode.
        record: whether routers store ``(x, action, log_prob)`` for PPO; ``count``: whether counters run.
    """

    def __init__(self, model: nn.Module, seed: int = 0) -> None:
        self.model = model
        self.routers: list[AdaKRouter] = []
        self.names: list[str] = []
        self.blocks: list[nn.Module] = []
        self.host_top_k = 0
        self.num_experts = 0
        self.mode: Mode = "argmax"
        self.fixed_k = 1
        self.record = False
        self.count = True
        self.seed = seed
        self._generators: dict[str, torch.Generator] = {}
        self._host_max_k = 0
        self._ep_flags: list[bool | None] = []
        self.settings: dict[str, Any] = {}  # the apply_adak arguments, saved with the allocators
        # what remove() puts back: each parameter's own requires_grad and each module's training mode
        self._requires_grad = [(p, p.requires_grad) for p in model.parameters()]
        self._training = [(m, m.training) for m in model.modules()]
        self._save_installed = False
        self.sample_noise: list[torch.Tensor] | None = None
        """Per layer, ``(tokens,)`` uniforms in [0, 1) that ``"sample"`` mode turns into actions by inverse CDF
        instead of drawing from the generator (set by :func:`~iclr25_adak.train_allocators` so that a token's draw
        does not depend on which rank or batch it is in)."""
        self.dispatch: Literal["grouped", "host"] = "grouped"
        self.dispatch_impl: Literal["auto", "loop", "grouped_mm"] = "auto"
        self._dispatch_installed: list[nn.Module] = []

    # -- policy ------------------------------------------------------------------------------------------------
    def allocators(self) -> list[AdaKAllocator]:
        return [r.allocator for r in self.routers]

    def parameters(self) -> list[nn.Parameter]:
        """The trainable parameters: the allocators' only."""
        return [p for a in self.allocators() for p in a.parameters()]

    def generator(self, device: torch.device) -> torch.Generator:
        key = str(device)
        if key not in self._generators:
            gen = torch.Generator(device=device)
            gen.manual_seed(self.seed)
            self._generators[key] = gen
        return self._generators[key]

    def reseed(self, seed: int) -> None:
        self.seed = check_int("seed", seed, low=0)
        self.settings["seed"] = self.seed
        self._generators.clear()

    def set_mode(self, mode: Mode, k: int | None = None) -> None:
        """``"argmax"``, ``"sample"`` or ``"fixed"`` (then ``k`` in ``[1, N]`` is every token's count).

        Raises:
            ValueError: unknown mode, or ``k`` missing/outside ``[1, N]`` in fixed mode.
        """
        check_choice("mode", mode, ("argmax", "sample", "fixed"))
        if mode == "fixed":
            if k is None:
                raise ValueError("k must be given in fixed mode (an integer in [1, num_experts])")
            self.fixed_k = check_int("k", k, low=1, high=self.reachable_k)
        self.mode = mode

    @contextlib.contextmanager
    def mode_as(self, mode: Mode, k: int | None = None) -> Iterator[AdaKPatch]:
        old = (self.mode, self.fixed_k)
        self.set_mode(mode, k)
        try:
            yield self
        finally:
            self.mode, self.fixed_k = old

    @property
    def reachable_k(self) -> int:
        """The largest k every patched host router can serve (``N``, or fewer under grouped top-k)."""
        return self._host_max_k

    # -- records and counters ----------------------------------------------------------------------------------
    def take_records(self) -> list[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]:
        """Per layer, the ``(x, action, log_prob)`` chunks recorded since the last call (and clear them)."""
        out = [r.records for r in self.routers]
        for r in self.routers:
            r.records = []
        return out

    def reset_counters(self) -> None:
        for r in self.routers:
            r.counters = LayerCounters()

    def mean_k_per_layer(self) -> list[float]:
        """Mean activated experts per token for each patched block since the last reset."""
        return [r.counters.experts / max(r.counters.tokens, 1) for r in self.routers]

    def flops(self) -> dict[str, Any]:
        """Routed-expert FLOPs since the last reset, per layer and total, and the reduction against static top-K.

        ``expert_flops = sum_t k_t * c`` with ``c`` = :func:`expert_flops_per_token`, so the reduction against
        top-K on the same tokens is ``1 - mean(k) / K`` exactly (shared experts, attention and the LM head are
        the same for both and left out).
        """
        per_layer, base = [], []
        for r, block in zip(self.routers, self.blocks, strict=True):
            c = expert_flops_per_token(block.experts)
            per_layer.append(r.counters.experts * c)
            base.append(r.counters.tokens * self.host_top_k * c)
        total, total_base = sum(per_layer), sum(base)
        return {
            "expert_flops_per_layer": per_layer,
            "expert_flops": total,
            "topk_expert_flops": total_base,
            "flops_reduction": 1.0 - total / total_base if total_base else 0.0,
        }

    # -- undo ------------------------------------------------------------------------------------------------
    def remove(self) -> None:
        """Undo the patch: the host routers go back in place, every parameter gets back its own ``requires_grad``
        and every module the training mode it had when :func:`apply_adak` was called, and the model's
        ``save_pretrained`` is the class's again. The model is then the original one (same outputs, bit for bit).
        Calling it twice does nothing the second time."""
        for block, router, flag in zip(self.blocks, self.routers, self._ep_flags, strict=True):
            block.gate = router.router
            if flag is not None:
                block.experts._is_expert_parallel = flag
        for experts in self._dispatch_installed:
            experts.__dict__.pop("forward", None)
        self._dispatch_installed = []
        if self.routers:
            for p, requires_grad in self._requires_grad:
                p.requires_grad_(requires_grad)
            for m, training in self._training:
                m.training = training
        if self._save_installed:
            self.model.__dict__.pop("save_pretrained", None)
            self._save_installed = False
        self.routers, self.blocks, self.names, self._ep_flags = [], [], [], []

    @contextlib.contextmanager
    def _host_routers(self) -> Iterator[None]:
        """The host routers in place for the duration (the model's own state dict keys, ``gate.weight``)."""
        for block, router in zip(self.blocks, self.routers, strict=True):
            block.gate = router.router
        try:
            yield
        finally:
            for block, router in zip(self.blocks, self.routers, strict=True):
                block.gate = router

    # -- save and load -------------------------------------------------------------------------------------------
    def save_pretrained(self, save_directory: str | os.PathLike[str], **kwargs: Any) -> None:
        """Save the patched model so that :func:`load_pretrained` restores it exactly.

        The host model is saved by its own ``save_pretrained`` (keyword arguments pass through) with the host
        routers in place, so the folder is an ordinary checkpoint of the host (``gate.weight`` keys, no
        ``gate.router``): ``AutoModelForCausalLM.from_pretrained`` loads the host alone, with its static top-K
        routing. Beside it, :data:`ALLOCATORS_FILE` holds the allocators and the :func:`apply_adak` settings.
        A patched model's ``model.save_pretrained`` calls this.

        Raises:
            RuntimeError: the patch was removed (save the model itself).
            ValueError: ``push_to_hub=True`` (the allocators file would not be uploaded: save locally, then
                upload the folder).
        """
        if not self.routers:
            raise RuntimeError("this Ada-K patch was removed: save the model with its own save_pretrained")
        if kwargs.get("push_to_hub"):
            raise ValueError(
                "push_to_hub is not supported for an Ada-K model (the allocators file would not be uploaded):"
                " save it locally, then upload the folder (huggingface_hub.upload_folder)"
            )
        from safetensors.torch import save_file

        with self._host_routers():
            type(self.model).save_pretrained(self.model, save_directory, **kwargs)
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.allocator_state_dict().items()}
        metadata = {"format": "pt", "adak": json.dumps({**self.settings, "blocks": self.names})}
        save_file(tensors, os.path.join(os.fspath(save_directory), ALLOCATORS_FILE), metadata=metadata)

    def allocator_state_dict(self) -> dict[str, torch.Tensor]:
        return {
            f"{name}.allocator.{k}": v
            for name, r in zip(self.names, self.routers, strict=True)
            for k, v in r.allocator.state_dict().items()
        }

    def load_allocator_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for name, r in zip(self.names, self.routers, strict=True):
            prefix = f"{name}.allocator."
            r.allocator.load_state_dict(
                {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
            )


def _align_cpu_tensors(model: nn.Module) -> None:
    """Move CPU parameters and buffers that sit off a 64-byte boundary into fresh (aligned) memory.

    transformers' loader leaves most CPU weights at 8-byte offsets (56 mod 64 here); MKL's small matrix products
    round differently there (one ulp, 2.4e-7 on a router logit of a single-token routing call), so a loaded model
    would differ from the one that was saved (whose weights, built by the constructor, are 64-byte aligned).
    """
    with torch.no_grad():
        seen: set[int] = set()
        for t in [*model.parameters(), *model.buffers()]:
            if id(t) in seen or t.device.type != "cpu" or t.data_ptr() % 64 == 0:
                continue
            seen.add(id(t))
            t.data = t.data.clone()


def load_pretrained(folder: str | os.PathLike[str], **kwargs: Any) -> AdaKPatch:
    """Load what a patched model's ``save_pretrained`` wrote: the host model, patched again with the saved
    :func:`apply_adak` settings and allocators (the same outputs as the saved model, bit for bit).

    Args:
        folder: the folder ``save_pretrained`` wrote (the host's files and :data:`ALLOCATORS_FILE`).
        **kwargs: passed to ``AutoModelForCausalLM.from_pretrained`` (``dtype``, ``device_map``, ...).

    Returns:
        The :class:`AdaKPatch` (``patch.model`` is the model) in ``"argmax"`` mode.

    Raises:
        FileNotFoundError: the folder has no :data:`ALLOCATORS_FILE` (it was saved from a model without Ada-K).
        ValueError: the allocators belong to other MoE blocks than the loaded model's.
    """
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    path = os.path.join(os.fspath(folder), ALLOCATORS_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{path} not found: {folder} was not saved from an Ada-K model (load it with from_pretrained and"
            " call apply_adak)"
        )
    with safe_open(path, framework="pt") as f:
        settings = json.loads((f.metadata() or {}).get("adak", "{}"))
        state = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
    blocks = settings.pop("blocks", None)
    model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    _align_cpu_tensors(model)
    patch = apply_adak(model, **settings)
    if blocks != patch.names:
        patch.remove()
        raise ValueError(f"{path} holds allocators for blocks {blocks}, the model has {patch.names}")
    device = patch.routers[0].allocator.proj.weight.device
    patch.load_allocator_state_dict({k: v.to(device) for k, v in state.items()})
    return patch


def _max_k_of(block: nn.Module, num_experts: int) -> int:
    """The largest k the host router can serve: grouped top-k (DeepSeek) only sees ``topk_group`` groups."""
    gate = block.gate
    groups = getattr(gate, "num_group", None)
    topk_group = getattr(gate, "topk_group", None)
    method = getattr(gate, "topk_method", "group_limited_greedy")
    if groups and topk_group and method != "greedy" and groups > 1:
        return int(topk_group) * (num_experts // int(groups))
    return num_experts


def find_moe_blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The ``(name, block)`` of every supported sparse MoE block of ``model``, in module order.

    Raises:
        ValueError: none found: the model has no MoE block, or only blocks of an unsupported architecture (the
            message names them and the supported ones).
    """
    supported = _supported_classes()
    blocks = [(name, m) for name, m in model.named_modules() if type(m) in supported]
    if not blocks:
        moe_like = sorted({type(m).__name__ for m in model.modules() if "moe" in type(m).__name__.lower()})
        names = ", ".join(name for _, name in SUPPORTED_BLOCKS)
        if moe_like:
            raise ValueError(
                f"model {type(model).__name__} has MoE blocks of an unsupported architecture ({', '.join(moe_like)});"
                f" supported: {names}"
            )
        raise ValueError(f"model {type(model).__name__} has no MoE blocks to patch (supported: {names})")
    return blocks


def apply_adak(
    model: nn.Module,
    *,
    k_min: int = 1,
    k_max: int | None = None,
    init_k: int | None = None,
    init_logit: float = 2.0,
    seed: int = 0,
    dispatch: Literal["grouped", "host"] = "grouped",
    dispatch_impl: Literal["auto", "loop", "grouped_mm"] = "auto",
) -> AdaKPatch:
    """Patch every sparse MoE block of a Hugging Face model with an Ada-K allocator; freeze everything else.

    Supported blocks (those present in the installed transformers): ``MixtralSparseMoeBlock``,
    ``Qwen2MoeSparseMoeBlock`` (shared expert kept), ``Qwen3MoeSparseMoeBlock``, ``OlmoeSparseMoeBlock``,
    ``DeepseekV2Moe`` and ``DeepseekV3MoE`` (shared experts, grouped top-k and ``routed_scaling_factor`` kept).

    Args:
        model: a Hugging Face causal LM (any ``nn.Module`` holding supported blocks).
        k_min, k_max: the allocator's action range, ``1 <= k_min <= k_max <= N`` (``N`` = experts per block;
            for grouped routing the experts reachable in ``topk_group`` groups). ``k_max=None`` means ``N``.
        init_k: the ``k`` the untrained allocator prefers (default: the host's top-k, clipped to the range).
        init_logit: its initial logit (see :class:`AdaKAllocator`).
        seed: seed of the sampling generator used in ``"sample"`` mode.
        dispatch: ``"grouped"`` (default): a routing table that mixes several ``k`` is computed by
            :func:`~iclr25_adak._dispatch.grouped_experts_forward` (token-slot pairs sorted by expert, one GEMM
            per activated expert; cost follows ``sum_t k_t``); a table with one ``k`` for every token runs the
            host's own expert kernel. ``"host"``: always the host's kernel (the sentinel-padded table).
            A runtime choice (``patch.dispatch``), not saved.
        dispatch_impl: ``"auto"``, ``"loop"`` or ``"grouped_mm"`` (see :mod:`iclr25_adak._dispatch`).

    Returns:
        An :class:`AdaKPatch` in ``"argmax"`` mode. Every model parameter gets ``requires_grad=False``; the
        allocators' parameters are the only trainable ones (``patch.remove()`` gives each parameter back its own
        flag). The allocators are created in float32 and follow later casts of the model. The model's
        ``save_pretrained`` becomes :meth:`AdaKPatch.save_pretrained` (the host's checkpoint plus the allocators;
        :func:`load_pretrained` loads it back exactly).

    Raises:
        ValueError: the model has no MoE block, or only MoE blocks of an unsupported architecture (the message
            names them and the supported ones); ``k_min``/``k_max``/``init_k`` outside ``1..N``; the model is
            already patched.
    """
    if any(isinstance(m, AdaKRouter) for m in model.modules()):
        raise ValueError("model is already patched with Ada-K (call patch.remove() first)")
    blocks = find_moe_blocks(model)
    check_choice("dispatch", dispatch, ("grouped", "host"))
    check_choice("dispatch_impl", dispatch_impl, ("auto", "loop", "grouped_mm"))
    patch = AdaKPatch(model, seed=seed)
    patch.dispatch, patch.dispatch_impl = dispatch, dispatch_impl
    for p in model.parameters():
        p.requires_grad_(False)
    reach = []
    for _, block in blocks:
        n = int(block.experts.num_experts)
        reach.append(_max_k_of(block, n))
    n_reach = min(reach)
    k_min = check_int("k_min", k_min, low=1, high=n_reach)
    k_max = n_reach if k_max is None else check_int("k_max", k_max, low=k_min, high=n_reach)
    host_k = int(blocks[0][1].gate.top_k)
    init_k = (
        min(max(host_k, k_min), k_max)
        if init_k is None
        else check_int("init_k", init_k, low=k_min, high=k_max)
    )
    patch.settings = {
        "k_min": k_min,
        "k_max": k_max,
        "init_k": init_k,
        "init_logit": float(init_logit),
        "seed": seed,
    }
    patch.host_top_k = host_k
    patch.num_experts = int(blocks[0][1].experts.num_experts)
    patch._host_max_k = n_reach
    for name, block in blocks:
        hidden = int(block.gate.hidden_dim)
        device = block.gate.weight.device
        alloc = AdaKAllocator(hidden, k_min, k_max, init_k=init_k, init_logit=init_logit).to(device)
        router = AdaKRouter(block.gate, alloc, int(block.experts.num_experts), patch)
        router.layer = len(patch.routers)
        block.gate = router
        # transformers' expert kernels skip (grouped_mm) or zero (batched_mm) the sentinel id only when this flag
        # is on; the eager loop always skips it. Without it, batched_mm indexes out of range and grouped_mm reads
        # uninitialised rows. It changes nothing for slots that hold real experts.
        patch._ep_flags.append(getattr(block.experts, "_is_expert_parallel", None))
        if hasattr(block.experts, "_is_expert_parallel"):
            block.experts._is_expert_parallel = True
        if supports_grouped_dispatch(block.experts):
            _install_dispatch(block.experts, router, patch)
            patch._dispatch_installed.append(block.experts)
        patch.routers.append(router)
        patch.blocks.append(block)
        patch.names.append(name)
    if callable(getattr(model, "save_pretrained", None)):

        def save_pretrained(save_directory: str | os.PathLike[str], **kwargs: Any) -> None:
            patch.save_pretrained(save_directory, **kwargs)

        save_pretrained.__doc__ = AdaKPatch.save_pretrained.__doc__
        model.save_pretrained = save_pretrained  # an instance attribute; remove() deletes it
        patch._save_installed = True
    return patch
