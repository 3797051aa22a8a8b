"""``bench``: step time, bytes communicated and peak memory of a SemiCLIP stage-2 step against a stage-1 step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_semiclip import _experiment as ex
from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_semiclip._stages import Features, Settings
    from iclr25_semiclip.cli import BenchConfig
    from iclr25_shared.distributed import ByteCounter

__all__ = ["bench"]


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Step time of a stage-2 step vs a stage-1 step at the same labelled batch (shared interleaved protocol), bytes
    communicated per step when launched on several ranks, and peak memory of one step of each stage."""
    from iclr25_shared.bench import interleaved

    device = ctx.join_group(seed=cfg.seed)
    here = ctx.world
    image_tower, text_tower = ex._towers(cfg.towers, device, 64, None)
    text = ex._TextBank(text_tower)
    feats, concepts = _features(cfg, image_tower, text, device, ctx)
    arms, counters, sent = _arms(cfg, feats, concepts, text, text_tower, device)
    for c in counters.values():
        c.reset()
    run = interleaved(arms, repeats=cfg.repeats, warmup=1, device=device, progress=ctx.progress)
    calls = cfg.repeats + 1  # warm-up included in the byte counts
    ddp_bytes = {stage: c.bytes // calls for stage, c in counters.items()}  # before the memory steps below
    peaks = _peaks(arms, device)
    ratio = run.ratio("stage2", "stage1")
    return Result(
        metrics={
            "stage2_over_stage1_time": ratio.value,
            "stage2_over_stage1_interval": [ratio.low, ratio.high],
            "stage2_minus_stage1_peak_MiB": peaks["stage2"] - peaks["stage1"],
            "processes": here.world_size,
            "bench_run": run.as_dict(),
        },
        tables={"bench": _rows(run, here.world_size, ddp_bytes, sent, peaks)},
        notes=_notes(cfg, ctx),
    )


def _features(
    cfg: BenchConfig, image_tower: Any, text: Any, device: Any, ctx: RunContext
) -> tuple[Features, list[str]]:
    """Cached frozen-tower features of a Fashion-MNIST pool (a quarter captioned) and its mined concepts."""
    import torch

    from iclr25_semiclip._concepts import concept_multi_hot, mine_concepts
    from iclr25_semiclip._data import fashion_split
    from iclr25_semiclip._stages import Features

    pool = max(4 * cfg.batch_size, 4 * cfg.unlabelled_batch, 200)
    data = ex._fashion(ex._fashion_images(pool, 10, None), image_tower, cfg.towers, device, ctx)
    split = fashion_split(np.arange(pool), data.pool_labels, labelled_fraction=0.25, seed=cfg.seed)
    li, ui = torch.from_numpy(split.labelled_images), torch.from_numpy(split.unlabelled_images)
    concepts = mine_concepts(split.captions)
    feats = Features(
        data.weak[li],
        text(split.captions),
        torch.from_numpy(concept_multi_hot(split.captions, concepts)).to(device),
        data.weak[ui],
        data.strong[ui],
    )
    return feats, concepts


def _arms(
    cfg: BenchConfig, feats: Features, concepts: list[str], text: Any, text_tower: Any, device: Any
) -> tuple[dict[str, Any], dict[str, ByteCounter], dict[str, int]]:
    """One step of each stage as a timed arm (optimizers, schedules and DDP wrappers built here, outside the timed
    calls), with the DDP byte counters and the all-gather bytes each arm records."""
    import torch

    from iclr25_semiclip import _distributed
    from iclr25_semiclip._model import SemiCLIPHead, SurrogateCaptions
    from iclr25_semiclip._stages import Stage1, Stage2, _batches, store_concept_logits
    from iclr25_shared.distributed import ByteCounter

    settings = _settings(cfg, len(concepts))
    torch.manual_seed(cfg.seed)
    head = SemiCLIPHead(feats.labelled_image.shape[1], text_tower.dim).to(device)
    head.init_concepts(text([ex.CONCEPT_PROMPT.format(c) for c in concepts]))
    stored = store_concept_logits(head, feats.unlabelled_weak)
    surrogate = SurrogateCaptions(text_tower, concepts, words=settings.words).to(device)
    # a long schedule keeps the learning rate in its plateau for every timed step
    counters = {"stage1": ByteCounter(), "stage2": ByteCounter()}
    total = 10 * (cfg.repeats + 2)
    stages = {
        "stage1": Stage1(head, feats, steps=total, settings=settings, comm_hook=counters["stage1"].hook),
        "stage2": Stage2(
            head, surrogate, text_tower, feats, stored, steps=total, settings=settings,
            comm_hook=counters["stage2"].hook,
        ),
    }  # fmt: skip
    gen = torch.Generator().manual_seed(cfg.seed)
    lab = _batches(feats.labelled_image.shape[0], settings.batch_size, 10**9, gen)
    unl = _batches(feats.unlabelled_weak.shape[0], settings.unlabelled_batch, 10**9, gen)
    sent = {"stage1": 0, "stage2": 0}

    def arm(stage: str):
        def call() -> None:
            before = _distributed.SENT["bytes"]
            if stage == "stage1":
                stages["stage1"].step(next(lab))
            else:
                stages["stage2"].step(next(lab), next(unl))
            sent[stage] = _distributed.SENT["bytes"] - before

        return call

    return {"stage1": arm("stage1"), "stage2": arm("stage2")}, counters, sent


def _settings(cfg: BenchConfig, concepts: int) -> Settings:
    """The bench's training settings: its batches, one warm-up step, words and top-k within the concept set."""
    from iclr25_semiclip._stages import Settings

    return Settings(
        batch_size=cfg.batch_size,
        unlabelled_batch=cfg.unlabelled_batch,
        warmup=1,
        words=min(4, concepts),
        topk=min(3, concepts),
    )


def _peaks(arms: dict[str, Any], device: Any) -> dict[str, float]:
    """Peak memory (MiB) of one more, untimed, step of each stage."""
    from iclr25_shared.device import PeakMemory

    peaks = {}
    for stage, call in arms.items():
        with PeakMemory(device) as mem:
            call()
        peaks[stage] = mem.peak_bytes / 2**20
    return peaks


def _rows(
    run: Any, processes: int, ddp_bytes: dict[str, int], sent: dict[str, int], peaks: dict[str, float]
) -> list[dict[str, Any]]:
    """One row per stage: median step time, ratio to stage 1 with its interval, bytes and peak memory."""
    rows = []
    for stage, label in (("stage1", "InfoNCE + concept soft CE"),
                         ("stage2", "+ pseudo-labels, surrogate captions, trapezoid")):  # fmt: skip
        est = run.ratio(stage, "stage1")
        rows.append(
            {
                "stage": stage,
                "what": label,
                "processes": processes,
                "median_step_s": run.median(stage),
                "ratio_to_stage1": round(est.value, 2),
                "interval": f"[{est.low:.3g}, {est.high:.3g}]",
                "ddp_grad_bytes_per_step": ddp_bytes[stage],
                "gather_bytes_per_step": sent[stage],
                "peak_mem_MiB": round(peaks[stage], 2),
            }
        )
    return rows


def _notes(cfg: BenchConfig, ctx: RunContext) -> list[str]:
    """What a step is and holds equal, the protocol, the byte columns (and the process count under torchrun)."""
    here = ctx.world
    notes = [
        f"labelled batch {cfg.batch_size}, unlabelled batch {cfg.unlabelled_batch} (global, over "
        f"{here.world_size} process(es)), towers {cfg.towers}, device {ctx.device_label}, threads {cfg.threads}; "
        "step = forward + backward + AdamW update on cached frozen-tower image features (stage 2 also runs the text "
        "tower on the surrogate captions). Held equal: the labelled batch, the head, the optimizer; not equal: "
        "stage 2's extra unlabelled batch and text-tower pass (what the ratio measures).",
        f"iclr25_shared.bench.interleaved: 1 warm-up call of each stage, then {cfg.repeats} rounds, each running "
        "both stages in rotated order; ratio = median of the per-round ratios, 95% bootstrap interval over rounds. "
        "Optimizers are built before the timed calls.",
        "ddp_grad_bytes_per_step: gradient bytes this rank all-reduced per step (ByteCounter, DDP's buckets); "
        "gather_bytes_per_step: payload of the differentiable all-gathers of the embeddings (forward and backward). "
        "Both 0 in one process.",
    ]
    if here.is_distributed:
        notes.append(
            f"{here.world_size} processes on this machine: each rank computes 1/{here.world_size} of the batch; on "
            "2 shared CPU cores no speed-up is expected (the ranks compete for the same cores)."
        )
    return notes
