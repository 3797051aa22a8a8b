"""Adaptive-weight NT-Xent of SiMHand (arXiv:2502.15251, Section 3.3) and the pose-distance weights it uses.

The weights sit *inside* the exponent: for the ``2N`` projections ``z = [z1; z2]`` (rows L2-normalised), the loss
of anchor ``i`` with positive ``p(i) = (i + N) mod 2N`` is

    l_i = -log( exp(w+_i s_{i,p(i)} / tau) / sum_{j != i} exp(W-_{ij} s_{ij} / tau) ),

with ``s`` the cosine similarity; the denominator runs over every ``j != i`` (the positive included, as in
NT-Xent) and the self-similarity is *masked out*, not subtracted. With all weights one it is exactly NT-Xent
(SimCLR, arXiv:2002.05709, Eq. (1)). The weights come from the 2-D pose distance of the pair (mean per-joint
distance): linear ``w = (max d - d) / (max d - min d)`` (the closest pair 1, the farthest 0) or non-linear
``w = 1 / (1 + exp(lambda (d - mean d)))``. When every distance is equal the linear form is 0/0 in the official
code (NaN); here it returns ones (no information to weight by).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from iclr25_shared.checks import check_choice, check_finite, check_float, check_shape

if TYPE_CHECKING:
    import torch

__all__ = ["adaptive_weights", "mpjpe_2d_matrix", "ntxent", "pair_weights", "weighted_ntxent"]

_EPS = 1e-12


def _check_pair(z1: torch.Tensor, z2: torch.Tensor) -> int:
    sizes = check_shape("z1", z1, ("n", "d"))
    check_shape("z2", z2, ("n", "d"), bind=sizes)
    if sizes["n"] < 2:
        raise ValueError(
            f"batch size must be >= 2 for a contrastive loss (needs negatives), got n={sizes['n']}"
        )
    check_finite("z1", z1)
    check_finite("z2", z2)
    return sizes["n"]


def weighted_ntxent(
    z1: torch.Tensor,
    z2: torch.Tensor,
    w_pos: torch.Tensor | None = None,
    w_neg: torch.Tensor | None = None,
    *,
    temperature: float = 0.5,
) -> torch.Tensor:
    """SiMHand's adaptive-weight NT-Xent (weights inside the exponent), averaged over the ``2N`` anchors.

    Args:
        z1: ``(n, d)`` float tensor, projections of the first views (normalised here).
        z2: ``(n, d)`` float tensor, projections of their positives (row ``i`` pairs with ``z1[i]``).
        w_pos: ``(n,)`` positive-pair weights in ``[0, 1]`` (shared by the pairs ``(i, i+n)`` and ``(i+n, i)``);
            ``None`` = ones.
        w_neg: ``(2n, 2n)`` weights of every pair of the ``2n`` samples (order ``[z1; z2]``); ``None`` = ones.
            The diagonal is unused (self-pairs are masked out).
        temperature: ``tau > 0``.

    Returns:
        0-d tensor, the mean of ``l_i`` over the ``2n`` anchors (nats). Gradients flow through ``z1``, ``z2``
        (the weights are treated as given; pass detached tensors).

    Raises:
        ValueError: shapes disagree, ``n < 2``, non-finite inputs, ``temperature <= 0``.

    References:
        Lin et al., "SiMHand", ICLR 2025, arXiv:2502.15251, Section 3.3 (weighted contrastive loss);
        Chen et al., SimCLR, arXiv:2002.05709, Eq. (1).
    """
    import torch
    import torch.nn.functional as F

    n = _check_pair(z1, z2)
    tau = check_float("temperature", temperature, low=0.0, low_inclusive=False)
    z = F.normalize(torch.cat([z1, z2], dim=0), dim=1)
    sim = z @ z.T  # (2n, 2n) cosine similarities
    m = 2 * n
    ones = torch.ones((), dtype=sim.dtype, device=sim.device)
    if w_neg is None:
        wn = ones.expand(m, m)
    else:
        check_shape("w_neg", w_neg, (m, m))
        check_finite("w_neg", w_neg)
        wn = w_neg.to(sim)
    if w_pos is None:
        wp = ones.expand(n)
    else:
        check_shape("w_pos", w_pos, (n,))
        check_finite("w_pos", w_pos)
        wp = w_pos.to(sim)
    idx = torch.arange(m, device=sim.device)
    pos = (idx + n) % m
    logits = wn * sim / tau
    logits = logits.masked_fill(torch.eye(m, dtype=torch.bool, device=sim.device), float("-inf"))
    numerator = torch.cat([wp, wp]) * sim[idx, pos] / tau
    return (torch.logsumexp(logits, dim=1) - numerator).mean()


def ntxent(z1: torch.Tensor, z2: torch.Tensor, *, temperature: float = 0.5) -> torch.Tensor:
    """Plain NT-Xent (SimCLR, arXiv:2002.05709, Eq. (1)): :func:`weighted_ntxent` with all weights one.

    Written separately (as the cross-entropy of the masked similarity logits) so the reduction can be tested.
    Shapes, errors: as :func:`weighted_ntxent`.
    """
    import torch
    import torch.nn.functional as F

    n = _check_pair(z1, z2)
    tau = check_float("temperature", temperature, low=0.0, low_inclusive=False)
    z = F.normalize(torch.cat([z1, z2], dim=0), dim=1)
    logits = (z @ z.T) / tau
    m = 2 * n
    logits = logits.masked_fill(torch.eye(m, dtype=torch.bool, device=z.device), float("-inf"))
    target = (torch.arange(m, device=z.device) + n) % m
    return F.cross_entropy(logits, target)


def adaptive_weights(
    distances: torch.Tensor,
    *,
    kind: Literal["linear", "nonlinear"] = "linear",
    lam: float = 1.0,
) -> torch.Tensor:
    """Weights from pose distances: near pairs get weight near 1, far pairs near 0.

    Args:
        distances: any-shape float tensor of non-negative distances (pixels or normalised units).
        kind: ``"linear"``: ``(max d - d) / (max d - min d)`` (parameter-free; min and max over the whole
            tensor); ``"nonlinear"``: ``1 / (1 + exp(lam (d - mean d)))``.
        lam: slope of the non-linear form (``> 0``; in the units of ``1 / d``).

    Returns:
        Tensor of the same shape, values in ``[0, 1]``. If every distance is equal (or only one is given) the
        linear form returns ones instead of the official 0/0 = NaN; the non-linear form returns 0.5.

    Raises:
        ValueError: empty, non-finite or negative ``distances``; unknown ``kind``; ``lam <= 0``.

    References:
        arXiv:2502.15251, Section 3.3 (adaptive weighting, linear and non-linear).
    """
    import torch

    check_choice("kind", kind, ("linear", "nonlinear"))
    check_finite("distances", distances)
    if distances.numel() == 0:
        raise ValueError("distances must be non-empty")
    if bool((distances < 0).any()):
        raise ValueError("distances must be >= 0")
    d = distances
    if kind == "linear":
        lo, hi = d.min(), d.max()
        span = hi - lo
        if float(span) <= _EPS * max(1.0, float(hi)):
            return torch.ones_like(d)
        return ((hi - d) / span).clamp(0.0, 1.0)
    lam = check_float("lam", lam, low=0.0, low_inclusive=False)
    return torch.sigmoid(-lam * (d - d.mean()))


def mpjpe_2d_matrix(a: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """Mean per-joint distance between every pair of poses: ``D[i, j] = mean_k ||a[i, k] - b[j, k]||``.

    Args:
        a: ``(n, joints, c)`` keypoints (any units); b: ``(m, joints, c)`` or ``None`` (= ``a``).

    Returns:
        ``(n, m)`` distances in the keypoints' units.
    """
    b = a if b is None else b
    sizes = check_shape("a", a, ("n", "joints", "c"))
    check_shape("b", b, ("m", "joints", "c"), bind=sizes)
    diff = a[:, None, :, :] - b[None, :, :, :]
    return diff.norm(dim=-1).mean(dim=-1)


def pair_weights(
    joints1: torch.Tensor,
    joints2: torch.Tensor,
    *,
    kind: Literal["linear", "nonlinear"] = "linear",
    lam_pos: float = 1.0,
    lam_neg: float = 1.0,
    apply_to: Literal["both", "pos", "neg"] = "both",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positive and negative weights of a batch from the 2-D joints of its two views.

    Args:
        joints1: ``(n, joints, 2)`` 2-D keypoints of the first views (after their augmentation).
        joints2: ``(n, joints, 2)`` keypoints of the positives (after theirs).
        kind: ``"linear"`` or ``"nonlinear"`` (see :func:`adaptive_weights`).
        lam_pos, lam_neg: non-linear slopes for the positive and negative distances.
        apply_to: where weights apply; the other side gets ones.

    Returns:
        ``(w_pos, w_neg)``: ``(n,)`` weights from ``d+_i = mean_k ||J1_ik - J2_ik||`` and ``(2n, 2n)`` weights from
        the distances between all ``2n`` poses ``[J1; J2]``. Detached, in the keypoints' floating dtype (float64
        stays float64; half precision is computed in float32 and returned in its own dtype; integer keypoints give
        the default float dtype), on their device.

    Raises:
        ValueError: bad shapes, NaN keypoints, unknown ``kind`` / ``apply_to``.

    References:
        arXiv:2502.15251, Section 3.3.
    """
    import torch

    sizes = check_shape("joints1", joints1, ("n", "joints", 2))
    check_shape("joints2", joints2, ("n", "joints", 2), bind=sizes)
    check_finite("joints1", joints1)
    check_finite("joints2", joints2)
    check_choice("apply_to", apply_to, ("both", "pos", "neg"))
    dtype = torch.promote_types(joints1.dtype, joints2.dtype)
    if not dtype.is_floating_point:  # integer pixel coordinates: the default float type
        dtype = torch.get_default_dtype()
    work = torch.promote_types(dtype, torch.float32)  # bf16 / fp16 distances are computed in float32
    j1, j2 = joints1.detach().to(work), joints2.detach().to(work)
    n = sizes["n"]
    if apply_to in ("both", "pos"):
        d_pos = (j1 - j2).norm(dim=-1).mean(dim=-1)
        w_pos = adaptive_weights(d_pos, kind=kind, lam=lam_pos)
    else:
        w_pos = torch.ones(n, dtype=work, device=j1.device)
    if apply_to in ("both", "neg"):
        allj = torch.cat([j1, j2], dim=0)
        w_neg = adaptive_weights(mpjpe_2d_matrix(allj), kind=kind, lam=lam_neg)
    else:
        w_neg = torch.ones(2 * n, 2 * n, dtype=work, device=j1.device)
    return w_pos.to(dtype), w_neg.to(dtype)
