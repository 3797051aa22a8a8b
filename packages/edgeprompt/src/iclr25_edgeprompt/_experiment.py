"""Experiments behind the CLI: pre-train, tune, the paper's comparison at small scale, and the benchmark.

Each command takes ``(cfg, ctx)`` and returns an :class:`iclr25_shared.cli.Result`; the runner writes
results.json / results.md / config.json into ``--out``. Everything here composes the library API; the method
itself lives in ``_conv``, ``_prompt`` and ``_tuner``.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

# torch warns about its own deprecated torch.jit.script when torch_geometric is imported; not actionable here.
warnings.filterwarnings("ignore", message=r"`torch\.jit\.script", category=FutureWarning)

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch_geometric.data import Data  # noqa: E402

from iclr25_edgeprompt._backbone import BackboneConfig, GNNEncoder, load_backbone, save_backbone  # noqa: E402
from iclr25_edgeprompt._data import TaskData, few_shot_split, load_dataset  # noqa: E402
from iclr25_edgeprompt._pretrain import PretrainSettings, pretrain  # noqa: E402
from iclr25_edgeprompt._tuner import PROMPTS, PromptTuner, TuneSettings, make_prompt  # noqa: E402
from iclr25_shared.cli import Result, RunContext, UsageError  # noqa: E402
from iclr25_shared.results import markdown_table  # noqa: E402

if TYPE_CHECKING:
    from iclr25_edgeprompt.cli import BenchConfig, PretrainConfig, ReproduceConfig, TuneConfig

__all__ = [
    "TuneResult",
    "bench",
    "bench_prompts",
    "pretrain_backbone",
    "pretrain_command",
    "pretraining_graphs",
    "reproduce",
    "tune",
    "tune_once",
]

Log = Callable[[str], None]


def pretraining_graphs(data: TaskData, strategy: str) -> list[Data]:
    """What a strategy pre-trains on: the task's graphs; for node tasks, edge prediction uses the full graph."""
    if data.task == "node" and strategy == "edgepred" and data.source is not None:
        return [Data(x=data.source.x.float(), edge_index=data.source.edge_index)]
    return [Data(x=g.x, edge_index=g.edge_index) for g in data.graphs]


def pretrain_backbone(
    graphs: Sequence[Data],
    backbone_config: BackboneConfig,
    settings: PretrainSettings,
    *,
    seed: int,
    device: torch.device,
) -> tuple[GNNEncoder, list[float]]:
    """A fresh backbone (initialised from ``seed``) pre-trained on ``graphs``; returns it with its loss curve."""
    torch.manual_seed(seed)
    backbone = GNNEncoder(backbone_config).to(device)
    history = pretrain(backbone, graphs, settings, seed=seed)
    return backbone, history


@dataclass
class TuneResult:
    """One tuning run: test accuracy, train loss curve, sizes and timing."""

    prompt: str
    seed: int
    accuracy: float
    final_loss: float
    num_train: int
    num_test: int
    trainable_params: int
    seconds: float


def tune_once(
    data: TaskData,
    backbone: GNNEncoder,
    prompt_name: str,
    *,
    shots: int,
    seed: int,
    settings: TuneSettings,
    test_fraction: float = 1.0,
    num_anchors: int = 5,
    allow_fewer: bool = False,
) -> TuneResult:
    """Few-shot split with ``seed``, a fresh prompt + linear head (initialised from ``seed``), fit, test.

    ``backbone`` is copied first, so the caller's model is reused unchanged across runs.
    """
    train_idx, test_idx = few_shot_split(
        data.labels, shots, test_fraction=test_fraction, seed=seed, allow_fewer=allow_fewer
    )
    frozen = GNNEncoder(backbone.config).to(next(backbone.parameters()).device)
    frozen.load_state_dict(backbone.state_dict())
    torch.manual_seed(seed)
    prompt = make_prompt(prompt_name, frozen, num_anchors=num_anchors)
    head = nn.Linear(frozen.out_channels, data.num_classes)
    tuner = PromptTuner(frozen, prompt, head).to(next(frozen.parameters()).device)
    start = time.perf_counter()
    history = tuner.fit([data.graphs[i] for i in train_idx], settings, seed=seed)
    seconds = time.perf_counter() - start
    acc = tuner.accuracy([data.graphs[i] for i in test_idx])
    return TuneResult(
        prompt=prompt_name,
        seed=seed,
        accuracy=acc,
        final_loss=history[-1],
        num_train=len(train_idx),
        num_test=len(test_idx),
        trainable_params=sum(p.numel() for p in tuner.trainable_parameters()),
        seconds=seconds,
    )


