"""The LevAttention layer: each query attends only to the top-k keys by leverage score (per head, per example).

This is the paper's ViT mechanism (arXiv:2410.05462, §5): at every head, compute the leverage scores of that head's
key matrix for the current input, keep the ``top_k`` keys with the largest scores, and let every query attend to
those keys only. With |x|^p normalisation and top_k ≥ |U| this is exact for the weights ≥ eps (every heavy key is
kept); with softmax normalisation the selection is a **heuristic**: softmax has no small universal set (keys on a
sphere, q = c·k_j makes any j heavy), so no guarantee is claimed for it.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from iclr25_shared.checks import check_choice, check_float, check_int

__all__ = ["LevAttention", "leverage_scores_torch", "select_top_keys"]

Score = Literal["leverage", "norm"]
Normalization = Literal["softmax", "polynomial"]


def _rank_revealing_left(x: torch.Tensor, rank_tol: float | None) -> torch.Tensor:
    """An orthonormal basis ``(..., n, c)`` of the column space of ``x`` (zero columns beyond the numerical rank).

    Columns are equilibrated first (a change of basis: leverage scores are unchanged). A batched Householder QR
    gives the basis when every R has a well-separated diagonal (min |R_ii| > sqrt(rel) · max |R_ii|: full column
    rank, 6x cheaper than the SVD on the ViT's 50 × 16 keys); otherwise the rank-revealing SVD decides the rank.
    """
    norms = x.norm(dim=-2, keepdim=True)
    x = x / torch.where(norms > 0, norms, torch.ones_like(norms))
    rel = max(x.shape[-2], x.shape[-1]) * torch.finfo(x.dtype).eps if rank_tol is None else rank_tol
    if x.shape[-2] >= x.shape[-1]:
        q, r = torch.linalg.qr(x)
        diag = r.diagonal(dim1=-2, dim2=-1).abs()
        if bool((diag.amin(-1) > math.sqrt(rel) * diag.amax(-1)).all()):
            return q
    u, s, _ = torch.linalg.svd(x, full_matrices=False)
    keep = s > rel * s[..., :1]
    return u * keep.unsqueeze(-2)


def _symmetric_features_torch(x: torch.Tensor, degree: int) -> torch.Tensor:
    """φ(x) with ⟨φ(x), φ(y)⟩ = ⟨x, y⟩^degree (the torch twin of ``symmetric_tensor_features``)."""
    from iclr25_levattention._leverage import _monomials

    combos, weights = _monomials(x.shape[-1], degree)
    combos_t = torch.as_tensor(combos, device=x.device)
    out = x[..., combos_t[:, 0]] * torch.as_tensor(weights, dtype=x.dtype, device=x.device)
    for t in range(1, degree):
        out = out * x[..., combos_t[:, t]]
    return out


@torch.no_grad()
def leverage_scores_torch(keys: torch.Tensor, *, p: int = 2, rank_tol: float | None = None) -> torch.Tensor:
    """Batched f-sensitivity bounds of the rows of ``keys`` for f(x) = |x|^p, p even (leverage scores at p = 2).

    p = 2: τ_j = k_jᵀ(KᵀK)⁺k_j. p = 2m: the leverage scores of φ(U), φ the symmetric m-th tensor power and U the
    orthonormal (whitened) keys, an upper bound on sup_q |⟨q, k_j⟩|^p / Σ_l |⟨q, k_l⟩|^p (arXiv:2410.05462 §2-3).
    Computed with two rank-revealing SVDs on column-equilibrated matrices, no gradient; fp16/bf16 in float32.

    Args:
        keys: ``(..., n, d)`` real tensor (a batch of key matrices).
        p: positive even integer.
        rank_tol: singular values ≤ ``rank_tol · s_max`` count as zero; default ``max(rows, cols) · eps(dtype)``.

    Returns:
        ``(..., n)`` scores in [0, 1], summing to the numerical rank of each (tensor) key matrix.

    Raises:
        ValueError: ``keys`` has fewer than 2 dimensions; ``p`` not a positive even integer.

    References:
        arXiv:2410.05462 §2 (leverage scores, f-sensitivities), §5 (per-head selection).
    """
    if keys.ndim < 2:
        raise ValueError(f"keys must have shape (..., n, d), got {tuple(keys.shape)}")
    p = check_int("p", p, low=2)
    if p % 2:
        raise ValueError(f"p must be a positive even integer for leverage_scores_torch, got {p}")
    work = keys.float() if keys.dtype in (torch.float16, torch.bfloat16) else keys
    u = _rank_revealing_left(work, rank_tol)
    if p > 2:
        u = _rank_revealing_left(_symmetric_features_torch(u, p // 2), rank_tol)
    return u.square().sum(-1).clamp(0.0, 1.0)


@torch.no_grad()
def select_top_keys(keys: torch.Tensor, top_k: int, *, score: Score = "leverage", p: int = 2) -> torch.Tensor:
    """Indices ``(..., min(top_k, n))`` of the keys with the largest scores (sorted by index).

    ``score="leverage"``: the f-sensitivity bounds of |x|^p (:func:`leverage_scores_torch`; the paper's leverage
    scores at p = 2). ``score="norm"``: squared row norms (a cheap baseline, not the paper's).
    """
    check_choice("score", score, ("leverage", "norm"))
    s = leverage_scores_torch(keys, p=p) if score == "leverage" else keys.float().square().sum(-1)
    k = min(int(top_k), keys.shape[-2])
    return torch.topk(s, k, dim=-1, sorted=False).indices.sort(dim=-1).values


class LevAttention(nn.Module):
    """Multi-head self-attention where each query attends only to the ``top_k`` leverage-score keys.

    Per head h and example b, the leverage scores of K_bh (``(n, head_dim)``) select ``top_k`` keys; the weights
    over those keys are softmax(q·k/√head_dim) or |q·k/√head_dim|^p normalised; unselected keys get exactly zero
    weight. ``top_k=None`` (or ``top_k >= n``) is full attention. Gradients flow through the selected queries, keys
    and values; the selection itself is discrete (computed without gradient).

    Keys are ranked by the f-sensitivity bounds of the p the layer uses (:func:`leverage_scores_torch`): p = 2
    leverage scores for softmax (the paper's rule), the p-th tensor-power leverage scores for |x|^p.

    Guarantee (``normalization="polynomial"``, even p, per head and example): let U_eps = {j : σ̄_j ≥ eps}, the
    universal set of :func:`~iclr25_levattention.universal_set` (|U_eps| ≤ C(head_dim + p/2 − 1, p/2) / eps). If
    ``top_k ≥ |U_eps|``, every key that holds a weight ≥ eps of *full* |x|^p attention, for any query, is kept.
    The layer then renormalises over the kept keys, so its weights are the full weights divided by the kept mass
    (≥ the full weights; equal when the kept keys carry all the mass); it does not reproduce full attention.
    With ``normalization="softmax"`` no such guarantee exists (softmax has no small universal set, see the
    module docstring and README): the selection is the paper's heuristic.

    Args:
        dim: model width (input and output ``(B, n, dim)``).
        num_heads: heads; ``dim`` must be divisible by it.
        top_k: keys kept per head and example (≥ 1), or ``None`` for full attention.
        score: ``"leverage"`` (the paper) or ``"norm"`` (squared key norm baseline).
        normalization: ``"softmax"`` or ``"polynomial"`` (|x|^p).
        p: exponent for ``"polynomial"``: a positive even integer (2, 4, ...); ignored for softmax.
        qkv_bias: bias in the q/k/v projection.
        dropout: dropout on the attention weights.

    Raises:
        TypeError, ValueError: ``dim``/``num_heads`` not positive or not divisible, ``top_k < 1``, unknown
            ``score``/``normalization``, ``p ≤ 0``.

    References:
        arXiv:2410.05462 §5 (LevAttention for ViTs: top-32 leverage keys per head, trained from scratch).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        top_k: int | None = 32,
        score: Score = "leverage",
        normalization: Normalization = "softmax",
        p: int = 2,
        qkv_bias: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        dim, num_heads = check_int("dim", dim, low=1), check_int("num_heads", num_heads, low=1)
        if dim % num_heads:
            raise ValueError(f"dim ({dim}) must be divisible by num_heads ({num_heads})")
        check_choice("score", score, ("leverage", "norm"))
        check_choice("normalization", normalization, ("softmax", "polynomial"))
        if normalization == "polynomial":
            p = check_int("p", p, low=2)
            if p % 2:
                raise ValueError(
                    f"p must be a positive even integer for normalization='polynomial' (the keys are ranked by "
                    f"the exact |x|^p sensitivity bounds), got {p}"
                )
        check_float("dropout", dropout, low=0.0, high=1.0, high_inclusive=False)
        self.dim, self.num_heads, self.head_dim = dim, num_heads, dim // num_heads
        self.score, self.normalization, self.p = (
            score,
            normalization,
            int(p) if normalization == "polynomial" else 2,
        )
        self.top_k = top_k
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.attn_drop = nn.Dropout(dropout)

    @property
    def top_k(self) -> int | None:
        """Keys kept per head and example; ``None`` means full attention. Settable (e.g. for inference only)."""
        return self._top_k

    @top_k.setter
    def top_k(self, value: int | None) -> None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"top_k must be an integer >= 1 or None (full attention), got {value!r}")
        self._top_k = value

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, num_heads={self.num_heads}, top_k={self.top_k}, score={self.score}, "
            f"normalization={self.normalization}"
            + (f", p={self.p:g}" if self.normalization == "polynomial" else "")
        )

    def _weights(self, logits: torch.Tensor) -> torch.Tensor:
        if self.normalization == "softmax":
            return logits.softmax(dim=-1)
        w = logits.abs().pow(self.p)
        return w / w.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(w.dtype).tiny)

    def forward(
        self, x: torch.Tensor, *, return_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Attend.

        Args:
            x: ``(B, n, dim)`` float tensor.
            return_weights: also return the dense ``(B, num_heads, n, n)`` attention weights (zeros at the
                unselected keys); for inspection and tests, O(n²) memory.

        Returns:
            ``(B, n, dim)``, or ``(out, weights)`` with ``return_weights``.

        Raises:
            ValueError: ``x`` is not ``(B, n, dim)``.
        """
        if x.ndim != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"x must have shape (B, n, {self.dim}), got {tuple(x.shape)}")
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scale = 1.0 / math.sqrt(self.head_dim)
        if self.top_k is None:
            weights = self._weights((q @ k.transpose(-2, -1)) * scale)
            index = None
            out = self.attn_drop(weights) @ v
        else:
            rank_p = self.p if self.normalization == "polynomial" else 2
            index = select_top_keys(k.detach(), self.top_k, score=self.score, p=rank_p)  # (B, H, k)
            gather = index.unsqueeze(-1).expand(-1, -1, -1, self.head_dim)
            k_sel, v_sel = k.gather(2, gather), v.gather(2, gather)
            weights = self._weights((q @ k_sel.transpose(-2, -1)) * scale)  # (B, H, n, k)
            out = self.attn_drop(weights) @ v_sel
        out = self.proj(out.transpose(1, 2).reshape(b, n, self.dim))
        if not return_weights:
            return out
        if index is None:
            return out, weights
        dense = weights.new_zeros(b, self.num_heads, n, n)
        dense.scatter_(-1, index.unsqueeze(-2).expand(-1, -1, n, -1), weights)
        return out, dense
