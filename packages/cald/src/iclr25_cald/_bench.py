"""``bench``: time and peak memory of one layer's token mixer vs sequence length (attention vs Linformer vs Mamba),
and with ``--ddp-processes`` the data-parallel distillation step under torchrun (``iclr25_cald._ddp_bench``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_cald.cli import BenchConfig

BENCH_HELD_EQUAL = (
    "held equal: the input (batch 1, n tokens, d = 576), the layer's projections (converted from the same teacher "
    "layer), forward only without gradients, threads; not equal: FLOPs (attention O(n² d), Linformer O(n k d), "
    "Mamba O(n d d_state) + its projections) and the output (different mixers)"
)


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Time and peak memory of one layer's token mixer vs sequence length: attention vs Linformer vs Mamba, all
    three interleaved in rounds at each length (``iclr25_shared.bench.interleaved``); peak memory from one separate
    call each. With ``--ddp-processes``: data-parallel distillation step time and bytes per step."""
    import torch

    from iclr25_shared.bench import machine_state

    device = ctx.torch_device()
    hidden, models = _mixer_models(cfg, device)
    att = next(iter(models))
    rows: list[dict[str, Any]] = []
    runs: dict[str, Any] = {}
    skip: set[str] = set()
    for n in cfg.lengths:
        rows += _time_length(cfg, ctx, n, hidden, models, att, skip, runs, device)
    crossover = _crossover(rows, list(models)[1:])
    tables: dict[str, Any] = {"scaling": rows}
    notes = _scaling_notes(cfg)
    if cfg.ddp_processes:
        tables["ddp"] = [_ddp_bench_row(cfg, ctx, n, device) for n in cfg.ddp_processes]
        notes.append(
            "ddp: target-guided distillation of the reproduction's model shape (2-layer SmolLM2-135M prefix, random "
            "weights, Linformer k=16, seq 32) under torchrun, the same global batch at every process count; held "
            "equal: global batch, model, steps, data; not equal: the number of processes (each with --threads "
            "threads on the same machine). Run one process count after another, not interleaved (each is its own "
            "torchrun job); on a machine with fewer free cores than processes no speed-up is expected"
        )
    if ctx.writes:
        _plot(rows, ctx)
    return Result(
        metrics={
            "crossover_seq_len": crossover,
            "threads": torch.get_num_threads(),
            "device": str(device),
            "machine": machine_state(),
            "protocol": runs,
        },
        tables=tables,
        notes=notes,
    )


def _mixer_models(cfg: BenchConfig, device: Any) -> tuple[int, dict[str, Any]]:
    """The hidden size and the three one-layer models by arm name, attention (the teacher) first."""
    import torch
    import transformers

    from iclr25_cald._convert import convert as convert_model
    from iclr25_cald._mixers import MambaConfig

    config = (
        transformers.LlamaConfig(  # SmolLM2-135M's layer sizes; weights random (timing does not need them)
            vocab_size=256,
            hidden_size=576,
            intermediate_size=1536,
            num_hidden_layers=1,
            num_attention_heads=9,
            num_key_value_heads=3,
            max_position_embeddings=max(cfg.lengths),
            use_cache=False,
            attn_implementation="sdpa",
        )
    )
    torch.manual_seed(cfg.seed)
    teacher = transformers.LlamaForCausalLM(config).to(device).eval()
    scan = "recurrent scan" if cfg.mamba_chunk == 1 else f"blocked scan, chunk={cfg.mamba_chunk}"
    att, lin, mam = "attention (sdpa, teacher)", f"linformer k={cfg.k}", f"mamba ({scan})"
    models = {
        att: teacher,
        lin: convert_model(  # one mixer timed on its own: causality is not at stake
            teacher, "linformer", k=cfg.k, max_seq_len=max(cfg.lengths), allow_bidirectional=True
        ).model,
        mam: convert_model(
            teacher, "mamba", mamba=MambaConfig(expand=cfg.mamba_expand, chunk=cfg.mamba_chunk)
        ).model,
    }
    return config.hidden_size, models


def _mixer_calls(
    models: dict[str, Any], skip: set[str], n: int, hidden: int, device: Any
) -> dict[str, Callable]:
    """One no-grad token-mixer forward on a random ``(1, n, hidden)`` input per model not skipped."""
    import torch

    x = torch.randn(1, n, hidden, device=device)
    pos = torch.arange(n, device=device)[None]
    arms = {}
    for name, model in models.items():
        if name in skip:
            continue
        layer = model.model.layers[0]
        pe = model.model.rotary_emb(x, pos)

        def call(layer: Any = layer, pe: Any = pe, x: Any = x) -> None:
            with torch.no_grad():  # no padding: the teacher's SDPA attention is causal when no mask is given
                layer.self_attn(x, position_embeddings=pe, attention_mask=None)

        arms[name] = call
    return arms


