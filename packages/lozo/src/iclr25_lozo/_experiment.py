"""The runs behind the CLI: ``finetune`` (the main job), ``reproduce`` (the paper's comparison at small scale) and
``bench`` (memory and time per step as ratios to one inference forward pass)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from iclr25_lozo._optimizer import LOZO, MeZO
from iclr25_lozo._task import WIKI_LABEL_WORDS, Batch, LabelWordTask, balanced_split
from iclr25_lozo.cli import OPTIMIZERS, BenchConfig, FinetuneConfig, ReproduceConfig
from iclr25_shared.cli import Result, RunContext, progress
from iclr25_shared.device import PeakMemory, Timer, current_rss_bytes, resolve_device
from iclr25_shared.metrics import Estimate, accuracy
from iclr25_shared.results import markdown_table, save_figure

__all__ = ["bench", "finetune", "make_optimizer", "reproduce", "train_steps"]


# ----------------------------------------------------------------------------------------------------------------
# finetune
# ----------------------------------------------------------------------------------------------------------------


def make_optimizer(
    name: str,
    model: nn.Module,
    *,
    lr: float,
    eps: float,
    rank: int,
    interval: int,
    momentum: float,
    weight_decay: float,
    seed: int,
) -> torch.optim.Optimizer:
    """The optimizer ``name`` over ``model``'s trainable parameters (weight decay grouped by module type)."""
    if name == "lozo":
        return LOZO(model, lr=lr, eps=eps, rank=rank, interval=interval, weight_decay=weight_decay, seed=seed)
    if name == "lozo-m":
        return LOZO(
            model,
            lr=lr,
            eps=eps,
            rank=rank,
            interval=interval,
            momentum=momentum,
            weight_decay=weight_decay,
            seed=seed,
        )
    if name == "mezo":
        return MeZO(model, lr=lr, eps=eps, weight_decay=weight_decay, seed=seed)
    if name == "adam":
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("adam: no trainable parameters")
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}; got {name!r}")


def train_steps(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: Any,
    draw_batch: Any,
    steps: int,
    *,
    quiet: bool,
    desc: str,
) -> dict[str, Any]:
    """Run ``steps`` optimizer steps; zeroth-order optimizers get a closure, others a backward pass.

    Returns:
        ``losses`` (per step), ``forward_passes``, ``seconds``, ``skipped_steps``.
    """
    zeroth_order = isinstance(optimizer, (LOZO, MeZO))
    losses: list[float] = []
    forwards = 0
    start = time.perf_counter()
    for _ in progress(range(steps), total=steps, desc=desc, quiet=quiet):
        batch = draw_batch()
        if zeroth_order:
            loss = optimizer.step(lambda b=batch: loss_fn(b))
            forwards += 2
        else:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(batch)
            loss.backward()
            optimizer.step()
            forwards += 3  # one forward plus a backward counted as two forward-equivalents
        losses.append(float(loss.detach()) if torch.is_tensor(loss) else float(loss))
    return {
        "losses": losses,
        "forward_passes": forwards,
        "seconds": time.perf_counter() - start,
        "skipped_steps": getattr(optimizer, "skipped_steps", 0),
    }


def _apply_lora(model: nn.Module, rank: int) -> nn.Module:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as exc:
        raise ValueError("--lora needs peft: pip install 'iclr25-lozo[lora]'") from exc
    config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=["q_proj", "v_proj"])
    return get_peft_model(model, config)


def _wiki_task(cfg: Any, device: Any) -> tuple[Any, LabelWordTask, Batch, Batch, Any]:
    from iclr25_lozo._models import load_model
    from iclr25_shared.data import wiki_summaries

    data = wiki_summaries()
    train_idx, eval_idx = balanced_split(
        data.labels,
        shots=cfg.shots,
        eval_per_class=cfg.eval_per_class,
        seed=cfg.seed,
        class_names=data.classes,
    )
    lm = load_model(
        cfg.model,
        texts=data.texts,
        label_words=list(WIKI_LABEL_WORDS.values()),
        device=device,
        dtype=cfg.dtype,
        seed=cfg.seed,
    )
    task = LabelWordTask(lm.tokenizer, data.classes, max_text_tokens=cfg.max_text_tokens)
    train = task.encode(data.subset(train_idx)).to(device)
    held = task.encode(data.subset(eval_idx)).to(device)
    return lm, task, train, held, data


