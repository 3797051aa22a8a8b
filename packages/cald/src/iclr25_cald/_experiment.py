"""What the commands ``convert`` (``_convert_cmd.py``), ``distill`` (``_distill_cmd.py``) and ``reproduce``
(``_reproduce.py``) share: loading the teacher and the data, the train/eval split, the data-parallel set-up, the
teacher's fine-tuning, one guidance strategy's run, and the accuracy and layer-distance measures.

Real inputs: SmolLM2-135M (``iclr25_shared.models.load_causal_lm``, packaged offline) and the Wikipedia lead
summaries with their topic labels (``iclr25_shared.data.wiki_summaries``).
"""

from __future__ import annotations

import copy
import math
import time
from typing import Any

import numpy as np

from iclr25_shared.cli import RunContext
from iclr25_shared.errors import InputError


def _load(model: str, ctx: RunContext, *, layers: int = 0, families: tuple[str, ...] = ("llama",)) -> Any:
    """The teacher, checked to be of a family the command converts and to have at least ``layers`` layers."""
    from iclr25_shared.models import load_causal_lm

    ctx.log.info("loading %s ...", model)
    lm = load_causal_lm(model, device=ctx.torch_device())
    model_type = getattr(lm.model.config, "model_type", None)
    if model_type not in families:  # a .gguf file or a Hub id; a local folder was checked before it loaded
        raise InputError(
            f"--model: {model!r}: unsupported architecture: model_type={model_type!r} "
            f"({type(lm.model).__name__}); supported model_type values are {', '.join(families)}"
        )
    total = int(lm.model.config.num_hidden_layers)
    if layers > total:
        raise InputError(f"--layers: {layers} exceeds the {total} decoder layers of --model {model!r}")
    return lm


def _wiki(data: Any) -> Any:
    from iclr25_shared.data import wiki_summaries

    return wiki_summaries(path=data, label="--data")


