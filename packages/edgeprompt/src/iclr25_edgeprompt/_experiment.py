"""What the commands ``pretrain`` (``_pretrain_cmd.py``), ``tune`` (``_tune.py``), ``reproduce`` (``_reproduce.py``)
and ``bench`` (``_bench.py``) share: pre-training a backbone, one few-shot tuning run and its splits, the summary
over seeds, and the commands' set-up (device and seed, dataset, backbone and pre-training settings, the epoch
callback).

Everything here composes the library API; the method itself lives in ``_conv``, ``_prompt`` and ``_tuner``.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

# torch warns about its own deprecated torch.jit.script when torch_geometric is imported; not actionable here.
warnings.filterwarnings("ignore", message=r"`torch\.jit\.script", category=FutureWarning)

# numpy first, from Python: imported first from a C extension's init instead (jaxlib._jax, torch._C), a Ctrl-C
# landing in that import is printed with a traceback (numpy's import_array) or swallowed (torch), not raised.
import numpy  # noqa: E402, F401
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch_geometric.data import Data  # noqa: E402

from iclr25_edgeprompt._backbone import BackboneConfig, GNNEncoder  # noqa: E402
from iclr25_edgeprompt._data import TaskData, few_shot_split, load_dataset  # noqa: E402
from iclr25_edgeprompt._pretrain import PretrainSettings, pretrain  # noqa: E402
from iclr25_edgeprompt._prompt import DEFAULT_INIT  # noqa: E402
from iclr25_edgeprompt._tuner import PromptTuner, TuneSettings, make_prompt  # noqa: E402
from iclr25_shared.checks import check_float  # noqa: E402
from iclr25_shared.cli import RunContext, check_interrupted  # noqa: E402
from iclr25_shared.errors import InputError  # noqa: E402
from iclr25_shared.inputs import validating  # noqa: E402

if TYPE_CHECKING:
    from iclr25_edgeprompt.cli import PretrainConfig, TuneConfig

__all__ = [
    "TuneResult",
    "pretrain_backbone",
    "pretraining_graphs",
    "tune_once",
]

Log = Callable[[str], None]


def pretraining_graphs(data: TaskData, strategy: str) -> list[Data]:
    """What a strategy pre-trains on: the task's graphs; for node tasks, edge prediction uses the full graph."""
    if data.task == "node" and strategy == "edgepred" and data.source is not None:
        return [Data(x=data.source.x.float(), edge_index=data.source.edge_index)]
    return [Data(x=g.x, edge_index=g.edge_index) for g in data.graphs]


def pretrain_backbone(
    graphs: Sequence[Data],
    backbone_config: BackboneConfig,
    settings: PretrainSettings,
    *,
    seed: int,
    device: torch.device,
    callback: Callable[[int, float], None] | None = None,
) -> tuple[GNNEncoder, list[float]]:
    """A fresh backbone (initialised from ``seed``) pre-trained on ``graphs``; returns it with its loss curve.

    ``callback(epoch, loss)`` runs after every epoch (the CLI passes the runner's Ctrl-C check).
    """
    torch.manual_seed(seed)
    backbone = GNNEncoder(backbone_config).to(device)
    history = pretrain(backbone, graphs, settings, seed=seed, callback=callback)
    return backbone, history


@dataclass
class TuneResult:
    """One tuning run: test (and validation) accuracy, final train loss, sizes and timing."""

    prompt: str
    seed: int
    accuracy: float
    final_loss: float
    num_train: int
    num_test: int
    trainable_params: int
    seconds: float
    val_accuracy: float | None = None
    num_val: int = 0
    init: str = DEFAULT_INIT
    lr: float = 0.0


