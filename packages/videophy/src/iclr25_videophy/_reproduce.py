"""``reproduce``: the harness end to end on real clips (A), the physics-evaluator AUC comparison that is the
primary reproduction (B), the leaderboard from a label file (C) and generation (D)."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_videophy.cli import (
        ReproduceConfig,
    )

from iclr25_videophy._common import DEFAULT_PROMPTS, PAPER_LEADERBOARD, _example_labels, _round

__all__ = ["PAPER_EFFECT", "PRIMARY", "reproduce"]

PRIMARY = "trajectory - frame-diff ROC-AUC, overall (every violation kind in training)"
"""The primary comparison (README "Primary comparison"): the trained physics evaluator against the training-free
frame-difference baseline, ROC-AUC on held-out rendered clips, paired by seed."""
PAPER_EFFECT = 0.10
"""The ROC-AUC gain the verdict reads the primary interval against. The paper's claim is that a judge trained on
physical-commonsense labels (VideoCon-Physics) beats zero-shot judges on ROC-AUC; its exact margins could not be
checked offline and its judges are not ours, so this is a declared effect of interest (10 AUC points), fixed
before the run, not a number from the paper."""


def _auc(labels: np.ndarray, scores: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels, scores))


def _part_a(
    cfg: ReproduceConfig, ctx: RunContext
) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]], list[Any]]:
    """Real clips + constructed physics violations (time reversal, frame shuffling) through the harness."""
    from iclr25_videophy._aggregate import aggregate
    from iclr25_videophy._clips import real_clips
    from iclr25_videophy._evaluators import TemporalCoherence
    from iclr25_videophy._io import Judgement
    from iclr25_videophy._video import count_frames, read_video

    clips = real_clips(opencv_folder=cfg.opencv_data)
    if cfg.size == "tiny":
        clips = clips[2:4]
    tc = TemporalCoherence(num_frames=32, size=(64, 64))
    rng = np.random.default_rng(cfg.seed)
    judgements, rows = [], []
    t0 = time.perf_counter()
    for c in ctx.progress(clips, desc="clips"):
        n = count_frames(c.path)
        frames = read_video(c.path, 32, size=(64, 64))
        perm = rng.permutation(frames.shape[0])
        variants = {"original": frames, "reversed": frames[::-1], "shuffled": frames[perm]}
        for name, f in variants.items():
            s = tc.score_frames(f)
            # SA is not scored (no offline SA model): nan. PC is the proxy's score.
            judgements.append(Judgement(f"{c.path}#{name}", c.caption, math.nan, s, source=name))
        rows.append(
            {
                "clip": c.name,
                "frames": n,
                "pc_original": judgements[-3].pc,
                "pc_reversed": judgements[-2].pc,
                "pc_shuffled": judgements[-1].pc,
            }
        )
    decode_s = time.perf_counter() - t0
    y = np.array([1.0 if j.source == "original" else 0.0 for j in judgements])
    s = np.array([j.pc for j in judgements])
    src = np.array([j.source for j in judgements])
    auc = {}
    for neg in ("shuffled", "reversed"):
        sel = (src == "original") | (src == neg)
        auc[neg] = _auc(y[sel], s[sel])
    if ctx.writes:
        from iclr25_videophy._io import write_labels

        write_labels(ctx.path("real_clips_labels.csv"), judgements)
    # SA is not scored, so SA and joint are nan: JSON null with the reason in a column (never the string "nan")
    agg = [
        {
            **{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()},
            "null_reason": "SA not scored (no offline SA model), so SA and joint are undefined",
        }
        for r in aggregate(judgements, by=("source",))
    ]
    metrics = {
        "A_clips": len(clips),
        "A_auc_shuffled_vs_original": auc["shuffled"],
        "A_auc_reversed_vs_original": auc["reversed"],
        "A_decode_score_s": decode_s,
    }
    return metrics, {"A_real_clips": _round(rows, 3), "A_aggregate_by_source": _round(agg)}, judgements


def _mean_interval(values: np.ndarray) -> tuple[float | None, float | None]:
    """Student-t 95 % interval of the mean of per-seed values (:func:`iclr25_shared.metrics.paired_t_interval`);
    ``(None, None)`` for one seed (no interval: JSON null)."""
    from iclr25_shared.metrics import paired_t_interval

    if values.size < 2:
        return None, None
    d = paired_t_interval(values)
    return float(d.low), float(d.high)


def _part_b(
    cfg: ReproduceConfig, ctx: RunContext
) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]], list[str], list[Any]]:
    """ROC-AUC per violation of the physics-plausibility evaluator vs the frame-difference baseline, with every
    violation kind in training and with each kind held out of training (leave one violation kind out)."""
    n_train, n_test = {"quick": (60, 60), "gpu": (120, 120), "tiny": (10, 10)}[cfg.size]
    n_seeds = 10 if cfg.size == "gpu" and cfg.seeds == 5 else cfg.seeds  # --size gpu: 10 unless given
    seeds = list(range(cfg.seed, cfg.seed + n_seeds))
    per_seed, held_out, shuffled_auc = _b_aucs(seeds, n_train, n_test, ctx)
    metrics = {
        "B_seeds": len(seeds),
        "B_train_clips": 8 * n_train,
        "B_test_clips": 8 * n_test,
        "B_auc_overall": float(np.mean(per_seed["trajectory"]["overall"])),
        "B_auc_overall_baseline": float(np.mean(per_seed["framediff"]["overall"])),
        "B_auc_label_shuffled_control": float(np.mean(shuffled_auc)),
        "B_auc_label_shuffled_control_per_seed": shuffled_auc,
    }
    notes = [
        f"B: {len(seeds)} seeds; each seed renders {8 * n_train} training and {8 * n_test} held-out clips (half "
        "physical, a quarter-of-a-half per violation); the same logistic regression on two feature sets "
        "(held equal: the seed's clips, the classifier and its settings); per_seed holds every seed's AUCs",
        f"B_auc_heldout_kind: leave one violation kind out; per kind, fitted on the {4 * n_train} physical and "
        f"{3 * n_train} other-violation training clips (the held-out kind's {n_train} dropped), scored on the "
        f"{4 * n_test} physical and {n_test} held-out-kind test clips; same seeds and clips as B_auc. AUC low/high: "
        "Student-t 95 % over seeds (null with one seed)",
        "comparisons (iclr25_shared.stats.compare, trajectory - frame-diff per seed, Student-t 95 %): primary "
        "(declared before the run) the overall ROC-AUC with every violation kind in training; secondary "
        "(Holm-adjusted among themselves) each violation kind in training; exploratory each kind held out of "
        "training",
    ]
    tables = {
        "B_auc": _round(_b_auc_rows(per_seed), 3),
        "B_auc_heldout_kind": _round(_b_held_out_rows(held_out), 3),
        "per_seed": _b_per_seed_rows(seeds, per_seed, held_out),
    }
    return metrics, tables, notes, _b_comparisons(per_seed, held_out)


_AUCS = dict[str, dict[str, list[float]]]
"""Per feature set (``trajectory``, ``framediff``), per test set (``overall`` or a violation kind), one ROC-AUC per
seed."""
_FEATURE_SETS = ("trajectory", "framediff")


def _b_aucs(seeds: list[int], n_train: int, n_test: int, ctx: RunContext) -> tuple[_AUCS, _AUCS, list[float]]:
    """Per seed: render the clips, fit both evaluators with every violation kind in training and with each kind held
    out, and the label-shuffled control; the in-training AUCs, the held-out AUCs and the control's AUCs."""
    from iclr25_videophy._physics import VIOLATIONS, PhysicsPlausibility, held_out_split, make_dataset

    per_seed: _AUCS = {f: {} for f in _FEATURE_SETS}
    held_out: _AUCS = {f: {v: [] for v in VIOLATIONS} for f in _FEATURE_SETS}
    shuffled_auc = []
    for seed in ctx.progress(seeds, desc="seeds"):
        x_tr, y_tr, k_tr = make_dataset(n_train, 2 * seed)
        x_te, y_te, k_te = make_dataset(n_test, 2 * seed + 1)
        for feats in _FEATURE_SETS:
            model = PhysicsPlausibility(feats).fit(x_tr, y_tr)
            s = model.score_clips(x_te)
            per_seed[feats].setdefault("overall", []).append(_auc(y_te, s))
            for v in VIOLATIONS:
                sel = (k_te == "physical") | (k_te == v)
                per_seed[feats].setdefault(v, []).append(_auc(y_te[sel], s[sel]))
            # leave one violation kind out: fit on physical vs the other three, score physical vs the held-out one
            for v in VIOLATIONS:
                tr, te = held_out_split(k_tr, k_te, v)
                s_v = PhysicsPlausibility(feats).fit(x_tr[tr], y_tr[tr]).score_clips(x_te[te])
                held_out[feats][v].append(_auc(y_te[te], s_v))
        # diagnostic: the same pipeline with shuffled training labels must be at chance
        perm = np.random.default_rng(seed).permutation(y_tr)
        shuffled_auc.append(_auc(y_te, PhysicsPlausibility("trajectory").fit(x_tr, perm).score_clips(x_te)))
    return per_seed, held_out, shuffled_auc


