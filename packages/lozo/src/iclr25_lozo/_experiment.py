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

from iclr25_lozo._data import require_task_data
from iclr25_lozo._optimizer import LOZO, MeZO
from iclr25_lozo._task import (
    SENTIMENT_LABEL_WORDS,
    SENTIMENT_TEMPLATE,
    WIKI_LABEL_WORDS,
    WIKI_TEMPLATE,
    Batch,
    LabelWordTask,
    balanced_split,
    kshot_split,
)
from iclr25_lozo.cli import OPTIMIZERS, BenchConfig, FinetuneConfig, ReproduceConfig
from iclr25_shared.cli import Result, RunContext, progress
from iclr25_shared.device import PeakMemory, Timer, current_rss_bytes, resolve_device
from iclr25_shared.errors import InputError
from iclr25_shared.inputs import validating
from iclr25_shared.metrics import Estimate, accuracy, paired_t_interval
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
        raise InputError("--lora needs peft: pip install 'iclr25-lozo[lora]'") from exc
    config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=["q_proj", "v_proj"])
    return get_peft_model(model, config)


def _load_data(task: str, data_path: str = "", neutral_margin: float = 0.5) -> Any:
    """The task's labelled texts (:class:`iclr25_shared.data.TextClassification`).

    Raises:
        InputError: ``data_path`` (``--data-path``) is not the vaderSentiment sdist.
        DatasetUnavailable: the default source is missing (the message gives the fetch command).
    """
    if task == "sentiment":
        from iclr25_lozo._data import movie_review_sentiment

        return movie_review_sentiment(data_path or None, neutral_margin=neutral_margin, label="--data-path")
    from iclr25_shared.data import wiki_summaries

    return wiki_summaries()


def _label_task(task: str, tokenizer: Any, classes: list[str], max_text_tokens: int) -> LabelWordTask:
    words, template = (
        (SENTIMENT_LABEL_WORDS, SENTIMENT_TEMPLATE)
        if task == "sentiment"
        else (WIKI_LABEL_WORDS, WIKI_TEMPLATE)
    )
    return LabelWordTask(
        tokenizer, classes, label_words=dict(words), template=template, max_text_tokens=max_text_tokens
    )


def _load_lm(model: str, task: str, data: Any, device: Any, dtype: str, seed: int) -> Any:
    from iclr25_lozo._models import load_model

    words = SENTIMENT_LABEL_WORDS if task == "sentiment" else WIKI_LABEL_WORDS
    return load_model(
        model, texts=data.texts, label_words=list(words.values()), device=device, dtype=dtype, seed=seed
    )


