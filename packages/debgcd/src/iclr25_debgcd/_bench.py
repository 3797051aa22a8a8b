"""``bench``: training-step time, memory and bytes communicated of DebGCD against SimGCD."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_debgcd._experiment import _train_config
from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_debgcd.cli import BenchConfig

__all__ = ["bench"]


def _saved_bytes(step: Any) -> int:
    """Bytes of the tensors autograd saves for backward during one call of ``step`` (device-independent)."""
    import torch

    saved = {"bytes": 0}

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved["bytes"] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    return saved["bytes"]


def _batch(cfg: BenchConfig, device: Any) -> tuple[Any, tuple[Any, Any, Any, Any]]:
    """The split every arm is built for and one fixed batch ``(x, y, labelled, index)`` drawn from ``--seed``."""
    import torch

    from iclr25_debgcd._data import GCDSplit

    b = cfg.batch_size
    split = GCDSplit(
        labels=np.zeros(1, np.int64), labelled=np.zeros(1, bool), num_old=5, num_classes=10, original=()
    )
    g = torch.Generator().manual_seed(cfg.seed)
    x = torch.rand(b, 1, cfg.image_size, cfg.image_size, generator=g).to(device)
    y = torch.randint(0, 5, (b,), generator=g).to(device)
    lab = (torch.rand(b, generator=g) < 0.5).to(device)
    idx = torch.arange(b, device=device)
    return split, (x, y, lab, idx)


def _build_arms(
    cfg: BenchConfig, here: Any, device: Any, split: Any, batch: tuple[Any, Any, Any, Any]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """One training-step arm per (backbone, method), built outside the timed calls, and its bookkeeping."""
    import torch

    from iclr25_debgcd import _distributed
    from iclr25_debgcd._distributed import DataParallel, global_batchnorm
    from iclr25_debgcd._losses import debgcd_loss, simgcd_loss
    from iclr25_debgcd._train import _step, build_model
    from iclr25_shared.distributed import ByteCounter

    x, y, lab, idx = batch
    arms, info = {}, {}
    for backbone in cfg.backbones:
        for method, fn in (("simgcd", simgcd_loss), ("debgcd", debgcd_loss)):
            tcfg = _train_config(
                method,
                backbone=backbone,
                epochs=1,
                batch_size=cfg.batch_size,
                lr=0.1,
                hidden=cfg.hidden,
                data="fashion-mnist",
                threshold=0.0,
                adl_weight=2.0,
                sdl_weight=0.01,
            )
            torch.manual_seed(cfg.seed)
            model = build_model(split, (1, cfg.image_size, cfg.image_size), tcfg).to(device)
            if here.is_distributed:
                model = global_batchnorm(model)
            model.train()
            counter = ByteCounter()
            # model, optimizer and DDP wrapper are built here, outside the timed calls
            net = DataParallel([model], comm_hook=counter.hook)
            opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01, momentum=0.9)
            gen = torch.Generator().manual_seed(cfg.seed)
            name = f"{backbone}/{method}"
            sent = {"bytes": 0}

            def step(net=net, model=model, opt=opt, gen=gen, tcfg=tcfg, fn=fn, sent=sent) -> None:
                before = _distributed.SENT["bytes"]
                _step(net, model, x, y, lab, idx, gen, 0, tcfg, fn, opt)
                sent["bytes"] = _distributed.SENT["bytes"] - before

            arms[name] = step
            info[name] = {
                "model": model,
                "counter": counter,
                "sent": sent,
                "params": sum(p.numel() for p in model.parameters()),
            }
    return arms, info


def _measure(
    cfg: BenchConfig, ctx: RunContext, device: Any, arms: dict[str, Any], info: dict[str, dict[str, Any]]
) -> Any:
    """The interleaved step times, then (untimed) bytes communicated and memory of one more step per arm."""
    from iclr25_shared.bench import interleaved
    from iclr25_shared.device import PeakMemory

    for arm in info.values():
        arm["counter"].reset()
    run = interleaved(arms, repeats=cfg.repeats, warmup=2, device=device, progress=ctx.progress)
    calls = cfg.repeats + 2
    for name, arm in info.items():  # untimed: memory of one more step (bytes per step read before it)
        arm["ddp_bytes"] = arm["counter"].bytes // calls
        arm["saved"] = _saved_bytes(arms[name])
        if device.type == "cuda":
            with PeakMemory(device) as mem:
                arms[name]()
            arm["peak_cuda_mb"] = mem.peak_bytes / 2**20
    return run


def _rows(
    cfg: BenchConfig, run: Any, info: dict[str, dict[str, Any]], device: Any, here: Any
) -> list[dict[str, Any]]:
    """One row per backbone: SimGCD and DebGCD step time, memory and bytes, and their ratios."""
    rows = []
    for backbone in cfg.backbones:
        base, deb = f"{backbone}/simgcd", f"{backbone}/debgcd"
        est = run.ratio(deb, base)
        row: dict[str, Any] = {
            "backbone": backbone,
            "device": str(device),
            "processes": here.world_size,
            "batch": cfg.batch_size,
        }
        row["simgcd step_ms"] = round(1000 * run.median(base), 2)
        row["debgcd step_ms"] = round(1000 * run.median(deb), 2)
        row["ratio step_ms"] = round(est.value, 3)
        row["interval"] = f"[{est.low:.3g}, {est.high:.3g}]"
        for key, scale in (("params", 1), ("saved", 2**-20), ("peak_cuda_mb", 1)):
            if key in info[base]:
                label = "saved_activations_mb" if key == "saved" else key
                row[f"simgcd {label}"] = round(info[base][key] * scale, 2)
                row[f"debgcd {label}"] = round(info[deb][key] * scale, 2)
                row[f"ratio {label}"] = round(info[deb][key] / info[base][key], 3)
        for method, arm in (("simgcd", base), ("debgcd", deb)):
            row[f"{method} ddp_bytes/step"] = info[arm]["ddp_bytes"]
            row[f"{method} gather_bytes/step"] = info[arm]["sent"]["bytes"]
        rows.append(row)
    return rows


def _notes(cfg: BenchConfig, here: Any) -> list[str]:
    """What the step is, what the ratio holds equal, and the processes it ran in."""
    notes = [
        "step = augmentation of both views + forward + loss + backward + SGD step (the training loop's step); "
        f"iclr25_shared.bench.interleaved: 2 warm-up calls per arm, then {cfg.repeats} rounds running every arm "
        "once in rotated order; ratio = median of per-round DebGCD/SimGCD ratios with a 95% bootstrap interval. "
        "Held equal: backbone, batch, heads' widths, optimizer; not equal: DebGCD's two extra heads and loss "
        "terms (what the ratio measures). Models and optimizers are built before the timed calls.",
        "saved_activations_mb = bytes of the tensors autograd saves for backward (device-independent memory).",
        f"heads' MLP width {cfg.hidden} (paper: 2048); images {cfg.image_size}x{cfg.image_size}, 1 channel; "
        f"global batch {cfg.batch_size} over {here.world_size} process(es).",
        "ddp_bytes/step: gradient bytes this rank all-reduced per step (ByteCounter); gather_bytes/step: payload "
        "of the differentiable all-gathers of the outputs and the BatchNorm all-reduces (forward and backward). "
        "Both 0 in one process.",
    ]
    if here.is_distributed:
        notes.append(
            f"{here.world_size} processes on this machine: each rank computes 1/{here.world_size} of the batch; on "
            "2 shared CPU cores no speed-up is expected (the ranks compete for the same cores)."
        )
    return notes


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Step time (shared interleaved protocol), memory (parameters, activations saved for backward, CUDA peak) and
    bytes communicated per step (under torchrun) of DebGCD against SimGCD, same backbone and batch."""
    device = ctx.join_group(seed=cfg.seed)
    here = ctx.world
    if "efficientnet-lite0" in cfg.backbones:  # timm and the weights, before the other backbones run
        from iclr25_debgcd._model import efficientnet_lite0_weights

        efficientnet_lite0_weights()
    split, batch = _batch(cfg, device)
    arms, info = _build_arms(cfg, here, device, split, batch)
    run = _measure(cfg, ctx, device, arms, info)
    rows = _rows(cfg, run, info, device, here)
    return Result(
        metrics={f"{r['backbone']} step time ratio": r["ratio step_ms"] for r in rows}
        | {"processes": here.world_size, "bench_run": run.as_dict()},
        tables={"DebGCD / SimGCD, one training step (two views of the batch)": rows},
        notes=_notes(cfg, here),
    )
