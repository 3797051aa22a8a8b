"""``bench``: HCxn against the residual baseline, one training step per call: time, activation memory, parameters,
and data-parallel steps under ``torch.distributed.run``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from iclr25_hyper_connections import _experiment as ex
from iclr25_hyper_connections._experiment import build_model, saved_activation_bytes
from iclr25_hyper_connections._variants import Variant
from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_hyper_connections.cli import BenchConfig

__all__ = ["BENCH_HELD_EQUAL", "bench"]


def _ratio_text(est: Any) -> str:
    return f"{est.value:.3f} [{est.low:.3f}, {est.high:.3f}]"


BENCH_HELD_EQUAL = (
    "held equal: base weights, batch (random tokens), one AdamW step per call; not equal: FLOPs and parameters "
    "(HC adds its n-stream width/depth connections), activation memory"
)


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Measure HCxn against the residual baseline in one process (iclr25_shared.bench.interleaved: warm-up, then
    rounds of one training step per variant in rotating order; time ratios are medians of per-round ratios with
    bootstrap intervals): time, activation memory, parameters. With ``--processes``, also data-parallel steps
    (DDP) under ``torch.distributed.run`` at each process count: step time and gradient bytes all-reduced."""
    from iclr25_shared.bench import interleaved
    from iclr25_shared.device import PeakMemory

    device = ex._setup(cfg, ctx)
    spec, batch = ex._bench_model_and_batch(cfg, device)
    kind = "DHC" if cfg.dynamic else "SHC"
    variants = [Variant(name="residual")] + [
        Variant(name=f"{kind}x{n}", expansion_rate=n, dynamic=cfg.dynamic) for n in cfg.expansion_rates
    ]
    models = [
        build_model(cfg.vocab_size, spec, v, seed=cfg.seed, fused=cfg.fused).to(device).train()
        for v in variants
    ]
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-4) for m in models]

    def step(i: int) -> None:
        opts[i].zero_grad(set_to_none=True)
        ex._lm_loss(models[i], batch).backward()
        opts[i].step()

    run = interleaved(
        {v.name: (lambda i=i: step(i)) for i, v in enumerate(variants)},
        repeats=cfg.repeats,
        warmup=cfg.warmup_steps,
        device=device,
        progress=lambda it: ctx.progress(it, total=cfg.repeats, desc="bench"),
    )
    rows: list[dict[str, Any]] = []
    for i, (variant, model) in enumerate(zip(variants, models)):
        opts[i].zero_grad(set_to_none=True)
        params = list(model.parameters())
        act = saved_activation_bytes(lambda model=model: ex._lm_loss(model, batch), exclude=params)
        peak = None
        if device.type == "cuda":  # CPU peak RSS cannot see memory the allocator reuses: not reported there
            with PeakMemory(device) as mem:
                ex._lm_loss(model, batch).backward()
            peak = mem.peak_bytes / 2**20
        opts[i].zero_grad(set_to_none=True)
        est = run.ratio(variant.name, "residual")
        rows.append(
            {
                "variant": variant.name,
                "params": sum(p.numel() for p in params),
                "step ms": 1000 * run.median(variant.name),
                "time ratio": est.value,
                "time ratio 95 % CI": f"[{est.low:.3f}, {est.high:.3f}]",
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
        "time ratio 95 % CI",
        "saved activations MiB",
        "activation ratio",
        "peak memory MiB",
        "peak memory ratio",
    ]
    tables: dict[str, Any] = {"bench": [{c: row[c] for c in columns} for row in rows]}
    notes = [
        "time ratio: median over rounds of (variant step / residual step in the same round), 95 % bootstrap "
        f"interval over {cfg.repeats} rounds (iclr25_shared.bench.interleaved); " + BENCH_HELD_EQUAL + ".",
        "saved activations: bytes of distinct tensors autograd keeps for backward (exact); peak memory: "
        "CUDA max_memory_allocated during forward+backward above the start (CUDA only).",
        "paper (OLMo-1B, d = 2048): +0.03 % parameters, +0.2 % FLOPs, +26 % activation memory.",
    ]
    metrics: dict[str, Any] = {r["variant"]: {k: v for k, v in r.items() if k != "variant"} for r in rows}
    metrics["bench_run"] = run.as_dict()
    if cfg.processes:
        ddp_rows = _bench_data_parallel(cfg, ctx, device)
        tables["data parallel (DDP)"] = ddp_rows
        metrics["data_parallel"] = ddp_rows
        notes.append(
            "data parallel: each process count in its own torch.distributed.run launch (gloo on CPU, NCCL on CUDA), "
            f"global batch {cfg.batch_size} x {cfg.context} tokens split over the processes, one thread per "
            "process; bytes = gradient buckets DDP all-reduces per step, counted by iclr25_shared.distributed."
            "ByteCounter (1 process: no DDP, nothing sent); train/reproduce also all-reduce the step's loss "
            "(8 bytes). Step times of different process counts come from different launches (not interleaved); "
            "on 2 shared CPU cores no speed-up is expected."
        )
    return Result(metrics=metrics, tables=tables, notes=notes)


def _bench_data_parallel(cfg: BenchConfig, ctx: RunContext, device: torch.device) -> list[dict[str, Any]]:
    """Launch ``_ddp_bench`` under ``torch.distributed.run`` once per process count; its rows."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    from iclr25_shared.errors import InputError

    rows: list[dict[str, Any]] = []
    for n in cfg.processes:
        if cfg.batch_size % n:
            raise InputError(f"--processes: {n} does not divide --batch-size {cfg.batch_size}")
        args = {
            "dim": cfg.dim,
            "num_layers": cfg.num_layers,
            "num_heads": cfg.num_heads,
            "context": cfg.context,
            "batch_size": cfg.batch_size,
            "vocab_size": cfg.vocab_size,
            "seed": cfg.seed,
            "expansion_rate": max(cfg.expansion_rates),
            "dynamic": cfg.dynamic,
            "fused": cfg.fused,
            "repeats": cfg.repeats,
            "warmup": cfg.warmup_steps,
            "device": device.type,
        }
        with tempfile.TemporaryDirectory(prefix="hc-ddp-bench-") as tmp:
            out = os.path.join(tmp, "rank0.json")
            cmd = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node",
                str(n),
                "-m",
                "iclr25_hyper_connections._ddp_bench",
                json.dumps(args),
                out,
            ]
            env = dict(os.environ, OMP_NUM_THREADS="1")
            ctx.log.info(f"data parallel: {n} process(es)")
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"the {n}-process DDP bench failed:\n{done.stderr[-2000:]}")
            with open(out, encoding="utf-8") as fh:
                rows.extend(json.load(fh))
    return rows
