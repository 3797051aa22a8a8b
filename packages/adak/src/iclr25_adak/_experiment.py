"""What the commands share: the host MoE's spec and the ``--size gpu`` preset, the text blocks, joining the
process group, loading the model and patching it, and one PPO training run (``train`` in ``_train.py``,
``evaluate`` in ``_evaluate.py``, ``reproduce`` in ``_reproduce.py``, ``bench`` in ``_bench.py``). The commands
reach these through the module (``ex._load``), so a test can replace one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from iclr25_adak.cli import WIKI_MOE
from iclr25_shared.cli import RunContext, UsageError

QUICK_SPEC = {"steps": 200, "batch": 8, "docs": 3000, "layers": 6}
FULL_SPEC = {"steps": 1500, "batch": 16, "docs": 9033, "layers": 6, "hidden": 192, "ffn": 384}


def _spec(size: str = "quick") -> Any:
    from iclr25_adak._zoo import MoESpec

    return MoESpec(**(FULL_SPEC if size == "full" else QUICK_SPEC))


GPU_PRESET = {"seeds": 8, "steps": 50, "batch": 32, "eval_blocks": 256}
"""``reproduce --size gpu``: the quick host MoE (so the GPU run extends the CPU table) with more seeds, rollouts,
rollout blocks and validation blocks; applied to the options left at their defaults."""


def _apply_preset(cfg: Any) -> Any:
    import dataclasses

    if getattr(cfg, "size", None) != "gpu":
        return cfg
    defaults = {f.name: f.default for f in dataclasses.fields(cfg)}
    return dataclasses.replace(cfg, **{k: v for k, v in GPU_PRESET.items() if getattr(cfg, k) == defaults[k]})


def _text_blocks(tokenizer: Any, docs: list[str], seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokenise documents with the model's own tokenizer; 90/10 document split; ``(blocks, seq_len)`` each."""
    enc = tokenizer(docs, add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    n_val = max(1, len(docs) // 10)

    def cut(rows: list[list[int]]) -> np.ndarray:
        flat = np.asarray([t for r in rows for t in [*r, eos]], dtype=np.int64)
        if len(flat) < seq_len:
            raise UsageError(
                f"text is too short: {len(flat)} tokens, need at least seq_len={seq_len} per split"
            )
        return flat[: len(flat) // seq_len * seq_len].reshape(-1, seq_len)

    return cut(enc[n_val:]), cut(enc[:n_val])


def _join(cfg: Any, ctx: RunContext) -> Any:
    """``--device`` after joining the launcher's process group (torchrun / accelerate launch; a no-op in one
    process; ``ctx.join_group``), every rank checked to run the same configuration and ``--batch`` to split evenly
    over the ranks."""
    from iclr25_shared.distributed import world

    device = ctx.join_group(configuration=repr(cfg))
    here = world()
    batch = getattr(cfg, "batch", None)
    if here.is_distributed and batch is not None and batch % here.world_size:
        raise UsageError(
            f"--batch {batch} must be divisible by the number of processes ({here.world_size}): each rank"
            " rolls out an equal share of every PPO batch"
        )
    return device


def _rank0_first(here: Any, build: Any) -> Any:
    """``build()`` on rank 0 first, then on the others (the model cache is written once, then read)."""
    if not here.is_distributed:
        return build()
    import torch.distributed as dist

    if not here.is_main:
        dist.barrier()
    out = build()
    if here.is_main:
        dist.barrier()
    return out


def _check_replicated(model: Any) -> None:
    """Every rank must hold the same frozen model (a checksum of its parameters; a no-op in one process)."""
    from iclr25_adak._ppo import _group
    from iclr25_shared.distributed import check_same

    if _group().is_distributed:
        check_same(round(sum(float(p.double().sum()) for p in model.parameters()), 6), "frozen model weights")


def _load(cfg: Any, ctx: RunContext) -> tuple[Any, np.ndarray, np.ndarray, list[str] | None, Any]:
    """Model, train and validation blocks, vocabulary pieces (wiki-moe only) and device; joins the process
    group when launched with torchrun / accelerate launch."""
    import torch

    from iclr25_shared.distributed import world

    device = _join(cfg, ctx)
    here = world()
    torch.manual_seed(cfg.seed)
    if cfg.model == WIKI_MOE:
        from iclr25_adak._zoo import wiki_moe

        if cfg.text is not None:
            raise UsageError("text can only be given with a --model folder (wiki-moe has its own vocabulary)")
        model, tokens = _rank0_first(
            here,
            lambda: wiki_moe(
                _spec(),
                wiki_path=cfg.wiki_path,
                label="--wiki-path",
                device=device,
                log=ctx.log,
                progress=lambda it: ctx.progress(it, desc="pre-train MoE"),
            ),
        )
        _check_replicated(model)
        return model, tokens.train, tokens.val, tokens.pieces, device
    from iclr25_adak._inputs import load_model_folder, read_text

    # the user's files first (fast), then the weights
    docs = read_text(cfg.text, label="--text") if cfg.text is not None else None
    model, tokenizer = load_model_folder(cfg.model, device=device, label="--model")
    _check_replicated(model)
    if docs is None:
        from iclr25_shared.data import wiki_summaries

        docs = wiki_summaries("en", path=cfg.wiki_path, label="--wiki-path").texts[:2000]
    train, val = _text_blocks(tokenizer, docs, cfg.seq_len)
    return model, train, val, None, device


def _patch(model: Any, cfg: Any) -> Any:
    from iclr25_adak._routing import apply_adak

    try:
        return apply_adak(model, k_min=cfg.k_min, k_max=cfg.k_max or None, seed=cfg.seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _batches(train: np.ndarray, steps: int, batch: int, seed: int, device: Any) -> Any:
    import torch

    gen = np.random.default_rng(seed)
    for _ in range(steps):
        yield torch.as_tensor(train[gen.integers(0, len(train), batch)], device=device)


def _ppo_cfg(cfg: Any, lam: float) -> Any:
    from iclr25_adak._ppo import PPOConfig

    return PPOConfig(
        lam=lam, clip_eps=cfg.clip_eps, entropy_coef=cfg.entropy_coef, epochs=cfg.epochs, lr=cfg.lr
    )


def _train_once(
    patch: Any, train: np.ndarray, cfg: Any, lam: float, seed: int, device: Any, ctx: RunContext
) -> Any:
    from iclr25_adak._ppo import train_allocators

    patch.reseed(seed)
    return train_allocators(
        patch,
        _batches(train, cfg.steps, cfg.batch, seed, device),
        _ppo_cfg(cfg, lam),
        progress=lambda it: ctx.progress(it, total=cfg.steps, desc=f"PPO lam={lam}"),
    )


def _reset_allocators(patch: Any) -> None:
    import torch

    for r in patch.routers:
        a = r.allocator
        with torch.no_grad():
            a.proj.weight.zero_()
            a.proj.bias.zero_()
            a.proj.bias[min(max(patch.host_top_k, a.k_min), a.k_max) - a.k_min] = 2.0
