"""What the CLI runs: ``convert``, ``distill`` and ``bench`` (``reproduce``: ``_reproduce.py``), and the helpers
``reproduce`` shares.

Each command takes ``(cfg, ctx)`` and returns an :class:`iclr25_shared.cli.Result`. Real inputs: SmolLM2-135M
(``iclr25_shared.models.load_causal_lm``, packaged offline) and the Wikipedia lead summaries with their topic labels
(``iclr25_shared.data.wiki_summaries``).
"""

from __future__ import annotations

import copy
import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_shared.cli import Result, RunContext
from iclr25_shared.errors import InputError

if TYPE_CHECKING:
    from iclr25_cald.cli import BenchConfig, ConvertConfig, DistillConfig


def _load(model: str, ctx: RunContext, *, layers: int = 0, families: tuple[str, ...] = ("llama",)) -> Any:
    """The teacher, checked to be of a family the command converts and to have at least ``layers`` layers."""
    from iclr25_shared.models import load_causal_lm

    ctx.log.info("loading %s ...", model)
    lm = load_causal_lm(model, device=ctx.torch_device())
    model_type = getattr(lm.model.config, "model_type", None)
    if model_type not in families:  # a .gguf file or a Hub id; a local folder was checked before it loaded
        raise InputError(
            f"--model: {model!r}: unsupported architecture: model_type={model_type!r} "
            f"({type(lm.model).__name__}); supported model_type values are {', '.join(families)}"
        )
    total = int(lm.model.config.num_hidden_layers)
    if layers > total:
        raise InputError(f"--layers: {layers} exceeds the {total} decoder layers of --model {model!r}")
    return lm


def _wiki(data: Any) -> Any:
    from iclr25_shared.data import wiki_summaries

    return wiki_summaries(path=data, label="--data")


