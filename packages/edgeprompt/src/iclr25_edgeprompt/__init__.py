"""EdgePrompt and EdgePrompt+: edge prompt tuning for frozen pre-trained GNNs (Fu, He & Li, ICLR 2025).

Public API:

- layers: :class:`EdgePromptGCNConv`, :class:`EdgePromptGINConv` (PyG layers that add a prompt to each message);
- backbone: :class:`GNNEncoder`, :class:`BackboneConfig`, :func:`save_backbone`, :func:`load_backbone`;
- prompts: :class:`EdgePrompt`, :class:`EdgePromptPlus`, baselines :class:`GPF`, :class:`GPFPlus`,
  :func:`make_prompt`;
- tuning: :class:`PromptTuner`, :class:`TuneSettings`;
- pre-training: :func:`pretrain`, :class:`PretrainSettings` (GraphCL, SimGRACE, edge prediction);
- data: :func:`load_dataset`, :func:`from_pyg`, :func:`node_subgraphs`, :func:`few_shot_split`,
  :func:`superpixel_graph`, :func:`digit_grid_graphs`.

References:
    Xingbo Fu, Yinhan He, Jundong Li. "Edge Prompt Tuning for Graph Neural Networks". ICLR 2025.
    arXiv:2503.00750.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iclr25_shared import distribution_version, lazy_exports

if TYPE_CHECKING:
    from iclr25_edgeprompt._backbone import BackboneConfig, GNNEncoder, load_backbone, save_backbone
    from iclr25_edgeprompt._conv import EdgePromptGCNConv, EdgePromptGINConv
    from iclr25_edgeprompt._data import (
        BUILTIN_DATASETS,
        TaskData,
        digit_grid_graphs,
        few_shot_split,
        from_pyg,
        load_dataset,
        node_subgraphs,
        read_tu,
        superpixel_graph,
        superpixel_graphs,
    )
    from iclr25_edgeprompt._pretrain import STRATEGIES, PretrainSettings, nt_xent, pretrain
    from iclr25_edgeprompt._prompt import (
        GPF,
        INITS,
        EdgePrompt,
        EdgePromptPlus,
        GPFPlus,
        NodePrompt,
        PromptModule,
        init_prompt,
    )
    from iclr25_edgeprompt._tuner import PROMPTS, PromptTuner, TuneSettings, make_prompt

# Public name -> private module. Imported on first use, so `import iclr25_edgeprompt` (and the CLI's --help) does
# not pay for torch / torch_geometric until something needs them.
_LAZY = {
    **dict.fromkeys(["BackboneConfig", "GNNEncoder", "load_backbone", "save_backbone"], "_backbone"),
    **dict.fromkeys(["EdgePromptGCNConv", "EdgePromptGINConv"], "_conv"),
    **dict.fromkeys(
        [
            "BUILTIN_DATASETS",
            "TaskData",
            "digit_grid_graphs",
            "few_shot_split",
            "from_pyg",
            "load_dataset",
            "node_subgraphs",
            "read_tu",
            "superpixel_graph",
            "superpixel_graphs",
        ],
        "_data",
    ),
    **dict.fromkeys(["STRATEGIES", "PretrainSettings", "nt_xent", "pretrain"], "_pretrain"),
    **dict.fromkeys(
        [
            "GPF",
            "INITS",
            "EdgePrompt",
            "EdgePromptPlus",
            "GPFPlus",
            "NodePrompt",
            "PromptModule",
            "init_prompt",
        ],
        "_prompt",
    ),
    **dict.fromkeys(["PROMPTS", "PromptTuner", "TuneSettings", "make_prompt"], "_tuner"),
}


__version__ = distribution_version("iclr25-edgeprompt")

__all__ = [
    "BUILTIN_DATASETS",
    "GPF",
    "INITS",
    "PROMPTS",
    "STRATEGIES",
    "BackboneConfig",
    "EdgePrompt",
    "EdgePromptGCNConv",
    "EdgePromptGINConv",
    "EdgePromptPlus",
    "GNNEncoder",
    "GPFPlus",
    "NodePrompt",
    "PretrainSettings",
    "PromptModule",
    "PromptTuner",
    "TaskData",
    "TuneSettings",
    "__version__",
    "digit_grid_graphs",
    "few_shot_split",
    "from_pyg",
    "init_prompt",
    "load_backbone",
    "load_dataset",
    "make_prompt",
    "node_subgraphs",
    "nt_xent",
    "pretrain",
    "read_tu",
    "save_backbone",
    "superpixel_graph",
    "superpixel_graphs",
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
