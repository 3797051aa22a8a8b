"""The curriculum timestep sampler: a drop-in replacement for ``torch.randint(0, T, (B,))`` (paper §4, Alg. 1)."""

from __future__ import annotations

from typing import Any, Literal

import torch

from iclr25_diffusion_curriculum._clusters import TimestepClusters
from iclr25_diffusion_curriculum._pacer import FixedPacer, PatiencePacer
from iclr25_shared.checks import check_choice, check_int

__all__ = ["ORDERS", "CurriculumSampler"]

ORDERS = ("curriculum", "reverse", "uniform")
Order = Literal["curriculum", "reverse", "uniform"]
Pacer = PatiencePacer | FixedPacer


def _mean_over_ranks(loss: Any) -> Any:
    """The loss averaged over the default process group (unchanged when torch.distributed is not initialised)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return loss
    device = torch.device("cpu")
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    value = loss.detach().reshape(-1)[:1] if torch.is_tensor(loss) else torch.tensor([float(loss)])
    buf = value.to(device=device, dtype=torch.float64).clone()
    dist.all_reduce(buf)
    return float(buf.item()) / dist.get_world_size()


class CurriculumSampler:
    """Sample training timesteps from the clusters the current curriculum stage allows.

    With ``order="curriculum"`` (the paper's method), stage ``n`` (1-based) samples uniformly from
    ``C_{N−n+1} ∪ … ∪ C_N``: stage 1 only from the highest-t (easiest) cluster, each later stage adds the next
    harder cluster, and stage ``N`` is the full range, used for the rest of training. ``order="reverse"`` is the
    hard-first control (stage ``n`` samples ``C_1 ∪ … ∪ C_n``), and ``order="uniform"`` is standard training
    (every stage is the full range; the pacer is not consulted). Loss, weighting and model are untouched.

    Use it in a diffusers training loop::

        clusters = TimestepClusters(scheduler.config.num_train_timesteps, num_clusters=20)
        sampler = CurriculumSampler(clusters, PatiencePacer(patience=200, max_steps_per_stage=2000))
        sampler.check_scheduler(scheduler)
        for batch in loader:
            t = sampler.sample(batch.shape[0], generator=gen, device=batch.device)   # instead of torch.randint
            loss = ...
            sampler.update(loss)                                                       # advances the stage

    Args:
        clusters: the partition of the time axis.
        pacer: a :class:`PatiencePacer` (or :class:`FixedPacer`); required unless ``order="uniform"``. It is bound
            to ``clusters.num_clusters`` stages.
        order: ``"curriculum"`` (easy → hard), ``"reverse"`` (hard → easy) or ``"uniform"``.
        sync_distributed: average the loss over ``torch.distributed`` ranks in :meth:`update` (when a process
            group is initialised) so that data-parallel ranks advance together.

    Raises:
        TypeError: ``clusters`` is not a :class:`TimestepClusters`.
        ValueError: an unknown ``order``, a missing pacer, or a pacer bound to another number of stages.

    References:
        Kim et al., ICLR 2025, arXiv:2403.10348, §4 and Algorithm 1 (stage n trains on the union of the n easiest
        clusters; after the last stage, standard training on all timesteps).
    """

    def __init__(
        self,
        clusters: TimestepClusters,
        pacer: Pacer | None = None,
        *,
        order: Order = "curriculum",
        sync_distributed: bool = True,
    ) -> None:
        if not isinstance(clusters, TimestepClusters):
            raise TypeError(f"clusters must be a TimestepClusters, got {type(clusters).__name__}")
        check_choice("order", order, ORDERS)
        if pacer is None and order != "uniform":
            raise ValueError(
                f"order={order!r} needs a pacer (e.g. PatiencePacer(patience=200)); only 'uniform' works without"
            )
        if pacer is not None:
            if not isinstance(pacer, (PatiencePacer, FixedPacer)):
                raise TypeError(f"pacer must be a PatiencePacer or FixedPacer, got {type(pacer).__name__}")
            pacer.bind(clusters.num_clusters)
        self.clusters = clusters
        self.pacer = pacer
        self.order: Order = order
        self.sync_distributed = bool(sync_distributed)

    @property
    def num_stages(self) -> int:
        """``N``: the number of clusters, hence stages."""
        return self.clusters.num_clusters

    @property
    def stage(self) -> int:
        """The current stage, 1 … N (always N for ``order="uniform"``)."""
        if self.order == "uniform" or self.pacer is None:
            return self.num_stages
        return min(self.pacer.stage, self.num_stages)

    def allowed_clusters(self, stage: int | None = None) -> range:
        """The 0-based cluster indices stage ``stage`` (default: the current one) samples from.

        Raises:
            ValueError: ``stage`` outside ``[1, N]``.
        """
        n = self.stage if stage is None else stage
        check_int("stage", n, low=1, high=self.num_stages)
        if self.order == "uniform":
            return range(0, self.num_stages)
        if self.order == "curriculum":
            return range(self.num_stages - n, self.num_stages)
        return range(0, n)

    def sample(
        self,
        batch_size: int,
        generator: torch.Generator | None = None,
        *,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """Draw ``batch_size`` training timesteps for the current stage.

        Returns:
            ``(batch_size,)`` int64 timesteps in ``[0, T)`` (``"uniform"`` clusters) or float32 noise levels σ
            (``"snr_quantile"``), on ``device`` (default: the generator's device, else CPU).

        Raises:
            ValueError: ``batch_size < 1``.
        """
        allowed = self.allowed_clusters()
        return self.clusters.sample(
            allowed.start, allowed.stop, batch_size, generator=generator, device=device
        )

    __call__ = sample

    def update(self, loss: Any) -> int:
        """Report the step's training loss to the pacer; return the stage for the next step.

        Under ``torch.distributed`` (initialised, ``sync_distributed=True``) the loss is first averaged over all
        ranks, so every rank's pacer sees the same value and all ranks stay in the same stage. A non-finite loss is
        skipped with a ``RuntimeWarning`` (see :class:`PatiencePacer`).
        """
        if self.pacer is None:
            return self.num_stages
        if self.sync_distributed:
            loss = _mean_over_ranks(loss)
        self.pacer.update(loss)
        return self.stage

    def check_scheduler(self, scheduler: object) -> None:
        """Raise ``ValueError`` if a diffusers scheduler's ``num_train_timesteps`` differs from the clusters'."""
        self.clusters.check_scheduler(scheduler)

    def stage_schedule(self) -> list[tuple[int, int, int]]:
        """The stages so far as ``(update at which the stage began, t_min, t_max)`` rows, t_max inclusive, in the
        spirit of sd-scripts' ``--dynamic_timestep_schedule`` (``"uniform"`` clusters only)."""
        if not self.clusters.discrete:
            raise ValueError("stage_schedule() needs scheme='uniform' clusters")
        starts = [(0, 1)] + (
            list(self.pacer.history) if self.pacer is not None and self.order != "uniform" else []
        )
        rows = []
        for begin, stage in starts:
            allowed = self.allowed_clusters(min(stage, self.num_stages))
            b = self.clusters.boundaries
            rows.append((begin, int(b[allowed.start]), int(b[allowed.stop]) - 1))
        return rows

    def _fingerprint(self) -> dict[str, Any]:
        c = self.clusters
        return {
            "num_train_timesteps": c.num_train_timesteps,
            "num_clusters": c.num_clusters,
            "scheme": c.scheme,
            "timestep_range": list(c.timestep_range),
            "order": self.order,
        }

    def state_dict(self) -> dict[str, Any]:
        """Sampler identity plus the pacer's state; with the caller's generator state this resumes exactly."""
        return {
            "sampler": self._fingerprint(),
            "pacer": None if self.pacer is None else self.pacer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`.

        Raises:
            ValueError: the state was saved by a sampler with other clusters or order.
        """
        mine = self._fingerprint()
        theirs = dict(state.get("sampler", {}))
        if theirs != mine:
            diff = sorted(k for k in mine if theirs.get(k) != mine[k])
            raise ValueError(f"state_dict is from a different sampler (differs in {', '.join(diff)})")
        if (state.get("pacer") is None) != (self.pacer is None):
            raise ValueError("state_dict and this sampler disagree on whether a pacer is used")
        if self.pacer is not None:
            self.pacer.load_state_dict(state["pacer"])

    def __repr__(self) -> str:
        return (
            f"CurriculumSampler({self.clusters!r}, {self.pacer!r}, order={self.order!r}; stage {self.stage})"
        )
