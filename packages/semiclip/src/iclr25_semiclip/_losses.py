"""SemiCLIP's objectives, written from the paper (Gan, Ye, Zhang, Wei, ICLR 2025, OpenReview 97D725GJtQ, Sec. 3).

All functions take and return torch tensors and are device/dtype agnostic (they compute in the dtype of their
inputs; pass float32 for the exact values quoted in the docstrings). Shapes use named axes: ``B`` pairs in a batch,
``D`` embedding width, ``K`` mined concepts, ``U`` unlabelled images.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from iclr25_shared.checks import check_float, check_int, check_probability

if TYPE_CHECKING:
    import torch

__all__ = [
    "clip_contrastive_loss",
    "normalize_multi_hot",
    "select_top_fraction",
    "soft_cross_entropy",
    "topk_uniform_targets",
    "trapezoidal_consistency_loss",
]


def _matrix(name: str, x: torch.Tensor) -> None:
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D (rows, columns) tensor, got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")


def _same_shape(a: str, x: torch.Tensor, b: str, y: torch.Tensor) -> None:
    if x.shape != y.shape:
        raise ValueError(f"{a} and {b} must have the same shape, got {tuple(x.shape)} and {tuple(y.shape)}")


def clip_contrastive_loss(
    image_features: torch.Tensor, text_features: torch.Tensor, logit_scale: torch.Tensor | float
) -> torch.Tensor:
    """Symmetric InfoNCE of CLIP on ``B`` paired embeddings (the supervised term L_CLIP of SemiCLIP, Sec. 3).

    ``S = s · I Tᵀ``; loss ``= (CE(S, arange B) + CE(Sᵀ, arange B)) / 2``. Single process: the targets are
    ``arange(B)`` of the rows given here (no distributed gather, so no rank offsets).

    Args:
        image_features: ``(B, D)`` L2-normalised image embeddings.
        text_features: ``(B, D)`` L2-normalised text embeddings, row ``i`` paired with image ``i``.
        logit_scale: the multiplier ``s`` (already exponentiated), a positive scalar or 0-d tensor.

    Returns:
        0-d tensor, the mean loss in nats. ``log B`` when all embeddings are equal.

    Raises:
        ValueError: not 2-D, shapes differ, or ``B == 0``. TypeError: not floating point.
    """
    import torch
    import torch.nn.functional as F

    _matrix("image_features", image_features)
    _matrix("text_features", text_features)
    _same_shape("image_features", image_features, "text_features", text_features)
    if image_features.shape[0] == 0:
        raise ValueError("image_features must hold at least one pair, got 0 rows")
    logits = logit_scale * image_features @ text_features.T
    labels = torch.arange(logits.shape[0], device=logits.device)
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def soft_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy against a soft target, ``mean_i −Σ_k q_ik log softmax(z_i)_k`` (SemiCLIP Sec. 3.1).

    Args:
        logits: ``(B, K)`` unnormalised scores ``z``.
        targets: ``(B, K)`` non-negative rows ``q`` (each sums to 1, or to 0 for a row with no concept, which
            then contributes 0).

    Returns:
        0-d tensor (nats). Equals ``F.cross_entropy`` for one-hot targets.

    Raises:
        ValueError: shapes differ or are not 2-D.
    """
    import torch.nn.functional as F

    _matrix("logits", logits)
    _matrix("targets", targets)
    _same_shape("logits", logits, "targets", targets)
    return -(targets * F.log_softmax(logits, dim=1)).sum(dim=1).mean()


def normalize_multi_hot(multi_hot: torch.Tensor) -> torch.Tensor:
    """Stage-1 concept target ``q_i = y_i / Σ_k y_ik`` for a labelled image's multi-hot concept vector ``y_i``.

    A row with no concept stays all-zero (no NaN), so it adds nothing to :func:`soft_cross_entropy`.

    Args:
        multi_hot: ``(B, K)`` tensor of 0/1 (or non-negative counts).

    Returns:
        ``(B, K)`` tensor of the same dtype; each non-empty row sums to 1.

    Raises:
        ValueError: not 2-D, or a negative entry.
    """
    _matrix("multi_hot", multi_hot)
    if bool((multi_hot < 0).any()):
        raise ValueError("multi_hot must be non-negative, got a negative entry")
    total = multi_hot.sum(dim=1, keepdim=True)
    return multi_hot / total.clamp_min(1e-12) * (total > 0)