def summarise(results: Sequence[TuneResult]) -> dict[str, Any]:
    """Mean and sample SD of accuracy over seeds (SD 0 for one seed)."""
    accs = [r.accuracy for r in results]
    return {
        "mean": statistics.fmean(accs),
        "sd": statistics.stdev(accs) if len(accs) > 1 else 0.0,
        "seeds": len(accs),
        "per_seed": [round(a, 4) for a in accs],
    }


def bench_prompts(
    graphs: Sequence[Data],
    backbone_config: BackboneConfig,
    num_classes: int,
    *,
    device: torch.device,
    batch_size: int,
    steps: int,
    warmup: int,
    num_anchors: int,
    seed: int,
    prompts: Sequence[str] = PROMPTS,
) -> list[dict[str, Any]]:
    """Median time of one tuning step (forward, backward, Adam) and its memory, per prompt, in one run.

    Memory is the size of the tensors autograd saves for backward in one step (device-independent and exact),
    plus the CUDA peak allocation on GPUs.

    Every prompt sees the same batches in the same order; ratios are against ``none`` (classifier only).
    """
    from torch_geometric.loader import DataLoader

    from iclr25_shared.device import PeakMemory, Timer

    torch.manual_seed(seed)
    backbone = GNNEncoder(backbone_config).to(device)
    batches = [b.to(device) for b in DataLoader(list(graphs), batch_size=batch_size, shuffle=False)]
    if not batches:
        raise ValueError("no graphs to benchmark on")
    rows = []
    for name in prompts:
        torch.manual_seed(seed)
        tuner = PromptTuner(
            backbone,
            make_prompt(name, backbone, num_anchors=num_anchors),
            nn.Linear(backbone.out_channels, num_classes),
        ).to(device)
        optimizer = torch.optim.Adam(tuner.trainable_parameters(), lr=1e-3)
        tuner.train()

        for i in range(warmup):
            _step(tuner, optimizer, batches[i % len(batches)])
        times = []
        for i in range(steps):
            with Timer(device) as t:
                _step(tuner, optimizer, batches[i % len(batches)])
            times.append(t.seconds)
        saved = _saved_bytes(lambda: _step(tuner, optimizer, batches[0]))  # noqa: B023 (called right here)
        row = {
            "prompt": name,
            "step_ms": 1000 * statistics.median(times),
            "saved_for_backward_mib": saved / 2**20,
            "trainable_params": sum(p.numel() for p in tuner.trainable_parameters()),
        }
        if device.type == "cuda":
            with PeakMemory(device) as mem:
                _step(tuner, optimizer, batches[0])
            row["cuda_peak_mib"] = mem.peak_bytes / 2**20
        rows.append(row)
    base = rows[0] if rows[0]["prompt"] == "none" else None
    for row in rows:
        for key, ratio in (
            ("step_ms", "time_ratio"),
            ("saved_for_backward_mib", "saved_mem_ratio"),
            ("cuda_peak_mib", "cuda_mem_ratio"),
        ):
            if key in row:
                row[ratio] = row[key] / base[key] if base and base.get(key) else float("nan")
    return rows


