"""Grouped expert dispatch for variable-k routing tables: cost follows the number of activated experts.

The host MoE kernels of transformers take a ``(tokens, slots)`` routing table. Under Ada-K the table is padded to
the largest ``k`` of the batch with the sentinel expert id ``N`` (weight 0): the ``eager`` kernel builds a
``(N + 1, slots, tokens)`` one-hot mask and scans it once per expert, ``batched_mm`` gathers one weight matrix per
*slot*, sentinel slots included (cost follows ``max k``, not ``mean k``), and ``grouped_mm`` gathers and masks the
sentinel rows. :func:`grouped_experts_forward` instead takes the token-slot pairs that hold a real expert, sorts
them by expert id (sentinels sort last and are never computed) and runs one GEMM per activated expert, so its
cost is ``sum_t k_t`` expert evaluations plus an ``O(tokens * slots)`` sort.

Two implementations of the same arithmetic:

- ``"loop"``: one ``gate_up`` and one ``down`` GEMM per expert with at least one token (reads the per-expert
  counts on the host: one device-to-host copy per call on CUDA); results are added into the output in expert
  order (``index_add_``), like the eager kernel, so it is deterministic on CPU.
- ``"grouped_mm"``: ``torch.nn.functional.grouped_mm`` (or ``torch._grouped_mm``) over the sorted rows with
  device-side offsets, no host synchronisation where torch has a fast path (bfloat16 on CUDA, compute capability
  >= 9.0 in torch 2.15); the slot results are put back in token order and summed over slots (no atomics).

``"auto"`` picks ``grouped_mm`` for bfloat16 on CUDA with capability >= 8.0 and ``loop`` elsewhere (on CPU the
per-expert GEMMs measured faster than torch's grouped fallback; see the README's performance section).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

__all__ = ["DispatchImpl", "grouped_experts_forward", "supports_grouped_dispatch"]

DispatchImpl = Literal["auto", "loop", "grouped_mm"]


def supports_grouped_dispatch(experts: nn.Module) -> bool:
    """Whether ``experts`` is a transformers experts module this dispatch reproduces: 3-D ``gate_up_proj``
    ``(N, 2f, d)`` and ``down_proj`` ``(N, d, f)``, gated, no bias, not transposed, no post-expert norm (every
    family :func:`iclr25_adak.apply_adak` supports)."""
    gate_up = getattr(experts, "gate_up_proj", None)
    down = getattr(experts, "down_proj", None)
    return (
        isinstance(gate_up, torch.Tensor)
        and isinstance(down, torch.Tensor)
        and gate_up.dim() == 3
        and down.dim() == 3
        and getattr(experts, "has_gate", True)
        and not getattr(experts, "has_bias", False)
        and not getattr(experts, "is_transposed", False)
        and not getattr(experts, "has_post_expert_norm", False)
        and hasattr(experts, "num_experts")
    )


def _gate(experts: nn.Module, h: torch.Tensor) -> torch.Tensor:
    apply_gate = getattr(experts, "_apply_gate", None)
    if apply_gate is not None:
        return apply_gate(h)
    gate, up = h.chunk(2, dim=-1)
    return experts.act_fn(gate) * up


def _pick(impl: DispatchImpl, x: torch.Tensor) -> str:
    if impl != "auto":
        return impl
    if (
        x.device.type == "cuda"
        and x.dtype == torch.bfloat16
        and torch.cuda.get_device_capability(x.device) >= (8, 0)
        and (hasattr(nn.functional, "grouped_mm") or hasattr(torch, "_grouped_mm"))
    ):
        return "grouped_mm"
    return "loop"


def _sorted_pairs(indices: torch.Tensor, num_experts: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Slot positions sorted by expert id (stable: token order within an expert; sentinels last), their token
    ids and the ``(N + 1,)`` per-expert counts (the last one counts sentinel slots)."""
    slots = indices.shape[1]
    flat = indices.reshape(-1).long().clamp(max=num_experts)
    order = torch.argsort(flat, stable=True)
    tokens = torch.div(order, slots, rounding_mode="floor")
    # not torch.bincount: on CUDA it reads the maximum on the host (a synchronisation)
    counts = torch.zeros(num_experts + 1, dtype=torch.long, device=flat.device)
    counts.index_add_(0, flat, torch.ones_like(flat))
    return order, tokens, counts


