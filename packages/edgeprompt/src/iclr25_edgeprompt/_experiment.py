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

# numpy first, from Python: imported first from a C extension's init instead (jaxlib._jax, torch._C), a Ctrl-C
# landing in that import is printed with a traceback (numpy's import_array) or swallowed (torch), not raised.
import numpy  # noqa: E402, F401
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch_geometric.data import Data  # noqa: E402

from iclr25_edgeprompt._backbone import BackboneConfig, GNNEncoder, load_backbone, save_backbone  # noqa: E402
from iclr25_edgeprompt._data import TaskData, few_shot_split, load_dataset  # noqa: E402
from iclr25_edgeprompt._pretrain import PretrainSettings, pretrain  # noqa: E402
from iclr25_edgeprompt._prompt import DEFAULT_INIT  # noqa: E402
from iclr25_edgeprompt._tuner import PROMPTS, PromptTuner, TuneSettings, make_prompt  # noqa: E402
from iclr25_shared.checks import check_float  # noqa: E402
from iclr25_shared.cli import Result, RunContext, UsageError, check_interrupted  # noqa: E402
from iclr25_shared.errors import InputError  # noqa: E402
from iclr25_shared.inputs import validating  # noqa: E402

if TYPE_CHECKING:
    from iclr25_edgeprompt.cli import BenchConfig, PretrainConfig, TuneConfig

__all__ = [
    "TuneResult",
    "bench",
    "bench_prompts",
    "pretrain_backbone",
    "pretrain_command",
    "pretraining_graphs",
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
    callback: Callable[[int, float], None] | None = None,
) -> tuple[GNNEncoder, list[float]]:
    """A fresh backbone (initialised from ``seed``) pre-trained on ``graphs``; returns it with its loss curve.

    ``callback(epoch, loss)`` runs after every epoch (the CLI passes the runner's Ctrl-C check).
    """
    torch.manual_seed(seed)
    backbone = GNNEncoder(backbone_config).to(device)
    history = pretrain(backbone, graphs, settings, seed=seed, callback=callback)
    return backbone, history


@dataclass
class TuneResult:
    """One tuning run: test (and validation) accuracy, final train loss, sizes and timing."""

    prompt: str
    seed: int
    accuracy: float
    final_loss: float
    num_train: int
    num_test: int
    trainable_params: int
    seconds: float
    val_accuracy: float | None = None
    num_val: int = 0
    init: str = DEFAULT_INIT
    lr: float = 0.0