def split_three_way(
    labels: torch.Tensor, shots: int, *, seed: int, test_fraction: float, val_fraction: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``shots`` per class for training; from the rest, ``round(val_fraction·n)`` validation and
    ``round(test_fraction·n)`` test samples (disjoint, drawn with ``seed``; test capped by what is left).

    ``n`` is the whole dataset's size, as the official code takes its test set as ``int(0.4 · len(data))``.

    Raises:
        ValueError: too few samples left for a non-empty validation and test set.
    """
    check_float("val_fraction", val_fraction, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
    check_float("test_fraction", test_fraction, low=0.0, high=1.0, low_inclusive=False)
    train, rest = few_shot_split(labels, shots, test_fraction=1.0, seed=seed)
    gen = torch.Generator().manual_seed(seed + 7919)
    rest = rest[torch.randperm(rest.numel(), generator=gen)]
    n = labels.numel()
    n_val = max(1, round(val_fraction * n))
    n_test = min(round(test_fraction * n), rest.numel() - n_val)
    if n_test < 1:
        raise ValueError(
            f"no samples left for testing (n={n}, shots={shots}, val_fraction={val_fraction}); lower shots"
        )
    val = torch.sort(rest[:n_val]).values
    test = torch.sort(rest[n_val : n_val + n_test]).values
    return train, val, test


def tune_once(
    data: TaskData,
    backbone: GNNEncoder,
    prompt_name: str,
    *,
    shots: int,
    seed: int,
    settings: TuneSettings,
    test_fraction: float = 1.0,
    num_anchors: int = 5,
    allow_fewer: bool = False,
    init: str = DEFAULT_INIT,
    val_fraction: float = 0.0,
    callback: Callable[[int, float], None] | None = None,
) -> TuneResult:
    """Few-shot split with ``seed``, a fresh prompt + linear head (initialised from ``seed``), fit, test.

    With ``val_fraction > 0`` the split is :func:`split_three_way` and the validation accuracy is reported too
    (for choosing hyperparameters without looking at the test set). ``backbone`` is copied first, so the
    caller's model is reused unchanged across runs. ``callback(epoch, loss)`` runs after every tuning epoch.
    """
    if val_fraction > 0:
        train_idx, val_idx, test_idx = split_three_way(
            data.labels, shots, seed=seed, test_fraction=test_fraction, val_fraction=val_fraction
        )
    else:
        train_idx, test_idx = few_shot_split(
            data.labels, shots, test_fraction=test_fraction, seed=seed, allow_fewer=allow_fewer
        )
        val_idx = None
    device = next(backbone.parameters()).device
    frozen = GNNEncoder(backbone.config).to(device)
    frozen.load_state_dict(backbone.state_dict())
    torch.manual_seed(seed)
    prompt = make_prompt(prompt_name, frozen, num_anchors=num_anchors, init=init)
    head = nn.Linear(frozen.out_channels, data.num_classes)
    tuner = PromptTuner(frozen, prompt, head).to(device)
    start = time.perf_counter()
    history = tuner.fit([data.graphs[i] for i in train_idx], settings, seed=seed, callback=callback)
    seconds = time.perf_counter() - start
    acc = tuner.accuracy([data.graphs[i] for i in test_idx])
    val_acc = tuner.accuracy([data.graphs[i] for i in val_idx]) if val_idx is not None else None
    return TuneResult(
        prompt=prompt_name,
        seed=seed,
        accuracy=acc,
        final_loss=history[-1],
        num_train=len(train_idx),
        num_test=len(test_idx),
        trainable_params=sum(p.numel() for p in tuner.trainable_parameters()),
        seconds=seconds,
        val_accuracy=val_acc,
        num_val=0 if val_idx is None else len(val_idx),
        init=init,
        lr=settings.lr,
    )


def summarise(results: Sequence[TuneResult]) -> dict[str, Any]:
    """Mean and sample SD of accuracy over seeds (SD 0 for one seed)."""
    accs = [r.accuracy for r in results]
    return {
        "mean": statistics.fmean(accs),
        "sd": statistics.stdev(accs) if len(accs) > 1 else 0.0,
        "seeds": len(accs),
        "per_seed": [round(a, 4) for a in accs],
    }


# ------------------------------------------------------------------------------------------------------------------
# The commands' set-up
# ------------------------------------------------------------------------------------------------------------------


def _check(epoch: int, loss: float) -> None:
    """The commands' epoch callback: the runner's Ctrl-C check, so that one a library swallowed stops pre-training
    or tuning at the next epoch."""
    check_interrupted()


def _setup(ctx: RunContext) -> torch.device:
    """``--device`` (one that is not there, ``cuda`` without a GPU, is bad input) and the seed.

    Importing torch and torch_geometric takes seconds: a Ctrl-C during it that a library swallowed stops the run
    here, before any work.
    """
    from iclr25_shared.device import seed_everything

    check_interrupted()
    with validating("--device"):
        device = ctx.torch_device()
    seed_everything(ctx.seed)
    return device


def _backbone_config(cfg: PretrainConfig | TuneConfig, data: TaskData) -> BackboneConfig:
    conv = cfg.conv if cfg.conv != "auto" else ("gcn" if data.task == "node" else "gin")
    layers = cfg.num_layers or (2 if conv == "gcn" else 3)
    return BackboneConfig(
        conv=conv,
        in_channels=data.in_channels,
        hidden_channels=cfg.hidden_channels,
        num_layers=layers,
        dropout=cfg.dropout,
    )


def _load(cfg: PretrainConfig | TuneConfig, *, split: str = "test") -> TaskData:
    """The dataset ``--dataset`` names; an unknown name, a PyG dataset without ``--root``, or files in ``--root``
    that are not a dataset are bad input (exit 2)."""
    try:
        with validating("--dataset"):
            return load_dataset(
                cfg.dataset,
                root=cfg.root,
                download=cfg.download,
                num_graphs=cfg.num_graphs,
                split=split,
                seed=cfg.seed,
            )
    except FileNotFoundError as exc:
        raise InputError(f"--dataset: {exc}") from None


def _pretrain_settings(cfg: PretrainConfig | TuneConfig) -> PretrainSettings:
    return PretrainSettings(
        strategy=cfg.strategy,
        epochs=cfg.pretrain_epochs,
        lr=cfg.pretrain_lr,
        batch_size=cfg.pretrain_batch_size,
    )