def topk_uniform_targets(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Concept pseudo-label of an unlabelled image: uniform ``1/k`` on its top-``k`` concepts (SemiCLIP Sec. 3.1).

    The top-``k`` is taken on the given (detached) scores, e.g. the weak-view concept logits; ties are broken by
    ``torch.topk``.

    Args:
        logits: ``(U, K)`` concept scores.
        k: number of concepts kept, an integer in ``[1, K]``.

    Returns:
        ``(U, K)`` target with exactly ``k`` entries ``1/k`` per row (no gradient).

    Raises:
        ValueError: ``k`` outside ``[1, K]``; ``logits`` not 2-D.
    """
    import torch

    _matrix("logits", logits)
    k = check_int("k", k, low=1, high=logits.shape[1])
    idx = torch.topk(logits.detach(), k, dim=1).indices
    out = torch.zeros_like(logits, dtype=logits.dtype).detach()
    return out.scatter_(1, idx, 1.0 / k)


def trapezoidal_consistency_loss(
    image_features: torch.Tensor,
    text_features: torch.Tensor,
    *,
    weight: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Trapezoidal consistency of ``N`` image–text pairs (SemiCLIP Sec. 3.2): in-modal and cross-modal terms.

    For every two pairs ``(I_j, T_j)`` and ``(I_k, T_k)`` the four points form an isosceles trapezoid when
    ``⟨I_j, I_k⟩ = ⟨T_j, T_k⟩`` (equal legs/diagonals inside each modality) and ``⟨I_j, T_k⟩ = ⟨I_k, T_j⟩``
    (equal cross diagonals). The penalties are

        L_in    = weight · mean_{j,k} (⟨I_j, I_k⟩ − ⟨T_j, T_k⟩)²
        L_cross = weight · mean_{j,k} (⟨I_j, T_k⟩ − ⟨I_k, T_j⟩)²

    The official code multiplies by the CLIP scale ``s`` inside the square and divides by ``s²`` outside, which
    cancels exactly for any ``s > 0``; this function therefore takes no scale. ``weight`` defaults to ``N`` (so
    the terms are sums over ``k`` averaged over ``j``, as in CyCLIP); SemiCLIP's stage 2 passes the labelled batch
    size ``B_l`` while ``N = B_l`` + the selected unlabelled pairs.

    Args:
        image_features: ``(N, D)`` L2-normalised image embeddings.
        text_features: ``(N, D)`` L2-normalised text embeddings (row ``j`` paired with image ``j``).
        weight: positive multiplier (default ``N``).

    Returns:
        ``(L_in, L_cross)``, two 0-d tensors ≥ 0. Both are 0 when ``T = I``; ``L_in`` is 0 when ``T = I Q`` for
        any orthogonal ``Q``; ``L_cross`` is 0 iff ``I Tᵀ`` is symmetric. Both are invariant to a joint rotation
        ``(I R, T R)`` and symmetric under swapping the two modalities.

    Raises:
        ValueError: shapes differ, not 2-D, ``N == 0``, or ``weight`` not positive/finite.
    """
    _matrix("image_features", image_features)
    _matrix("text_features", text_features)
    _same_shape("image_features", image_features, "text_features", text_features)
    n = image_features.shape[0]
    if n == 0:
        raise ValueError("image_features must hold at least one pair, got 0 rows")
    w = float(n) if weight is None else check_float("weight", weight, low=0.0, low_inclusive=False)
    cross = image_features @ text_features.T
    in_modal = ((image_features @ image_features.T - text_features @ text_features.T) ** 2).mean() * w
    cross_modal = ((cross - cross.T) ** 2).mean() * w
    return in_modal, cross_modal


def select_top_fraction(scores: torch.Tensor, ratio: float) -> torch.Tensor:
    """Keep the ``⌊ratio · U⌋`` unlabelled images whose surrogate caption matches best (SemiCLIP Sec. 3.2).

    Args:
        scores: ``(U,)`` cosine similarities ``cos(t̃_u, f_u)``.
        ratio: fraction kept, in ``[0, 1]``.

    Returns:
        ``(U,)`` bool mask with exactly ``⌊ratio · U⌋`` True entries, on the largest scores (ties by
        ``torch.topk``).

    Raises:
        ValueError: ``scores`` not 1-D; ``ratio`` outside ``[0, 1]``.
    """
    import torch

    if scores.ndim != 1:
        raise ValueError(f"scores must be a 1-D (U,) tensor, got shape {tuple(scores.shape)}")
    ratio = check_probability("ratio", ratio)
    keep = math.floor(ratio * scores.shape[0] + 1e-9)  # ⌊ratio·U⌋, robust to 0.29·100 = 28.999…
    mask = torch.zeros(scores.shape[0], dtype=torch.bool, device=scores.device)
    if keep:
        mask[torch.topk(scores.detach(), keep).indices] = True
    return mask