def _time_length(
    cfg: BenchConfig,
    ctx: RunContext,
    n: int,
    hidden: int,
    models: dict[str, Any],
    att: str,
    skip: set[str],
    runs: dict[str, Any],
    device: Any,
) -> list[dict[str, Any]]:
    """The scaling rows at length ``n``: the mixers interleaved (protocol into ``runs``), then one call each for
    peak memory; a mixer whose median exceeds ``--max-seconds`` joins ``skip`` for the longer lengths."""
    from iclr25_shared.bench import interleaved
    from iclr25_shared.device import PeakMemory

    arms = _mixer_calls(models, skip, n, hidden, device)
    run = None
    if arms:
        run = interleaved(
            arms, repeats=cfg.repeats, warmup=cfg.warmup, device=str(device), threads=ctx.threads or None
        )
        runs[str(n)] = run.as_dict()
    peaks = {}
    for name, call in arms.items():  # memory apart from the timed rounds: one call each
        with PeakMemory(device) as mem:
            call()
        peaks[name] = mem.peak_bytes / 2**20
    rows: list[dict[str, Any]] = []
    for name in models:
        if name not in arms:
            rows.append(_skipped_row(n, name, cfg.max_seconds))
            continue
        t = run.median(name)
        est = run.ratio(name, att) if name != att and att in arms else None
        rows.append(
            {
                "seq_len": n,
                "mixer": name,
                "seconds": t,
                "time_vs_attention": 1.0 if name == att else (est.value if est else None),
                "ratio_low": est.low if est else None,
                "ratio_high": est.high if est else None,
                "peak_mib": peaks[name],
                "note": "",
            }
        )
        ctx.log.info(
            "n=%6d %-28s %.4f s  x attn %s  %.1f MiB",
            n,
            name,
            t,
            f"{est.value:.3f}" if est else "-",
            peaks[name],
        )
        if t > cfg.max_seconds:
            skip.add(name)
    return rows


def _skipped_row(n: int, name: str, max_seconds: float) -> dict[str, Any]:
    """The scaling row of a mixer skipped at length ``n`` (too slow at a shorter one)."""
    return {
        "seq_len": n,
        "mixer": name,
        "seconds": None,
        "time_vs_attention": None,
        "ratio_low": None,
        "ratio_high": None,
        "peak_mib": None,
        "note": f"skipped: its median at a shorter length took > {max_seconds} s",
    }


def _crossover(rows: list[dict[str, Any]], mixers: list[str]) -> dict[str, Any]:
    """Per mixer, the shortest length from which it is faster than attention at every longer measured length."""
    crossover: dict[str, Any] = {}
    for name in mixers:
        ratios = [
            (r["seq_len"], r["ratio_high"])
            for r in rows
            if r["mixer"] == name and r["ratio_high"] is not None
        ]
        # shortest length from which the mixer is faster than attention (the ratio's 95 % interval below 1) at
        # every longer measured length
        crossover[name] = next(
            (n for i, (n, _) in enumerate(ratios) if all(v < 1 for _, v in ratios[i:])), None
        )
    return crossover


def _scaling_notes(cfg: BenchConfig) -> list[str]:
    """The notes saying how the scaling table was measured."""
    return [
        "one token-mixer forward (no grad), batch 1, SmolLM2-135M layer sizes; at each length the three mixers run "
        f"in {cfg.repeats} interleaved rounds (order rotated each round) after {cfg.warmup} warm-up call(s) each "
        "(iclr25_shared.bench.interleaved); seconds = median over rounds; time_vs_attention = median of the "
        "per-round ratios mixer / attention with a 95 % bootstrap interval over rounds [ratio_low, ratio_high]; "
        "peak memory from one further call each, apart from the timed rounds",
        BENCH_HELD_EQUAL,
        "crossover = shortest measured length from which the mixer is faster than attention (ratio interval "
        "below 1) at every longer measured length (None: not within the measured lengths)",
    ]


def _ddp_bench_row(cfg: BenchConfig, ctx: RunContext, processes: int, device: Any) -> dict[str, Any]:
    """Run ``iclr25_cald._ddp_bench`` under torchrun with ``processes`` processes; its rank 0's JSON result."""
    import json
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    args = {
        "seed": cfg.seed,
        "batch_size": cfg.ddp_batch_size,
        "seq_len": 32,
        "k": 16,
        "warmup": 2,
        "steps": cfg.ddp_steps,
        "threads": ctx.threads or 1,
        "device": str(device),
    }
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ddp.json"
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(processes),
            "-m",
            "iclr25_cald._ddp_bench",
            json.dumps(args),
            str(out),
        ]
        ctx.log.info("ddp bench: %d process(es) ...", processes)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not out.is_file():
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            errors = [ln.strip() for ln in lines if "Error" in ln and not ln.lstrip().startswith("File ")]
            raise RuntimeError(
                f"ddp bench with {processes} processes failed: {' | '.join((errors or lines)[-3:])}"
            )
        row = json.loads(out.read_text(encoding="utf-8"))
    row["job_wall_s"] = time.perf_counter() - t0
    return row


def _plot(rows: list[dict], ctx: RunContext) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        ctx.log.info("matplotlib not installed; no plot (pip install iclr25-cald[plot])")
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name in dict.fromkeys(r["mixer"] for r in rows):
        pts = [
            (r["seq_len"], r["seconds"], r["peak_mib"]) for r in rows if r["mixer"] == name and r["seconds"]
        ]
        if pts:
            n, t, m = zip(*pts)
            axes[0].loglog(n, t, "o-", label=name)
            axes[1].loglog(n, [max(v, 1e-3) for v in m], "o-", label=name)
    axes[0].set(xlabel="sequence length", ylabel="seconds per forward", title="time")
    axes[1].set(xlabel="sequence length", ylabel="peak extra memory (MiB)", title="memory")
    axes[0].legend()
    ctx.save_figure("scaling.png", fig)