def _step(tuner: PromptTuner, optimizer: torch.optim.Optimizer, batch: Data) -> None:
    """One tuning step: forward, cross-entropy, backward, Adam."""
    loss = nn.functional.cross_entropy(tuner(batch), batch.y.view(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def _saved_bytes(fn: Callable[[], None]) -> int:
    """Bytes of the tensors autograd saves for backward while ``fn`` runs (the activation memory of a step)."""
    seen: dict[tuple[int, int], int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        key = (t.untyped_storage().data_ptr(), t.storage_offset())
        seen[key] = max(seen.get(key, 0), t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


# ------------------------------------------------------------------------------------------------------------------
# Commands
# ------------------------------------------------------------------------------------------------------------------


def _setup(ctx: RunContext) -> torch.device:
    from iclr25_shared.device import seed_everything

    device = ctx.torch_device()
    seed_everything(ctx.seed)
    return device


def _backbone_config(cfg: PretrainConfig | TuneConfig, data: TaskData) -> BackboneConfig:
    conv = cfg.conv if cfg.conv != "auto" else ("gcn" if data.task == "node" else "gin")
    layers = cfg.num_layers or (2 if conv == "gcn" else 3)
    return BackboneConfig(
        conv=conv,
        in_channels=data.in_channels,
        hidden_channels=cfg.hidden_channels,
        num_layers=layers,
        dropout=cfg.dropout,
    )


def _load(cfg: PretrainConfig | TuneConfig, *, split: str = "test") -> TaskData:
    return load_dataset(
        cfg.dataset,
        root=cfg.root,
        download=cfg.download,
        num_graphs=cfg.num_graphs,
        split=split,
        seed=cfg.seed,
    )


def _pretrain_settings(cfg: PretrainConfig | TuneConfig) -> PretrainSettings:
    return PretrainSettings(
        strategy=cfg.strategy,
        epochs=cfg.pretrain_epochs,
        lr=cfg.pretrain_lr,
        batch_size=cfg.pretrain_batch_size,
    )


def pretrain_command(cfg: PretrainConfig, ctx: RunContext) -> Result:
    """``pretrain``: pre-train a backbone and write ``backbone.pt`` + ``backbone.json`` into ``--out``."""
    if not ctx.writes:
        raise UsageError(
            "out: pretrain writes the checkpoint (backbone.pt, backbone.json) there; pass --out DIR"
        )
    device = _setup(ctx)
    data = _load(cfg, split="train")
    graphs = pretraining_graphs(data, cfg.strategy)
    ctx.log.info(
        f"pre-training a {cfg.conv} backbone with {cfg.strategy} on {len(graphs)} graphs of {data.name}"
    )
    backbone, history = pretrain_backbone(
        graphs, _backbone_config(cfg, data), _pretrain_settings(cfg), seed=cfg.seed, device=device
    )
    path = save_backbone(
        backbone,
        ctx.path("backbone.pt"),
        dataset=data.name,
        strategy=cfg.strategy,
        epochs=cfg.pretrain_epochs,
        seed=cfg.seed,
        final_loss=history[-1],
    )
    ctx.log.info(f"loss {history[0]:.4f} -> {history[-1]:.4f}")
    assert cfg.out is not None
    return Result(
        metrics={
            "final_loss": history[-1],
            "first_loss": history[0],
            "checkpoint": str(cfg.out / path.name),
        },
        tables={"loss": [{"epoch": i, "loss": v} for i, v in enumerate(history)]},
    )


def tune(cfg: TuneConfig, ctx: RunContext) -> Result:
    """``tune``: few-shot prompt tuning of a loaded or freshly pre-trained backbone over ``cfg.seeds`` seeds."""
    device = _setup(ctx)
    data = _load(cfg)
    # Check the split for every seed first: a bad --shots must fail before minutes of pre-training.
    for seed in range(cfg.seed, cfg.seed + cfg.seeds):
        few_shot_split(
            data.labels, cfg.shots, test_fraction=cfg.test_fraction, seed=seed, allow_fewer=cfg.allow_fewer
        )
    notes = []
    if cfg.backbone is not None:
        backbone = load_backbone(cfg.backbone).to(device)
        if backbone.config.in_channels != data.in_channels:
            raise ValueError(
                f"backbone: checkpoint expects {backbone.config.in_channels}-dim node features but {data.name} has "
                f"{data.in_channels}"
            )
        notes.append(f"backbone loaded from {cfg.backbone}")
    else:
        ctx.log.info(f"no --backbone: pre-training one with {cfg.strategy} on {data.name} (labels unused)")
        backbone, _ = pretrain_backbone(
            pretraining_graphs(data, cfg.strategy),
            _backbone_config(cfg, data),
            _pretrain_settings(cfg),
            seed=cfg.seed,
            device=device,
        )
        notes.append(f"backbone pre-trained here with {cfg.strategy} for {cfg.pretrain_epochs} epochs")
    anchors = cfg.num_anchors or (10 if data.task == "node" else 5)
    settings = TuneSettings(
        epochs=cfg.epochs, lr=cfg.lr, weight_decay=cfg.weight_decay, batch_size=cfg.batch_size
    )
    results = []
    for seed in ctx.progress(range(cfg.seed, cfg.seed + cfg.seeds), total=cfg.seeds, desc="seeds"):
        res = tune_once(
            data,
            backbone,
            cfg.prompt,
            shots=cfg.shots,
            seed=seed,
            settings=settings,
            test_fraction=cfg.test_fraction,
            num_anchors=anchors,
            allow_fewer=cfg.allow_fewer,
        )
        results.append(res)
        ctx.log.info(
            f"seed {seed}: accuracy {res.accuracy:.4f} ({res.num_train} train / {res.num_test} test)"
        )
    summary = summarise(results)
    return Result(
        metrics={
            "summary": f"{data.name} {cfg.prompt} {cfg.shots}-shot: accuracy {summary['mean']:.4f} ± "
            f"{summary['sd']:.4f} over {summary['seeds']} seed(s)",
            "accuracy_mean": summary["mean"],
            "accuracy_sd": summary["sd"],
            "seeds": summary["seeds"],
            "task": data.task,
            "num_anchors": anchors,
        },
        tables={"runs": [dataclasses.asdict(r) for r in results]},
        notes=notes,
    )


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """``reproduce``: every prompt under each pre-training strategy, graph task and node task, several seeds."""
    device = _setup(ctx)
    start = time.perf_counter()
    graph_data = load_dataset("fashion-superpixels", num_graphs=cfg.num_graphs, split="test", seed=cfg.seed)
    pre_data = load_dataset(
        "fashion-superpixels", num_graphs=cfg.pretrain_graphs, split="train", seed=cfg.seed
    )
    node_data = load_dataset("karate")
    tasks = [
        (
            "graph",
            graph_data,
            pre_data,
            BackboneConfig(
                conv="gin",
                in_channels=graph_data.in_channels,
                hidden_channels=cfg.graph_hidden,
                num_layers=cfg.graph_layers,
            ),
            cfg.graph_shots,
            cfg.graph_seeds,
            5,
            cfg.pretrain_epochs,
            128,
        ),
        (
            "node",
            node_data,
            node_data,
            BackboneConfig(
                conv="gcn", in_channels=node_data.in_channels, hidden_channels=cfg.node_hidden, num_layers=2
            ),
            cfg.node_shots,
            cfg.node_seeds,
            10,
            5 * cfg.pretrain_epochs,
            16,
        ),
    ]
    settings = TuneSettings(epochs=cfg.epochs, lr=cfg.lr, batch_size=cfg.batch_size)
    rows, runs = [], []
    total = sum(len(cfg.strategies) * len(cfg.prompts) * t[5] for t in tasks)
    ticks = iter(ctx.progress(range(total), total=total, desc="reproduce"))
    for task, data, pre, bb_cfg, shots, n_seeds, anchors, pre_epochs, pre_batch in tasks:
        for strategy in cfg.strategies:
            pre_settings = PretrainSettings(strategy=strategy, epochs=pre_epochs, batch_size=pre_batch)
            backbone, _history = pretrain_backbone(
                pretraining_graphs(pre, strategy), bb_cfg, pre_settings, seed=cfg.seed, device=device
            )
            for prompt in cfg.prompts:
                results = []
                for seed in range(cfg.seed, cfg.seed + n_seeds):
                    results.append(
                        tune_once(
                            data,
                            backbone,
                            prompt,
                            shots=shots,
                            seed=seed,
                            settings=settings,
                            num_anchors=anchors,
                        )
                    )
                    next(ticks, None)
                s = summarise(results)
                rows.append(
                    {
                        "task": f"{task} ({data.name})",
                        "strategy": strategy,
                        "prompt": prompt,
                        "accuracy": f"{100 * s['mean']:.1f} ± {100 * s['sd']:.1f}",
                        "mean": s["mean"],
                        "sd": s["sd"],
                        "seeds": s["seeds"],
                        "train/test": f"{results[0].num_train}/{results[0].num_test}",
                        "params": results[0].trainable_params,
                    }
                )
                runs += [{"task": task, "strategy": strategy, **dataclasses.asdict(r)} for r in results]
                ctx.log.info(
                    f"{task:5s} {strategy:8s} {prompt:11s} {100 * s['mean']:.1f} ± {100 * s['sd']:.1f}"
                )
    claims = _claims(rows)
    elapsed = time.perf_counter() - start
    ctx.log.info(
        markdown_table(rows, ["task", "strategy", "prompt", "accuracy", "seeds", "train/test", "params"])
    )
    return Result(
        metrics={"wall_seconds": elapsed},
        tables={
            "accuracy (mean ± SD over seeds, %)": rows,
            "paper's claims, checked on these means": claims,
            "runs": runs,
        },
        timings={"total": elapsed},
        notes=[
            "Paper (Tables 2-3, full-size datasets): EdgePrompt+ >= EdgePrompt >= classifier-only and both above "
            "GPF/GPF-plus, under every pre-training strategy.",
            "Graph task: Fashion-MNIST test-split superpixel graphs, GIN; node task: KarateClub 2-hop subgraphs, GCN.",
        ],
    )


def _compare(means: dict[str, float], a: str, b: str, *, strict: bool) -> str:
    if a not in means or b not in means:
        return "n/a"
    better = means[a] > means[b] if strict else means[a] >= means[b]
    return "yes" if better else "no"


def _claims(rows: list[dict]) -> list[dict]:
    """The paper's orderings, checked on the mean accuracies of each (task, strategy)."""
    groups: dict[tuple[str, str], dict[str, float]] = {}
    for r in rows:
        groups.setdefault((r["task"], r["strategy"]), {})[r["prompt"]] = r["mean"]
    return [
        {
            "task": task,
            "strategy": strategy,
            "EP+ >= EP": _compare(m, "edgeprompt+", "edgeprompt", strict=False),
            "EP >= none": _compare(m, "edgeprompt", "none", strict=False),
            "EP+ >= none": _compare(m, "edgeprompt+", "none", strict=False),
            "EP > GPF": _compare(m, "edgeprompt", "gpf", strict=True),
            "EP+ > GPF-plus": _compare(m, "edgeprompt+", "gpf-plus", strict=True),
        }
        for (task, strategy), m in groups.items()
    ]


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """``bench``: tuning-step time and saved-for-backward memory of each prompt, ratios against classifier-only."""
    device = _setup(ctx)
    data = load_dataset(cfg.dataset, num_graphs=cfg.num_graphs, seed=cfg.seed)
    graphs = data.graphs[: cfg.num_graphs]
    bb_cfg = BackboneConfig(
        conv="gin",
        in_channels=data.in_channels,
        hidden_channels=cfg.hidden_channels,
        num_layers=cfg.num_layers,
    )
    rows = bench_prompts(
        graphs,
        bb_cfg,
        data.num_classes,
        device=device,
        batch_size=cfg.batch_size,
        steps=cfg.steps,
        warmup=cfg.warmup,
        num_anchors=cfg.num_anchors,
        seed=cfg.seed,
    )
    return Result(
        metrics={
            r["prompt"]: {"time_ratio": r["time_ratio"], "saved_mem_ratio": r["saved_mem_ratio"]}
            for r in rows
        },
        tables={"tuning step vs classifier-only": rows},
        notes=[
            f"median over {cfg.steps} steps after {cfg.warmup} warm-up steps; batch {cfg.batch_size} "
            f"graphs; GIN {cfg.num_layers}x{cfg.hidden_channels}; torch threads {ctx.threads}"
        ],
    )