def _b_per_seed_rows(seeds: list[int], per_seed: _AUCS, held_out: _AUCS) -> list[dict[str, Any]]:
    """One row per seed and evaluator with every AUC (the values the comparisons are computed from)."""
    from iclr25_videophy._physics import VIOLATIONS

    arms = {"trajectory": "trajectory features", "framediff": "frame-difference baseline"}
    per_seed_rows = []
    for i, seed in enumerate(seeds):
        for feats in _FEATURE_SETS:
            row: dict[str, Any] = {"seed": seed, "evaluator": arms[feats]}
            row.update({f"auc_{k}": per_seed[feats][k][i] for k in ("overall", *VIOLATIONS)})
            row.update({f"auc_heldout_{v}": held_out[feats][v][i] for v in VIOLATIONS})
            per_seed_rows.append(row)
    return per_seed_rows


def _b_auc_rows(per_seed: _AUCS) -> list[dict[str, Any]]:
    """Mean and minimum AUC over seeds per test set, every violation kind in training."""
    from iclr25_videophy._physics import VIOLATIONS

    rows = []
    for key in ("overall", *VIOLATIONS):
        a = np.array(per_seed["trajectory"][key])
        b = np.array(per_seed["framediff"][key])
        rows.append(
            {
                "test set": key if key == "overall" else f"physical vs {key}",
                "AUC trajectory (mean)": float(a.mean()),
                "AUC trajectory (min)": float(a.min()),
                "AUC frame-diff (mean)": float(b.mean()),
            }
        )
    return rows


