"""Experiments behind the CLI: pre-train, tune, the paper's comparison at small scale, and the benchmark.

Everything here composes the library API; the method itself lives in ``_conv``, ``_prompt`` and ``_tuner``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch_geometric.data import Data

from iclr25_edgeprompt._backbone import BackboneConfig, GNNEncoder
from iclr25_edgeprompt._data import TaskData, few_shot_split
from iclr25_edgeprompt._pretrain import PretrainSettings, pretrain
from iclr25_edgeprompt._tuner import PROMPTS, PromptTuner, TuneSettings, make_prompt

__all__ = ["TuneResult", "bench_prompts", "pretrain_backbone", "pretraining_graphs", "tune_once"]

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
