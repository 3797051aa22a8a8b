"""Timestep clusters: the partition of the diffusion time axis into N difficulty groups (paper §4.1)."""

from __future__ import annotations

from typing import Literal

import torch

from iclr25_shared.checks import check_choice, check_float, check_int

__all__ = ["SCHEMES", "TimestepClusters"]

SCHEMES = ("uniform", "snr_quantile")
Scheme = Literal["uniform", "snr_quantile"]


class TimestepClusters:
    """A partition of the training noise levels into ``num_clusters`` contiguous clusters ``C_1 … C_N``.

    ``C_1`` holds the lowest timesteps / noise levels (the hardest denoising tasks) and ``C_N`` the highest (the
    easiest). Cluster indices in this API are 0-based: cluster ``i`` is the paper's ``C_{i+1}``.

    Two schemes:

    - ``"uniform"`` (discrete DDPM/DiT training, paper §4.1): the integer timesteps ``{begin, …, end−1}``
      (``timestep_range``, default ``(0, num_train_timesteps)``) are cut at the integer boundaries
      ``b_i = begin + ⌊i·(end−begin)/N⌋``, ``i = 0…N``, so cluster ``i`` is ``[b_i, b_{i+1})``. The clusters are
      disjoint, cover the range exactly and are non-empty whenever ``N ≤ end − begin``; when ``N`` does not divide
      the range, sizes differ by at most one. No timestep equals ``num_train_timesteps``.
    - ``"snr_quantile"`` (continuous-σ, EDM-style training, paper §4.1): the noise level σ is drawn from
      EDM's log-normal ``ln σ ~ N(p_mean, p_std²)``; the cluster boundaries are its quantiles
      ``σ_i = exp(p_mean + p_std·Φ⁻¹(i/N))``, so every cluster has probability mass exactly ``1/N`` (and, because
      SNR = 1/σ² is monotone in σ, these are also SNR quantiles). Samples are float noise levels σ, not indices.

    Args:
        num_train_timesteps: ``T``, the scheduler's ``config.num_train_timesteps`` (int ≥ 1). For
            ``"snr_quantile"`` it is only used to check that a scheduler matches.
        num_clusters: ``N``, in ``[1, end − begin]`` for ``"uniform"``, ``≥ 1`` for ``"snr_quantile"``.
        scheme: ``"uniform"`` or ``"snr_quantile"``.
        timestep_range: ``(begin, end)`` with ``0 ≤ begin < end ≤ T`` restricts ``"uniform"`` clusters to
            ``{begin, …, end−1}`` (half-open, like ``range``).
        p_mean, p_std: the log-normal σ distribution of ``"snr_quantile"`` (EDM defaults −1.2, 1.2).

    Raises:
        TypeError: a count is not an int.
        ValueError: ``num_clusters < 1`` or larger than the number of timesteps, an unknown scheme, an empty or
            inverted ``timestep_range`` or one outside ``[0, T]``, ``p_std ≤ 0`` or a non-finite ``p_mean``.

    References:
        Kim, Go, Kwon, Kim. "Denoising Task Difficulty-based Curriculum for Training Diffusion Models",
        ICLR 2025, arXiv:2403.10348, §4.1 (clustering timesteps; uniform intervals for DiT, SNR-based equal-mass
        intervals for EDM). Karras et al. 2022 (EDM), arXiv:2206.00364, Table 1 (log-normal p(σ)).
    """

    def __init__(
        self,
        num_train_timesteps: int = 1000,
        num_clusters: int = 10,
        scheme: Scheme = "uniform",
        *,
        timestep_range: tuple[int, int] | None = None,
        p_mean: float = -1.2,
        p_std: float = 1.2,
    ) -> None:
        self.num_train_timesteps = check_int("num_train_timesteps", num_train_timesteps, low=1)
        check_choice("scheme", scheme, SCHEMES)
        self.scheme: Scheme = scheme
        if scheme == "uniform":
            if timestep_range is None:
                timestep_range = (0, num_train_timesteps)
            if not isinstance(timestep_range, (tuple, list)) or len(timestep_range) != 2:
                raise ValueError(f"timestep_range must be a (begin, end) pair, got {timestep_range!r}")
            begin = check_int("timestep_range begin", timestep_range[0], low=0, high=num_train_timesteps)
            end = check_int("timestep_range end", timestep_range[1], low=0, high=num_train_timesteps)
            if end <= begin:
                raise ValueError(
                    f"timestep_range ({begin}, {end}) is empty or inverted: need 0 <= begin < end <= "
                    f"num_train_timesteps={num_train_timesteps} (end is exclusive)"
                )
            self.timestep_range = (begin, end)
            self.num_clusters = check_int("num_clusters", num_clusters, low=1, high=end - begin)
            width = end - begin
            self.boundaries = torch.tensor(
                [begin + (i * width) // self.num_clusters for i in range(self.num_clusters + 1)],
                dtype=torch.int64,
            )
            self.p_mean = self.p_std = float("nan")
        else:
            if timestep_range is not None:
                raise ValueError(
                    "timestep_range applies to scheme='uniform' only (snr_quantile clusters are σ ranges)"
                )
            self.num_clusters = check_int("num_clusters", num_clusters, low=1)
            check_float("p_mean", p_mean)
            check_float("p_std", p_std, low=0.0, low_inclusive=False)
            self.p_mean, self.p_std = float(p_mean), float(p_std)
            self.timestep_range = (0, num_train_timesteps)
            q = torch.arange(self.num_clusters + 1, dtype=torch.float64) / self.num_clusters
            self.boundaries = torch.exp(
                self.p_mean + self.p_std * torch.special.ndtri(q)
            )  # σ_0 = 0, σ_N = inf

    # ------------------------------------------------------------------------------------------------------------
    @property
    def discrete(self) -> bool:
        """True for integer timesteps (``"uniform"``), False for continuous σ (``"snr_quantile"``)."""
        return self.scheme == "uniform"

    def sizes(self) -> torch.Tensor:
        """``(N,)`` int64 number of timesteps per cluster (``"uniform"`` only)."""
        self._need_discrete("sizes")
        return self.boundaries[1:] - self.boundaries[:-1]

    def mass(self) -> torch.Tensor:
        """``(N,)`` float64 probability of each cluster under the training distribution of the full range
        (uniform over the timesteps, or EDM's log-normal σ)."""
        if self.discrete:
            sizes = self.sizes().to(torch.float64)
            return sizes / sizes.sum()
        return torch.full((self.num_clusters,), 1.0 / self.num_clusters, dtype=torch.float64)

    def members(self, cluster: int) -> torch.Tensor:
        """The int64 timesteps of cluster ``cluster`` (0-based), ascending (``"uniform"`` only)."""
        self._need_discrete("members")
        check_int("cluster", cluster, low=0, high=self.num_clusters - 1)
        return torch.arange(
            int(self.boundaries[cluster]), int(self.boundaries[cluster + 1]), dtype=torch.int64
        )

    def cluster_of(self, values: torch.Tensor) -> torch.Tensor:
        """The 0-based cluster index of each timestep (``"uniform"``) or noise level σ (``"snr_quantile"``).

        Args:
            values: any shape; integer timesteps in ``timestep_range`` or positive finite σ.

        Returns:
            int64 tensor of the same shape, values in ``[0, N)``.

        Raises:
            ValueError: a timestep outside ``[begin, end)`` (for example ``T`` itself, diffusers#10003), a
                non-integral timestep, or a σ that is not positive and finite.
        """
        values = torch.as_tensor(values)
        if self.discrete:
            if values.is_floating_point():
                if not torch.all(values == values.round()):
                    raise ValueError("timesteps must be integers for scheme='uniform'")
                values = values.to(torch.int64)
            begin, end = self.timestep_range
            if values.numel() and (values.min() < begin or values.max() >= end):
                raise ValueError(
                    f"timesteps must lie in [{begin}, {end}); got values in "
                    f"[{int(values.min())}, {int(values.max())}]"
                )
            inner = self.boundaries[1:-1].to(values.device)
        else:
            values = values.to(torch.float64)
            if values.numel() and not torch.all(torch.isfinite(values) & (values > 0)):
                raise ValueError("noise levels σ must be positive and finite")
            inner = self.boundaries[1:-1].to(values.device)
        return torch.bucketize(values, inner, right=True)

    def sample(
        self,
        first: int,
        stop: int,
        batch_size: int,
        *,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """Draw ``batch_size`` values from the union of clusters ``first … stop−1`` (0-based, contiguous),
        distributed as the training distribution restricted to that union.

        For ``"uniform"`` this is uniform over the integer timesteps ``[b_first, b_stop)`` (int64); for
        ``"snr_quantile"`` it is the log-normal σ conditioned on ``[σ_first, σ_stop)`` (float32), drawn by inverse
        CDF from ``u ~ U[first/N, stop/N)``. Random numbers come from ``generator`` (on its device); the result
        is moved to ``device``.

        Raises:
            ValueError: an empty or out-of-range cluster span, or ``batch_size < 1``.
        """
        check_int("batch_size", batch_size, low=1)
        check_int("first", first, low=0, high=self.num_clusters - 1)
        check_int("stop", stop, low=first + 1, high=self.num_clusters)
        gen_device = generator.device if generator is not None else torch.device("cpu")
        if self.discrete:
            low, high = int(self.boundaries[first]), int(self.boundaries[stop])
            out = torch.randint(low, high, (batch_size,), generator=generator, device=gen_device)
        else:
            lo, hi = first / self.num_clusters, stop / self.num_clusters
            u = torch.rand(batch_size, generator=generator, device=gen_device, dtype=torch.float64)
            u = (lo + (hi - lo) * u).clamp(1e-12, 1 - 1e-12)
            out = torch.exp(self.p_mean + self.p_std * torch.special.ndtri(u)).to(torch.float32)
        return out if device is None else out.to(device)

    def check_scheduler(self, scheduler: object) -> None:
        """Raise ``ValueError`` when a diffusers scheduler's ``config.num_train_timesteps`` differs from ``T``."""
        config = getattr(scheduler, "config", None)
        t = getattr(config, "num_train_timesteps", None) if config is not None else None
        if t is None and isinstance(config, dict):
            t = config.get("num_train_timesteps")
        if t is None:
            raise TypeError(
                f"{type(scheduler).__name__} has no config.num_train_timesteps; pass a diffusers scheduler"
            )
        if int(t) != self.num_train_timesteps:
            raise ValueError(
                f"scheduler {type(scheduler).__name__} has num_train_timesteps={t} but the clusters were built for "
                f"num_train_timesteps={self.num_train_timesteps}; build TimestepClusters({t}, ...)"
            )

    def _need_discrete(self, what: str) -> None:
        if not self.discrete:
            raise ValueError(
                f"{what}() needs scheme='uniform' (snr_quantile clusters are continuous σ ranges)"
            )

    def __repr__(self) -> str:
        extra = (
            f", timestep_range={self.timestep_range}"
            if self.discrete
            else f", p_mean={self.p_mean}, p_std={self.p_std}"
        )
        return (
            f"TimestepClusters(num_train_timesteps={self.num_train_timesteps}, num_clusters={self.num_clusters}, "
            f"scheme={self.scheme!r}{extra})"
        )