def _split(n: int, n_train: int, n_eval: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if n_train + n_eval > n:
        raise InputError(
            f"--train-examples/--eval-examples: {n_train} + {n_eval} examples exceed the {n} in --data"
        )
    order = np.random.default_rng(seed).permutation(n)
    return order[:n_train], order[n_train : n_train + n_eval]


def _accuracy(model: Any, data: Any, batch_size: int = 64) -> float:
    """Accuracy on ``data``; under torchrun each rank scores its round-robin share of the rows and the correct
    counts are summed over the ranks (integers: the same count as one process)."""
    import torch

    from iclr25_cald._task import batch_at
    from iclr25_shared.distributed import all_reduce_sum, shard

    model.eval()
    correct = 0
    n = data.input_ids.shape[0]
    rows = torch.as_tensor(list(shard(n)), dtype=torch.long)
    with torch.no_grad():
        for i in range(0, len(rows), batch_size):
            b = batch_at(data, rows[i : i + batch_size], task="classify")
            dev = next(model.parameters()).device
            logits = model(
                input_ids=b["input_ids"].to(dev), attention_mask=b["attention_mask"].to(dev)
            ).logits
            correct += int((logits.argmax(-1).cpu() == b["labels"]).sum())
    return round(all_reduce_sum({"correct": correct})["correct"]) / n


def _join(cfg: Any, ctx: RunContext) -> Any:
    """Join the process group torchrun / ``accelerate launch`` set up (one process: nothing happens); returns the
    :class:`iclr25_shared.distributed.World`.

    Each rank trains on its share of every batch (``distill``'s data parallelism), so ``--batch-size`` must be a
    multiple of the number of processes; every rank must run the same options (checked)."""
    import torch

    from iclr25_shared.distributed import check_same, init_process_group

    device = ctx.torch_device()
    world = init_process_group(device.type)
    if world.is_distributed:
        if device.type == "cuda":  # one GPU per process: the local rank's
            torch.cuda.set_device(world.local_rank)
        check_same(repr(cfg), "the command's options")
        if cfg.batch_size % world.world_size:
            raise InputError(
                f"--batch-size: {cfg.batch_size} is not a multiple of the {world.world_size} processes (each "
                "process trains on an equal share of every batch)"
            )
        ctx.log.info("data parallel: rank %d of %d", world.rank, world.world_size)
    return world


def _rank_seed(seed: int) -> int:
    """The torch seed of this rank's training loop: ``seed`` in one process, ``derive_seed(seed, rank)`` under
    torchrun (independent dropout streams per rank; the models here have none, so this changes nothing today)."""
    from iclr25_shared.distributed import derive_seed, world

    w = world()
    return derive_seed(seed, w.rank) if w.is_distributed else seed


def _layer_distance(student: Any, teacher: Any, data: Any, n: int = 64) -> float:
    """Mean over hidden states of the relative MSE ``‖h_S - h_T‖² / ‖h_T‖²`` on ``n`` examples (diagnostic)."""
    import torch

    from iclr25_cald._task import batch_at

    b = batch_at(data, torch.arange(min(n, data.input_ids.shape[0])), task="classify")
    dev = next(student.parameters()).device
    kw = {"input_ids": b["input_ids"].to(dev), "attention_mask": b["attention_mask"].to(dev)}
    with torch.no_grad():
        hs = student(**kw, output_hidden_states=True).hidden_states
        ht = teacher(**kw, output_hidden_states=True).hidden_states
    m = kw["attention_mask"][..., None].float()
    vals = [float(((s - t).pow(2) * m).sum() / ((t.pow(2) * m).sum() + 1e-12)) for s, t in zip(hs, ht)]
    return float(np.mean(vals[1:]))  # state 0 (embeddings) is shared


def _to(batch: dict, device: Any) -> dict:
    return {k: v.to(device) for k, v in batch.items()}


def _setup(cfg: Any, ctx: RunContext) -> dict[str, Any]:
    """Load SmolLM2 and the Wikipedia topics; build the pretrained prefix, and the train/eval tensors."""
    import torch

    from iclr25_cald._task import prefix_model, tokenize

    torch.manual_seed(cfg.seed)
    wiki = _wiki(cfg.data)  # the data first: its problems never wait for the model
    train_idx, eval_idx = _split(len(wiki), cfg.train_examples, cfg.eval_examples, cfg.seed)
    lm = _load(cfg.model, ctx, layers=cfg.layers)
    tok = lm.tokenizer
    train = tokenize(tok, [wiki.texts[i] for i in train_idx], wiki.labels[train_idx], cfg.seq_len)
    evald = tokenize(tok, [wiki.texts[i] for i in eval_idx], wiki.labels[eval_idx], cfg.seq_len)
    base = prefix_model(lm.model, cfg.layers, task="classify", num_labels=len(wiki.classes), seed=cfg.seed)
    del lm
    return {"base": base, "train": train, "eval": evald, "classes": wiki.classes}


def _trainable(freeze_embeddings: bool) -> Any:
    if not freeze_embeddings:
        return None
    return lambda name, _p: "embed_tokens" not in name


def _run_strategy(
    strategy: str,
    cfg: Any,
    s: dict[str, Any],
    teacher: Any,
    seed: int,
    ctx: RunContext,
    waypoints: Any = None,
) -> dict[str, Any]:
    import torch

    from iclr25_cald._convert import convert
    from iclr25_cald._distill import Guidance, distill
    from iclr25_cald._task import batches

    device = ctx.torch_device()
    # official start (the official target/hybrid script without --student_reinit): the student is the fine-tuned
    # teacher converted, and the teacher stays in train(); otherwise the pretrained prefix converted, teacher eval()
    official = cfg.student_start == "official" and strategy in ("target", "hybrid")
    source = teacher if official else s["base"]
    conv = convert(source, cfg.mixer, k=cfg.k, max_seq_len=cfg.seq_len, seed=seed, mamba=_mamba_cfg(cfg))
    student = conv.model.to(device)
    if official:  # the teacher's parameters were frozen after its fine-tuning; the student's are trained
        for p in student.parameters():
            p.requires_grad_(True)
    guidance = Guidance(
        strategy=strategy,
        alpha_layer=cfg.alpha_layer,
        teacher_lr=cfg.lr,
        max_distill_steps=max(1, round(cfg.hybrid_fraction * cfg.steps)),
        waypoint_every=max(1, math.ceil(cfg.steps / max(1, len(waypoints or [None])))),
        teacher_mode="train" if official else "eval",
    )
    tch = {"target": teacher, "hybrid": teacher, "trajectory": s["base"], "waypoint": s["base"]}.get(strategy)
    torch.manual_seed(_rank_seed(seed))
    t0 = time.perf_counter()
    res = distill(
        student,
        (_to(b, device) for b in batches(s["train"], cfg.batch_size, task="classify", seed=seed)),
        steps=cfg.steps,
        guidance=guidance,
        teacher=tch,
        waypoints=waypoints,
        lr=cfg.lr,
        warmup_steps=cfg.steps // 10,
        trainable=_trainable(cfg.freeze_embeddings),
    )
    wall = time.perf_counter() - t0
    acc = _accuracy(res.student, s["eval"])
    dist = _layer_distance(res.student, teacher, s["eval"]) if teacher is not None else float("nan")
    ctx.log.info("seed %d %-10s acc %.4f  (%.1f s)", seed, strategy, acc, wall)
    return {
        "strategy": strategy,
        "seed": seed,
        "accuracy": acc,
        "layer_distance_to_target_teacher": dist,
        "final_task_loss": res.history[-1]["task"],
        "wall_s": wall,
    }


def _mamba_cfg(cfg: Any) -> Any:
    from iclr25_cald._mixers import MambaConfig

    return MambaConfig(expand=cfg.mamba_expand, d_state=cfg.mamba_d_state)


def _fine_tune_teacher(cfg: Any, s: dict[str, Any], ctx: RunContext, save_every: int = 0) -> tuple[Any, list]:
    import torch

    from iclr25_cald._distill import Guidance, distill
    from iclr25_cald._task import batches

    device = ctx.torch_device()
    teacher = copy.deepcopy(s["base"]).to(device)
    waypoints: list = []

    def keep(step: int, _rec: dict) -> None:
        if save_every and (step + 1) % save_every == 0:
            waypoints.append({k: v.detach().clone() for k, v in teacher.state_dict().items()})

    torch.manual_seed(_rank_seed(cfg.seed))
    distill(
        teacher,
        (
            _to(b, device)
            for b in batches(s["train"], cfg.batch_size, task="classify", seed=10_000 + cfg.seed)
        ),
        steps=cfg.teacher_steps,
        guidance=Guidance(strategy="unguided"),
        lr=cfg.lr,
        warmup_steps=cfg.teacher_steps // 10,
        trainable=_trainable(cfg.freeze_embeddings),
        on_step=keep,
    )
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher, waypoints


_START_NOTE = {
    "pretrained": "student start: pretrained (every strategy converts the pretrained prefix; the target teacher "
    "guides in eval mode); the official target/hybrid script starts from the fine-tuned teacher (the default, "
    "--student-start official)",
    "official": "student start: official (target/hybrid students are the fine-tuned teacher converted, the teacher "
    "guides in train mode, as the official script without --student_reinit; unguided/trajectory start from the "
    "pretrained prefix)",
}
