"""``bench``: memory and time per optimizer step as ratios to one inference forward pass (each method's memory in a
fresh process; time interleaved in one process), and optionally the distributed step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from iclr25_lozo._experiment import make_optimizer, train_steps
from iclr25_lozo.cli import BenchConfig
from iclr25_shared.cli import Result, RunContext, progress
from iclr25_shared.device import PeakMemory, Timer, current_rss_bytes, resolve_device

__all__ = ["bench"]


def _bench_worker(args: dict[str, Any]) -> dict[str, Any]:
    """Measure one method in this (fresh) process: inference forward, then optimizer steps."""
    device = resolve_device(args["device"])
    baseline = current_rss_bytes() if device.type != "cuda" else 0
    from iclr25_lozo._models import bench_model_and_batch

    model, ids = bench_model_and_batch(
        args["model"],
        device=device,
        dtype=args.get("dtype", "float32"),
        batch_size=args["batch_size"],
        seq_len=args["seq_len"],
    )
    ids = ids.to(device)

    def loss_fn(_: Any = None) -> torch.Tensor:
        return model(input_ids=ids, labels=ids).loss.float()

    with torch.no_grad():
        loss_fn()  # warm-up
    with PeakMemory(device) as mem_inf, torch.no_grad():
        loss_fn()
    times_inf = []
    for _ in range(args["repeats"]):
        with Timer(device) as t, torch.no_grad():
            loss_fn()
        times_inf.append(t.seconds)
    optimizer = make_optimizer(
        args["method"], model, lr=1e-7, eps=1e-3, rank=2, interval=50, momentum=0.9, weight_decay=0.0, seed=0
    )

    def one_step() -> None:
        train_steps(model, optimizer, loss_fn, lambda: None, 1, quiet=True, desc="")

    one_step()  # warm-up (allocates optimizer state)
    with PeakMemory(device) as mem_step:
        one_step()
    times_step = []
    for _ in range(args["repeats"]):
        with Timer(device) as t:
            one_step()
        times_step.append(t.seconds)
    base = baseline if device.type != "cuda" else 0
    return {
        "method": args["method"],
        "inference_peak_bytes": mem_inf.absolute_peak_bytes - base,
        "step_peak_bytes": mem_step.absolute_peak_bytes - base,
        "inference_seconds": float(np.median(times_inf)),
        "step_seconds": float(np.median(times_step)),
        "parameters": sum(p.numel() for p in model.parameters()),
        "device": str(device),
    }


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Run the ``bench`` subcommand; see :class:`~iclr25_lozo.cli.BenchConfig`."""
    log = ctx.log.info
    rows = []
    r: dict[str, Any] = {}
    for method in progress(cfg.methods, total=len(cfg.methods), desc="bench", quiet=cfg.quiet):
        args = {
            "method": method,
            "model": cfg.model,
            "batch_size": cfg.batch_size,
            "seq_len": cfg.seq_len,
            "repeats": cfg.repeats,
            "device": cfg.device,
            "threads": cfg.threads,
            "dtype": cfg.dtype,
        }
        proc = subprocess.run(
            [sys.executable, "-m", "iclr25_lozo._bench_worker", json.dumps(args)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"bench worker for {method} failed: {proc.stderr.strip().splitlines()[-1:]}")
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(
            {
                "method": method,
                "memory_vs_inference": r["step_peak_bytes"] / r["inference_peak_bytes"],
                "time_vs_inference": r["step_seconds"] / r["inference_seconds"],
                "step_peak_mib": r["step_peak_bytes"] / 2**20,
                "inference_peak_mib": r["inference_peak_bytes"] / 2**20,
                "step_seconds": r["step_seconds"],
                "inference_seconds": r["inference_seconds"],
            }
        )
    device = r["device"] if rows else cfg.device
    ctx.device_label = device
    if rows:
        log(
            f"{cfg.model} ({cfg.dtype}), batch {cfg.batch_size} x {cfg.seq_len} tokens, device {device}; memory "
            f"is {'CUDA allocated' if device.startswith('cuda') else 'process RSS above the pre-load baseline'} "
            "(model weights included)"
        )
    tables: dict[str, Any] = {"ratios to one inference forward pass": rows}
    metrics: dict[str, Any] = {}
    if cfg.methods:
        time_rows, run = _bench_interleaved(cfg, ctx)
        tables["time per step / one inference forward (interleaved, one process)"] = time_rows
        metrics["bench_run"] = run
        by = {t["method"]: t for t in time_rows}
        for row in rows:  # the interleaved ratio replaces the separate processes' medians
            row["time_vs_inference"] = by[row["method"]]["time_vs_inference"]
            row["time_vs_inference_95ci"] = by[row["method"]]["95 % CI"]
            row["step_seconds"] = by[row["method"]]["step_seconds"]
            row["inference_seconds"] = by["inference"]["step_seconds"]
    if cfg.low_rank_add:
        tables["low-precision low-rank add, one pass over the model's matrices (CPU)"] = _bench_low_rank_add(
            cfg
        )
    if cfg.distributed:
        tables["data parallel: LOZO (2 scalars per step) vs DDP + Adam (the gradient)"] = _bench_distributed(
            cfg
        )
    notes = [
        "memory: each method in a fresh process (peak above the pre-load baseline, weights included); time: every "
        "method and one inference forward in one process, interleaved (iclr25_shared.bench.interleaved: warm-up, "
        f"then {cfg.repeats} rounds in rotating order), ratio = median of per-round ratios with a 95 % bootstrap "
        "interval. Held equal: model, weights, batch; a zeroth-order step is 2 forward passes, an Adam step one "
        "forward and one backward.",
    ]
    return Result(metrics=metrics, tables=tables, notes=notes)


def _bench_interleaved(cfg: BenchConfig, ctx: RunContext) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One inference forward and one step of every method, timed in this process with the shared interleaved
    protocol; one model shared by all arms (lr 1e-7: the weights barely move, as in the memory workers)."""
    from iclr25_lozo._models import bench_model_and_batch
    from iclr25_shared.bench import interleaved

    device = resolve_device(cfg.device)
    model, ids = bench_model_and_batch(
        cfg.model, device=device, dtype=cfg.dtype, batch_size=cfg.batch_size, seq_len=cfg.seq_len
    )
    ids = ids.to(device)

    def loss_fn(_: Any = None) -> torch.Tensor:
        return model(input_ids=ids, labels=ids).loss.float()

    def inference() -> None:
        with torch.no_grad():
            loss_fn()

    arms: dict[str, Any] = {"inference": inference}
    for method in cfg.methods:
        opt = make_optimizer(
            method, model, lr=1e-7, eps=1e-3, rank=2, interval=50, momentum=0.9, weight_decay=0.0, seed=0
        )
        arms[method] = lambda opt=opt: train_steps(model, opt, loss_fn, lambda: None, 1, quiet=True, desc="")
    run = interleaved(
        arms,
        repeats=cfg.repeats,
        warmup=1,
        device=device,
        progress=lambda it: ctx.progress(it, total=cfg.repeats, desc="interleaved"),
    )
    rows = []
    for name in arms:
        est = run.ratio(name, "inference")
        rows.append(
            {
                "method": name,
                "step_seconds": run.median(name),
                "time_vs_inference": est.value,
                "95 % CI": f"[{est.low:.2f}, {est.high:.2f}]",
                "rounds": cfg.repeats,
            }
        )
    return rows, run.as_dict()


# oneDNN and ATen limited to AVX2: a CPU without bfloat16/float16 matrix units (no AVX-512 BF16, no AMX)
AVX2_ENV = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}


def _low_rank_add_worker(args: dict[str, Any]) -> dict[str, Any]:
    """Time X <- X + U V^T (r = 2) over every matrix of the model in this (fresh) process, per dtype: ``addmm_``
    in the matrix's dtype against :meth:`LOZO._add_low_rank` (float32 row blocks, rounded once), interleaved."""
    from iclr25_lozo._models import bench_model_and_batch
    from iclr25_lozo._optimizer import LOZO
    from iclr25_shared.bench import interleaved

    torch.set_num_threads(max(1, int(args["threads"])))
    rows = []
    for dtype in ("bfloat16", "float16"):
        model, _ = bench_model_and_batch(
            args["model"], device=torch.device("cpu"), dtype=dtype, batch_size=1, seq_len=2
        )
        matrices = [p.detach().view(p.shape[0], -1) for p in model.parameters() if p.ndim >= 2]
        gen = torch.Generator().manual_seed(0)
        factors = [(1e-3 * torch.randn(m.shape[0], 2, generator=gen), torch.randn(m.shape[1], 2, generator=gen))
                   for m in matrices]  # fmt: skip

        def fused(matrices: list[torch.Tensor] = matrices, factors: list[Any] = factors) -> None:
            for x, (u, v) in zip(matrices, factors, strict=True):
                x.addmm_(u.to(x.dtype), v.T.to(x.dtype))

        def blocked(matrices: list[torch.Tensor] = matrices, factors: list[Any] = factors) -> None:
            for x, (u, v) in zip(matrices, factors, strict=True):
                LOZO._add_low_rank(x, u, v)

        run = interleaved({"addmm_": fused, "blocked": blocked}, repeats=int(args["repeats"]), warmup=1)
        est = run.ratio("addmm_", "blocked")
        rows.append(
            {
                "dtype": dtype,
                "addmm_ms": 1e3 * run.median("addmm_"),
                "blocked_ms": 1e3 * run.median("blocked"),
                "addmm_ / blocked": est.value,
                "95 % CI": f"[{est.low:.2f}, {est.high:.2f}]",
                "matrices": len(matrices),
                "elements": sum(x.numel() for x in matrices),
                "rounds": int(args["repeats"]),
            }
        )
    return {"rows": rows, "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def _bench_low_rank_add(cfg: BenchConfig) -> list[dict[str, Any]]:
    """The low-rank add timed natively and with oneDNN limited to AVX2, each in a fresh process."""
    import os

    rows = []
    for isa, extra in (("native", {}), ("AVX2 (ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2)", AVX2_ENV)):
        args = {"kind": "low_rank_add", "model": cfg.model, "repeats": cfg.repeats, "threads": cfg.threads}
        proc = subprocess.run(
            [sys.executable, "-m", "iclr25_lozo._bench_worker", json.dumps(args)],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, **extra},
        )
        if proc.returncode != 0:
            raise RuntimeError(f"low-rank add worker ({isa}) failed: {proc.stderr.strip().splitlines()[-1:]}")
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        rows += [{"instruction set": isa, "cpu_capability": r["cpu_capability"], **row} for row in r["rows"]]
    return rows


def _bench_distributed(cfg: BenchConfig) -> list[dict[str, Any]]:
    """Data-parallel LOZO vs DDP + Adam at each process count in ``cfg.processes`` (same global batch)."""
    import tempfile

    rows = []
    for world in cfg.processes:
        args = {
            "model": cfg.model,
            "batch_size": cfg.batch_size,
            "seq_len": cfg.seq_len,
            "repeats": cfg.repeats,
            "device": cfg.device,
            "threads": max(1, cfg.threads),
            "dtype": cfg.dtype,
        }
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "result.json"
            cmd = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc_per_node",
                str(world),
            ]
            cmd += ["-m", "iclr25_lozo._dist_bench_worker", json.dumps(args), str(out)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0 or not out.is_file():
                lines = proc.stderr.strip().splitlines()
                tail = [x for x in lines if "Error" in x and "elastic" not in x][-2:] or lines[-3:]
                raise RuntimeError(f"distributed bench at {world} process(es) failed: {tail}")
            r = json.loads(out.read_text())
        rows.append(
            {
                "processes": world,
                "per_rank_batch": r["per_rank_batch"],
                "lozo_bytes_per_step": r["lozo_bytes_per_step"],
                "lozo_all_reduces_per_step": r["lozo_all_reduces_per_step"],
                "ddp_adam_bytes_per_step": r["ddp_adam_bytes_per_step"],
                "lozo_step_seconds": r["lozo_step_seconds"],
                "ddp_adam_step_seconds": r["ddp_adam_step_seconds"],
                "ddp_adam / lozo time [95 % CI]": "{:.2f} [{:.2f}, {:.2f}]".format(
                    *r["ddp_adam_vs_lozo_time"]
                ),
                "parameters": r["parameters"],
            }
        )
    return rows
