"""The hyper-connection module: width and depth connections of one branch (paper §2, Algorithm 2).

Notation (arXiv 2409.19606, §2.1–2.2): a layer ``T`` (attention or FFN, a pre-norm branch) sees ``n`` residual
streams ``H ∈ R^{n×d}``. Its hyper-connection matrix is

    HC = [[0,   B  ],          B   ∈ R^{1×n}  depth-connection weights (β)
          [A_m, A_r]]          A_m ∈ R^{n×1}  branch-input weights (α_{·,0}),  A_r ∈ R^{n×n}  stream mixing

and the layer computes ``h_0 = A_mᵀ H`` (width connection, the branch input), ``H' = A_rᵀ H`` and
``Ĥ = Bᵀ T(h_0)ᵀ + H'`` (depth connection). Static HC learns B, A_m, A_r directly; dynamic HC adds per-token
terms ``s ∘ tanh(norm(H) W)`` with ``W = 0`` at init.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterator
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from iclr25_shared.checks import check_float, check_int

__all__ = [
    "HyperConnection",
    "WidthConnection",
    "expand_streams",
    "hyper_connection_num_params",
    "hyper_connections_of",
    "parallel_arrangement",
    "param_groups",
    "reduce_streams",
    "sequential_arrangement",
]

NormSpec = Literal["layernorm", "layernorm_affine", "rmsnorm"] | Callable[[int], nn.Module]
_NORMS = ("layernorm", "layernorm_affine", "rmsnorm")


def _check_int(name: str, value: Any, *, low: int) -> int:
    """An integer >= ``low`` (bool rejected), via :func:`iclr25_shared.checks.check_int`."""
    return check_int(name, value, low=low)


def _check_streams(streams: Any, expansion_rate: int, dim: int | None, what: str = "streams") -> None:
    if not isinstance(streams, Tensor):
        raise TypeError(
            f"{what} must be a torch.Tensor of shape (..., expansion_rate, dim), got {type(streams).__name__}"
        )
    if not streams.is_floating_point():
        raise TypeError(f"{what} must be a floating-point tensor, got dtype {streams.dtype}")
    if (
        streams.ndim < 2
        or streams.shape[-2] != expansion_rate
        or (dim is not None and streams.shape[-1] != dim)
    ):
        want = f"(..., {expansion_rate}, {dim if dim is not None else 'dim'})"
        raise ValueError(
            f"{what} must have shape {want} (expansion_rate={expansion_rate} streams of width dim), "
            f"got {tuple(streams.shape)}"
        )


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32, or the input's dtype when it is wider (float64)."""
    return torch.promote_types(dtype, torch.float32)


@contextlib.contextmanager
def _fp32_region(device: torch.device) -> Iterator[None]:
    """Disable autocast so the connection weights and the mixing run in (at least) fp32."""
    if device.type in ("cpu", "cuda", "mps", "xpu") and torch.is_autocast_enabled(device.type):
        with torch.autocast(device_type=device.type, enabled=False):
            yield
    else:
        yield


def expand_streams(x: Tensor, expansion_rate: int) -> Tensor:
    """Copy a hidden state into ``expansion_rate`` identical residual streams: ``H⁰ = (h⁰, …, h⁰)ᵀ``.

    Args:
        x: ``(..., dim)`` hidden state, any floating dtype.
        expansion_rate: ``n >= 1``.

    Returns:
        ``(..., n, dim)``, a new tensor (not a view), same dtype and device as ``x``.

    Raises:
        TypeError: ``x`` is not a floating tensor or ``expansion_rate`` not an int.
        ValueError: ``expansion_rate < 1`` or ``x`` is 0-d.

    References:
        Zhu et al., "Hyper-Connections", ICLR 2025, arXiv 2409.19606, §2.1.
    """
    _check_int("expansion_rate", expansion_rate, low=1)
    if not isinstance(x, Tensor) or not x.is_floating_point():
        raise TypeError(
            f"x must be a floating-point torch.Tensor of shape (..., dim), got {type(x).__name__}"
        )
    if x.ndim < 1:
        raise ValueError("x must have at least one dimension (..., dim), got a 0-d tensor")
    return x.unsqueeze(-2).expand(*x.shape[:-1], expansion_rate, x.shape[-1]).clone()


