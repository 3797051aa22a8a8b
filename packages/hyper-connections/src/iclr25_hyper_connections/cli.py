"""``iclr25-hyper-connections``: train, reproduce and bench hyper-connections against residual connections."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from iclr25_shared.cli import CommonOptions, check_range, progress, run

__all__ = ["BenchConfig", "ReproduceConfig", "TrainConfig", "bench", "main", "reproduce", "train"]

PROG = "iclr25-hyper-connections"
# OLMo-1B, 500B tokens: V2 eval loss (paper's main OLMo table).
PAPER_V2_LOSS = {
    "residual": 2.811,
    "DHCx1": 2.819,
    "DHCx2": 2.802,
    "SHCx4": 2.791,
    "DHCx4": 2.781,
    "DHCx8": 2.778,
}


@dataclass(frozen=True, kw_only=True)
class _Threads(CommonOptions):
    threads: int = 1
    """CPU intra-op threads for torch (0 = torch's default). These small models run fastest single-threaded,
    and more threads on a busy machine can be many times slower."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("threads", self.threads, low=0)


@dataclass(frozen=True, kw_only=True)
class _TrainingOptions(_Threads):
    """Model size and optimisation shared by train and reproduce."""

    tokenizer: Literal["bytes", "smollm2"] = "bytes"
    """Tokenise the Wikipedia summaries as UTF-8 bytes (vocab 256) or with SmolLM2's tokenizer (vocab 49 152)."""
    dim: int = 64
    """Hidden size d of the decoder."""
    num_layers: int = 4
    """Decoder layers (each has an attention and an FFN branch, i.e. two hyper-connections)."""
    num_heads: int = 4
    """Attention heads (must divide dim)."""
    context: int = 64
    """Tokens per training window."""
    steps: int = 300
    """Optimizer steps."""
    batch_size: int = 16
    """Windows per step."""
    lr: float = 3e-3
    """Peak AdamW learning rate (linear warm-up, cosine decay to 10 %)."""
    weight_decay: float = 0.1
    """AdamW weight decay (not applied to static HC weights, biases and norms)."""
    warmup: int = 30
    """Warm-up steps."""
    eval_every: int = 50
    """Evaluate on a quarter of the validation windows every this many steps."""
    eval_batches: int = 16
    """Validation batches (of batch_size windows) for the final loss."""
    max_docs: int | None = None
    """Use only this many documents (after a fixed shuffle); all 9 033 when omitted."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in (
            "dim",
            "num_layers",
            "num_heads",
            "context",
            "steps",
            "batch_size",
            "eval_every",
            "eval_batches",
        ):
            check_range(name, getattr(self, name), low=1)
        check_range("warmup", self.warmup, low=0)
        check_range("lr", self.lr, low=0.0, low_inclusive=False)
        check_range("weight_decay", self.weight_decay, low=0.0)
        if self.dim % self.num_heads:
            raise ValueError(f"num_heads must divide dim; got dim={self.dim}, num_heads={self.num_heads}")
        if (self.dim // self.num_heads) % 2:
            raise ValueError(
                f"dim / num_heads must be even (rotary embeddings); got {self.dim // self.num_heads}"
            )
        if self.max_docs is not None:
            check_range("max_docs", self.max_docs, low=2)


def _check_variant(name: str, value: str) -> Any:
    from iclr25_hyper_connections._experiment import Variant

    try:
        variant = Variant.parse(value)
    except ValueError:
        raise ValueError(
            f"{name} must be residual, dhc<n> or shc<n> with n in 1..16 (optional -notanh suffix), got {value!r}"
        ) from None
    if variant.expansion_rate > 16:
        raise ValueError(f"{name}: expansion rate must be in 1..16, got {variant.expansion_rate}")
    return variant


@dataclass(frozen=True, kw_only=True)
class TrainConfig(_TrainingOptions):
    """Pre-train a small decoder LM with residual or hyper-connections on Wikipedia summaries."""

    variant: str = "dhc4"
    """residual, dhc<n> (dynamic HC) or shc<n> (static HC), n = expansion rate (1, 2, 4, 8 ...); add -notanh for
    the w/o-tanh ablation, e.g. dhc4-notanh."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_variant("variant", self.variant)


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(_TrainingOptions):
    """Residual vs DHCx4, SHCx4 and DHCx1 at equal steps and base weights over seeds (the paper's headline table)."""

    variants: tuple[str, ...] = ("residual", "dhc4", "shc4", "dhc1")
    """Variants to compare (the first one is the reference for the loss differences)."""
    num_seeds: int = 2
    """Seeds seed, seed+1, ...; each seed gives every variant the same initial weights and batches."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("num_seeds", self.num_seeds, low=1)
        if not self.variants:
            raise ValueError("variants must name at least one variant")
        names = [_check_variant("variants", v).name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"variants must be distinct, got {list(self.variants)}")


@dataclass(frozen=True, kw_only=True)
class BenchConfig(_Threads):
    """Step time, activation memory and parameter overhead of HCxn vs residual, as ratios measured in one run."""

    dim: int = 256
    """Hidden size d."""
    num_layers: int = 4
    """Decoder layers."""
    num_heads: int = 4
    """Attention heads."""
    context: int = 128
    """Tokens per sequence."""
    batch_size: int = 8
    """Sequences per step."""
    vocab_size: int = 256
    """Vocabulary size of the benchmark model (random tokens)."""
    expansion_rates: tuple[int, ...] = (1, 2, 4)
    """Expansion rates n to compare against the residual baseline."""
    dynamic: bool = True
    """Dynamic (DHC) or static (SHC) hyper-connections."""
    repeats: int = 7
    """Timed rounds (one training step of every variant each, in rotating order); medians reported."""
    warmup_steps: int = 2
    """Untimed rounds first."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("dim", "num_layers", "num_heads", "context", "batch_size", "vocab_size", "repeats"):
            check_range(name, getattr(self, name), low=1)
        check_range("warmup_steps", self.warmup_steps, low=0)
        if self.dim % self.num_heads or (self.dim // self.num_heads) % 2:
            raise ValueError(
                f"num_heads must divide dim into an even head size; got dim={self.dim}, num_heads={self.num_heads}"
            )
        if not self.expansion_rates:
            raise ValueError("expansion_rates must list at least one rate")
        for n in self.expansion_rates:
            check_range("expansion_rates", n, low=1, high=16)


# ----------------------------------------------------------------------------------------------------------------
# Commands
# ----------------------------------------------------------------------------------------------------------------
def _setup(cfg: _Threads) -> Any:
    import torch

    from iclr25_shared.device import resolve_device, seed_everything

    device = resolve_device(cfg.device)
    seed_everything(cfg.seed)
    if device.type == "cpu" and cfg.threads:
        torch.set_num_threads(cfg.threads)
    return device


def _spec(cfg: _TrainingOptions) -> Any:
    from iclr25_hyper_connections._experiment import ModelSpec

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


def _versions() -> dict[str, str]:
    from iclr25_shared.results import package_versions

    return package_versions(["torch", "transformers", "iclr25-hyper-connections", "iclr25-shared"])


def _say(cfg: CommonOptions, text: str) -> None:
    if not cfg.quiet:
        print(text, flush=True)


def train(cfg: TrainConfig) -> int:
    """Train one variant; print and (with --out) save its loss curve and final validation loss."""
    from iclr25_hyper_connections._experiment import Variant, load_corpus, train_lm
    from iclr25_shared.results import RunRecord, markdown_table

    device = _setup(cfg)
    variant = Variant.parse(cfg.variant)
    corpus = load_corpus(cfg.tokenizer, max_docs=cfg.max_docs)
    _say(
        cfg,
        f"{variant.name}: {len(corpus.train):,} train / {len(corpus.val):,} val tokens ({cfg.tokenizer}), {device}",
    )
    res = train_lm(
        corpus,
        _spec(cfg),
        variant,
        seed=cfg.seed,
        device=device,
        progress=lambda it: progress(it, total=cfg.steps, desc=variant.name, quiet=cfg.quiet),
        **_train_kwargs(cfg),
    )
    evals = [r for r in res.curve if "val_loss" in r]
    print(markdown_table(evals, ["step", "train_loss", "val_loss"]))
    print(
        f"{variant.name}: final validation loss {res.final_val_loss:.4f} nats/token, {res.num_params:,} parameters"
    )
    if cfg.out is not None:
        record = RunRecord(
            command=f"{PROG} train",
            config=cfg,
            metrics={
                "variant": variant.name,
                "final_val_loss": res.final_val_loss,
                "num_params": res.num_params,
                "layer_similarity": res.layer_similarity,
            },
            tables={"loss curve": res.curve},
            timings={"train": res.seconds},
            device=str(device),
            versions=_versions(),
        )
        record.save(cfg.out)
    return 0


def _plot_reproduce(out: Path, results: list[Any], variants: list[str]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from iclr25_shared.results import save_figure

    paths = []
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
    paths.append(save_figure(fig, out / "loss_curves.png"))
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
    paths.append(save_figure(fig, out / "layer_similarity.png"))
    return paths


def reproduce(cfg: ReproduceConfig) -> int:
    """Train every variant for every seed; table of validation loss, paired differences and layer similarity."""
    from iclr25_hyper_connections._experiment import Variant, load_corpus, summarise, train_lm
    from iclr25_shared.results import RunRecord, markdown_table

    device = _setup(cfg)
    variants = [Variant.parse(v) for v in cfg.variants]
    corpus = load_corpus(cfg.tokenizer, max_docs=cfg.max_docs)
    seeds = [cfg.seed + i for i in range(cfg.num_seeds)]
    _say(
        cfg,
        f"{len(variants)} variants x {len(seeds)} seeds, {cfg.steps} steps each, {corpus.tokenizer} tokens, {device}",
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
                progress=lambda it, v=variant, s=seed: progress(
                    it, total=cfg.steps, desc=f"{v.name} seed {s}", quiet=cfg.quiet
                ),
                **_train_kwargs(cfg),
            )
            _say(
                cfg,
                f"  {variant.name:>10} seed {seed}: val loss {res.final_val_loss:.4f} ({res.seconds:.0f} s)",
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
    print(markdown_table(rows))
    notes = [
        "Same seed = same initial attention/FFN/embedding weights and the same batches for every variant; "
        "differences are paired per seed.",
        "consecutive-layer cos: median over held-out tokens of cos(h0^i, h0^(i+1)) between the inputs of consecutive "
        "decoder layers, averaged over layers (lower = less representation collapse).",
    ]
    if cfg.out is not None:
        record = RunRecord(
            command=f"{PROG} reproduce",
            config=cfg,
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
            device=str(device),
            versions=_versions(),
        )
        plots = _plot_reproduce(Path(cfg.out), results, [v.name for v in variants])
        record.notes.append("plots: " + ", ".join(p.name for p in plots))
        record.save(cfg.out)
    return 0


def bench(cfg: BenchConfig) -> int:
    """Measure HCxn against the residual baseline in one process: time, activation memory, parameters."""
    import torch

    from iclr25_hyper_connections._experiment import ModelSpec, Variant, build_model, saved_activation_bytes
    from iclr25_shared.device import PeakMemory, Timer
    from iclr25_shared.results import RunRecord, markdown_table

    device = _setup(cfg)
    spec = ModelSpec(dim=cfg.dim, num_layers=cfg.num_layers, num_heads=cfg.num_heads, context=cfg.context)
    gen = torch.Generator().manual_seed(cfg.seed)
    batch = torch.randint(0, cfg.vocab_size, (cfg.batch_size, cfg.context + 1), generator=gen).to(device)
    kind = "DHC" if cfg.dynamic else "SHC"
    variants = [Variant(name="residual")] + [
        Variant(name=f"{kind}x{n}", expansion_rate=n, dynamic=cfg.dynamic) for n in cfg.expansion_rates
    ]
    models = [build_model(cfg.vocab_size, spec, v, seed=cfg.seed).to(device).train() for v in variants]
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-4) for m in models]

    def loss_fn(model: Any) -> Any:
        logits = model(input_ids=batch[:, :-1]).logits
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())

    def step(i: int) -> float:
        with Timer(device) as t:
            opts[i].zero_grad(set_to_none=True)
            loss_fn(models[i]).backward()
            opts[i].step()
        return t.seconds

    # Timing: rounds of one step per variant, in rotating order, so load changes hit every variant alike;
    # the time ratio is the median over rounds of (variant step / residual step in the same round).
    times: list[list[float]] = [[] for _ in variants]
    for r in progress(range(cfg.warmup_steps + cfg.repeats), desc="bench", quiet=cfg.quiet):
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
    print(markdown_table(rows, columns))
    if cfg.out is not None:
        RunRecord(
            command=f"{PROG} bench",
            config=cfg,
            metrics={r["variant"]: {k: v for k, v in r.items() if k != "variant"} for r in rows},
            tables={"bench": rows},
            notes=[
                "saved activations: bytes of distinct tensors autograd keeps for backward (exact); peak memory: "
                "CUDA max_memory_allocated during forward+backward above the start (CUDA only).",
                "paper (OLMo-1B, d = 2048): +0.03 % parameters, +0.2 % FLOPs, +26 % activation memory.",
            ],
            device=str(device),
            versions=_versions(),
        ).save(cfg.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``iclr25-hyper-connections``."""
    from iclr25_hyper_connections import __version__

    return run(
        PROG,
        {
            "train": (TrainConfig, train),
            "reproduce": (ReproduceConfig, reproduce),
            "bench": (BenchConfig, bench),
        },
        argv,
        default="reproduce",
        description="Hyper-Connections (Zhu et al., ICLR 2025, arXiv 2409.19606): train, reproduce and bench "
        "dynamic/static hyper-connections against residual connections on Wikipedia text.",
        version=__version__,
    )


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
