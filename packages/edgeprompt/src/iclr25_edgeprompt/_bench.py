"""``bench``: tuning-step time and saved-for-backward memory of each prompt (ratios against classifier-only), and
the 2-hop subgraph extraction against PyG's ``k_hop_subgraph`` per node."""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

# torch warns about its own deprecated torch.jit.script when torch_geometric is imported; not actionable here.
warnings.filterwarnings("ignore", message=r"`torch\.jit\.script", category=FutureWarning)

# numpy first, from Python (as in ``_experiment``): a Ctrl-C landing in torch's C-extension import is then raised.
import numpy  # noqa: E402, F401
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch_geometric.data import Data  # noqa: E402

from iclr25_edgeprompt._backbone import BackboneConfig, GNNEncoder  # noqa: E402
from iclr25_edgeprompt._data import load_dataset  # noqa: E402
from iclr25_edgeprompt._experiment import _setup  # noqa: E402
from iclr25_edgeprompt._tuner import PROMPTS, PromptTuner, make_prompt  # noqa: E402
from iclr25_shared.cli import Result, RunContext, check_interrupted  # noqa: E402

if TYPE_CHECKING:
    from iclr25_edgeprompt.cli import BenchConfig

__all__ = ["bench", "bench_prompts"]


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

    torch.manual_seed(seed)
    backbone = GNNEncoder(backbone_config).to(device)
    batches = [b.to(device) for b in DataLoader(list(graphs), batch_size=batch_size, shuffle=False)]
    if not batches:
        raise ValueError("no graphs to benchmark on")
    arms: dict[str, Callable[[], None]] = {}
    info: dict[str, dict[str, Any]] = {}
    for name in prompts:
        arms[name], info[name] = _prompt_arm(
            name, backbone, batches, num_classes, num_anchors=num_anchors, seed=seed, device=device
        )

    def ticking(rounds):
        for r in rounds:
            if tick is not None:  # the CLI passes the runner's Ctrl-C check
                tick()
            yield r

    run = interleaved(arms, repeats=steps, warmup=warmup, device=device, threads=threads, progress=ticking)
    rows = [
        _prompt_row(name, step, run, info[name], "none" in arms, steps, device) for name, step in arms.items()
    ]
    _memory_ratios(rows)
    return rows, run.as_dict()


def _prompt_arm(
    name: str,
    backbone: GNNEncoder,
    batches: list[Data],
    num_classes: int,
    *,
    num_anchors: int,
    seed: int,
    device: torch.device,
) -> tuple[Callable[[], None], dict[str, Any]]:
    """One prompt's tuning step (a fresh prompt and head from ``seed``, Adam; each call on the next batch) and
    what the table says of it (mode, trainable parameters; for ``none`` the one-off embedding time)."""
    from iclr25_shared.device import Timer

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
        info: dict[str, Any] = {
            "mode": "head on precomputed embeddings",
            "embed_once_ms_per_batch": 1000 * t_embed.seconds / len(batches),
        }

        def step(tuner=tuner, optimizer=optimizer, cached=cached, counter=counter) -> None:
            emb, y = cached[next(counter) % len(cached)]
            _head_step(tuner.head, optimizer, emb, y)
    else:
        info = {"mode": "through the frozen GNN"}

        def step(tuner=tuner, optimizer=optimizer, counter=counter) -> None:
            _step(tuner, optimizer, batches[next(counter) % len(batches)])

    info["trainable_params"] = sum(p.numel() for p in tuner.trainable_parameters())
    return step, info


def _prompt_row(
    name: str,
    step: Callable[[], None],
    run: Any,
    info: dict[str, Any],
    has_none: bool,
    steps: int,
    device: torch.device,
) -> dict[str, Any]:
    """One prompt's row: median step time, ratio to ``none``, saved-for-backward memory (one more step), sizes."""
    from iclr25_shared.device import PeakMemory

    row: dict[str, Any] = {"prompt": name, "mode": info["mode"], "step_ms": 1000 * run.median(name)}
    if has_none:
        est = run.ratio(name, "none")
        row["time_ratio"] = est.value
        row["time_ratio_interval"] = f"[{est.low:.3g}, {est.high:.3g}]"
    row["saved_for_backward_mib"] = _saved_bytes(step) / 2**20
    row["trainable_params"] = info["trainable_params"]
    if "embed_once_ms_per_batch" in info:
        row["embed_once_ms_per_batch"] = info["embed_once_ms_per_batch"]
    if device.type == "cuda":
        with PeakMemory(device) as mem:
            step()
        row["cuda_peak_mib"] = mem.peak_bytes / 2**20
    row["rounds"] = steps
    row["held_equal"] = (
        "the same batches in the same order, one optimiser step each; not equal: what is trained"
    )
    return row


def _memory_ratios(rows: list[dict[str, Any]]) -> None:
    """Add each row's memory ratios to the ``none`` row's (NaN without one)."""
    by_name = {r["prompt"]: r for r in rows}
    for row in rows:
        for key, ratio in (
            ("saved_for_backward_mib", "saved_mem_ratio"),
            ("cuda_peak_mib", "cuda_mem_ratio"),
        ):
            if key in row:
                b = by_name.get("none", {}).get(key)
                row[ratio] = row[key] / b if b else float("nan")


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