def reduce_streams(streams: Tensor) -> Tensor:
    """Sum the residual streams at the end of the network (``h^L = Σ_i H^L_i``), before the final norm.

    Args:
        streams: ``(..., n, dim)``.

    Returns:
        ``(..., dim)``.

    References:
        arXiv 2409.19606, §2.1 ("the final output is the sum of the rows of H").
    """
    if not isinstance(streams, Tensor) or streams.ndim < 2:
        raise TypeError("streams must be a torch.Tensor of shape (..., expansion_rate, dim)")
    return streams.sum(dim=-2)


def sequential_arrangement() -> Tensor:
    """The ``n = 2`` HC matrix under which hyper-connected layers act **sequentially** (the paper's sequential–parallel duality).

    ``[[0, 1, 1], [1, 1, 0], [0, 0, 1]]``: the layer reads stream 1, its output is added to both streams, so with
    both streams equal the next layer receives ``h + T(h)``, exactly as in a Pre-Norm network.

    Returns:
        ``(3, 3)`` float32 tensor for ``HyperConnection(..., expansion_rate=2, init_matrix=...)``.
    """
    return torch.tensor([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]])


def parallel_arrangement(layer_index: int) -> Tensor:
    """The ``n = 2`` HC matrices under which a pair of layers acts **in parallel** (the paper's sequential–parallel duality).

    Odd layers (``layer_index`` even, i.e. the first of each pair, counting from 0) use
    ``[[0, 1, 0], [1, 1, 1], [1, 1, 1]]``; even layers use ``[[0, 0, 1], [0, 1, 0], [1, 0, 1]]``.
    With streams ``(h_1, h_2)`` entering a pair and ``u = h_1 + h_2``, both layers receive the same input ``u``
    and the pair leaves the streams ``(u + T_1(u), u + T_2(u))``: the two layers form one parallel block.

    Args:
        layer_index: the layer's position (0-based); its parity picks the matrix.

    Returns:
        ``(3, 3)`` float32 tensor.
    """
    _check_int("layer_index", layer_index, low=0)
    if layer_index % 2 == 0:
        return torch.tensor([[0.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    return torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 1.0]])


def _norm_num_params(norm: NormSpec, dim: int) -> int:
    if norm == "layernorm":
        return 0
    if norm == "layernorm_affine":
        return 2 * dim
    if norm == "rmsnorm":
        return dim
    return sum(p.numel() for p in norm(dim).parameters())


def hyper_connection_num_params(
    dim: int, expansion_rate: int, *, dynamic: bool = True, norm: NormSpec = "layernorm"
) -> int:
    """Parameters one :class:`HyperConnection` adds, from the paper's overhead count.

    Static: ``n(n+2)`` (B: n, A_m: n, A_r: n²). Dynamic adds ``d(n+2) + 2 + |norm|`` (W_β: d, W_m and W_r: d(n+1),
    the scales s_α and s_β, and the norm's parameters: 0 for the paper's non-parametric LayerNorm, 2d with an
    affine LayerNorm, d for RMSNorm). OLMo-1B-DHC×4 (d = 2048, 32 branches): 32 · 12 314 = 394 048 extra parameters.
    """
    _check_int("dim", dim, low=1)
    n = _check_int("expansion_rate", expansion_rate, low=1)
    static = n * (n + 2)
    if not dynamic:
        return static
    return static + dim * (n + 2) + 2 + _norm_num_params(norm, dim)


class WidthConnection(NamedTuple):
    """What :meth:`HyperConnection.width_connection` returns.

    Attributes:
        branch_input: ``(..., dim)`` ``h_0 = A_mᵀ H``, the input of the (pre-norm) branch.
        residual: ``(..., n, dim)`` ``H' = A_rᵀ H``, the mixed streams the branch output is added to.
        beta: ``(..., n)`` fp32 depth-connection weights ``B`` (per token when dynamic).
    """

    branch_input: Tensor
    residual: Tensor
    beta: Tensor


