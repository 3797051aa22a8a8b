"""``iclr25-edgeprompt``: EdgePrompt / EdgePrompt+ graph prompt tuning for frozen pre-trained GNNs (Fu et al., ICLR 2025).

Verbs: tune (default: EdgePrompt+ on KarateClub), pretrain (writes ``backbone.pt`` + ``backbone.json`` into
``--out``), reproduce, bench. Config dataclasses and ``main`` only; the work is in ``_experiment.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

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


@dataclass(frozen=True, kw_only=True)
class _DataOptions(CommonOptions):
    dataset: str = "karate"
    """karate (node task), fashion-superpixels, digits-grid (graph tasks), or a PyG name with --root: Cora,
    CiteSeer, PubMed, ENZYMES, MUTAG, PROTEINS, ... or tu:<any TUDataset name>."""
    root: Path | None = None
    """Folder of PyG datasets (Cora, TUDataset, ...)."""
    download: bool = False
    """Let PyG download a dataset missing from --root (needs internet)."""
    num_graphs: int = 1000
    """fashion-superpixels: how many images (class-balanced) become graphs."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("num_graphs", self.num_graphs, low=10)


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

    prompt: str = "edgeprompt+"
    """none (classifier only), gpf, gpf-plus, edgeprompt, edgeprompt+."""
    shots: int = 1
    """Training samples per class (KarateClub's smallest class has 4 nodes)."""
    backbone: Path | None = None
    """Checkpoint from 'pretrain' (backbone.pt); without it a backbone is pre-trained here with --strategy."""
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
    test_fraction: float = 1.0
    """Fraction of the non-training samples used for testing."""
    allow_fewer: bool = False
    """Classes with no more than --shots samples are put entirely into training instead of being an error."""
    seeds: int = 1
    """Number of seeds (seed, seed+1, ...): split, prompt init and shuffling; reports mean and SD."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("prompt", self.prompt, _PROMPTS)
        check_int("shots", self.shots, low=1)
        check_int("epochs", self.epochs, low=1)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)
        check_float("weight_decay", self.weight_decay, low=0.0)
        check_int("batch_size", self.batch_size, low=1)
        check_int("num_anchors", self.num_anchors, low=0)
        check_float("test_fraction", self.test_fraction, low=0.0, high=1.0, low_inclusive=False)
        check_int("seeds", self.seeds, low=1)
        if self.backbone is not None and not Path(self.backbone).with_suffix(".pt").is_file():
            raise ValueError(f"backbone: checkpoint {str(self.backbone)!r} does not exist")


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(CommonOptions):
    """The paper's comparison at small scale: every prompt under each pre-training strategy, several seeds.

    Graph task: Fashion-MNIST superpixel graphs (GIN). Node task: KarateClub 2-hop subgraphs (GCN).
    """

    strategies: list[str] = field(default_factory=lambda: ["graphcl", "edgepred"])
    """Pre-training strategies to compare under (graphcl, simgrace, edgepred)."""
    prompts: list[str] = field(default_factory=lambda: list(_PROMPTS))
    """Prompt methods to compare."""
    graph_seeds: int = 3
    """Seeds for the graph task."""
    node_seeds: int = 10
    """Seeds for the node task (KarateClub is tiny and noisy)."""
    num_graphs: int = 1000
    """Downstream Fashion-MNIST test-split images turned into graphs."""
    pretrain_graphs: int = 500
    """Fashion-MNIST train-split images used (unlabelled) for pre-training."""
    graph_shots: int = 10
    """Training graphs per class."""
    node_shots: int = 1
    """Training nodes per class (KarateClub)."""
    epochs: int = 100
    """Tuning epochs."""
    lr: float = 1e-2
    """Tuning learning rate."""
    batch_size: int = 128
    """Graphs per tuning step (128 covers a 10-shot x 10-class training set: full-batch steps)."""
    pretrain_epochs: int = 20
    """Pre-training epochs (graph task; the node task uses 5x as many, its graphs are tiny)."""
    graph_hidden: int = 64
    """GIN width."""
    graph_layers: int = 3
    """GIN depth."""
    node_hidden: int = 32
    """GCN width."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.strategies or not self.prompts:
            raise ValueError("strategies and prompts must not be empty")
        for s in self.strategies:
            check_choice("strategies", s, _STRATEGIES)
        for p in self.prompts:
            check_choice("prompts", p, _PROMPTS)
        for name in (
            "graph_seeds",
            "node_seeds",
            "graph_shots",
            "node_shots",
            "epochs",
            "pretrain_epochs",
            "batch_size",
        ):
            check_int(name, getattr(self, name), low=1)
        check_int("num_graphs", self.num_graphs, low=20)
        check_int("pretrain_graphs", self.pretrain_graphs, low=2)
        check_int("graph_hidden", self.graph_hidden, low=1)
        check_int("graph_layers", self.graph_layers, low=1)
        check_int("node_hidden", self.node_hidden, low=1)
        check_float("lr", self.lr, low=0.0, low_inclusive=False)


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

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("dataset", self.dataset, ("fashion-superpixels", "digits-grid"))
        check_int("num_graphs", self.num_graphs, low=10)
        for name in ("batch_size", "steps", "hidden_channels", "num_layers", "num_anchors"):
            check_int(name, getattr(self, name), low=1)
        check_int("warmup", self.warmup, low=0)


COMMANDS = {
    "tune": (TuneConfig, "iclr25_edgeprompt._experiment:tune"),
    "pretrain": (PretrainConfig, "iclr25_edgeprompt._experiment:pretrain_command"),
    "reproduce": (ReproduceConfig, "iclr25_edgeprompt._experiment:reproduce"),
    "bench": (BenchConfig, "iclr25_edgeprompt._experiment:bench"),
}


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``iclr25-edgeprompt``; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")