def _split(n: int, n_train: int, n_eval: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if n_train + n_eval > n:
        raise InputError(
            f"--train-examples/--eval-examples: {n_train} + {n_eval} examples exceed the {n} in --data"
        )
    order = np.random.default_rng(seed).permutation(n)
    return order[:n_train], order[n_train : n_train + n_eval]


def _accuracy(model: Any, data: Any, batch_size: int = 64) -> float:
    """Accuracy on ``data``; under torchrun each rank scores its round-robin share of the rows and the correct
    counts are summed over the ranks (integers: the same count as one process)."""
    import torch

    from iclr25_cald._task import batch_at
    from iclr25_shared.distributed import all_reduce_sum, shard

    model.eval()
    correct = 0
    n = data.input_ids.shape[0]
    rows = torch.as_tensor(list(shard(n)), dtype=torch.long)
    with torch.no_grad():
        for i in range(0, len(rows), batch_size):
            b = batch_at(data, rows[i : i + batch_size], task="classify")
            dev = next(model.parameters()).device
            logits = model(
                input_ids=b["input_ids"].to(dev), attention_mask=b["attention_mask"].to(dev)
            ).logits
            correct += int((logits.argmax(-1).cpu() == b["labels"]).sum())
    return round(all_reduce_sum({"correct": correct})["correct"]) / n


def _join(cfg: Any, ctx: RunContext) -> Any:
    """Join the process group torchrun / ``accelerate launch`` set up (one process: nothing happens); returns the
    :class:`iclr25_shared.distributed.World`.

    Each rank trains on its share of every batch (``distill``'s data parallelism), so ``--batch-size`` must be a
    multiple of the number of processes; every rank must run the same options (checked)."""
    import torch

    from iclr25_shared.distributed import check_same, init_process_group

    device = ctx.torch_device()
    world = init_process_group(device.type)
    if world.is_distributed:
        if device.type == "cuda":  # one GPU per process: the local rank's
            torch.cuda.set_device(world.local_rank)
        check_same(repr(cfg), "the command's options")
        if cfg.batch_size % world.world_size:
            raise InputError(
                f"--batch-size: {cfg.batch_size} is not a multiple of the {world.world_size} processes (each "
                "process trains on an equal share of every batch)"
            )
        ctx.log.info("data parallel: rank %d of %d", world.rank, world.world_size)
    return world


def _rank_seed(seed: int) -> int:
    """The torch seed of this rank's training loop: ``seed`` in one process, ``derive_seed(seed, rank)`` under
    torchrun (independent dropout streams per rank; the models here have none, so this changes nothing today)."""
    from iclr25_shared.distributed import derive_seed, world

    w = world()
    return derive_seed(seed, w.rank) if w.is_distributed else seed


def _layer_distance(student: Any, teacher: Any, data: Any, n: int = 64) -> float:
    """Mean over hidden states of the relative MSE ``‖h_S - h_T‖² / ‖h_T‖²`` on ``n`` examples (diagnostic)."""
    import torch

    from iclr25_cald._task import batch_at

    b = batch_at(data, torch.arange(min(n, data.input_ids.shape[0])), task="classify")
    dev = next(student.parameters()).device
    kw = {"input_ids": b["input_ids"].to(dev), "attention_mask": b["attention_mask"].to(dev)}
    with torch.no_grad():
        hs = student(**kw, output_hidden_states=True).hidden_states
        ht = teacher(**kw, output_hidden_states=True).hidden_states
    m = kw["attention_mask"][..., None].float()
    vals = [float(((s - t).pow(2) * m).sum() / ((t.pow(2) * m).sum() + 1e-12)) for s, t in zip(hs, ht)]
    return float(np.mean(vals[1:]))  # state 0 (embeddings) is shared


def _to(batch: dict, device: Any) -> dict:
    return {k: v.to(device) for k, v in batch.items()}


def _setup(cfg: Any, ctx: RunContext) -> dict[str, Any]:
    """Load SmolLM2 and the Wikipedia topics; build the pretrained prefix, and the train/eval tensors."""
    import torch

    from iclr25_cald._task import prefix_model, tokenize

    torch.manual_seed(cfg.seed)
    wiki = _wiki(cfg.data)  # the data first: its problems never wait for the model
    train_idx, eval_idx = _split(len(wiki), cfg.train_examples, cfg.eval_examples, cfg.seed)
    lm = _load(cfg.model, ctx, layers=cfg.layers)
    tok = lm.tokenizer
    train = tokenize(tok, [wiki.texts[i] for i in train_idx], wiki.labels[train_idx], cfg.seq_len)
    evald = tokenize(tok, [wiki.texts[i] for i in eval_idx], wiki.labels[eval_idx], cfg.seq_len)
    base = prefix_model(lm.model, cfg.layers, task="classify", num_labels=len(wiki.classes), seed=cfg.seed)
    del lm
    return {"base": base, "train": train, "eval": evald, "classes": wiki.classes}


def _trainable(freeze_embeddings: bool) -> Any:
    if not freeze_embeddings:
        return None
    return lambda name, _p: "embed_tokens" not in name


def _run_strategy(
    strategy: str,
    cfg: Any,
    s: dict[str, Any],
    teacher: Any,
    seed: int,
    ctx: RunContext,
    waypoints: Any = None,
) -> dict[str, Any]:
    import torch

    from iclr25_cald._convert import convert
    from iclr25_cald._distill import Guidance, distill
    from iclr25_cald._task import batches

    device = ctx.torch_device()
    # official start (the official target/hybrid script without --student_reinit): the student is the fine-tuned
    # teacher converted, and the teacher stays in train(); otherwise the pretrained prefix converted, teacher eval()
    official = cfg.student_start == "official" and strategy in ("target", "hybrid")
    source = teacher if official else s["base"]
    conv = convert(source, cfg.mixer, k=cfg.k, max_seq_len=cfg.seq_len, seed=seed, mamba=_mamba_cfg(cfg))
    student = conv.model.to(device)
    if official:  # the teacher's parameters were frozen after its fine-tuning; the student's are trained
        for p in student.parameters():
            p.requires_grad_(True)
    guidance = Guidance(
        strategy=strategy,
        alpha_layer=cfg.alpha_layer,
        teacher_lr=cfg.lr,
        max_distill_steps=max(1, round(cfg.hybrid_fraction * cfg.steps)),
        waypoint_every=max(1, math.ceil(cfg.steps / max(1, len(waypoints or [None])))),
        teacher_mode="train" if official else "eval",
    )
    tch = {"target": teacher, "hybrid": teacher, "trajectory": s["base"], "waypoint": s["base"]}.get(strategy)
    torch.manual_seed(_rank_seed(seed))
    t0 = time.perf_counter()
    res = distill(
        student,
        (_to(b, device) for b in batches(s["train"], cfg.batch_size, task="classify", seed=seed)),
        steps=cfg.steps,
        guidance=guidance,
        teacher=tch,
        waypoints=waypoints,
        lr=cfg.lr,
        warmup_steps=cfg.steps // 10,
        trainable=_trainable(cfg.freeze_embeddings),
    )
    wall = time.perf_counter() - t0
    acc = _accuracy(res.student, s["eval"])
    dist = _layer_distance(res.student, teacher, s["eval"]) if teacher is not None else float("nan")
    ctx.log.info("seed %d %-10s acc %.4f  (%.1f s)", seed, strategy, acc, wall)
    return {
        "strategy": strategy,
        "seed": seed,
        "accuracy": acc,
        "layer_distance_to_target_teacher": dist,
        "final_task_loss": res.history[-1]["task"],
        "wall_s": wall,
    }


def _mamba_cfg(cfg: Any) -> Any:
    from iclr25_cald._mixers import MambaConfig

    return MambaConfig(expand=cfg.mamba_expand, d_state=cfg.mamba_d_state)


def _fine_tune_teacher(cfg: Any, s: dict[str, Any], ctx: RunContext, save_every: int = 0) -> tuple[Any, list]:
    import torch

    from iclr25_cald._distill import Guidance, distill
    from iclr25_cald._task import batches

    device = ctx.torch_device()
    teacher = copy.deepcopy(s["base"]).to(device)
    waypoints: list = []

    def keep(step: int, _rec: dict) -> None:
        if save_every and (step + 1) % save_every == 0:
            waypoints.append({k: v.detach().clone() for k, v in teacher.state_dict().items()})

    torch.manual_seed(_rank_seed(cfg.seed))
    distill(
        teacher,
        (
            _to(b, device)
            for b in batches(s["train"], cfg.batch_size, task="classify", seed=10_000 + cfg.seed)
        ),
        steps=cfg.teacher_steps,
        guidance=Guidance(strategy="unguided"),
        lr=cfg.lr,
        warmup_steps=cfg.teacher_steps // 10,
        trainable=_trainable(cfg.freeze_embeddings),
        on_step=keep,
    )
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher, waypoints


# ----------------------------------------------------------------------------------------------------------------
# commands
# ----------------------------------------------------------------------------------------------------------------


def convert(cfg: ConvertConfig, ctx: RunContext) -> Result:
    """Convert SmolLM2 (or ``--model``) and report the weight accounting and the layerwise gap on real text."""
    import torch

    from iclr25_cald._convert import FAMILIES, save_converted
    from iclr25_cald._convert import convert as convert_model
    from iclr25_cald._task import prefix_model, tokenize

    wiki = _wiki(cfg.data)  # the data first: its problems never wait for the model
    lm = _load(cfg.model, ctx, layers=cfg.layers, families=tuple(sorted(FAMILIES)))
    layers = cfg.layers or int(lm.model.config.num_hidden_layers)
    if layers != lm.model.config.num_hidden_layers and lm.model.config.model_type != "llama":
        raise InputError(
            f"--layers: a layer prefix is built for Llama models only; --model {cfg.model!r} is "
            f"{lm.model.config.model_type!r} (use --layers 0)"
        )
    teacher = (
        prefix_model(lm.model, layers, task="lm") if layers != lm.model.config.num_hidden_layers else lm.model
    )
    t0 = time.perf_counter()
    conv = convert_model(
        teacher,
        cfg.mixer,
        k=cfg.k,
        max_seq_len=cfg.max_seq_len,
        seed=cfg.seed,
        mamba=_mamba_cfg(cfg),
        allow_bidirectional=cfg.allow_bidirectional,
    )
    wall = time.perf_counter() - t0
    student = conv.model
    t_state, s_state = teacher.state_dict(), student.state_dict()
    kept = [k for k in t_state if k in s_state]
    identical = sum(bool(torch.equal(t_state[k], s_state[k])) for k in kept)
    data = tokenize(lm.tokenizer, wiki.texts[:32], wiki.labels[:32], min(cfg.max_seq_len, 64))
    dist = _layer_distance(student, teacher, data, n=32)
    n_new = sum(s_state[k].numel() for k in conv.report.new_keys)
    n_removed = sum(t_state[k].numel() for k in conv.report.removed_keys)
    if ctx.writes:
        save_converted(student, ctx.path("model"))
    return Result(
        metrics={
            "family": conv.report.family,
            "mixer": conv.report.mixer,
            "layers_converted": conv.report.layers,
            "kept_tensors": len(kept),
            "kept_tensors_bit_identical": identical,
            "new_tensors": len(conv.report.new_keys),
            "new_parameters": n_new,
            "removed_tensors": len(conv.report.removed_keys),
            "removed_parameters": n_removed,
            "relative_layer_mse_before_fine_tuning": dist,
        },
        tables={"new_keys": [{"key": k} for k in conv.report.new_keys[:12]]},
        timings={"convert": wall},
        notes=[
            f"settings: {conv.report.settings}",
            "the converted model is saved under model/ (load with iclr25_cald.load_converted)"
            if ctx.writes
            else "pass --out to save the converted model",
        ],
        exit_code=0 if identical == len(kept) else 1,
    )


def distill_cmd(cfg: DistillConfig, ctx: RunContext) -> Result:
    """One guidance strategy on Wikipedia topic classification: teacher, conversion, guided fine-tuning."""
    t0 = time.perf_counter()
    _join(cfg, ctx)
    s = _setup(cfg, ctx)
    teacher, waypoints = _fine_tune_teacher(
        cfg, s, ctx, save_every=max(1, cfg.teacher_steps // 4) if cfg.strategy == "waypoint" else 0
    )
    teacher_acc = _accuracy(teacher, s["eval"])
    row = _run_strategy(cfg.strategy, cfg, s, teacher, cfg.seed, ctx, waypoints=waypoints or None)
    return Result(
        metrics={
            "teacher_accuracy": teacher_acc,
            "student_accuracy": row["accuracy"],
            "layer_distance_to_teacher": row["layer_distance_to_target_teacher"],
        },
        tables={"run": [row]},
        timings={"total": time.perf_counter() - t0},
        notes=[_START_NOTE[cfg.student_start]],
    )


_START_NOTE = {
    "pretrained": "student start: pretrained (every strategy converts the pretrained prefix; the target teacher "
    "guides in eval mode); the official target/hybrid script starts from the fine-tuned teacher (the default, "
    "--student-start official)",
    "official": "student start: official (target/hybrid students are the fine-tuned teacher converted, the teacher "
    "guides in train mode, as the official script without --student_reinit; unguided/trajectory start from the "
    "pretrained prefix)",
}


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
    import transformers

    from iclr25_cald._convert import convert as convert_model
    from iclr25_cald._mixers import MambaConfig
    from iclr25_shared.bench import interleaved, machine_state
    from iclr25_shared.device import PeakMemory

    device = ctx.torch_device()
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
    rows: list[dict[str, Any]] = []
    runs: dict[str, Any] = {}
    skip: set[str] = set()
    for n in cfg.lengths:
        x = torch.randn(1, n, config.hidden_size, device=device)
        pos = torch.arange(n, device=device)[None]
        arms = {}
        for name, model in models.items():
            if name in skip:
                continue
            layer = model.model.layers[0]
            pe = model.model.rotary_emb(x, pos)

            def call(layer: Any = layer, pe: Any = pe, x: Any = x) -> None:
                with (
                    torch.no_grad()
                ):  # no padding: the teacher's SDPA attention is causal when no mask is given
                    layer.self_attn(x, position_embeddings=pe, attention_mask=None)

            arms[name] = call
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
        for name in models:
            if name not in arms:
                rows.append(
                    {
                        "seq_len": n,
                        "mixer": name,
                        "seconds": None,
                        "time_vs_attention": None,
                        "ratio_low": None,
                        "ratio_high": None,
                        "peak_mib": None,
                        "note": f"skipped: its median at a shorter length took > {cfg.max_seconds} s",
                    }
                )
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
    crossover: dict[str, Any] = {}
    for name in list(models)[1:]:
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
    tables: dict[str, Any] = {"scaling": rows}
    notes = [
        "one token-mixer forward (no grad), batch 1, SmolLM2-135M layer sizes; at each length the three mixers run "
        f"in {cfg.repeats} interleaved rounds (order rotated each round) after {cfg.warmup} warm-up call(s) each "
        "(iclr25_shared.bench.interleaved); seconds = median over rounds; time_vs_attention = median of the "
        "per-round ratios mixer / attention with a 95 % bootstrap interval over rounds [ratio_low, ratio_high]; "
        "peak memory from one further call each, apart from the timed rounds",
        BENCH_HELD_EQUAL,
        "crossover = shortest measured length from which the mixer is faster than attention (ratio interval "
        "below 1) at every longer measured length (None: not within the measured lengths)",
    ]
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