class HyperConnection(nn.Module):
    """Hyper-connections around one branch (an attention or FFN sub-layer), replacing ``h + T(norm(h))``.

    Holds the static matrix ``HC = [[0, B], [A_m, A_r]]`` and, when ``dynamic``, the per-token terms of §2.2:
    ``B(H) = s_β ∘ tanh(H̄ W_β)ᵀ + B``, ``[A_m A_r](H) = s_α ∘ tanh(H̄ W_α) + [A_m A_r]``, with ``H̄ = norm(H)``.

    Initialisation (eq. 14, App. J): ``B = 1``, ``A_m = e_{layer_index mod n}``, ``A_r = I``, ``W_β = W_α = 0``,
    ``s_α = s_β = 0.01``. A network built from these modules is then exactly the Pre-Norm residual network
    (every stream equals the residual stream), whatever the global RNG state: initialisation is deterministic.

    Use either one call, ``streams = hc(streams, branch)``, or the two halves the paper names::

        h0, residual, beta = hc.width_connection(streams)
        streams = hc.depth_connection(residual, branch(h0), beta)

    Args:
        dim: width ``d`` of each stream (the model's hidden size).
        expansion_rate: number of streams ``n >= 1``. ``n = 1`` with ``dynamic=False, trainable=False`` is exactly
            the residual connection ``h + T(h)`` (bit for bit).
        layer_index: 0-based position of this branch in the network (count attention and FFN separately, i.e.
            ``2·block + {0, 1}`` in a transformer). Stream ``layer_index mod n`` feeds the branch at init.
        dynamic: add the input-dependent terms (DHC, the paper's default); ``False`` gives static HC (SHC).
        tanh: squash the dynamic terms with ``tanh`` (paper default); ``False`` is the "w/o tanh" ablation.
        norm: the norm applied to each stream before the dynamic projections: ``"layernorm"`` (non-parametric, as
            in the paper's OLMo models), ``"layernorm_affine"``, ``"rmsnorm"``, or a factory ``dim -> nn.Module``.
            Unused when ``dynamic=False``.
        eps: epsilon of the built-in norms.
        init_matrix: optional ``(n+1, n+1)`` static HC matrix to start from instead of eq. 14 (e.g.
            :func:`sequential_arrangement`); its top-left entry must be 0.
        trainable: ``False`` stores the static weights as buffers (not parameters), e.g. for an exact residual
            baseline or identity-preserving adapters.
        depth_residual_fn: ``f(residual, branch_term) -> streams`` combining ``H'`` and ``Bᵀ T(h_0)``; defaults to
            addition (the paper). Called on every path.
        recompute: recompute the dynamic weights' norm and projections in the backward pass instead of storing
            the normalised streams (saves ``n·dim`` activations per token and branch; same results).
        fused: compute the width connection as one autograd node with a hand-written backward pass
            (:mod:`iclr25_hyper_connections._fused`; same function to float rounding, less memory and time).
            Needs ``dynamic=True`` and ``norm="layernorm"``; ``recompute`` is then unused.

    Shapes:
        streams ``(..., n, dim)`` (e.g. ``(batch, seq, n, dim)``); branch input/output ``(..., dim)``.
        Connection weights are computed and applied in fp32 even under autocast; outputs keep the streams' dtype.

    Raises:
        TypeError: ``layer_index`` is missing/``None`` or a non-int, ``dim``/``expansion_rate`` not ints.
        ValueError: ``expansion_rate < 1``, ``layer_index < 0``, ``dim < 1``, unknown ``norm``, bad ``init_matrix``,
            ``fused=True`` without ``dynamic=True, norm="layernorm"``.

    References:
        Zhu et al., "Hyper-Connections", ICLR 2025, arXiv 2409.19606: §2.1 (static HC), §2.2 (dynamic HC),
        §2.3 (initialisation, eq. 14), Appendix J (Algorithm 2).
    """

    static_alpha: Tensor
    static_beta: Tensor

    def __init__(
        self,
        dim: int,
        *,
        expansion_rate: int = 4,
        layer_index: int | None = None,
        dynamic: bool = True,
        tanh: bool = True,
        norm: NormSpec = "layernorm",
        eps: float = 1e-5,
        init_matrix: Tensor | None = None,
        trainable: bool = True,
        depth_residual_fn: Callable[[Tensor, Tensor], Tensor] | None = None,
        recompute: bool = True,
        fused: bool = False,
    ) -> None:
        super().__init__()
        if layer_index is None:
            raise TypeError(
                "layer_index is required: pass the branch's 0-based position in the network "
                "(stream layer_index mod expansion_rate feeds it at init; no random choice)"
            )
        self.dim = _check_int("dim", dim, low=1)
        self.expansion_rate = n = _check_int("expansion_rate", expansion_rate, low=1)
        self.layer_index = _check_int("layer_index", layer_index, low=0)
        self.dynamic = bool(dynamic)
        self.tanh = bool(tanh)
        self.trainable = bool(trainable)
        self.recompute = bool(recompute)
        self.fused = bool(fused)
        if self.fused and not (self.dynamic and isinstance(norm, str) and norm == "layernorm"):
            raise ValueError(
                f"fused=True needs dynamic=True and norm='layernorm'; got dynamic={dynamic}, norm={norm!r}"
            )
        if depth_residual_fn is not None and not callable(depth_residual_fn):
            raise TypeError(f"depth_residual_fn must be callable, got {type(depth_residual_fn).__name__}")
        self.depth_residual_fn = depth_residual_fn or operator.add

        if init_matrix is None:
            alpha = torch.zeros(n, n + 1)
            alpha[self.layer_index % n, 0] = 1.0  # A_m = e_{k mod n}
            alpha[:, 1:] = torch.eye(n)  # A_r = I
            beta = torch.ones(n)  # B = 1
        else:
            if not isinstance(init_matrix, Tensor):
                raise TypeError(f"init_matrix must be a torch.Tensor, got {type(init_matrix).__name__}")
            if tuple(init_matrix.shape) != (n + 1, n + 1):
                raise ValueError(
                    f"init_matrix must have shape ({n + 1}, {n + 1}) for expansion_rate={n}, "
                    f"got {tuple(init_matrix.shape)}"
                )
            matrix = init_matrix.detach().to(torch.float32, copy=True).cpu()
            if matrix[0, 0] != 0:
                raise ValueError(
                    f"init_matrix[0, 0] must be 0 (no branch-to-branch path), got {matrix[0, 0].item()}"
                )
            beta, alpha = matrix[0, 1:].clone(), matrix[1:, :].clone()
        if self.trainable:
            self.static_alpha = nn.Parameter(alpha)
            self.static_beta = nn.Parameter(beta)
        else:
            self.register_buffer("static_alpha", alpha)
            self.register_buffer("static_beta", beta)

        self.norm: nn.Module | None = None
        if self.dynamic:
            if isinstance(norm, str):
                if norm not in _NORMS:
                    raise ValueError(
                        f"norm must be one of {', '.join(_NORMS)} or a callable dim -> nn.Module; got {norm!r}"
                    )
                self.norm = (
                    nn.RMSNorm(dim, eps=eps)
                    if norm == "rmsnorm"
                    else nn.LayerNorm(dim, eps=eps, elementwise_affine=norm == "layernorm_affine")
                )
            elif callable(norm):
                module = norm(dim)
                if not isinstance(module, nn.Module):
                    raise TypeError(f"norm factory must return an nn.Module, got {type(module).__name__}")
                self.norm = module
            else:
                raise ValueError(
                    f"norm must be one of {', '.join(_NORMS)} or a callable dim -> nn.Module; got {norm!r}"
                )
            self.dynamic_alpha_fn = nn.Parameter(torch.zeros(dim, n + 1))  # [W_m W_r]
            self.dynamic_alpha_scale = nn.Parameter(torch.full((1,), 0.01))  # s_α
            self.dynamic_beta_fn = nn.Parameter(torch.zeros(dim))  # W_β
            self.dynamic_beta_scale = nn.Parameter(torch.full((1,), 0.01))  # s_β
            if not self.trainable:
                for p in (
                    self.dynamic_alpha_fn,
                    self.dynamic_alpha_scale,
                    self.dynamic_beta_fn,
                    self.dynamic_beta_scale,
                ):
                    p.requires_grad_(False)

    # ------------------------------------------------------------------------------------------------------------
    # The static matrix and its blocks
    # ------------------------------------------------------------------------------------------------------------
    def matrix(self) -> Tensor:
        """The static ``(n+1, n+1)`` matrix ``[[0, B], [A_m, A_r]]`` (detached, fp32)."""
        n = self.expansion_rate
        out = torch.zeros(n + 1, n + 1, dtype=torch.float32, device=self.static_alpha.device)
        out[0, 1:] = self.static_beta.detach().float()
        out[1:, :] = self.static_alpha.detach().float()
        return out

    def extra_repr(self) -> str:
        kind = "dynamic" if self.dynamic else "static"
        return (
            f"dim={self.dim}, expansion_rate={self.expansion_rate}, layer_index={self.layer_index}, {kind}"
            f"{'' if self.tanh or not self.dynamic else ', tanh=False'}{'' if self.trainable else ', trainable=False'}"
        )

    # ------------------------------------------------------------------------------------------------------------
    # Connection weights
    # ------------------------------------------------------------------------------------------------------------
    def connection_weights(self, streams: Tensor) -> tuple[Tensor, Tensor]:
        """The (possibly per-token) weights ``alpha = [A_m A_r]`` and ``beta = B`` for these streams.

        Args:
            streams: ``(..., n, dim)``.

        Returns:
            ``alpha`` ``(..., n, n+1)`` (or ``(n, n+1)`` when static) and ``beta`` ``(..., n)`` (or ``(n,)``),
            both fp32 (float64 for float64 streams), also under autocast.
        """
        _check_streams(streams, self.expansion_rate, self.dim)
        dtype = _compute_dtype(streams.dtype)
        alpha = self.static_alpha.to(dtype)
        beta = self.static_beta.to(dtype)
        if not self.dynamic:
            return alpha, beta
        if self.recompute and torch.is_grad_enabled():
            # Keep only the streams (already saved by the mixing) for backward; recompute the norm there.
            a, b = checkpoint(self._dynamic_terms, streams, dtype, use_reentrant=False)
        else:
            a, b = self._dynamic_terms(streams, dtype)
        return a + alpha, b + beta

    def _dynamic_terms(self, streams: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``s_α ∘ tanh(H̄ W_α)`` and ``s_β ∘ tanh(H̄ W_β)`` with ``H̄ = norm(H)``, in ``dtype`` (>= fp32)."""
        assert self.norm is not None
        with _fp32_region(streams.device):
            normed = self.norm(streams.to(dtype))
            a = normed @ self.dynamic_alpha_fn.to(dtype)  # (..., n, n+1)
            b = normed @ self.dynamic_beta_fn.to(dtype)  # (..., n)
            if self.tanh:
                a, b = torch.tanh(a), torch.tanh(b)
            return a * self.dynamic_alpha_scale.to(dtype), b * self.dynamic_beta_scale.to(dtype)

    # ------------------------------------------------------------------------------------------------------------
    # Width and depth connections
    # ------------------------------------------------------------------------------------------------------------
    def width_connection(self, streams: Tensor) -> WidthConnection:
        """Width connection: ``h_0 = A_mᵀ H`` (branch input) and ``H' = A_rᵀ H`` (mixed streams).

        Args:
            streams: ``(..., n, dim)``.

        Returns:
            :class:`WidthConnection` ``(branch_input (..., dim), residual (..., n, dim), beta (..., n))``;
            tensors keep ``streams.dtype``, ``beta`` is fp32.

        Raises:
            TypeError / ValueError: ``streams`` is not a floating tensor of shape ``(..., n, dim)``.
        """
        if self.fused:
            return self._fused_width_connection(streams)
        alpha, beta = self.connection_weights(streams)
        with _fp32_region(streams.device):
            mixed = torch.einsum(
                "...ij,...id->...jd", alpha, streams.to(alpha.dtype)
            )  # (..., n+1, d) = alphaᵀ H
        mixed = mixed.to(streams.dtype)
        return WidthConnection(mixed[..., 0, :], mixed[..., 1:, :], beta)

    def _fused_width_connection(self, streams: Tensor) -> WidthConnection:
        from iclr25_hyper_connections._fused import fused_dynamic_width_connection

        _check_streams(streams, self.expansion_rate, self.dim)
        assert isinstance(self.norm, nn.LayerNorm)
        dtype = _compute_dtype(streams.dtype)
        with _fp32_region(streams.device):
            mixed, beta = fused_dynamic_width_connection(
                streams.to(dtype),
                self.dynamic_alpha_fn.to(dtype),
                self.dynamic_beta_fn.to(dtype),
                self.dynamic_alpha_scale.to(dtype),
                self.dynamic_beta_scale.to(dtype),
                self.static_alpha.to(dtype),
                self.static_beta.to(dtype),
                eps=float(self.norm.eps),
                use_tanh=self.tanh,
            )
        mixed = mixed.to(streams.dtype)
        return WidthConnection(mixed[..., 0, :], mixed[..., 1:, :], beta)

    def depth_connection(self, residual: Tensor, branch_output: Tensor, beta: Tensor) -> Tensor:
        """Depth connection: ``Ĥ = Bᵀ T(h_0)ᵀ + H'``, via ``depth_residual_fn(H', Bᵀ T(h_0))``.

        Args:
            residual: ``(..., n, dim)`` ``H'`` from :meth:`width_connection`.
            branch_output: ``(..., dim)`` the branch's output ``T(h_0)``.
            beta: ``(..., n)`` or ``(n,)`` from :meth:`width_connection`.

        Returns:
            ``(..., n, dim)`` new streams in ``residual.dtype``.

        Raises:
            TypeError: ``branch_output`` is not a tensor.
            ValueError: ``branch_output`` does not have shape ``residual.shape`` without the stream axis.
        """
        _check_streams(residual, self.expansion_rate, self.dim, what="residual")
        if not isinstance(branch_output, Tensor):
            raise TypeError(
                f"branch output must be a torch.Tensor of shape (..., {self.dim}), got {type(branch_output).__name__}"
            )
        expected = (*residual.shape[:-2], residual.shape[-1])
        if tuple(branch_output.shape) != expected:
            raise ValueError(
                f"branch output must have the streams' shape without the stream axis, {expected} "
                f"(dim={self.dim}), got {tuple(branch_output.shape)}"
            )
        with _fp32_region(residual.device):
            dtype = _compute_dtype(torch.promote_types(residual.dtype, branch_output.dtype))
            term = beta.to(dtype).unsqueeze(-1) * branch_output.to(dtype).unsqueeze(-2)  # (..., n, d)
            out = self.depth_residual_fn(residual.to(dtype), term)
        return out.to(residual.dtype)

    def forward(self, streams: Tensor, branch: Callable[..., Tensor], *args: Any, **kwargs: Any) -> Tensor:
        """Run one branch through the hyper-connection: ``Ĥ = Bᵀ branch(A_mᵀ H) + A_rᵀ H``.

        Args:
            streams: ``(..., n, dim)``.
            branch: the pre-norm branch ``(..., dim) -> (..., dim)`` (include its norm), e.g.
                ``lambda h: mlp(norm(h))``. Extra ``args``/``kwargs`` are passed to it.

        Returns:
            ``(..., n, dim)``.

        Raises:
            TypeError: ``branch`` is not callable or does not return a tensor.
            ValueError: shapes do not match (see :meth:`width_connection`, :meth:`depth_connection`).
        """
        if not callable(branch):
            raise TypeError(f"branch must be callable, got {type(branch).__name__}")
        h0, residual, beta = self.width_connection(streams)
        return self.depth_connection(residual, branch(h0, *args, **kwargs), beta)


def hyper_connections_of(model: nn.Module) -> list[HyperConnection]:
    """All :class:`HyperConnection` modules of a model, in module order (empty when none)."""
    return [m for m in model.modules() if isinstance(m, HyperConnection)]


def param_groups(model: nn.Module, *, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW parameter groups following the paper's training recipe (no weight decay on static parts).

    Hyper-connection static weights (``B``, ``A_m``, ``A_r``), the scales ``s_α, s_β`` and the dynamic norm get no
    weight decay; the dynamic projections ``W_α, W_β`` do. Every other parameter follows the usual rule: tensors
    with ``ndim >= 2`` are decayed, biases and norm gains are not. Frozen parameters are left out.

    Returns:
        ``[{"params": decayed, "weight_decay": weight_decay}, {"params": others, "weight_decay": 0.0}]``.
    """
    weight_decay = check_float("weight_decay", weight_decay, low=0.0)
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    seen: set[int] = set()
    hc_dynamic: set[int] = set()
    hc_other: set[int] = set()
    for module in model.modules():
        if isinstance(module, HyperConnection):
            for name, p in module.named_parameters():
                (hc_dynamic if name in ("dynamic_alpha_fn", "dynamic_beta_fn") else hc_other).add(id(p))
    for p in model.parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        if id(p) in hc_dynamic:
            decay.append(p)
        elif id(p) in hc_other or p.ndim < 2:
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": float(weight_decay)}, {"params": no_decay, "weight_decay": 0.0}]
