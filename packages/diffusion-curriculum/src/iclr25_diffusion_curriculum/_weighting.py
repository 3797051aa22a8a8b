"""Loss weightings the curriculum composes with (it changes which t are sampled, not how losses are weighted)."""

from __future__ import annotations

from typing import Literal

import torch

from iclr25_shared.checks import check_choice, check_float

__all__ = ["PREDICTION_TYPES", "min_snr_weights", "snr_from_alphas_cumprod"]

PREDICTION_TYPES = ("epsilon", "v_prediction", "sample")


def snr_from_alphas_cumprod(alphas_cumprod: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:
    """Signal-to-noise ratio ``SNR(t) = ᾱ_t / (1 − ᾱ_t)`` of discrete timesteps.

    Args:
        alphas_cumprod: ``(T,)`` a diffusers scheduler's ``alphas_cumprod``.
        timesteps: ``(B,)`` int64 in ``[0, T)``.

    Returns:
        ``(B,)`` float32 SNR on ``timesteps.device``.

    Raises:
        ValueError: a timestep outside ``[0, T)``.
    """
    alphas_cumprod = torch.as_tensor(alphas_cumprod)
    timesteps = torch.as_tensor(timesteps)
    if timesteps.numel() and (timesteps.min() < 0 or timesteps.max() >= alphas_cumprod.numel()):
        raise ValueError(
            f"timesteps must be in [0, {alphas_cumprod.numel()}), got max {int(timesteps.max())}"
        )
    a = alphas_cumprod.to(device=timesteps.device, dtype=torch.float64)[timesteps.long()]
    return (a / (1.0 - a)).to(torch.float32)


def min_snr_weights(
    snr: torch.Tensor,
    gamma: float = 5.0,
    prediction_type: Literal["epsilon", "v_prediction", "sample"] = "epsilon",
) -> torch.Tensor:
    """Min-SNR-γ loss weights (Hang et al., 2023): the x₀-loss weight ``min(SNR, γ)`` expressed for the model's
    prediction target: ``min(SNR, γ)/SNR`` for ε, ``min(SNR, γ)/(SNR + 1)`` for v, ``min(SNR, γ)`` for x₀.

    Multiply the per-sample MSE by these weights; the curriculum sampler is unchanged (orthogonality, paper §5).

    Args:
        snr: ``(B,)`` positive SNR values (e.g. from :func:`snr_from_alphas_cumprod`, or ``1/σ²`` for EDM).
        gamma: the clamp γ > 0 (5 in the Min-SNR paper).
        prediction_type: ``"epsilon"``, ``"v_prediction"`` or ``"sample"``.

    Raises:
        ValueError: ``gamma ≤ 0``, an unknown prediction type, or a non-positive / NaN SNR.

    References:
        Hang et al., "Efficient Diffusion Training via Min-SNR Weighting Strategy", ICCV 2023, arXiv:2303.09556,
        Eq. 6 and §3.4. Kim et al., arXiv:2403.10348, §5 (curriculum combined with loss weightings).
    """
    check_float("gamma", gamma, low=0.0, low_inclusive=False)
    check_choice("prediction_type", prediction_type, PREDICTION_TYPES)
    snr = torch.as_tensor(snr, dtype=torch.float32)
    if snr.numel() and not bool(torch.all(snr > 0)):
        raise ValueError("snr must be positive (and not NaN)")
    clipped = torch.clamp(snr, max=float(gamma))
    if prediction_type == "epsilon":
        return clipped / snr
    if prediction_type == "v_prediction":
        return clipped / (snr + 1.0)
    return clipped
