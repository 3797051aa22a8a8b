"""VideoPhy (ICLR 2025, arXiv:2406.03520): a physical-commonsense benchmark harness for text-to-video models.

Generate one video per prompt with any text-to-video model (:func:`generate`), score every video for semantic
adherence (SA) and physical commonsense (PC) with an evaluator (human labels, a VLM judge read through
:func:`entailment_score` and the paper's prompt templates, or the offline :class:`PhysicsPlausibility` and
:class:`TemporalCoherence` evaluators), and aggregate into the paper's leaderboard metric
(joint = SA ∧ PC, per prompt then per model: :func:`aggregate`, :func:`leaderboard`).

    from iclr25_videophy import read_labels, leaderboard
    rows = leaderboard(read_labels("videophy_test_public.csv"))   # [{'rank', 'source', 'joint', 'sa', 'pc', ...}]

Nothing is imported at ``import iclr25_videophy`` beyond the core: every public name loads on first use (PEP 562).
"""

from iclr25_shared import distribution_version, lazy_exports

_LAZY = {
    "AGGREGATION_MODES": "_aggregate",
    "ConstantScoresWarning": "_aggregate",
    "aggregate": "_aggregate",
    "dedupe": "_aggregate",
    "leaderboard": "_aggregate",
    "rule_summary": "_aggregate",
    "warn_if_constant": "_aggregate",
    "Evaluator": "_evaluators",
    "FrameEvaluator": "_evaluators",
    "HumanLabels": "_evaluators",
    "LogitJudge": "_evaluators",
    "TemporalCoherence": "_evaluators",
    "evaluate_videos": "_evaluators",
    "DiffusersGenerator": "_generation",
    "generate": "_generation",
    "Judgement": "_io",
    "Prompt": "_io",
    "STATES_OF_MATTER": "_io",
    "caption_filename_stem": "_io",
    "match_videos": "_io",
    "read_judge_output": "_io",
    "read_labels": "_io",
    "read_mapping": "_io",
    "read_prompts": "_io",
    "write_labels": "_io",
    "write_mapping": "_io",
    "write_prompts": "_io",
    "PC_TEMPLATE": "_judge",
    "SA_TEMPLATE": "_judge",
    "entailment_score": "_judge",
    "last_non_pad_index": "_judge",
    "pc_prompt": "_judge",
    "sa_prompt": "_judge",
    "task_prompt": "_judge",
    "yes_no_token_ids": "_judge",
    "PhysicsPlausibility": "_physics",
    "VIOLATIONS": "_physics",
    "frame_difference_features": "_physics",
    "held_out_split": "_physics",
    "make_dataset": "_physics",
    "render_clip": "_physics",
    "trajectory_features": "_physics",
    "VideoDecodeError": "_video",
    "count_frames": "_video",
    "read_video": "_video",
    "sample_frame_indices": "_video",
    "write_video": "_video",
}

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

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