def _evaluate(task: LabelWordTask, model: nn.Module, held: Batch) -> Estimate:
    model.eval()
    return accuracy(task.predict(model, held, batch_size=32), held.labels.cpu().numpy())


def _plot_losses(curves: dict[str, list[float]], path: Path, title: str, xlabel: str = "step") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, ys in curves.items():
        ys = np.asarray(ys, dtype=float)
        window = max(1, len(ys) // 20)
        smooth = np.convolve(ys, np.ones(window) / window, mode="valid") if len(ys) >= window else ys
        ax.plot(np.arange(len(smooth)) + window - 1, smooth, label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("training loss (moving average)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)


def finetune(cfg: FinetuneConfig, ctx: RunContext) -> Result:
    """Run the ``finetune`` subcommand; see :class:`~iclr25_lozo.cli.FinetuneConfig`."""
    device = ctx.torch_device()
    lm, task, train, held, data = _wiki_task(cfg, device)
    if cfg.batch_size > len(train):
        raise ValueError(
            f"batch_size={cfg.batch_size} exceeds the {len(train)} training examples (shots x classes)"
        )
    model = lm.model
    if cfg.lora:
        model = _apply_lora(model, cfg.lora_rank)
    ctx.log.info(
        f"model {cfg.model} ({lm.source}), {sum(p.numel() for p in model.parameters() if p.requires_grad):,} "
        f"trainable parameters on {device}; {len(train)} training / {len(held)} held-out examples, "
        f"{len(data.classes)} topics"
    )
    zero_shot = _evaluate(task, model, held)
    ctx.log.info(f"zero-shot accuracy:  {zero_shot}")
    optimizer = make_optimizer(
        cfg.optimizer,
        model,
        lr=cfg.lr,
        eps=cfg.eps,
        rank=cfg.rank,
        interval=cfg.interval,
        momentum=cfg.momentum,
        weight_decay=cfg.weight_decay,
        seed=cfg.seed,
    )
    rng = np.random.default_rng(cfg.seed)

    def draw() -> Batch:
        return LabelWordTask.select(train, rng.choice(len(train), cfg.batch_size, replace=False))

    with PeakMemory(device) as mem:
        run = train_steps(
            model,
            optimizer,
            lambda b: task.loss(model, b),
            draw,
            cfg.steps,
            quiet=cfg.quiet,
            desc=f"{cfg.optimizer} fine-tuning",
        )
    tuned = _evaluate(task, model, held)
    steps_per_s = cfg.steps / run["seconds"] if run["seconds"] > 0 else float("nan")
    ctx.log.info(f"fine-tuned accuracy: {tuned}")
    ctx.log.info(
        f"{cfg.steps} steps ({run['forward_passes']} forward passes) in {run['seconds']:.1f} s = "
        f"{steps_per_s:.3f} steps/s; peak memory {mem.absolute_peak_bytes / 2**20:.0f} MiB "
        f"({'CUDA allocated' if device.type == 'cuda' else 'process RSS'}); skipped steps {run['skipped_steps']}"
    )
    if ctx.writes and run["losses"]:
        _plot_losses({cfg.optimizer: run["losses"]}, ctx.path("loss.png"), f"{cfg.model}: {cfg.optimizer}")
    return Result(
        metrics={
            "zero_shot_accuracy": zero_shot.as_dict(),
            "finetuned_accuracy": tuned.as_dict(),
            "peak_memory_mib": mem.absolute_peak_bytes / 2**20,
            "steps_per_second": steps_per_s,
            "forward_passes": run["forward_passes"],
            "skipped_steps": run["skipped_steps"],
            "final_train_loss_mean_last_10": float(np.mean(run["losses"][-10:])) if run["losses"] else None,
            "model_source": lm.source,
        },
        timings={"train_seconds": run["seconds"]},
        tables={"training loss": [{"step": i, "loss": v} for i, v in enumerate(run["losses"])]},
    )


# ----------------------------------------------------------------------------------------------------------------
# reproduce
# ----------------------------------------------------------------------------------------------------------------

# Learning-rate grids for the digits MLP (a 64-128-10 MLP on scikit-learn digits, batch 128, equal forward-pass budgets), per method; zeroth-order grids are in the same units.
DIGITS_LR_GRID = {
    "mezo": (1e-3, 3e-3, 1e-2),
    "lozo": (1e-3, 3e-3, 1e-2),
    "lozo-m": (1e-3, 3e-3, 1e-2),
    "adam": (1e-3, 3e-3, 1e-2),
}
# Learning rates for the SmolLM2 runs (chosen from the --full grid; see the package README).
LM_LR = {"mezo": 3e-5, "lozo": 3e-5, "lozo-m": 3e-5, "adam": 1e-5}


def _digits_split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    from iclr25_shared.data import digits

    images, labels = digits()
    x = torch.as_tensor(images.reshape(len(images), -1))
    y = torch.as_tensor(labels)
    perm = np.random.default_rng(1234).permutation(len(x))  # one fixed split for every run
    train, test = perm[:1500], perm[1500:]
    return x[train], y[train], x[test], y[test]


def _reproduce_optimizer(cfg: ReproduceConfig, method: str, model: nn.Module, lr: float, seed: int) -> Any:
    return make_optimizer(
        method,
        model,
        lr=lr,
        eps=cfg.eps,
        rank=cfg.rank,
        interval=cfg.interval,
        momentum=cfg.momentum,
        weight_decay=0.0,
        seed=seed,
    )


def _digits_run(cfg: ReproduceConfig, method: str, lr: float, seed: int, zo_steps: int) -> dict[str, Any]:
    x_train, y_train, x_test, y_test = _digits_split()  # the seed varies init, batches and directions
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = _reproduce_optimizer(cfg, method, model, lr, seed)
    # Equal forward-pass budgets: a ZO step is 2 forwards, a first-order step ~3 forward-equivalents.
    steps = zo_steps if method != "adam" else (2 * zo_steps) // 3
    rng = np.random.default_rng(seed)
    loss_fn = nn.CrossEntropyLoss()

    def draw() -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(rng.choice(len(x_train), 128, replace=False))
        return x_train[idx], y_train[idx]

    run = train_steps(
        model, optimizer, lambda b: loss_fn(model(b[0]), b[1]), draw, steps, quiet=True, desc=""
    )
    with torch.no_grad():
        train_loss = float(loss_fn(model(x_train), y_train))
        test_acc = float((model(x_test).argmax(1) == y_test).float().mean())
    state_bytes = (
        optimizer.state_bytes()
        if isinstance(optimizer, LOZO)
        else (
            sum(
                t.numel() * t.element_size()
                for s in optimizer.state.values()
                for t in s.values()
                if torch.is_tensor(t)
            )
        )
    )
    return {
        "method": method,
        "lr": lr,
        "seed": seed,
        "steps": steps,
        "forward_passes": run["forward_passes"],
        "train_loss": train_loss if math.isfinite(train_loss) else float("inf"),
        "test_accuracy": test_acc,
        "optimizer_state_bytes": state_bytes,
        "curve": run["losses"],
    }


def _lm_run(
    cfg: ReproduceConfig, method: str, lr: float, seed: int, zo_steps: int, shared: Any
) -> dict[str, Any]:
    lm, task, train, held = shared
    model = lm.model
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        optimizer = _reproduce_optimizer(cfg, method, model, lr, seed)
        steps = zo_steps if method != "adam" else (2 * zo_steps) // 3
        rng = np.random.default_rng(seed)

        def draw() -> Batch:
            return LabelWordTask.select(train, rng.choice(len(train), 8, replace=False))

        run = train_steps(
            model,
            optimizer,
            lambda b: task.loss(model, b),
            draw,
            steps,
            quiet=cfg.quiet,
            desc=f"SmolLM2 {method} lr={lr:g} seed={seed}",
        )
        acc = _evaluate(task, model, held)
    finally:
        model.load_state_dict(initial)
    return {
        "method": method,
        "lr": lr,
        "seed": seed,
        "steps": steps,
        "forward_passes": run["forward_passes"],
        "final_train_loss": float(np.mean(run["losses"][-5:])),
        "accuracy": acc.value,
        "accuracy_low": acc.low,
        "accuracy_high": acc.high,
        "curve": run["losses"],
    }


def _summarise(rows: list[dict[str, Any]], key: str, lower_is_better: bool) -> list[dict[str, Any]]:
    """Mean over seeds per (method, lr); then the best lr per method."""
    table: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in rows:
        table.setdefault((r["method"], r["lr"]), []).append(r)
    means = []
    for (method, lr), rs in table.items():
        vals = np.array([r[key] for r in rs], dtype=float)
        means.append(
            {
                "method": method,
                "lr": lr,
                key: float(np.mean(vals)),
                f"{key}_std": float(np.std(vals)),
                "seeds": len(rs),
                "forward_passes": rs[0]["forward_passes"],
            }
        )
    best = {}
    for m in means:
        cur = best.get(m["method"])
        better = cur is None or (m[key] < cur[key] if lower_is_better else m[key] > cur[key])
        if better:
            best[m["method"]] = m
    return [best[k] for k in OPTIMIZERS if k in best]


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """Run the ``reproduce`` subcommand; see :class:`~iclr25_lozo.cli.ReproduceConfig`."""
    device = ctx.torch_device()
    log = ctx.log.info
    digits_steps = cfg.digits_steps * (2 if cfg.full else 1)
    seeds = list(range(cfg.seed, cfg.seed + cfg.seeds))
    log(
        f"A. digits MLP 64-128-10, {digits_steps} zeroth-order steps (Adam: same forward-pass budget), "
        f"{len(seeds)} seeds, LR grid per method"
    )
    rows_a = []
    jobs = [(m, lr, s) for m in OPTIMIZERS for lr in DIGITS_LR_GRID[m] for s in seeds]
    for method, lr, seed in progress(jobs, total=len(jobs), desc="digits grid", quiet=cfg.quiet):
        rows_a.append(_digits_run(cfg, method, lr, seed, digits_steps))
    best_a = _summarise(rows_a, "train_loss", lower_is_better=True)
    for b in best_a:
        accs = [r["test_accuracy"] for r in rows_a if r["method"] == b["method"] and r["lr"] == b["lr"]]
        b["test_accuracy"] = float(np.mean(accs))
        b["optimizer_state_bytes"] = next(
            r["optimizer_state_bytes"] for r in rows_a if r["method"] == b["method"]
        )
    log(
        markdown_table(
            best_a,
            [
                "method",
                "lr",
                "train_loss",
                "train_loss_std",
                "test_accuracy",
                "forward_passes",
                "optimizer_state_bytes",
            ],
        )
    )
    curves_a = {
        b["method"]: next(r["curve"] for r in rows_a if r["method"] == b["method"] and r["lr"] == b["lr"])
        for b in best_a
    }

    best_b: list[dict[str, Any]] = []
    rows_b: list[dict[str, Any]] = []
    curves_b: dict[str, list[float]] = {}
    zero_shot = None
    if not cfg.skip_lm:
        lm_steps = cfg.lm_steps * (5 if cfg.full else 1)
        lm_seeds = seeds if cfg.full else seeds[:1]
        fcfg = FinetuneConfig(
            model=cfg.model, seed=cfg.seed, device=cfg.device, quiet=True, threads=cfg.threads
        )
        lm, task, train, held, _ = _wiki_task(fcfg, device)
        zero_shot = _evaluate(task, lm.model, held)
        log(
            f"B. {cfg.model}: zero-shot accuracy {zero_shot}; {lm_steps} zeroth-order steps per run, "
            f"{len(lm_seeds)} seed(s)"
        )
        grid = {m: ((LM_LR[m] / 3, LM_LR[m], LM_LR[m] * 3) if cfg.full else (LM_LR[m],)) for m in OPTIMIZERS}
        for method in OPTIMIZERS:
            for lr in grid[method]:
                for seed in lm_seeds:
                    rows_b.append(_lm_run(cfg, method, lr, seed, lm_steps, (lm, task, train, held)))
                    log(
                        f"  {method:7s} lr={lr:g} seed={seed}: accuracy {rows_b[-1]['accuracy']:.3f}, "
                        f"final loss {rows_b[-1]['final_train_loss']:.3f}"
                    )
        best_b = _summarise(rows_b, "accuracy", lower_is_better=False)
        for b in best_b:
            b["final_train_loss"] = float(
                np.mean(
                    [
                        r["final_train_loss"]
                        for r in rows_b
                        if r["method"] == b["method"] and r["lr"] == b["lr"]
                    ]
                )
            )
        curves_b = {
            b["method"]: next(r["curve"] for r in rows_b if r["method"] == b["method"] and r["lr"] == b["lr"])
            for b in best_b
        }
        log(
            markdown_table(
                best_b, ["method", "lr", "accuracy", "accuracy_std", "final_train_loss", "forward_passes"]
            )
        )

    strip = lambda rows: [{k: v for k, v in r.items() if k != "curve"} for r in rows]  # noqa: E731
    if ctx.writes:
        _plot_losses(curves_a, ctx.path("digits_loss.png"), "digits MLP, best LR per method")
        if curves_b:
            _plot_losses(curves_b, ctx.path("lm_loss.png"), f"{cfg.model}, Wikipedia topics")
    return Result(
        metrics={"lm_zero_shot_accuracy": zero_shot.as_dict() if zero_shot else None},
        tables={
            "A. digits MLP, best LR per method (mean over seeds)": best_a,
            "A. digits MLP, every run": strip(rows_a),
            "B. LM, best LR per method": best_b,
            "B. LM, every run": strip(rows_b),
        },
        notes=[
            "Equal forward-pass budgets: a zeroth-order step costs 2 forward passes, a first-order Adam step "
            "3 forward-equivalents (forward + backward), so Adam gets 2/3 as many steps."
        ],
    )


# ----------------------------------------------------------------------------------------------------------------
# bench
# ----------------------------------------------------------------------------------------------------------------


def _bench_worker(args: dict[str, Any]) -> dict[str, Any]:
    """Measure one method in this (fresh) process: inference forward, then optimizer steps."""
    device = resolve_device(args["device"])
    baseline = current_rss_bytes() if device.type != "cuda" else 0
    from iclr25_lozo._models import load_model
    from iclr25_shared.data import wiki_summaries

    texts = wiki_summaries().texts[:500] if args["model"] == "tiny" else []
    lm = load_model(
        args["model"],
        texts=texts,
        label_words=list(WIKI_LABEL_WORDS.values()),
        device=device,
        dtype=args.get("dtype", "float32"),
        seed=0,
    )
    model = lm.model
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (args["batch_size"], args["seq_len"]), generator=gen).to(
        device
    )

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
    device = r["device"]
    ctx.device_label = device
    log(
        f"{cfg.model} ({cfg.dtype}), batch {cfg.batch_size} x {cfg.seq_len} tokens, device {device}; memory is "
        f"{'CUDA allocated' if device.startswith('cuda') else 'process RSS above the pre-load baseline'} "
        "(model weights included)"
    )
    return Result(tables={"ratios to one inference forward pass": rows})