def split_three_way(
    labels: torch.Tensor, shots: int, *, seed: int, test_fraction: float, val_fraction: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``shots`` per class for training; from the rest, ``round(val_fraction·n)`` validation and
    ``round(test_fraction·n)`` test samples (disjoint, drawn with ``seed``; test capped by what is left).

    ``n`` is the whole dataset's size, as the official code takes its test set as ``int(0.4 · len(data))``.

    Raises:
        ValueError: too few samples left for a non-empty validation and test set.
    """
    check_float("val_fraction", val_fraction, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
    check_float("test_fraction", test_fraction, low=0.0, high=1.0, low_inclusive=False)
    train, rest = few_shot_split(labels, shots, test_fraction=1.0, seed=seed)
    gen = torch.Generator().manual_seed(seed + 7919)
    rest = rest[torch.randperm(rest.numel(), generator=gen)]
    n = labels.numel()
    n_val = max(1, round(val_fraction * n))
    n_test = min(round(test_fraction * n), rest.numel() - n_val)
    if n_test < 1:
        raise ValueError(
            f"no samples left for testing (n={n}, shots={shots}, val_fraction={val_fraction}); lower shots"
        )
    val = torch.sort(rest[:n_val]).values
    test = torch.sort(rest[n_val : n_val + n_test]).values
    return train, val, test


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
    init: str = DEFAULT_INIT,
    val_fraction: float = 0.0,
    callback: Callable[[int, float], None] | None = None,
) -> TuneResult:
    """Few-shot split with ``seed``, a fresh prompt + linear head (initialised from ``seed``), fit, test.

    With ``val_fraction > 0`` the split is :func:`split_three_way` and the validation accuracy is reported too
    (for choosing hyperparameters without looking at the test set). ``backbone`` is copied first, so the
    caller's model is reused unchanged across runs. ``callback(epoch, loss)`` runs after every tuning epoch.
    """
    if val_fraction > 0:
        train_idx, val_idx, test_idx = split_three_way(
            data.labels, shots, seed=seed, test_fraction=test_fraction, val_fraction=val_fraction
        )
    else:
        train_idx, test_idx = few_shot_split(
            data.labels, shots, test_fraction=test_fraction, seed=seed, allow_fewer=allow_fewer
        )
        val_idx = None
    device = next(backbone.parameters()).device
    frozen = GNNEncoder(backbone.config).to(device)
    frozen.load_state_dict(backbone.state_dict())
    torch.manual_seed(seed)
    prompt = make_prompt(prompt_name, frozen, num_anchors=num_anchors, init=init)
    head = nn.Linear(frozen.out_channels, data.num_classes)
    tuner = PromptTuner(frozen, prompt, head).to(device)
    start = time.perf_counter()
    history = tuner.fit([data.graphs[i] for i in train_idx], settings, seed=seed, callback=callback)
    seconds = time.perf_counter() - start
    acc = tuner.accuracy([data.graphs[i] for i in test_idx])
    val_acc = tuner.accuracy([data.graphs[i] for i in val_idx]) if val_idx is not None else None
    return TuneResult(
        prompt=prompt_name,
        seed=seed,
        accuracy=acc,
        final_loss=history[-1],
        num_train=len(train_idx),
        num_test=len(test_idx),
        trainable_params=sum(p.numel() for p in tuner.trainable_parameters()),
        seconds=seconds,
        val_accuracy=val_acc,
        num_val=0 if val_idx is None else len(val_idx),
        init=init,
        lr=settings.lr,
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
    tick: Callable[[], None] | None = None,
    threads: int | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Time of one tuning step (forward, backward, Adam) and its memory, per prompt, interleaved in one run.

    Timing: :func:`iclr25_shared.bench.interleaved`: ``warmup`` untimed steps of each prompt, then ``steps`` rounds
    in which every prompt takes one step (order rotated each round, each prompt on its next batch); speed ratios are
    medians of per-round ratios with a 95 % bootstrap interval. Memory is the size of the tensors autograd saves
    for backward in one step (device-independent and exact), plus the CUDA peak allocation on GPUs.

    Every prompt sees the same batches in the same order; ratios are against ``none`` (classifier only), which is
    timed as a user runs it: the frozen backbone embeds every graph once (``embed_once_ms_per_batch``, not in the
    step time) and each step trains the linear head on those fixed embeddings.
    """
    from torch_geometric.loader import DataLoader

    from iclr25_shared.bench import interleaved
    from iclr25_shared.device import PeakMemory, Timer

    torch.manual_seed(seed)
    backbone = GNNEncoder(backbone_config).to(device)
    batches = [b.to(device) for b in DataLoader(list(graphs), batch_size=batch_size, shuffle=False)]
    if not batches:
        raise ValueError("no graphs to benchmark on")
    arms: dict[str, Callable[[], None]] = {}
    info: dict[str, dict[str, Any]] = {}
    for name in prompts:
        torch.manual_seed(seed)
        tuner = PromptTuner(
            backbone,
            make_prompt(name, backbone, num_anchors=num_anchors),
            nn.Linear(backbone.out_channels, num_classes),
        ).to(device)
        optimizer = torch.optim.Adam(tuner.trainable_parameters(), lr=1e-3)
        tuner.train()
        counter = iter(range(10**12))
        if name == "none":
            # Classifier-only as a user runs it: embed every graph once with the frozen backbone, then train the
            # head on those fixed embeddings (nothing upstream of the head needs a gradient).
            with torch.no_grad(), Timer(device) as t_embed:
                cached = [(tuner.embed(b), b.y.view(-1)) for b in batches]
            info[name] = {
                "mode": "head on precomputed embeddings",
                "embed_once_ms_per_batch": 1000 * t_embed.seconds / len(batches),
            }

            def step(tuner=tuner, optimizer=optimizer, cached=cached, counter=counter) -> None:
                emb, y = cached[next(counter) % len(cached)]
                _head_step(tuner.head, optimizer, emb, y)
        else:
            info[name] = {"mode": "through the frozen GNN"}

            def step(tuner=tuner, optimizer=optimizer, counter=counter) -> None:
                _step(tuner, optimizer, batches[next(counter) % len(batches)])

        arms[name] = step
        info[name]["trainable_params"] = sum(p.numel() for p in tuner.trainable_parameters())

    def ticking(rounds):
        for r in rounds:
            if tick is not None:  # the CLI passes the runner's Ctrl-C check
                tick()
            yield r

    run = interleaved(arms, repeats=steps, warmup=warmup, device=device, threads=threads, progress=ticking)
    rows = []
    for name, step in arms.items():
        row: dict[str, Any] = {"prompt": name, "mode": info[name]["mode"], "step_ms": 1000 * run.median(name)}
        if "none" in arms:
            est = run.ratio(name, "none")
            row["time_ratio"] = est.value
            row["time_ratio_interval"] = f"[{est.low:.3g}, {est.high:.3g}]"
        row["saved_for_backward_mib"] = _saved_bytes(step) / 2**20
        row["trainable_params"] = info[name]["trainable_params"]
        if "embed_once_ms_per_batch" in info[name]:
            row["embed_once_ms_per_batch"] = info[name]["embed_once_ms_per_batch"]
        if device.type == "cuda":
            with PeakMemory(device) as mem:
                step()
            row["cuda_peak_mib"] = mem.peak_bytes / 2**20
        row["rounds"] = steps
        row["held_equal"] = (
            "the same batches in the same order, one optimiser step each; not equal: what is trained"
        )
        rows.append(row)
    by_name = {r["prompt"]: r for r in rows}
    for row in rows:
        for key, ratio in (
            ("saved_for_backward_mib", "saved_mem_ratio"),
            ("cuda_peak_mib", "cuda_mem_ratio"),
        ):
            if key in row:
                b = by_name.get("none", {}).get(key)
                row[ratio] = row[key] / b if b else float("nan")
    return rows, run.as_dict()


def bench_subgraphs(
    num_nodes: int, degree: int, baseline_nodes: int, *, seed: int, repeats: int = 3
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Time :func:`node_subgraphs` (all nodes, 2 hops) against PyG's ``k_hop_subgraph`` called once per node.

    The graph is a seeded random simple graph with about ``num_nodes · degree / 2`` undirected edges (both
    directions stored). The baseline loop runs on the first ``baseline_nodes`` targets only (it costs nodes ×
    edges); per node, its time is scaled to all nodes. Both arms are interleaved
    (:func:`iclr25_shared.bench.interleaved`, one warm-up call each); the speed-up per node is the median of
    per-round ratios with a bootstrap interval. Both give the same subgraphs (tested).
    """
    from torch_geometric.utils import coalesce, k_hop_subgraph, to_undirected

    from iclr25_edgeprompt._data import node_subgraphs
    from iclr25_shared.bench import interleaved

    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(num_nodes, (2, num_nodes * degree // 2), generator=gen)
    ei = ei[:, ei[0] != ei[1]]
    ei = coalesce(to_undirected(ei, num_nodes=num_nodes), num_nodes=num_nodes)
    data = Data(
        x=torch.randn(num_nodes, 8, generator=gen), edge_index=ei, y=torch.zeros(num_nodes, dtype=torch.long)
    )
    k = min(baseline_nodes, num_nodes)
    found: list[Any] = []

    def fast() -> None:
        found[:] = node_subgraphs(data, 2)

    def slow() -> None:
        for v in range(k):
            k_hop_subgraph(v, 2, ei, relabel_nodes=True, num_nodes=num_nodes)

    run = interleaved({"node_subgraphs": fast, "k_hop_loop": slow}, repeats=repeats, warmup=1)
    est = run.speedup("node_subgraphs", "k_hop_loop")  # per node: times (num_nodes / k)
    scale = num_nodes / k
    mean_nodes = statistics.fmean(g.num_nodes for g in found)
    graph = f"{num_nodes} nodes, {ei.size(1)} directed edges"
    fast_s, slow_per_node = run.median("node_subgraphs"), run.median("k_hop_loop") / k
    held = "the same graph, 2 hops, the same subgraphs; per target node"
    rows = [
        {
            "method": "node_subgraphs (CSR, all targets)",
            "graph": graph,
            "seconds_all_nodes": fast_s,
            "ms_per_node": 1000 * fast_s / num_nodes,
            "speedup_per_node": est.value * scale,
            "interval": f"[{est.low * scale:.3g}, {est.high * scale:.3g}]",
            "rounds": repeats,
            "mean_subgraph_nodes": mean_nodes,
            "held_equal": held,
        },
        {
            "method": f"k_hop_subgraph per node (timed on {k}, scaled)",
            "graph": graph,
            "seconds_all_nodes": slow_per_node * num_nodes,
            "ms_per_node": 1000 * slow_per_node,
            "speedup_per_node": 1.0,
            "interval": "",
            "rounds": repeats,
            "mean_subgraph_nodes": mean_nodes,
            "held_equal": held,
        },
    ]
    return rows, run.as_dict()


def _head_step(head: nn.Module, optimizer: torch.optim.Optimizer, emb: torch.Tensor, y: torch.Tensor) -> None:
    """One classifier-only step on fixed embeddings: linear head, cross-entropy, backward, Adam."""
    loss = nn.functional.cross_entropy(head(emb), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


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


def _check(epoch: int, loss: float) -> None:
    """The commands' epoch callback: the runner's Ctrl-C check, so that one a library swallowed stops pre-training
    or tuning at the next epoch."""
    check_interrupted()


def _setup(ctx: RunContext) -> torch.device:
    """``--device`` (one that is not there, ``cuda`` without a GPU, is bad input) and the seed.

    Importing torch and torch_geometric takes seconds: a Ctrl-C during it that a library swallowed stops the run
    here, before any work.
    """
    from iclr25_shared.device import seed_everything

    check_interrupted()
    with validating("--device"):
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
    """The dataset ``--dataset`` names; an unknown name, a PyG dataset without ``--root``, or files in ``--root``
    that are not a dataset are bad input (exit 2)."""
    try:
        with validating("--dataset"):
            return load_dataset(
                cfg.dataset,
                root=cfg.root,
                download=cfg.download,
                num_graphs=cfg.num_graphs,
                split=split,
                seed=cfg.seed,
            )
    except FileNotFoundError as exc:
        raise InputError(f"--dataset: {exc}") from None


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
        graphs,
        _backbone_config(cfg, data),
        _pretrain_settings(cfg),
        seed=cfg.seed,
        device=device,
        callback=_check,
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
    with validating("--shots"):
        for seed in range(cfg.seed, cfg.seed + cfg.seeds):
            few_shot_split(
                data.labels,
                cfg.shots,
                test_fraction=cfg.test_fraction,
                seed=seed,
                allow_fewer=cfg.allow_fewer,
            )
    notes = []
    if cfg.backbone is not None:
        backbone = load_backbone(cfg.backbone, label="--backbone").to(device)
        if backbone.config.in_channels != data.in_channels:
            raise InputError(
                f"--backbone: checkpoint expects {backbone.config.in_channels}-dim node features but {data.name} "
                f"has {data.in_channels}"
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
            callback=_check,
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
            init=cfg.init,
            callback=_check,
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
    rows, raw = bench_prompts(
        graphs,
        bb_cfg,
        data.num_classes,
        device=device,
        batch_size=cfg.batch_size,
        steps=cfg.steps,
        warmup=cfg.warmup,
        num_anchors=cfg.num_anchors,
        seed=cfg.seed,
        tick=check_interrupted,
        threads=ctx.threads or None,
    )
    tables = {"prompts": rows}
    raws = {"prompts": raw}
    if cfg.subgraph_nodes:
        sub_rows, raws["subgraphs"] = bench_subgraphs(
            cfg.subgraph_nodes, cfg.subgraph_degree, cfg.subgraph_baseline_nodes, seed=cfg.seed
        )
        tables["subgraphs"] = sub_rows
    return Result(
        metrics={
            **{
                r["prompt"]: {"time_ratio": r.get("time_ratio"), "saved_mem_ratio": r["saved_mem_ratio"]}
                for r in rows
            },
            "bench": raws,
        },
        tables=tables,
        notes=[
            f"iclr25_shared.bench.interleaved: {cfg.warmup} warm-up steps per prompt, then {cfg.steps} rounds of one "
            f"step per prompt (order rotated each round); batch {cfg.batch_size} graphs; GIN "
            f"{cfg.num_layers}x{cfg.hidden_channels}; device {device}; torch threads {ctx.threads}; ratios are "
            "medians of per-round ratios with a 95 % bootstrap interval over rounds"
        ],
    )
