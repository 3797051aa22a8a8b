"""VideoPhy (ICLR 2025, arXiv:2406.03520): a physical-commonsense benchmark harness for text-to-video models.

Generate one video per prompt with any text-to-video model (:func:`generate`), score every video for semantic
adherence (SA) and physical commonsense (PC) with an evaluator (human labels, a VLM judge read through
:func:`entailment_score` and the paper's prompt templates, or the offline :class:`PhysicsPlausibility` and
:class:`TemporalCoherence` evaluators), and aggregate into the paper's leaderboard metric
(joint = SA ∧ PC, per prompt then per model: :func:`aggregate`, :func:`leaderboard`).

    from iclr25_videophy import read_labels, leaderboard
    rows = leaderboard(read_labels("videophy_test_public.csv"))   # [{'rank', 'source', 'joint', 'sa', 'pc', ...}]

Nothing heavy is imported at ``import iclr25_videophy``: torch, PyAV and scikit-learn load inside the functions.
"""

from iclr25_shared import distribution_version
from iclr25_videophy._aggregate import (
    AGGREGATION_MODES,
    ConstantScoresWarning,
    aggregate,
    dedupe,
    leaderboard,
    rule_summary,
    warn_if_constant,
)
from iclr25_videophy._evaluators import (
    Evaluator,
    FrameEvaluator,
    HumanLabels,
    LogitJudge,
    TemporalCoherence,
    evaluate_videos,
)
from iclr25_videophy._generate import DiffusersGenerator, generate
from iclr25_videophy._io import (
    STATES_OF_MATTER,
    Judgement,
    Prompt,
    caption_filename_stem,
    match_videos,
    read_judge_output,
    read_labels,
    read_mapping,
    read_prompts,
    write_labels,
    write_mapping,
    write_prompts,
)
from iclr25_videophy._judge import (
    PC_TEMPLATE,
    SA_TEMPLATE,
    entailment_score,
    last_non_pad_index,
    pc_prompt,
    sa_prompt,
    task_prompt,
    yes_no_token_ids,
)
from iclr25_videophy._physics import (
    VIOLATIONS,
    PhysicsPlausibility,
    frame_difference_features,
    held_out_split,
    make_dataset,
    render_clip,
    trajectory_features,
)
from iclr25_videophy._video import (
    VideoDecodeError,
    count_frames,
    read_video,
    sample_frame_indices,
    write_video,
)

__all__ = [
    "AGGREGATION_MODES",
    "PC_TEMPLATE",
    "SA_TEMPLATE",
    "STATES_OF_MATTER",
    "VIOLATIONS",
    "ConstantScoresWarning",
    "DiffusersGenerator",
    "Evaluator",
    "FrameEvaluator",
    "HumanLabels",
    "Judgement",
    "LogitJudge",
    "PhysicsPlausibility",
    "Prompt",
    "TemporalCoherence",
    "VideoDecodeError",
    "__version__",
    "aggregate",
    "caption_filename_stem",
    "count_frames",
    "dedupe",
    "entailment_score",
    "evaluate_videos",
    "frame_difference_features",
    "generate",
    "held_out_split",
    "last_non_pad_index",
    "leaderboard",
    "make_dataset",
    "match_videos",
    "pc_prompt",
    "read_judge_output",
    "read_labels",
    "read_mapping",
    "read_prompts",
    "read_video",
    "render_clip",
    "rule_summary",
    "sa_prompt",
    "sample_frame_indices",
    "task_prompt",
    "trajectory_features",
    "warn_if_constant",
    "write_labels",
    "write_mapping",
    "write_prompts",
    "write_video",
    "yes_no_token_ids",
]
__version__ = distribution_version("iclr25-videophy")
