"""``iclr25-edgeprompt``: EdgePrompt / EdgePrompt+ graph prompt tuning for frozen pre-trained GNNs (Fu et al., ICLR 2025).

Verbs: tune (default: EdgePrompt+ on KarateClub), pretrain (writes ``backbone.pt`` + ``backbone.json`` into
``--out``), reproduce, bench. Config dataclasses and ``main`` only; each command's work is in its own module (``_tune.py``,
``_pretrain_cmd.py``, ``_reproduce.py``, ``_bench.py``; what they share: ``_experiment.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import ClassVar, Literal

from iclr25_shared import inputs
from iclr25_shared.checks import check_choice, check_float, check_int
from iclr25_shared.cli import CommonOptions, run

__all__ = [
    "COMMANDS",
    "DEFAULT",
    "PROG",
    "BenchConfig",
    "PretrainConfig",
    "ReproduceConfig",
    "TuneConfig",
    "main",
]

PROG = "iclr25-edgeprompt"
DEFAULT = "tune"
_PROMPTS = ("none", "gpf", "gpf-plus", "edgeprompt", "edgeprompt+")
_STRATEGIES = ("graphcl", "simgrace", "edgepred")
_CONVS = ("auto", "gcn", "gin")
_INITS = ("glorot", "zero", "small")  # iclr25_edgeprompt._prompt.INITS (not imported: --help stays light)
_DEFAULT_INIT = "zero"  # iclr25_edgeprompt._prompt.DEFAULT_INIT (a test checks they agree)


def _check_root(path: Path, label: str) -> None:
    """An existing folder of PyG datasets, or one PyG may create (``--download``; the config checks that)."""
    if Path(path).expanduser().exists():
        inputs.check_folder(path, label=label, expected="a folder of PyG datasets")
    else:
        inputs.output_folder().check(path, label)


def _check_backbone(path: Path, label: str) -> None:
    """A checkpoint from ``pretrain``: its .pt (a state dict of finite tensors, read with ``weights_only=True``)
    and its .json (the architecture); whether it fits the dataset is checked once the data is loaded."""
    from iclr25_edgeprompt._checkpoint import read_checkpoint

    read_checkpoint(path, label=label)


@dataclass(frozen=True, kw_only=True)
class _DataOptions(CommonOptions):
    OUTPUTS: ClassVar[Mapping[str, inputs.Input]] = {
        "root": inputs.custom(_check_root, is_folder=True, kind="output_folder")
    }

    dataset: str = "karate"
    """karate (node task), fashion-superpixels, digits-grid (graph tasks), or a PyG name with --root: Cora,
    CiteSeer, PubMed, ENZYMES, MUTAG, PROTEINS, ... or tu:<any TUDataset name>."""
    root: Path | None = None
    """Folder of PyG datasets (Cora, TUDataset, ...); PyG writes processed (and, with --download, fetched) files
    there, except raw TU files, which are read in place."""
    download: bool = False
    """Let PyG download a dataset missing from --root (needs internet)."""
    num_graphs: int = 1000
    """fashion-superpixels: how many images (class-balanced) become graphs."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("num_graphs", self.num_graphs, low=10)
        if self.root is not None and not self.download and not Path(self.root).expanduser().exists():
            raise ValueError(
                f"root: {str(self.root)!r} does not exist; give the folder holding the dataset, or add --download "
                "to let PyG fetch it there"
            )