def _b_held_out_rows(held_out: _AUCS) -> list[dict[str, Any]]:
    """Mean, interval and minimum AUC over seeds per violation kind held out of training."""
    from iclr25_videophy._physics import VIOLATIONS

    held_rows = []
    for v in VIOLATIONS:
        a = np.array(held_out["trajectory"][v])
        b = np.array(held_out["framediff"][v])
        (a_lo, a_hi), (b_lo, b_hi) = _mean_interval(a), _mean_interval(b)
        held_rows.append(
            {
                "held-out kind": v,
                "AUC trajectory (mean)": float(a.mean()),
                "AUC trajectory low": a_lo,
                "AUC trajectory high": a_hi,
                "AUC trajectory (min)": float(a.min()),
                "AUC frame-diff (mean)": float(b.mean()),
                "AUC frame-diff low": b_lo,
                "AUC frame-diff high": b_hi,
            }
        )
    return held_rows


def _b_comparisons(per_seed: _AUCS, held_out: _AUCS) -> list[Any]:
    """Trajectory - frame-diff per seed: the primary (overall), secondary (each kind in training) and exploratory
    (each kind held out) comparisons."""
    from iclr25_shared.stats import compare
    from iclr25_videophy._physics import VIOLATIONS

    return compare(
        primary=(PRIMARY, per_seed["trajectory"]["overall"], per_seed["framediff"]["overall"]),
        secondary={
            f"trajectory - frame-diff ROC-AUC, physical vs {v} (in training)": (
                per_seed["trajectory"][v],
                per_seed["framediff"][v],
            )
            for v in VIOLATIONS
        },
        exploratory={
            f"trajectory - frame-diff ROC-AUC, physical vs {v} (held out of training)": (
                held_out["trajectory"][v],
                held_out["framediff"][v],
            )
            for v in VIOLATIONS
        },
    )


