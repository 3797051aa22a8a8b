"""The linear-time token mixers that replace attention: Linformer and a pure-torch Mamba (selective SSM).

Written from the papers:

- Linformer (Wang et al. 2020, arXiv:2006.04768, Eq. (7)): keys and values are projected along the sequence by
  learned ``E, F`` of shape ``(max_seq_len, k)``, so attention costs ``O(n k)``. CALD (He & Garner, ICLR 2025,
  arXiv:2410.06846, Section 3.1 and its NLP setting) keeps the teacher's Q/K/V/O projections and adds only ``E, F``,
  initialised ``N(0, 1)`` and applied as ``K' = E[:n]^T K / sqrt(n)`` over the ``n`` real (non-pad) tokens of each
  sequence.
- Mamba (Gu & Dao 2023, arXiv:2312.00752, Algorithm 2 / Eq. (2a)-(2b)): ``h_t = exp(Δ_t A) h_{t-1} + Δ_t B_t x_t``,
  ``y_t = C_t h_t + D x_t``, with input-dependent ``Δ, B, C``, a short causal depth-wise convolution before the SSM
  and a SiLU gate after it. CALD's language-model setting (Section 4.2) replaces each attention block by such a
  mixer, initialised randomly.

Every mixer here takes and returns ``(batch, seq, hidden)`` tensors and is device- and dtype-agnostic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from iclr25_shared.checks import check_choice, check_int

__all__ = [
    "LinformerProjection",
    "MambaConfig",
    "MambaMixer",
    "MambaState",
    "key_padding_mask",
    "selective_scan",
]


def key_padding_mask(attention_mask: torch.Tensor | None, batch: int, seq: int) -> torch.Tensor | None:
    """The ``(batch, seq)`` bool mask of real (non-pad) key positions, from whatever mask a HF layer receives.

    A HF decoder/encoder layer gets either ``None`` (no padding), a 2-D ``(batch, seq)`` 0/1 mask, or a 4-D
    ``(batch, 1, q, seq)`` mask (bool: True = attend; float: 0 = attend, large negative = masked). For a 4-D mask
    the last query row is read: under causal masking the last row sees every real key, and padding masks every
    pad key in every row.

    Raises:
        ValueError: the mask's shape does not match ``(batch, seq)``.
    """
    if attention_mask is None:
        return None
    m = attention_mask
    if m.dim() == 4:
        m = m[:, 0, -1, :]
        valid = m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2
    elif m.dim() == 2:
        valid = m.bool() if m.dtype != torch.bool else m
    else:
        raise ValueError(f"attention_mask must be 2-D or 4-D, got shape {tuple(attention_mask.shape)}")
    if valid.shape[0] != batch or valid.shape[-1] < seq:
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)}, expected batch={batch}, seq={seq}"
        )
    valid = valid[:, -seq:] if valid.shape[-1] != seq else valid
    return None if bool(valid.all()) else valid


class LinformerProjection(nn.Module):
    """The sequence projections ``E`` (keys) and ``F`` (values) of one Linformer layer.

    Args:
        max_seq_len: the longest sequence the layer accepts (rows of ``E, F``).
        k: the projected length (columns), ``1 <= k <= max_seq_len``.
        share: ``"none"`` (separate ``E`` and ``F``) or ``"kv"`` (``F = E``).
        scale: ``"sqrt_n"`` divides the projection by ``sqrt(n)`` (n = real tokens of each sequence; the CALD
            code's choice, which keeps ``N(0,1)`` projections well scaled) or ``"none"``.
        init: ``"normal"`` (``N(0,1)``, the CALD code) or ``"identity"`` (``E = F = I`` on the first ``k`` rows;
            with ``k = n`` and ``scale="none"`` the layer equals softmax attention exactly).

    Raises:
        ValueError: ``k`` outside ``[1, max_seq_len]``, or an unknown ``share``/``scale``/``init``.

    References:
        Wang et al., "Linformer", arXiv:2006.04768, Eq. (7); He & Garner, arXiv:2410.06846, Section 3.1.
    """

    def __init__(
        self,
        max_seq_len: int,
        k: int,
        *,
        share: str = "none",
        scale: str = "sqrt_n",
        init: str = "normal",
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        check_int("max_seq_len", max_seq_len, low=1)
        if isinstance(k, int) and not isinstance(k, bool) and k > max_seq_len:
            raise ValueError(
                f"k must be an integer in [1, max_seq_len={max_seq_len}] (the projected length cannot exceed "
                f"the sequence length), got {k}"
            )
        check_int("k", k, low=1, high=max_seq_len)
        self.share = check_choice("share", share, ("none", "kv"))
        self.scale = check_choice("scale", scale, ("sqrt_n", "none"))
        check_choice("init", init, ("normal", "identity"))
        self.max_seq_len, self.k = max_seq_len, k
        self.proj_k = nn.Parameter(self._init(init, generator))
        self.proj_v = None if share == "kv" else nn.Parameter(self._init(init, generator))

    def _init(self, init: str, generator: torch.Generator | None) -> torch.Tensor:
        if init == "identity":
            return torch.eye(self.max_seq_len, self.k)
        return torch.randn(self.max_seq_len, self.k, generator=generator)

    def project(
        self, keys: torch.Tensor, values: torch.Tensor, valid: torch.Tensor | None
    ) -> tuple[Any, Any]:
        """Project ``(batch, heads, n, head_dim)`` keys and values to ``(batch, heads, k, head_dim)``.

        ``valid`` is the ``(batch, n)`` bool mask of real tokens (right padding: pads after the real tokens) or
        ``None``. Pad rows of ``E, F`` are zeroed, so padded and unpadded inputs give the same projection.

        Raises:
            ValueError: ``n > max_seq_len``, or ``valid`` is not right-padded.
        """
        b, _, n, _ = keys.shape
        if n > self.max_seq_len:
            raise ValueError(
                f"sequence length {n} exceeds the Linformer projection size max_seq_len={self.max_seq_len}; "
                "truncate the input or convert with a larger max_seq_len"
            )
        e = self.proj_k[:n].to(keys.dtype)
        f = (self.proj_k if self.proj_v is None else self.proj_v)[:n].to(values.dtype)
        if valid is None:
            lengths = torch.full((b,), n, device=keys.device, dtype=keys.dtype)
            w = valid_f = None
        else:
            if bool((valid[:, 1:] & ~valid[:, :-1]).any()):
                raise ValueError("the Linformer mixer needs right padding (pads after the real tokens)")
            valid_f = valid.to(keys.dtype)
            lengths = valid_f.sum(-1).clamp_min(1)
            w = valid_f[:, :, None]
        ek = e if w is None else e[None] * w  # (n, k) or (b, n, k)
        fv = f if w is None else f[None] * w
        if self.scale == "sqrt_n":
            s = lengths.rsqrt()[:, None, None]
            ek, fv = (ek[None] if ek.dim() == 2 else ek) * s, (fv[None] if fv.dim() == 2 else fv) * s
        eq = "nk,bhnd->bhkd" if ek.dim() == 2 else "bnk,bhnd->bhkd"
        return torch.einsum(eq, ek, keys), torch.einsum(eq, fv, values)


def linformer_attention(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scaling: float, dropout: float = 0.0
) -> torch.Tensor:
    """Softmax attention of ``(batch, heads, n, d)`` queries over ``(batch, heads, k, d)`` projected keys/values.

    Returns ``(batch, n, heads, d)``. No mask: the projections already exclude pad tokens.
    """
    scores = torch.matmul(query, keys.transpose(-1, -2)) * scaling
    low = query.dtype in (torch.float16, torch.bfloat16)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32 if low else query.dtype).to(query.dtype)
    if dropout:
        probs = F.dropout(probs, p=dropout)
    return torch.matmul(probs, values).transpose(1, 2)


# ----------------------------------------------------------------------------------------------------------------
# Mamba
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MambaConfig:
    """Sizes of a Mamba mixer (Gu & Dao 2023, Section 3.4 defaults: d_state 16, d_conv 4, expand 2).

    Attributes:
        d_state: SSM state size N per channel (>= 1).
        d_conv: width of the causal depth-wise convolution (>= 1).
        expand: inner width = expand * hidden (>= 1).
        dt_rank: rank of the Δ projection; 0 = ceil(hidden / 16).
        dt_min, dt_max: range of the initial Δ (log-uniform), 0 < dt_min <= dt_max.
        chunk: time steps per block of the parallel scan (>= 1; memory grows as chunk²); 1 = the plain
            recurrence, the fastest on CPUs (measured: 16 is ~30x slower there for a 2-layer SmolLM2 prefix).
    """

    d_state: int = 16
    d_conv: int = 4
    expand: int = 2
    dt_rank: int = 0
    dt_min: float = 1e-3
    dt_max: float = 1e-1
    chunk: int = 1

    def __post_init__(self) -> None:
        check_int("d_state", self.d_state, low=1)
        check_int("d_conv", self.d_conv, low=1)
        check_int("expand", self.expand, low=1)
        check_int("dt_rank", self.dt_rank, low=0)
        check_int("chunk", self.chunk, low=1)
        if not 0 < self.dt_min <= self.dt_max:
            raise ValueError(
                f"dt_min and dt_max must satisfy 0 < dt_min <= dt_max, got {self.dt_min}, {self.dt_max}"
            )


def selective_scan(
    x: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    h0: torch.Tensor | None = None,
    *,
    chunk: int = 16,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The selective SSM of Mamba in its parallel (chunked) form.

    Computes ``h_t = exp(Δ_t A) ⊙ h_{t-1} + (Δ_t x_t) B_t`` and ``y_t = h_t C_t + D ⊙ x_t`` for every t (Gu & Dao
    2023, Eq. (2a)-(2b) with the zero-order-hold ``Ā = exp(ΔA)`` and the simplified ``B̄ = ΔB``, Section 3.5.2).
    Within a block of ``chunk`` steps every output is a masked sum over the block (decays ``exp(S_t - S_s)`` with
    ``S`` the cumulative ``ΔA``, only non-positive exponents, so it is stable); blocks are chained through the
    state. Cost is linear in the sequence length.

    Args:
        x: ``(batch, seq, channels)`` inputs.
        delta: ``(batch, seq, channels)`` positive step sizes Δ.
        A: ``(channels, d_state)`` negative state matrix (diagonal per channel).
        B, C: ``(batch, seq, d_state)`` input and output matrices.
        D: ``(channels,)`` skip weights, or ``None``.
        h0: ``(batch, channels, d_state)`` initial state, or ``None`` (zeros).
        chunk: block length (>= 1); 1 runs the recurrence step by step.

    Returns:
        ``y`` of shape ``(batch, seq, channels)`` and the final state ``(batch, channels, d_state)``.
    """
    b, n, c = x.shape
    ns = A.shape[1]
    h = x.new_zeros(b, c, ns) if h0 is None else h0
    ys = []
    if (
        chunk == 1
    ):  # the plain recurrence: fastest on CPUs, where the blocked form's chunk² work does not pay off
        for t in range(n):
            h = (
                torch.exp(delta[:, t, :, None] * A) * h
                + (delta[:, t] * x[:, t])[..., None] * B[:, t, None, :]
            )
            ys.append(torch.einsum("ben,bn->be", h, C[:, t]))
        y = torch.stack(ys, dim=1) if ys else x.new_zeros(b, 0, c)
        return (y + x * D if D is not None else y), h
    for start in range(0, n, chunk):
        sl = slice(start, min(n, start + chunk))
        dA = delta[:, sl, :, None] * A  # (b, L, c, ns), <= 0
        u = (delta[:, sl] * x[:, sl])[..., None] * B[:, sl, None, :]  # (b, L, c, ns)
        S = torch.cumsum(dA, dim=1)
        L = S.shape[1]
        diff = S[:, :, None] - S[:, None, :]  # (b, t, s, c, ns) = S_t - S_s
        causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
        decay = torch.exp(diff.masked_fill(~causal[None, :, :, None, None], float("-inf")))
        Ct = C[:, sl]  # (b, L, ns)
        y = torch.einsum("btsen,bsen,btn->bte", decay, u, Ct)
        y = y + torch.einsum("bten,ben,btn->bte", torch.exp(S), h, Ct)
        h = torch.exp(S[:, -1]) * h + torch.einsum("bsen,bsen->ben", decay[:, -1], u)
        ys.append(y)
    y = torch.cat(ys, dim=1) if ys else x.new_zeros(b, 0, c)
    if D is not None:
        y = y + x * D
    return y, h


@dataclass
class MambaState:
    """Recurrent state of one Mamba mixer for token-by-token inference.

    Attributes:
        conv: ``(batch, channels, d_conv - 1)`` the last inputs of the causal convolution.
        ssm: ``(batch, channels, d_state)`` the SSM state ``h``.
    """

    conv: torch.Tensor
    ssm: torch.Tensor


class MambaMixer(nn.Module):
    """A Mamba block's mixer (Gu & Dao 2023, Fig. 3 / Algorithm 2) in pure torch: no custom kernels.

    ``in_proj`` splits into the SSM branch ``x`` and the gate ``z``; ``x`` goes through a causal depth-wise
    convolution and SiLU; ``x_proj`` gives ``(Δ_low, B, C)``; ``Δ = softplus(dt_proj(Δ_low))``; the selective scan;
    the output is gated by ``SiLU(z)`` and projected back by ``out_proj``.

    Args:
        hidden: model width.
        config: :class:`MambaConfig`.
        generator: torch generator for the random initialisation (deterministic per seed).

    Shapes: ``forward((batch, seq, hidden)) -> (batch, seq, hidden)``; ``step((batch, hidden), state)``.
    """

    def __init__(self, hidden: int, config: MambaConfig, *, generator: torch.Generator | None = None) -> None:
        super().__init__()
        check_int("hidden", hidden, low=1)
        self.config = config
        inner = config.expand * hidden
        dt_rank = config.dt_rank or math.ceil(hidden / 16)
        self.hidden, self.inner, self.dt_rank = hidden, inner, dt_rank
        self.in_proj = nn.Linear(hidden, 2 * inner, bias=False)
        self.conv1d = nn.Conv1d(
            inner, inner, config.d_conv, groups=inner, padding=config.d_conv - 1, bias=True
        )
        self.x_proj = nn.Linear(inner, dt_rank + 2 * config.d_state, bias=False)
        self.dt_proj = nn.Linear(dt_rank, inner, bias=True)
        self.A_log = nn.Parameter(
            torch.log(torch.arange(1, config.d_state + 1, dtype=torch.float32)).repeat(inner, 1)
        )
        self.D = nn.Parameter(torch.ones(inner))
        self.out_proj = nn.Linear(inner, hidden, bias=False)
        self._reset(generator)

    @torch.no_grad()
    def _reset(self, generator: torch.Generator | None) -> None:
        cfg = self.config

        def uniform_(t: torch.Tensor, bound: float) -> None:
            t.copy_((torch.rand(t.shape, generator=generator) * 2 - 1) * bound)

        for lin in (self.in_proj, self.x_proj, self.out_proj):
            uniform_(lin.weight, 1 / math.sqrt(lin.in_features))
        uniform_(self.conv1d.weight, 1 / math.sqrt(cfg.d_conv))
        uniform_(self.conv1d.bias, 1 / math.sqrt(cfg.d_conv))
        uniform_(self.dt_proj.weight, self.dt_rank**-0.5)
        # Δ initialised log-uniform in [dt_min, dt_max]; the bias is softplus⁻¹ of it (Gu & Dao 2023, Section 3.6).
        lo, hi = math.log(cfg.dt_min), math.log(cfg.dt_max)
        dt = torch.exp(torch.rand(self.inner, generator=generator) * (hi - lo) + lo).clamp_min(1e-4)
        self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))

    def _ssm_inputs(self, xc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        n = self.config.d_state
        dbc = self.x_proj(xc)
        dt, B, C = torch.split(dbc, [self.dt_rank, n, n], dim=-1)
        delta = F.softplus(self.dt_proj(dt))
        # In the parameter's dtype, never below float32: a float64 model stays float64 (a float32 round trip was
        # 1.5e-11 off an exact float64 reference); bf16/fp16 parameters are exponentiated in float32, then cast.
        work = torch.promote_types(self.A_log.dtype, torch.float32)
        A = -torch.exp(self.A_log.to(work)).to(xc.dtype)
        return delta, A, B, C

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """``(batch, seq, hidden) -> (batch, seq, hidden)``; causal (output t depends on inputs <= t only)."""
        n = hidden_states.shape[1]
        x, z = self.in_proj(hidden_states).chunk(2, dim=-1)
        xc = F.silu(self.conv1d(x.transpose(1, 2))[..., :n].transpose(1, 2))
        delta, A, B, C = self._ssm_inputs(xc)
        y, _ = selective_scan(xc, delta, A, B, C, self.D.to(xc.dtype), chunk=self.config.chunk)
        return self.out_proj(y * F.silu(z))

    def empty_state(self, batch: int, *, device: Any = None, dtype: Any = None) -> MambaState:
        """A zero state for ``batch`` sequences (the state before the first token)."""
        p = self.in_proj.weight
        device, dtype = device or p.device, dtype or p.dtype
        return MambaState(
            conv=torch.zeros(batch, self.inner, self.config.d_conv - 1, device=device, dtype=dtype),
            ssm=torch.zeros(batch, self.inner, self.config.d_state, device=device, dtype=dtype),
        )

    def step(self, hidden: torch.Tensor, state: MambaState) -> tuple[torch.Tensor, MambaState]:
        """One token: ``(batch, hidden)`` and the state -> ``(batch, hidden)`` and the new state; O(1) in seq.

        The recurrent form of :meth:`forward`: feeding a sequence token by token gives the same outputs.
        """
        x, z = self.in_proj(hidden).chunk(2, dim=-1)
        window = torch.cat([state.conv, x[..., None]], dim=-1)  # (b, inner, d_conv)
        xc = F.silu((window * self.conv1d.weight[:, 0]).sum(-1) + self.conv1d.bias)
        delta, A, B, C = self._ssm_inputs(xc)
        h = torch.exp(delta[..., None] * A) * state.ssm + (delta * xc)[..., None] * B[:, None, :]
        y = (h * C[:, None, :]).sum(-1) + self.D * xc
        return self.out_proj(y * F.silu(z)), MambaState(conv=window[..., 1:], ssm=h)
