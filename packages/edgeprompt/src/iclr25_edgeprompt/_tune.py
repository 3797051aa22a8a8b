"""``tune``: few-shot prompt tuning of a loaded or freshly pre-trained backbone over ``--seeds`` seeds."""

from __future__ import annotations

import dataclasses
import warnings
from typing import TYPE_CHECKING

# torch warns about its own deprecated torch.jit.script when torch_geometric is imported; not actionable here.
warnings.filterwarnings("ignore", message=r"`torch\.jit\.script", category=FutureWarning)

# numpy first, from Python (as in ``_experiment``): a Ctrl-C landing in torch's C-extension import is then raised.
import numpy  # noqa: E402, F401

from iclr25_edgeprompt._backbone import load_backbone  # noqa: E402
from iclr25_edgeprompt._data import few_shot_split  # noqa: E402
from iclr25_edgeprompt._experiment import (  # noqa: E402
    _backbone_config,
    _check,
    _load,
    _pretrain_settings,
    _setup,
    pretrain_backbone,
    pretraining_graphs,
    summarise,
    tune_once,
)
from iclr25_edgeprompt._tuner import TuneSettings  # noqa: E402
from iclr25_shared.cli import Result, RunContext  # noqa: E402
from iclr25_shared.errors import InputError  # noqa: E402
from iclr25_shared.inputs import validating  # noqa: E402

if TYPE_CHECKING:
    from iclr25_edgeprompt.cli import TuneConfig

__all__ = ["tune"]


def tune(cfg: TuneConfig, ctx: RunContext) -> Result:
    """``tune``: few-shot prompt tuning of a loaded or freshly pre-trained backbone over ``cfg.seeds`` seeds."""
    device = _setup(ctx)
    data = _load(cfg)
    # Check the split for every seed first: a bad --shots must fail before minutes of pre-training.
    with validating("--shots"):
        for seed in range(cfg.seed, cfg.seed + cfg.seeds):
            few_shot_split(
                data.labels,
                cfg.shots,
                test_fraction=cfg.test_fraction,
                seed=seed,
                allow_fewer=cfg.allow_fewer,
            )
    notes = []
    if cfg.backbone is not None:
        backbone = load_backbone(cfg.backbone, label="--backbone").to(device)
        if backbone.config.in_channels != data.in_channels:
            raise InputError(
                f"--backbone: checkpoint expects {backbone.config.in_channels}-dim node features but {data.name} "
                f"has {data.in_channels}"
            )
        notes.append(f"backbone loaded from {cfg.backbone}")
    else:
        ctx.log.info(f"no --backbone: pre-training one with {cfg.strategy} on {data.name} (labels unused)")
        backbone, _ = pretrain_backbone(
            pretraining_graphs(data, cfg.strategy),
            _backbone_config(cfg, data),
            _pretrain_settings(cfg),
            seed=cfg.seed,
            device=device,
            callback=_check,
        )
        notes.append(f"backbone pre-trained here with {cfg.strategy} for {cfg.pretrain_epochs} epochs")
    anchors = cfg.num_anchors or (10 if data.task == "node" else 5)
    settings = TuneSettings(
        epochs=cfg.epochs, lr=cfg.lr, weight_decay=cfg.weight_decay, batch_size=cfg.batch_size
    )
    results = []
    for seed in ctx.progress(range(cfg.seed, cfg.seed + cfg.seeds), total=cfg.seeds, desc="seeds"):
        res = tune_once(
            data,
            backbone,
            cfg.prompt,
            shots=cfg.shots,
            seed=seed,
            settings=settings,
            test_fraction=cfg.test_fraction,
            num_anchors=anchors,
            allow_fewer=cfg.allow_fewer,
            init=cfg.init,
            callback=_check,
        )
        results.append(res)
        ctx.log.info(
            f"seed {seed}: accuracy {res.accuracy:.4f} ({res.num_train} train / {res.num_test} test)"
        )
    summary = summarise(results)
    return Result(
        metrics={
            "summary": f"{data.name} {cfg.prompt} {cfg.shots}-shot: accuracy {summary['mean']:.4f} ± "
            f"{summary['sd']:.4f} over {summary['seeds']} seed(s)",
            "accuracy_mean": summary["mean"],
            "accuracy_sd": summary["sd"],
            "seeds": summary["seeds"],
            "task": data.task,
            "num_anchors": anchors,
        },
        tables={"runs": [dataclasses.asdict(r) for r in results]},
        notes=notes,
    )