def _finetune_task(cfg: FinetuneConfig, device: Any) -> tuple[Any, LabelWordTask, Batch, Batch, Any]:
    data = _load_data(cfg.task, cfg.data_path, cfg.neutral_margin)
    with validating("--shots/--eval-per-class"):  # sizes that must fit the data, before the model loads
        train_idx, eval_idx = balanced_split(
            data.labels,
            shots=cfg.shots,
            eval_per_class=cfg.eval_per_class,
            seed=cfg.seed,
            class_names=data.classes,
        )
    if cfg.batch_size > len(train_idx):
        raise InputError(
            f"--batch-size: {cfg.batch_size} exceeds the {len(train_idx)} training examples (shots x classes)"
        )
    lm = _load_lm(cfg.model, cfg.task, data, device, cfg.dtype, cfg.seed)
    task = _label_task(cfg.task, lm.tokenizer, data.classes, cfg.max_text_tokens)
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
    import importlib.util

    require_task_data(cfg.task, cfg.data_path)  # the sentiment source, before any model loads
    if cfg.lora and importlib.util.find_spec("peft") is None:
        raise InputError("--lora needs peft: pip install 'iclr25-lozo[lora]'")
    device = ctx.torch_device()
    lm, task, train, held, data = _finetune_task(cfg, device)
    model = lm.model
    if cfg.lora:
        model = _apply_lora(model, cfg.lora_rank)
    ctx.log.info(
        f"model {cfg.model} ({lm.source}), {sum(p.numel() for p in model.parameters() if p.requires_grad):,} "
        f"trainable parameters on {device}; {len(train)} training / {len(held)} held-out examples, "
        f"{len(data.classes)} classes ({cfg.task})"
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


def _digits_split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    from iclr25_shared.data import digits

    images, labels = digits()
    x = torch.as_tensor(images.reshape(len(images), -1))
    y = torch.as_tensor(labels)
    perm = np.random.default_rng(1234).permutation(len(x))  # one fixed split for every run
    train, test = perm[:1500], perm[1500:]
    return x[train], y[train], x[test], y[test]


def _reproduce_optimizer(
    cfg: ReproduceConfig, method: str, model: nn.Module, lr: float, beta: float, seed: int
) -> Any:
    return make_optimizer(
        method,
        model,
        lr=lr,
        eps=cfg.eps,
        rank=cfg.rank,
        interval=cfg.interval,
        momentum=beta,
        weight_decay=0.0,
        seed=seed,
    )


def _adam_steps(zo_steps: int) -> int:
    """Adam's steps at the forward-pass budget of ``zo_steps`` zeroth-order steps (2 vs 3 forward-equivalents)."""
    return max(1, (2 * zo_steps) // 3)


def _digits_run(cfg: ReproduceConfig, method: str, lr: float, beta: float, seed: int) -> dict[str, Any]:
    x_train, y_train, x_test, y_test = _digits_split()  # the seed varies init, batches and directions
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = _reproduce_optimizer(cfg, method, model, lr, beta, seed)
    steps = cfg.digits_steps if method != "adam" else _adam_steps(cfg.digits_steps)
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
    return {
        "method": method,
        "lr": lr,
        "beta": beta,
        "seed": seed,
        "steps": steps,
        "forward_passes": run["forward_passes"],
        # no validation split here: the grid is chosen on the final full-train loss of the tuning seed
        "select": train_loss if math.isfinite(train_loss) else float("inf"),
        "train_loss": train_loss if math.isfinite(train_loss) else float("inf"),
        "test_accuracy": test_acc,
        "curve": run["losses"],
    }


def _lm_run(
    cfg: ReproduceConfig, method: str, lr: float, beta: float, seed: int, shared: dict[str, Any]
) -> dict[str, Any]:
    """One fine-tuning run from the initial weights on seed ``seed``'s k-shot split; weights restored after."""
    model, task = shared["model"], shared["task"]
    train, val, test = shared["splits"][seed]
    initial = shared["initial"]
    try:
        optimizer = _reproduce_optimizer(cfg, method, model, lr, beta, seed)
        steps = cfg.lm_steps if method != "adam" else _adam_steps(cfg.lm_steps)
        rng = np.random.default_rng([seed, 2])
        size = min(cfg.batch_size, len(train))

        def draw() -> Batch:
            return LabelWordTask.select(train, rng.choice(len(train), size, replace=False))

        model.train(False)
        run = train_steps(
            model,
            optimizer,
            lambda b: task.loss(model, b),
            draw,
            steps,
            quiet=cfg.quiet,
            desc=f"{method} lr={lr:g}" + (f" beta={beta:g}" if method == "lozo-m" else "") + f" seed={seed}",
        )
        scores = _scores(task, model, {"train": train, "val": val, "test": test})
    finally:
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(initial[name])
                p.grad = None
    val_loss = scores["val"]["loss"]
    return {
        "method": method,
        "lr": lr,
        "beta": beta,
        "seed": seed,
        "steps": steps,
        "forward_passes": run["forward_passes"],
        "seconds": run["seconds"],
        "skipped_steps": run["skipped_steps"],
        "select": val_loss if math.isfinite(val_loss) else float("inf"),
        "train_loss": scores["train"]["loss"],
        "val_loss": val_loss,
        "val_accuracy": scores["val"]["accuracy"],
        "test_loss": scores["test"]["loss"],
        "test_accuracy": scores["test"]["accuracy"],
        "curve": run["losses"],
    }


def _scores(task: LabelWordTask, model: nn.Module, sets: dict[str, Batch]) -> dict[str, dict[str, float]]:
    """Mean cross-entropy and accuracy of ``model`` on each labelled set."""
    out = {}
    for name, batch in sets.items():
        logits = task.scores(model, batch, batch_size=32)
        labels = batch.labels.cpu()
        out[name] = {
            "loss": float(torch.nn.functional.cross_entropy(logits, labels)),
            "accuracy": float((logits.argmax(1) == labels).float().mean()),
        }
    return out


def _tune_then_seeds(
    cfg: ReproduceConfig, run_one: Any, seeds: list[int], log: Any, label: str
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Each method's grid on the tuning seed ``seeds[0]``, the setting with the lowest ``select`` chosen, then the
    other seeds at it. Returns every run and the chosen (lr, beta) per method."""
    rows: list[dict[str, Any]] = []
    chosen: dict[str, dict[str, Any]] = {}
    for method in cfg.methods:
        grid_rows = []
        for lr, beta in cfg.lr_grid(method):
            r = run_one(method, lr, beta, seeds[0])
            r["phase"] = "grid"
            grid_rows.append(r)
            log(f"  {label} grid {_run_line(r)}")
        best = min(grid_rows, key=lambda r: r["select"])
        chosen[method] = {"lr": best["lr"], "beta": best["beta"]}
        rows += grid_rows
        for seed in seeds[1:]:
            r = run_one(method, best["lr"], best["beta"], seed)
            r["phase"] = "seeds"
            rows.append(r)
            log(f"  {label} seed {_run_line(r)}")
    return rows, chosen


def _run_line(r: dict[str, Any]) -> str:
    """One log line per run with every number the tables use (so a log alone is enough to rebuild them)."""
    text = f"{r['method']:7s} lr={r['lr']:g}" + (f" beta={r['beta']:g}" if r["method"] == "lozo-m" else "")
    text += f" seed={r['seed']}: select {r['select']:.4f}, train loss {r['train_loss']:.4f}"
    if "val_loss" in r:
        text += f", val loss {r['val_loss']:.4f} acc {r['val_accuracy']:.3f}, test loss {r['test_loss']:.4f}"
    text += f", test acc {r['test_accuracy']:.4f}"
    if "seconds" in r:
        text += f", {r['seconds'] / r['steps']:.2f} s/step"
    return text


def _at_chosen(
    rows: list[dict[str, Any]], chosen: dict[str, dict[str, Any]], method: str
) -> list[dict[str, Any]]:
    c = chosen[method]
    out = [r for r in rows if r["method"] == method and r["lr"] == c["lr"] and r["beta"] == c["beta"]]
    return sorted(out, key=lambda r: r["seed"])


def _summary(
    rows: list[dict[str, Any]], chosen: dict[str, dict[str, Any]], keys: list[str]
) -> list[dict[str, Any]]:
    table = []
    for method, c in chosen.items():
        rs = _at_chosen(rows, chosen, method)
        entry: dict[str, Any] = {
            "method": method,
            "lr": c["lr"],
            "beta": c["beta"] if method == "lozo-m" else None,
        }
        entry["seeds"] = len(rs)
        entry["forward_passes"] = rs[0]["forward_passes"]
        for k in keys:
            vals = np.array([r[k] for r in rs], dtype=float)
            entry[k] = float(vals.mean())
            entry[f"{k}_sd"] = float(vals.std(ddof=1)) if len(vals) > 1 else float("nan")
        table.append(entry)
    return table


def _paired(
    rows: list[dict[str, Any]],
    chosen: dict[str, dict[str, Any]],
    pairs: list[tuple[str, str]],
    key: str,
    baseline: dict[int, float] | None = None,
) -> list[dict[str, Any]]:
    """Paired differences ``a - b`` of ``key`` over the seeds both have, with a 95 % Student-t interval; ``b`` may
    be ``"zero-shot"`` (then ``baseline[seed]``)."""
    out = []
    for a, b in pairs:
        if a not in chosen or (b != "zero-shot" and b not in chosen):
            continue
        ra = {r["seed"]: r[key] for r in _at_chosen(rows, chosen, a)}
        rb = baseline if b == "zero-shot" else {r["seed"]: r[key] for r in _at_chosen(rows, chosen, b)}
        seeds = sorted(set(ra) & set(rb or {}))
        if not seeds:
            continue
        diffs = np.array([ra[s] - rb[s] for s in seeds], dtype=float)
        est = paired_t_interval(diffs)
        out.append(
            {
                "difference": f"{a} - {b}",
                "metric": key,
                "mean": est.value,
                "ci95_low": est.low,
                "ci95_high": est.high,
                "seeds": len(seeds),
                "per_seed": [float(d) for d in diffs],
            }
        )
    return out


PAIRS = [
    ("lozo", "mezo"),
    ("lozo-m", "mezo"),
    ("lozo-m", "lozo"),
    ("adam", "lozo"),
    ("mezo", "zero-shot"),
    ("lozo", "zero-shot"),
    ("lozo-m", "zero-shot"),
    ("adam", "zero-shot"),
]


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """Run the ``reproduce`` subcommand; see :class:`~iclr25_lozo.cli.ReproduceConfig`."""
    cfg = cfg.resolved()  # the --size preset
    if not cfg.skip_lm:
        require_task_data(cfg.lm_task, cfg.data_path)  # the sentiment source, before any model loads
    device = ctx.torch_device()
    log = ctx.log.info
    seeds = list(range(cfg.seed, cfg.seed + cfg.seeds))
    tables: dict[str, Any] = {}
    metrics: dict[str, Any] = {}
    figures: dict[str, dict[str, list[float]]] = {}
    strip = lambda rows: [{k: v for k, v in r.items() if k != "curve"} for r in rows]  # noqa: E731

    if not cfg.skip_lm:
        start = time.perf_counter()
        data = _load_data(cfg.lm_task, cfg.data_path, cfg.neutral_margin)
        with validating(
            "--shots/--val-per-class/--test-per-class"
        ):  # must fit the data; before the model loads
            index = {
                seed: kshot_split(
                    data.labels,
                    shots=cfg.shots,
                    val_per_class=cfg.val_per_class,
                    test_per_class=cfg.test_per_class,
                    seed=seed,
                )
                for seed in seeds
            }
        lm = _load_lm(cfg.model, cfg.lm_task, data, device, "float32", cfg.seed)
        model = lm.model.eval()
        task = _label_task(cfg.lm_task, lm.tokenizer, data.classes, cfg.max_text_tokens)
        splits, zero_shot = {}, {}
        for seed in seeds:
            splits[seed] = tuple(task.encode(data.subset(i)).to(device) for i in index[seed])
            zero_shot[seed] = _scores(
                task, model, dict(zip(("train", "val", "test"), splits[seed], strict=True))
            )
        initial = {name: p.detach().clone() for name, p in model.named_parameters()}
        shared = {"model": model, "task": task, "splits": splits, "initial": initial}
        prompt_tokens = float(
            np.mean([float(s[0].attention_mask.sum(1).float().mean()) for s in splits.values()])
        )
        log(
            f"B. {cfg.model} on {cfg.lm_task} ({len(data)} texts, {len(data.classes)} classes): k = {cfg.shots} "
            f"per class, {cfg.val_per_class} validation and {cfg.test_per_class} test examples per class per seed; "
            f"{cfg.lm_steps} zeroth-order steps ({2 * cfg.lm_steps} forward passes; Adam "
            f"{_adam_steps(cfg.lm_steps)} steps), batch {cfg.batch_size}, mean prompt {prompt_tokens:.1f} tokens; "
            f"grid on seed {seeds[0]} by validation loss, then seeds {seeds}"
        )
        for seed in seeds:
            z = zero_shot[seed]
            log(
                f"  zero-shot seed={seed}: test accuracy {z['test']['accuracy']:.3f}, val loss "
                f"{z['val']['loss']:.4f}, train loss {z['train']['loss']:.4f}"
            )
        rows, chosen = _tune_then_seeds(
            cfg, lambda m, lr, b, s: _lm_run(cfg, m, lr, b, s, shared), seeds, log, "LM"
        )
        summary = _summary(rows, chosen, ["test_accuracy", "test_loss", "train_loss", "val_loss"])
        zs_acc = {s: zero_shot[s]["test"]["accuracy"] for s in seeds}
        zs_row: dict[str, Any] = {"method": "zero-shot", "lr": None, "beta": None, "seeds": len(seeds)}
        zs_row["forward_passes"] = 0
        for k, part, field in (
            ("test_accuracy", "test", "accuracy"),
            ("test_loss", "test", "loss"),
            ("train_loss", "train", "loss"),
            ("val_loss", "val", "loss"),
        ):
            vals = np.array([zero_shot[s][part][field] for s in seeds])
            zs_row[k] = float(vals.mean())
            zs_row[f"{k}_sd"] = float(vals.std(ddof=1)) if len(vals) > 1 else float("nan")
        summary.insert(0, zs_row)
        paired = _paired(rows, chosen, PAIRS, "test_accuracy", baseline=zs_acc)
        paired += _paired(rows, chosen, PAIRS[:4], "train_loss")
        log(
            markdown_table(
                summary,
                [
                    "method",
                    "lr",
                    "beta",
                    "test_accuracy",
                    "test_accuracy_sd",
                    "train_loss",
                    "val_loss",
                    "seeds",
                ],
            )
        )
        log(markdown_table(paired, ["difference", "metric", "mean", "ci95_low", "ci95_high", "seeds"]))
        speed = {
            m: float(np.mean([r["seconds"] / r["steps"] for r in rows if r["method"] == m]))
            for m in cfg.methods
        }
        log("  seconds per step: " + ", ".join(f"{m} {v:.2f}" for m, v in speed.items()))
        tables["B. LM, chosen setting per method (mean and sd over seeds)"] = summary
        tables["B. LM, paired differences (95 % Student-t interval over seeds)"] = paired
        tables["B. LM, every run"] = strip(rows)
        metrics["lm_seconds_per_step"] = speed
        metrics["lm_wall_seconds"] = time.perf_counter() - start
        metrics["lm_zero_shot"] = zero_shot
        figures["lm_loss.png"] = {m: _at_chosen(rows, chosen, m)[0]["curve"] for m in chosen}

    if cfg.digits:
        log(
            f"A. digits MLP 64-128-10, {cfg.digits_steps} zeroth-order steps (Adam: same forward-pass budget)"
        )
        rows_a, chosen_a = _tune_then_seeds(
            cfg, lambda m, lr, b, s: _digits_run(cfg, m, lr, b, s), seeds, log, "digits"
        )
        summary_a = _summary(rows_a, chosen_a, ["train_loss", "test_accuracy"])
        paired_a = _paired(rows_a, chosen_a, PAIRS[:4], "train_loss")
        paired_a += _paired(rows_a, chosen_a, PAIRS[:4], "test_accuracy")
        log(
            markdown_table(
                summary_a, ["method", "lr", "beta", "train_loss", "train_loss_sd", "test_accuracy"]
            )
        )
        log(markdown_table(paired_a, ["difference", "metric", "mean", "ci95_low", "ci95_high", "seeds"]))
        tables["A. digits MLP, chosen setting per method"] = summary_a
        tables["A. digits MLP, paired differences"] = paired_a
        tables["A. digits MLP, every run"] = strip(rows_a)
        figures["digits_loss.png"] = {m: _at_chosen(rows_a, chosen_a, m)[0]["curve"] for m in chosen_a}

    if ctx.writes:
        for name, curves in figures.items():
            _plot_losses(
                curves, ctx.path(name), name.split("_")[0] + ": training loss, chosen setting, seed 0"
            )
    return Result(
        metrics=metrics,
        tables=tables,
        notes=[
            "Equal forward-pass budgets: a zeroth-order step costs 2 forward passes, a first-order Adam step "
            "3 forward-equivalents (forward + backward), so Adam gets 2/3 as many steps.",
            f"Each method's setting is chosen on the tuning seed {seeds[0]} (LM: validation loss; digits: final "
            "train loss); that seed's run is reused as the first of the reported seeds.",
        ],
    )


# ----------------------------------------------------------------------------------------------------------------
# bench
# ----------------------------------------------------------------------------------------------------------------


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