def _part_c(ctx: RunContext, judgements: list[Any]) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """The leaderboard read back from the published-format label file; the example labels' joint score."""
    import tempfile

    from iclr25_videophy._aggregate import leaderboard as rank
    from iclr25_videophy._io import read_labels, write_labels

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "labels.csv"
        write_labels(path, judgements)
        back = read_labels(path)
    same = len(back) == len(judgements) and all(
        (a.videopath, a.caption, a.source) == (b.videopath, b.caption, b.source)
        and ((math.isnan(a.pc) and math.isnan(b.pc)) or a.pc == b.pc)
        for a, b in zip(judgements, back)
    )
    example = rank(read_labels(_example_labels()))
    paper = [{"model": m, "joint": j, "sa": s, "pc": p} for m, (j, s, p) in PAPER_LEADERBOARD.items()]
    return (
        {"C_label_file_round_trip_exact": same, "C_example_joint": example[0]["joint"]},
        {"C_example_leaderboard": _round(example), "C_paper_leaderboard_human": paper},
    )


def _part_d(cfg: ReproduceConfig, ctx: RunContext) -> dict[str, Any]:
    import tempfile

    from iclr25_videophy._evaluators import TemporalCoherence, evaluate_videos
    from iclr25_videophy._generation import DiffusersGenerator
    from iclr25_videophy._generation import generate as run_generation
    from iclr25_videophy._io import Prompt
    from iclr25_videophy._tiny import tiny_text_to_video_pipeline

    gpu = cfg.size == "gpu"
    frames, per_prompt = (16, 4) if gpu else (8, 1)
    pipe = tiny_text_to_video_pipeline(0, ctx.torch_device() if gpu else "cpu")
    gen = DiffusersGenerator(
        pipe, num_frames=frames, num_inference_steps=10 if gpu else 2, height=32, width=32
    )
    with tempfile.TemporaryDirectory() as tmp:
        entries = run_generation(
            gen, [Prompt(p) for p in DEFAULT_PROMPTS], tmp, source="tiny-random", videos_per_prompt=per_prompt
        )
        js = evaluate_videos(entries, sa=None, pc=TemporalCoherence(num_frames=frames))
    return {"D_generated_videos": len(entries), "D_pc_mean": float(np.mean([j.pc for j in js]))}


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """Parts A-C by default (D with --generate; --parts picks any of them); see ReproduceConfig."""
    parts = cfg.part_list()
    timings: dict[str, float] = {}
    metrics: dict[str, Any] = {"parts": ",".join(parts)}
    tables: dict[str, list[dict[str, Any]]] = {}
    notes: list[str] = []
    judgements: list[Any] = []
    if "A" in parts:
        t0 = time.perf_counter()
        m_a, t_a, judgements = _part_a(cfg, ctx)
        timings["A"] = time.perf_counter() - t0
        metrics.update(m_a)
        tables.update(t_a)
        notes.append(
            "A: SA is not scored (no offline SA model); PC by the training-free temporal-coherence proxy. "
            "Time reversal is invisible to it by construction (AUC 0.5)."
        )
    if "B" in parts:
        t0 = time.perf_counter()
        m_b, t_b, n_b, rows_b = _part_b(cfg, ctx)
        timings["B"] = time.perf_counter() - t0
        from iclr25_shared.stats import verdict

        metrics.update(m_b)
        metrics["paper_effect"] = PAPER_EFFECT
        metrics["verdict"] = verdict(rows_b[0], PAPER_EFFECT)
        tables = {"comparisons": [r.as_dict() for r in rows_b], **tables, **t_b}
        notes = [
            f"verdict: the primary interval read against paper_effect {PAPER_EFFECT:+g} AUC, a declared effect of "
            "interest (the paper's judge margins could not be checked offline; its judges are not ours)",
            *n_b,
            *notes,
        ]
    if "C" in parts:  # the config guarantees A ran
        m_c, t_c = _part_c(ctx, judgements)
        metrics.update(m_c)
        tables.update(t_c)
        notes.append(
            "C: the paper's leaderboard needs the human labels of videophy_test_public.csv (Hugging Face, not "
            "reachable offline); with that file, `iclr25-videophy leaderboard --labels videophy_test_public.csv` "
            "computes it."
        )
    if "D" in parts:
        t0 = time.perf_counter()
        metrics.update(_part_d(cfg, ctx))
        timings["D"] = time.perf_counter() - t0
    return Result(metrics=metrics, tables=tables, timings=timings, notes=notes)
