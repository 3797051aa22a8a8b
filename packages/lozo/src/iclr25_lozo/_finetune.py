"""``finetune``: fine-tune a model on a label-word task with one optimizer, zero-shot and tuned accuracy."""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn

from iclr25_lozo._data import require_task_data
from iclr25_lozo._experiment import (
    _label_task,
    _load_data,
    _load_lm,
    _plot_losses,
    make_optimizer,
    train_steps,
)
from iclr25_lozo._task import (
    Batch,
    LabelWordTask,
    balanced_split,
)
from iclr25_lozo.cli import FinetuneConfig
from iclr25_shared.cli import Result, RunContext
from iclr25_shared.device import PeakMemory
from iclr25_shared.errors import InputError
from iclr25_shared.inputs import validating
from iclr25_shared.metrics import Estimate, accuracy

__all__ = ["finetune"]


def _apply_lora(model: nn.Module, rank: int) -> nn.Module:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as exc:
        raise InputError("--lora needs peft: pip install 'iclr25-lozo[lora]'") from exc
    config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=["q_proj", "v_proj"])
    return get_peft_model(model, config)


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
