"""``bench``: heavy_entries vs chunked brute force vs the matmul floor (numpy, host), and the LevAttention layer."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from iclr25_levattention._heavy import brute_force_heavy_entries, heavy_entries
from iclr25_levattention._parts import _cpu_timed, heavy_tailed, loglog_slope
from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_levattention.cli import BenchConfig

__all__ = ["bench", "bench_rows", "layer_bench_rows", "matmul_floor"]


def _measured(fn, *args, **kwargs):
    """``(result, wall, cpu, peak_bytes)``: :func:`_cpu_timed` plus the peak memory allocated by Python and numpy
    during the call (tracemalloc; numpy reports its array buffers to it) above what was allocated at the start."""
    import tracemalloc

    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result, wall, cpu = _cpu_timed(fn, *args, **kwargs)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return result, wall, cpu, peak


def matmul_floor(Q: np.ndarray, K: np.ndarray, *, chunk_size: int) -> float:
    """The pure matrix-product floor of any exact dense method: Q Kᵀ in the brute force's chunks, nothing else.

    Returns a checksum (the largest |⟨q, k⟩|) so the products cannot be optimised away.
    """
    big = 0.0
    for start in range(0, Q.shape[0], chunk_size):
        big = max(big, float(np.max(np.abs(Q[start : start + chunk_size] @ K.T))))
    return big


def bench_rows(
    ns, *, d: int, eps: float, p: int, seed: int, chunk_size: int, repeats: int = 5, quiet: bool = True
) -> tuple[list[dict], dict]:
    """heavy_entries vs brute force vs the matmul floor on heavy-tailed keys/queries: time and memory, same process.

    Time: :func:`iclr25_shared.bench.interleaved` per n (one warm-up call of each arm, then ``repeats`` rounds for
    n <= 8192 and 3 above, the arms rotated each round), wall seconds; speed-ups are medians of per-round ratios with
    a 95 % bootstrap interval. Memory: peak bytes allocated during one more call of each (tracemalloc, outside the
    timed rounds), excluding the inputs Q and K. The floor is Q Kᵀ alone (:func:`matmul_floor`).
    """
    from iclr25_shared.bench import interleaved
    from iclr25_shared.cli import progress

    rows, raw = [], {}
    for n in progress(ns, desc="bench n", quiet=quiet):
        K = heavy_tailed(n, d, seed=seed)
        Q = heavy_tailed(n, d, seed=seed + 1)
        arms = {
            "ours": lambda Q=Q, K=K: heavy_entries(Q, K, eps, p, chunk_size=chunk_size),
            "brute": lambda Q=Q, K=K: brute_force_heavy_entries(Q, K, eps, p, chunk_size=chunk_size),
            "floor": lambda Q=Q, K=K: matmul_floor(Q, K, chunk_size=chunk_size),
        }
        run = interleaved(arms, repeats=repeats if n <= 2**13 else 3, warmup=1)
        raw[str(n)] = run.as_dict()
        ours, _, _, mem_ours = _measured(arms["ours"])
        brute, _, _, mem_brute = _measured(arms["brute"])
        speed = run.speedup("ours", "brute")
        over_floor = run.ratio("brute", "floor")
        u = int(ours.universal_set.size)
        rows.append(
            {
                "n": n,
                "d": d,
                "p": p,
                "eps": eps,
                "U_size": u,
                "U_bound": d ** (p / 2) / eps,
                "entries": len(ours),
                "same_entries": ours.pairs() == brute.pairs(),
                "ours_s": run.median("ours"),
                "brute_s": run.median("brute"),
                "floor_s": run.median("floor"),
                "speedup_vs_brute": speed.value,
                "interval": f"[{speed.low:.3g}, {speed.high:.3g}]",
                "brute_over_floor": over_floor.value,
                "floor_over_ours": run.ratio("floor", "ours").value,
                "rounds": len(run.times["ours"]),
                "mem_ours_mib": mem_ours / 2**20,
                "mem_brute_mib": mem_brute / 2**20,
                "mem_ratio": mem_brute / mem_ours,
                "held_equal": "the same Q, K, eps, p and chunks; the same entry set found (same_entries)",
            }
        )
        del K, Q, ours, brute, arms
    return rows, raw


def layer_bench_rows(
    ns, *, batch: int, dim: int, heads: int, top_k: int, seed: int, device, repeats: int, threads=None
) -> tuple[list[dict], dict]:
    """The torch layer on ``device``: LevAttention top-``top_k`` against full softmax attention (``top_k=None``),
    one forward and backward of the same layer, weights and input per call, interleaved; plus each arm's peak memory
    (one more call, outside the timed rounds)."""
    import torch

    from iclr25_levattention._layer import LevAttention
    from iclr25_shared.bench import interleaved
    from iclr25_shared.device import PeakMemory

    rows, raw = [], {}
    for n in ns:
        torch.manual_seed(seed)
        layer = LevAttention(dim, heads, top_k=top_k).to(device)
        x = torch.randn(batch, n, dim, device=device, requires_grad=True)

        def step(k, layer=layer, x=x):
            layer.top_k = k
            layer(x).sum().backward()
            layer.zero_grad(set_to_none=True)
            x.grad = None

        arms = {"full": lambda: step(None), f"top-{top_k}": lambda: step(top_k)}
        run = interleaved(arms, repeats=repeats, warmup=1, device=device, threads=threads)
        raw[str(n)] = run.as_dict()
        peaks = {}
        for name, call in arms.items():
            with PeakMemory(device) as mem:
                call()
            peaks[name] = mem.peak_bytes / 2**20
        speed = run.speedup(f"top-{top_k}", "full")
        rows.append(
            {
                "device": str(device),
                "n": n,
                "top_k": top_k,
                "batch_x_heads": f"{batch} x {heads}",
                "dim": dim,
                "full_ms": 1e3 * run.median("full"),
                "topk_ms": 1e3 * run.median(f"top-{top_k}"),
                "speedup": speed.value,
                "interval": f"[{speed.low:.3g}, {speed.high:.3g}]",
                "rounds": repeats,
                "peak_full_mib": peaks["full"],
                "peak_topk_mib": peaks[f"top-{top_k}"],
                "held_equal": "the same layer weights and input, one forward + backward (float32); not equal: the "
                f"output (top-{top_k} attends to {top_k} keys per head)",
            }
        )
        del layer, x
    return rows, raw


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """``bench``: heavy_entries vs chunked brute force vs the matmul floor (numpy, host), time and peak-memory
    ratios in the same process; and the torch layer, top-k against full attention, on ``--device``."""
    ns = [2**e for e in range(cfg.min_log_n, cfg.max_log_n + 1)]
    rows, raw = bench_rows(
        ns,
        d=cfg.d,
        eps=cfg.eps,
        p=cfg.p,
        seed=cfg.seed,
        chunk_size=cfg.chunk_size,
        repeats=cfg.repeats,
        quiet=cfg.quiet,
    )
    device = ctx.torch_device()
    layer_rows, layer_raw = layer_bench_rows(
        cfg.layer_ns,
        batch=cfg.layer_batch,
        dim=cfg.layer_dim,
        heads=cfg.layer_heads,
        top_k=cfg.layer_top_k,
        seed=cfg.seed,
        device=device,
        repeats=cfg.repeats,
        threads=ctx.threads or None,
    )
    last = rows[-1]
    metrics: dict = {
        "speedup vs brute at largest n": last["speedup_vs_brute"],
        "speedup interval at largest n": last["interval"],
        "memory ratio at largest n": last["mem_ratio"],
        "brute / matmul floor at largest n": last["brute_over_floor"],
        "all entry sets equal": all(r["same_entries"] for r in rows),
    }
    if len(rows) >= 2:
        # growth exponents: least-squares slope of log time on log n, over all n and over the largest half
        top = rows[len(rows) // 2 :] if len(rows) >= 4 else rows
        for label, key in (
            ("ours", "ours_s"),
            ("brute", "brute_s"),
            ("matmul floor", "floor_s"),
        ):
            metrics[f"growth exponent {label}"] = round(loglog_slope(rows, key), 3)
            metrics[f"growth exponent {label} (n >= {top[0]['n']})"] = round(loglog_slope(top, key), 3)
    if layer_rows:
        metrics["layer speedup at largest n"] = layer_rows[-1]["speedup"]
    metrics["bench"] = {"finder": raw, "layer": layer_raw}
    return Result(
        metrics=metrics,
        tables={"finder": rows, "layer": layer_rows},
        notes=[
            "finder: numpy on the host (float64, --threads BLAS threads, default 1); keys and queries: Gaussian "
            "rows scaled by 1 + Pareto(1.5) magnitudes (seeded)",
            f"time: iclr25_shared.bench.interleaved, wall seconds; one warm-up call per arm, then {cfg.repeats} "
            "rounds (3 for n > 8192), arms rotated each round; speed-ups are medians of per-round ratios with a "
            "95 % bootstrap interval over rounds",
            "memory: peak bytes allocated during one more call (tracemalloc: Python + numpy buffers), inputs "
            "excluded",
            "matmul floor: Q K^T alone in the same chunks (no power, no threshold): the least any exact dense method "
            "does",
            f"layer: LevAttention on {device}, forward + backward, top-{cfg.layer_top_k} vs full softmax attention; "
            "peak memory from PeakMemory (CUDA: max allocated; CPU: peak RSS growth, page resolution)",
        ],
    )