def _loop(experts: nn.Module, x: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    n_exp = int(experts.num_experts)
    order, tokens, counts = _sorted_pairs(indices, n_exp)
    w_sorted = weights.reshape(-1)[order]
    out = torch.zeros_like(x)
    start = 0
    for e, c in enumerate(counts[:n_exp].tolist()):
        if c == 0:
            continue
        rows = tokens[start : start + c]
        h = nn.functional.linear(x[rows], experts.gate_up_proj[e])
        h = nn.functional.linear(_gate(experts, h), experts.down_proj[e])
        h = h * w_sorted[start : start + c, None]
        out.index_add_(0, rows, h.to(out.dtype))
        start += c
    return out


def _grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    fn = getattr(nn.functional, "grouped_mm", None) or torch._grouped_mm
    return fn(a, b, offs=offs)


def _grouped(
    experts: nn.Module, x: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    n_exp = int(experts.num_experts)
    n, slots = indices.shape
    order, tokens, counts = _sorted_pairs(indices, n_exp)
    offs = torch.cumsum(counts[:n_exp], dim=0, dtype=torch.int32)
    # rows past offs[-1] (sentinel slots) are not computed; their content is undefined, so they are masked out
    real = (torch.arange(order.numel(), device=x.device) < offs[-1])[:, None]
    wt = experts.gate_up_proj.dtype
    h = _grouped_mm(x.index_select(0, tokens).to(wt), experts.gate_up_proj.transpose(-2, -1), offs)
    h = _gate(experts, torch.where(real, h, 0))
    h = _grouped_mm(h, experts.down_proj.transpose(-2, -1), offs)
    h = torch.where(real, h, 0) * weights.reshape(-1).index_select(0, order)[:, None]
    # back to (token, slot) order with gathers and a scatter (no atomics: deterministic on CUDA)
    back = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device=x.device))
    return h.index_select(0, back).view(n, slots, -1).sum(dim=1).to(x.dtype)


def grouped_experts_forward(
    experts: nn.Module,
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    *,
    impl: DispatchImpl = "auto",
) -> torch.Tensor:
    """``out[t] = sum_j w[t, j] * E_{i[t, j]}(x[t])`` over the slots ``j`` whose expert id ``i[t, j] < N``.

    The same signature and result as a transformers experts module's ``forward``; the slots holding the
    sentinel id ``N`` (or any id >= N) are skipped, so a token whose every slot is a sentinel gets 0, and the
    same expert in two slots of one token counts twice (as in the host kernels).

    Args:
        experts: a transformers experts module (:func:`supports_grouped_dispatch`).
        hidden_states: ``(tokens, d)``.
        top_k_index: ``(tokens, slots)`` integer expert ids in ``[0, N]``.
        top_k_weights: ``(tokens, slots)`` gate weights.
        impl: ``"auto"``, ``"loop"`` or ``"grouped_mm"`` (module docstring).

    Returns:
        ``(tokens, d)`` in the dtype of ``hidden_states``.
    """
    if top_k_index.dim() != 2 or top_k_index.shape != top_k_weights.shape:
        raise ValueError(
            "top_k_index and top_k_weights must both be (tokens, slots), got "
            f"{tuple(top_k_index.shape)} and {tuple(top_k_weights.shape)}"
        )
    if top_k_index.shape[0] != hidden_states.shape[0]:
        raise ValueError(
            f"top_k_index has {top_k_index.shape[0]} rows, hidden_states {hidden_states.shape[0]} tokens"
        )
    if hidden_states.shape[0] == 0 or top_k_index.shape[1] == 0:
        return torch.zeros_like(hidden_states)
    kind = _pick(impl, hidden_states)
    if kind == "loop":
        return _loop(experts, hidden_states, top_k_index, top_k_weights)
    if kind == "grouped_mm":
        return _grouped(experts, hidden_states, top_k_index, top_k_weights)
    raise ValueError(f"impl must be 'auto', 'loop' or 'grouped_mm', got {impl!r}")