@dataclass(frozen=True, kw_only=True)
class _BackboneOptions(_DataOptions):
    conv: str = "auto"
    """Backbone layer: gcn, gin, or auto (GCN for node tasks, GIN for graph tasks, as in the paper)."""
    hidden_channels: int = 64
    """Backbone width."""
    num_layers: int = 0
    """Backbone depth; 0 = 2 for GCN, 3 for GIN."""
    dropout: float = 0.5
    """Dropout between backbone layers during pre-training (off while tuning)."""
    strategy: str = "graphcl"
    """Pre-training objective: graphcl, simgrace or edgepred."""
    pretrain_epochs: int = 20
    """Pre-training epochs."""
    pretrain_lr: float = 1e-3
    """Pre-training Adam learning rate."""
    pretrain_batch_size: int = 64
    """Graphs per pre-training step."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("conv", self.conv, _CONVS)
        check_choice("strategy", self.strategy, _STRATEGIES)
        check_int("hidden_channels", self.hidden_channels, low=1)
        check_int("num_layers", self.num_layers, low=0)
        check_float("dropout", self.dropout, low=0.0, high=1.0, high_inclusive=False)
        check_int("pretrain_epochs", self.pretrain_epochs, low=1)
        check_float("pretrain_lr", self.pretrain_lr, low=0.0, low_inclusive=False)
        check_int("pretrain_batch_size", self.pretrain_batch_size, low=2)


@dataclass(frozen=True, kw_only=True)
class PretrainConfig(_BackboneOptions):
    """Pre-train a GCN/GIN backbone with GraphCL, SimGRACE or edge prediction; save it as a plain state dict.

    Needs --out: the checkpoint (backbone.pt, backbone.json) is written there."""


@dataclass(frozen=True, kw_only=True)
class TuneConfig(_BackboneOptions):
    """Few-shot prompt tuning of a frozen backbone (EdgePrompt, EdgePrompt+, GPF, GPF-plus or classifier only)."""

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {
        "backbone": inputs.custom(_check_backbone, kind="torch_checkpoint")
    }

    prompt: str = "edgeprompt+"
    """none (classifier only), gpf, gpf-plus, edgeprompt, edgeprompt+."""
    shots: int = 1
    """Training samples per class (KarateClub's smallest class has 4 nodes)."""
    backbone: Path | None = None
    """Checkpoint from 'pretrain' (backbone.pt, with backbone.json beside it); without it a backbone is pre-trained
    here with --strategy."""
    epochs: int = 100
    """Tuning epochs."""
    lr: float = 1e-2
    """Adam learning rate of prompt + head."""
    weight_decay: float = 0.0
    """Adam weight decay."""
    batch_size: int = 32
    """Graphs (or node subgraphs) per tuning step."""
    num_anchors: int = 0
    """EdgePrompt+ anchors per layer; 0 = the official code's 10 for node tasks, 5 for graph tasks."""
    init: str = _DEFAULT_INIT
    """Prompt initialisation: zero (default; starts as classifier-only), glorot (official) or small (Glorot x 0.01)."""
    test_fraction: float = 1.0
    """Fraction of the non-training samples used for testing."""
    allow_fewer: bool = False
    """Classes with no more than --shots samples are put entirely into training instead of being an error."""
    seeds: int = 1
    """Number of seeds (seed, seed+1, ...): split, prompt init and shuffling; reports mean and SD."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("prompt", self.prompt, _PROMPTS)
        check_choice("init", self.init, _INITS)
        check_int("shots", self.shots, low=1)
        check_int("epochs", self.epochs, low=1)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)
        check_float("weight_decay", self.weight_decay, low=0.0)
        check_int("batch_size", self.batch_size, low=1)
        check_int("num_anchors", self.num_anchors, low=0)
        check_float("test_fraction", self.test_fraction, low=0.0, high=1.0, low_inclusive=False)
        check_int("seeds", self.seeds, low=1)


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """The paper's graph-classification comparison (arXiv:2503.00750 Table 3) at CPU scale on real TU datasets.

    Per dataset and pre-training strategy: pre-train a GIN on the dataset's graphs (labels unused), then tune every
    prompt method at the same budget (epochs x batches) over a learning-rate grid; each method's rate is chosen on
    a validation split, and its test accuracy is reported with paired differences (same split and seed) and 95 %
    t-intervals.
    """

    INPUTS: ClassVar[Mapping[str, inputs.Input]] = {
        "tu_root": inputs.folder(expected="a folder of TU datasets (<NAME>/raw/<NAME>_*.txt)")
    }

    size: Literal["quick", "gpu"] = "quick"
    """quick: the defaults below; gpu: options left at their defaults take :data:`GPU_SIZE` (the paper's GIN 5 x 128
    backbone; with --device cuda; README "GPU" has the time estimate). Explicit options win."""
    datasets: list[str] = field(default_factory=lambda: ["NCI1", "ENZYMES", "MUTAG"])
    """TU names read from --tu-root (ENZYMES, NCI1, MUTAG, PROTEINS, COX2, BZR, ...) or fashion-superpixels; the
    first is the primary comparison's (EdgePrompt+ - classifier only under the first strategy and init)."""
    tu_root: Path | None = None
    """Folder holding <NAME>/raw/<NAME>_*.txt (raw TU files; read in place, nothing written there). Default:
    $ICLR25_DATA/tu, else the kit's shared/data/tu found in a folder above this package (the project checkout's
    offline copies)."""
    strategies: list[str] = field(default_factory=lambda: ["graphcl"])
    """Pre-training strategies (graphcl, simgrace, edgepred)."""
    prompts: list[str] = field(default_factory=lambda: list(_PROMPTS))
    """Prompt methods to compare (none = classifier only)."""
    inits: list[str] = field(default_factory=lambda: [_DEFAULT_INIT])
    """Prompt initialisations to run (glorot, zero, small); each is its own row."""
    lrs: list[float] = field(default_factory=lambda: [3e-3, 3e-2])
    """Adam learning-rate grid; every method gets every value, the best on validation is reported."""
    seeds: int = 5
    """Seeds (split, prompt/head init, shuffling); >= 2 for an interval."""
    shots: int = 50
    """Training graphs per class (paper: 50); capped at the smallest class size minus one."""
    test_fraction: float = 0.4
    """Test set size as a fraction of the dataset (official code: 0.4), drawn from the non-training graphs."""
    val_fraction: float = 0.1
    """Validation set size (fraction of the dataset) for choosing the learning rate; disjoint from test."""
    epochs: int = 30
    """Tuning epochs (every method the same; paper: 200)."""
    batch_size: int = 32
    """Graphs per tuning step (paper: 32)."""
    hidden_channels: int = 32
    """GIN width (paper: 128)."""
    num_layers: int = 3
    """GIN depth (paper: 5)."""
    num_anchors: int = 5
    """EdgePrompt+ anchors per layer (official graph-task default: 5)."""
    pretrain_epochs: int = 20
    """Pre-training epochs."""
    pretrain_graphs: int = 1000
    """At most this many graphs (random, seeded) are used for pre-training."""
    fashion_graphs: int = 1000
    """Graphs for the fashion-superpixels dataset (Fashion-MNIST test split, class-balanced)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.datasets or not self.strategies or not self.prompts or not self.inits or not self.lrs:
            raise ValueError("datasets, strategies, prompts, inits and lrs must not be empty")
        for s in self.strategies:
            check_choice("strategies", s, _STRATEGIES)
        for p in self.prompts:
            check_choice("prompts", p, _PROMPTS)
        for i in self.inits:
            check_choice("inits", i, _INITS)
        for lr in self.lrs:
            check_float("lrs", lr, low=0.0, low_inclusive=False)
        for name in (
            "seeds",
            "shots",
            "epochs",
            "batch_size",
            "hidden_channels",
            "num_layers",
            "num_anchors",
        ):
            check_int(name, getattr(self, name), low=1)
        for name in ("pretrain_epochs", "pretrain_graphs", "fashion_graphs"):
            check_int(name, getattr(self, name), low=2)
        check_float("test_fraction", self.test_fraction, low=0.0, high=1.0, low_inclusive=False)
        check_float(
            "val_fraction", self.val_fraction, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False
        )
        check_choice("size", self.size, ("quick", "gpu"))

    def sized(self) -> ReproduceConfig:
        """This config with the ``--size`` preset applied to every option still at its quick default."""
        if self.size == "quick":
            return self
        defaults = {f.name: f.default for f in fields(self)}
        return replace(self, **{k: v for k, v in GPU_SIZE.items() if getattr(self, k) == defaults[k]})


GPU_SIZE = {"hidden_channels": 128, "num_layers": 5}
"""``reproduce --size gpu``: the paper's backbone (GIN 5 x 128: ~27x quick's 3 x 32 FLOPs per step), the same
datasets, strategies, prompts, seeds and budgets."""


@dataclass(frozen=True, kw_only=True)
class BenchConfig(CommonOptions):
    """Tuning-step time and activation memory of each prompt method relative to classifier-only, in one run."""

    dataset: str = "fashion-superpixels"
    """Graph-task dataset to draw batches from (fashion-superpixels or digits-grid)."""
    num_graphs: int = 256
    """Graphs to cycle through."""
    batch_size: int = 32
    """Graphs per step (the paper's batch size)."""
    steps: int = 20
    """Timed steps per method (median reported)."""
    warmup: int = 3
    """Untimed steps first."""
    hidden_channels: int = 128
    """GIN width (paper: 128)."""
    num_layers: int = 5
    """GIN depth (paper: 5)."""
    num_anchors: int = 5
    """EdgePrompt+ anchors."""
    subgraph_nodes: int = 20000
    """Nodes of the synthetic graph (Erdős–Rényi, seeded) on which 2-hop subgraph extraction is timed; 0 skips it."""
    subgraph_degree: int = 10
    """Average (undirected) degree of that graph."""
    subgraph_baseline_nodes: int = 200
    """Targets on which the per-node k_hop_subgraph loop (the baseline) is timed; its per-node time is scaled up."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("dataset", self.dataset, ("fashion-superpixels", "digits-grid"))
        check_int("subgraph_nodes", self.subgraph_nodes, low=0)
        check_int("subgraph_degree", self.subgraph_degree, low=1)
        check_int("subgraph_baseline_nodes", self.subgraph_baseline_nodes, low=1)
        check_int("num_graphs", self.num_graphs, low=10)
        for name in ("batch_size", "steps", "hidden_channels", "num_layers", "num_anchors"):
            check_int(name, getattr(self, name), low=1)
        check_int("warmup", self.warmup, low=0)


COMMANDS = {
    "tune": (TuneConfig, "iclr25_edgeprompt._tune:tune"),
    "pretrain": (PretrainConfig, "iclr25_edgeprompt._pretrain_cmd:pretrain_command"),
    "reproduce": (ReproduceConfig, "iclr25_edgeprompt._reproduce:reproduce"),
    "bench": (BenchConfig, "iclr25_edgeprompt._bench:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-edgeprompt``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
