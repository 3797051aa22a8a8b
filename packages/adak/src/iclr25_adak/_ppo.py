"""PPO for the Ada-K allocators on a frozen MoE language model (arXiv:2410.10456, Section 3.3).

An episode is one token passing through the ``L`` patched MoE blocks; the action at block ``l`` is its ``k``.
The reward of token ``t`` trades the model's log-likelihood of the next token against the experts it used:

    r_t = log p(x_{t+1} | x_{<=t}; k) - lam * (1/L) * sum_l k_{t,l}

(units: nats; ``lam`` is in nats per activated expert per layer). The advantage is ``r_t`` minus a baseline that
does not depend on the sampled actions: by default the reward the current argmax policy gets on the same token
(self-critical baseline, one extra forward pass), or the batch mean; it is shared by the token's ``L`` decisions. The allocators are updated with PPO's clipped surrogate
plus an entropy bonus; the backbone, routers and experts are frozen. Because the allocators do not change the
block inputs of a rollout whose actions are fixed, the recorded inputs ``x_t^l`` give the new policy exactly, so
no second forward pass through the model is needed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from iclr25_adak._routing import AdaKPatch
from iclr25_shared.checks import check_choice, check_float, check_int

__all__ = [
    "PPOConfig",
    "PPOStats",
    "expert_cost",
    "ppo_objective",
    "ppo_update",
    "rollout",
    "step_noise",
    "token_log_likelihood",
    "train_allocators",
]


@dataclass(frozen=True, kw_only=True)
class PPOConfig:
    """Hyper-parameters of the allocator PPO.

    Attributes:
        lam: cost per activated expert (``lambda`` >= 0, nats per expert per layer).
        clip_eps: PPO clip range ``epsilon`` in (0, 1).
        entropy_coef: weight of the entropy bonus (>= 0).
        epochs: PPO epochs per rollout batch (>= 1).
        lr: Adam learning rate of the allocators (> 0).
        normalize_advantage: divide the advantage by its standard deviation.
        baseline: ``"greedy"`` (self-critical: the reward the current argmax policy gets on the same token, one
            extra forward pass per rollout) or ``"mean"`` (the batch mean reward).
    """

    lam: float = 0.0
    clip_eps: float = 0.2
    entropy_coef: float = 0.01
    epochs: int = 2
    lr: float = 3e-3
    normalize_advantage: bool = True
    baseline: str = "greedy"

    def __post_init__(self) -> None:
        check_float("lam", self.lam, low=0.0)
        check_float("clip_eps", self.clip_eps, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
        check_float("entropy_coef", self.entropy_coef, low=0.0)
        check_int("epochs", self.epochs, low=1)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)
        check_choice("baseline", self.baseline, ("greedy", "mean"))


@dataclass
class PPOStats:
    """Diagnostics of one update: mean ratio, clipped fraction, entropy, reward, mean k (per epoch lists)."""

    ratio_mean: list[float] = field(default_factory=list)
    ratio_max: list[float] = field(default_factory=list)
    clip_fraction: list[float] = field(default_factory=list)
    entropy: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    reward: float = 0.0
    log_likelihood: float = 0.0
    mean_k: float = 0.0


def ppo_objective(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    advantage: torch.Tensor,
    entropy: torch.Tensor,
    *,
    clip_eps: float,
    entropy_coef: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's clipped surrogate loss with an entropy bonus (to minimise).

    ``loss = -mean(min(rho A, clip(rho, 1 - eps, 1 + eps) A)) - c_H mean(H)``, ``rho = exp(logp_new - logp_old)``.

    Args:
        logp_new: ``(decisions,)`` float, log pi_new(a) (with gradient).
        logp_old: ``(decisions,)`` float, log pi_old(a) of the rollout (no gradient).
        advantage: ``(decisions,)`` float.
        entropy: ``(decisions,)`` float, entropy of pi_new at each decision.
        clip_eps: ``epsilon`` in (0, 1).
        entropy_coef: ``c_H`` >= 0.

    Returns:
        The scalar loss and ``{"ratio", "clipped"}`` (``(decisions,)`` ratio and a bool mask of decisions whose
        clipped term was the minimum and differs from the unclipped one).

    References:
        Schulman et al., "Proximal Policy Optimization Algorithms", arXiv:1707.06347, Eq. (7); Ada-K uses it for the
        allocators, arXiv:2410.10456, Section 3.3.
    """
    if not (logp_new.shape == logp_old.shape == advantage.shape == entropy.shape):
        raise ValueError(
            "logp_new, logp_old, advantage and entropy must have one shape (decisions,), got "
            f"{tuple(logp_new.shape)}, {tuple(logp_old.shape)}, {tuple(advantage.shape)}, {tuple(entropy.shape)}"
        )
    check_float("clip_eps", clip_eps, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
    check_float("entropy_coef", entropy_coef, low=0.0)
    ratio = torch.exp(logp_new - logp_old)
    unclipped = ratio * advantage
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * advantage
    surrogate = torch.minimum(unclipped, clipped)
    loss = -surrogate.mean() - entropy_coef * entropy.mean()
    return loss, {"ratio": ratio.detach(), "clipped": (clipped < unclipped).detach()}


def token_log_likelihood(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """``log p(x_{t+1} | x_{<=t})`` for every position but the last.

    Args:
        logits: ``(batch, seq, vocab)`` model outputs.
        input_ids: ``(batch, seq)`` int64.

    Returns:
        ``(batch, seq - 1)`` float32.
    """
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1)


def expert_cost(k: torch.Tensor, lam: float) -> torch.Tensor:
    """``lam * (1/L) sum_l k_l`` per token: ``k`` ``(L, tokens)`` -> ``(tokens,)`` float32."""
    return float(lam) * k.float().mean(dim=0)


def _run(patch: AdaKPatch, input_ids: torch.Tensor, mode: str) -> tuple[torch.Tensor, list[Any]]:
    patch.take_records()
    old = patch.mode, patch.record, patch.count
    patch.mode, patch.record, patch.count = mode, True, False  # type: ignore[assignment]
    try:
        logits = patch.model(input_ids=input_ids).logits
    finally:
        patch.mode, patch.record, patch.count = old
    return logits, patch.take_records()


def _token_reward(
    patch: AdaKPatch, logits: torch.Tensor, input_ids: torch.Tensor, action: torch.Tensor, lam: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    b, s = input_ids.shape
    k = action + torch.tensor([r.allocator.k_min for r in patch.routers], device=action.device)[:, None]
    ll = token_log_likelihood(logits, input_ids)  # (b, s-1)
    ll_full = torch.zeros((b, s), device=ll.device)
    ll_full[:, :-1] = ll
    return ll_full.reshape(-1) - expert_cost(k, lam), k, ll


def _group() -> Any:
    """The process group's World when one is initialised (DDP, reductions), else rank 0 of 1."""
    from iclr25_shared.distributed import World, world

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return world()
    return World()


def _raise_if_any_rank(bad: bool, message: str) -> None:
    """Raise ``FloatingPointError(message)`` on every rank when it holds on any (one clear error, no rank left
    waiting in the next collective)."""
    from iclr25_shared.distributed import gather_objects

    flags = gather_objects(bool(bad))
    ranks = [r for r, flag in enumerate(flags) if flag]
    if ranks:
        where = f" (on rank {', '.join(map(str, ranks))} of {len(flags)})" if len(flags) > 1 else ""
        raise FloatingPointError(message + where)


class _AllocatorStack(nn.Module):
    """The allocators of every layer as one module (what DDP wraps): ``forward(xs)`` -> one logits per layer."""

    def __init__(self, allocators: list[nn.Module]) -> None:
        super().__init__()
        self.allocators = nn.ModuleList(allocators)

    def forward(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        return [a(x) for a, x in zip(self.allocators, xs, strict=True)]


def step_noise(seed: int, step: int, layers: int, shape: tuple[int, int]) -> torch.Tensor:
    """The sampling uniforms of PPO step ``step``: ``(layers, batch, seq)`` float64 in [0, 1), from a CPU generator
    seeded with ``derive_seed(seed, step)``, so every rank draws the same global array and takes its rows."""
    from iclr25_shared.distributed import derive_seed

    gen = torch.Generator().manual_seed(derive_seed(seed, step))
    return torch.rand((layers, *shape), generator=gen, dtype=torch.float64)


@torch.no_grad()
def rollout(
    patch: AdaKPatch,
    input_ids: torch.Tensor,
    lam: float,
    baseline: str = "mean",
    *,
    noise: torch.Tensor | None = None,
) -> dict[str, Any]:
    """Run the model once with sampled ``k``; return the rollout needed by :func:`ppo_update`.

    Args:
        patch: a patched model.
        input_ids: ``(batch, seq)`` int64 token ids (``seq >= 2``).
        lam: the cost per activated expert.
        baseline: ``"greedy"`` adds ``"baseline"``, the reward of each token under the current argmax policy
            (a second forward pass); ``"mean"`` leaves it out (the update then uses the batch mean).
        noise: optional ``(L, batch * seq)`` uniforms: each token's k is drawn by inverse CDF from its own uniform
            (see ``AdaKPatch.sample_noise``) instead of from the patch's generator.

    Returns:
        ``{"x": [L x (batch*seq, d)], "action": (L, batch*seq), "k": (L, batch*seq), "logp_old":
        (L, batch*seq), "reward": (batch*seq,), "valid": (batch*seq,) bool (positions that have a next token),
        "log_likelihood": (batch, seq-1)}`` and ``"baseline": (batch*seq,)`` for the greedy baseline.
    """
    b, s = input_ids.shape
    if s < 2:
        raise ValueError(
            f"input_ids must have at least 2 positions per row (a next token to predict), got {s}"
        )
    check_choice("baseline", baseline, ("greedy", "mean"))
    if noise is not None:
        n = input_ids.numel()
        if noise.shape != (len(patch.routers), n):
            raise ValueError(
                f"noise must be (layers, batch * seq) = ({len(patch.routers)}, {n}), got {tuple(noise.shape)}"
            )
        patch.sample_noise = list(noise.to(input_ids.device))
    try:
        logits, records = _run(patch, input_ids, "sample")
    finally:
        patch.sample_noise = None
    xs, actions, logps = [], [], []
    for chunks in records:
        if len(chunks) != 1:
            raise RuntimeError(f"expected one routed call per block in a rollout, got {len(chunks)}")
        x, a, lp = chunks[0]
        xs.append(x)
        actions.append(a)
        logps.append(lp)
    action = torch.stack(actions)  # (L, n)
    reward, k, ll = _token_reward(patch, logits, input_ids, action, lam)
    valid = torch.zeros((b, s), dtype=torch.bool, device=ll.device)
    valid[:, :-1] = True
    out = {
        "x": xs,
        "action": action,
        "k": k,
        "logp_old": torch.stack(logps),
        "reward": reward,
        "valid": valid.reshape(-1),
        "log_likelihood": ll,
    }
    if baseline == "greedy":
        g_logits, g_records = _run(patch, input_ids, "argmax")
        g_action = torch.stack([chunks[0][1] for chunks in g_records])
        out["baseline"] = _token_reward(patch, g_logits, input_ids, g_action, lam)[0]
    return out


def ppo_update(
    patch: AdaKPatch,
    batch: dict[str, Any],
    optimizer: torch.optim.Optimizer,
    cfg: PPOConfig,
    *,
    module: nn.Module | None = None,
) -> PPOStats:
    """``cfg.epochs`` PPO epochs over one rollout (full batch); only allocator parameters receive gradients.

    Under an initialised process group (data-parallel training, every rank holding the same number of tokens)
    the batch mean baseline, the advantage's standard deviation and the reported statistics are taken over all
    ranks, and ``module`` (the allocators wrapped in ``DistributedDataParallel``) averages the gradients: the
    update is the one-process update of the concatenated batch, up to floating-point summation order.

    Args:
        module: what computes every layer's allocator logits from the recorded inputs (a list in, a list out);
            default: the allocators themselves (one process).
    """
    from iclr25_shared.distributed import all_reduce_mean, all_reduce_sum, gather_objects

    valid = batch["valid"]
    reward = batch["reward"][valid]
    if "baseline" in batch:
        base: Any = batch["baseline"][valid]
    else:
        tot = all_reduce_sum({"sum": float(reward.double().sum()), "n": float(reward.numel())})
        base = tot["sum"] / max(tot["n"], 1.0)
    adv = reward - base
    if cfg.normalize_advantage:
        a64 = adv.double()
        tot = all_reduce_sum({"n": float(a64.numel()), "s": float(a64.sum()), "q": float((a64 * a64).sum())})
        if tot["n"] > 1:
            var = max(tot["q"] - tot["s"] ** 2 / tot["n"], 0.0) / (tot["n"] - 1)
            adv = adv / (var**0.5 + 1e-8)
    means = all_reduce_mean(
        {
            "reward": float(reward.mean()),
            "ll": float(batch["log_likelihood"].mean()),
            "k": float(batch["k"][:, valid].float().mean()),
        }
    )
    stats = PPOStats(reward=means["reward"], log_likelihood=means["ll"], mean_k=means["k"])
    layers = len(patch.routers)
    adv_all = adv.repeat(layers)
    logp_old = batch["logp_old"][:, valid].reshape(-1)
    actions = batch["action"][:, valid]
    module = module if module is not None else _AllocatorStack(patch.allocators())
    for _ in range(cfg.epochs):
        new_lp, ent = [], []
        for lg, a in zip(module([x[valid] for x in batch["x"]]), actions, strict=True):
            logp = torch.log_softmax(lg, dim=-1)
            new_lp.append(logp.gather(1, a[:, None]).squeeze(1))
            ent.append(-(logp.exp() * logp).sum(-1))
        loss, info = ppo_objective(
            torch.cat(new_lp),
            logp_old,
            adv_all,
            torch.cat(ent),
            clip_eps=cfg.clip_eps,
            entropy_coef=cfg.entropy_coef,
        )
        _raise_if_any_rank(
            not bool(torch.isfinite(loss)), "non-finite PPO loss; the allocators were not updated with it"
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        m = all_reduce_mean(
            {
                "ratio": float(info["ratio"].mean()),
                "clip": float(info["clipped"].float().mean()),
                "entropy": float(torch.cat(ent).detach().mean()),
                "loss": float(loss.detach()),
            }
        )
        stats.ratio_mean.append(m["ratio"])
        stats.ratio_max.append(max(gather_objects(float(info["ratio"].max()))))
        stats.clip_fraction.append(m["clip"])
        stats.entropy.append(m["entropy"])
        stats.loss.append(m["loss"])
    return stats


def train_allocators(
    patch: AdaKPatch,
    batches: Iterable[torch.Tensor],
    cfg: PPOConfig,
    *,
    progress: Any = None,
    comm_hook: Any = None,
) -> list[PPOStats]:
    """Train the allocators with PPO, one rollout per batch of ``(batch, seq)`` token ids.

    Each token's k in a rollout is drawn by inverse CDF from the uniforms of :func:`step_noise` (seeded by the
    patch's seed and the step), so a token's draw does not depend on how the batch is split.

    **Data-parallel** under an initialised process group (``torchrun`` / ``accelerate launch``, see
    :func:`iclr25_shared.distributed.init_process_group`): every rank is given the same global batches (and holds
    the same frozen model); rank ``r`` runs the rollout on rows ``r, r + W, ...`` (``iclr25_shared.distributed.
    shard``), and the allocators are wrapped in ``DistributedDataParallel``, which averages their gradients. The
    result is the one-process run on the same batches up to floating-point summation order.

    Args:
        comm_hook: a DDP communication hook (e.g. ``iclr25_shared.distributed.ByteCounter().hook``); ignored in
            one process.

    Returns:
        One :class:`PPOStats` per batch (reduced over ranks). The patch is left in ``"argmax"`` mode.

    Raises:
        FloatingPointError: a reward or the PPO loss became non-finite on some rank (raised on every rank, before
            that update is applied).
        ValueError: a batch's rows do not split evenly over the ranks.
    """
    from iclr25_shared.distributed import shard

    params = patch.parameters()
    if not params:
        raise ValueError("the patch has no allocator parameters to train")
    here = _group()
    stack = _AllocatorStack(patch.allocators())
    module: nn.Module = stack
    if here.is_distributed:
        from torch.nn.parallel import DistributedDataParallel

        device = params[0].device
        module = DistributedDataParallel(stack, device_ids=[device.index] if device.type == "cuda" else None)
        if comm_hook is not None:
            module.register_comm_hook(None, comm_hook)
    optimizer = torch.optim.Adam(params, lr=cfg.lr)
    history = []
    it = progress(batches) if progress is not None else batches
    for step, ids in enumerate(it):
        if ids.dim() != 2 or ids.shape[0] % here.world_size:
            raise ValueError(
                f"each batch must be (rows, seq) with rows divisible by the {here.world_size} ranks, got"
                f" {tuple(ids.shape)}"
            )
        rows = torch.as_tensor(list(shard(ids.shape[0], here)), dtype=torch.long)
        noise = step_noise(patch.seed, step, len(patch.routers), tuple(ids.shape))[:, rows]
        batch = rollout(
            patch,
            ids[rows.to(ids.device)],
            cfg.lam,
            cfg.baseline,
            noise=noise.reshape(len(patch.routers), -1),
        )
        _raise_if_any_rank(
            not bool(torch.isfinite(batch["reward"][batch["valid"]]).all()),
            "non-finite reward in a PPO rollout (the model produced NaN/inf logits)",
        )
        history.append(ppo_update(patch, batch, optimizer, cfg, module=module))
    patch.set_mode("argmax")
    return history
