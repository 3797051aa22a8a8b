"""What the CLI runs: ``discover`` (one GCD run), ``reproduce`` (k-means / SimGCD / DebGCD over seeds) and ``bench``.

Each command takes ``(cfg, ctx)`` and returns an :class:`iclr25_shared.cli.Result`.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_shared.cli import Result, RunContext
from iclr25_shared.errors import InputError
from iclr25_shared.inputs import validating

if TYPE_CHECKING:
    from iclr25_debgcd.cli import BenchConfig, DiscoverConfig, ReproduceConfig

__all__ = ["SIZES", "ReproduceSize", "bench", "check_data", "discover", "load_npz", "reproduce"]


NAMED_DATA = ("fashion-mnist", "digits")
_NPZ_KEYS = ("images", "labels")


def load_npz(path: str | Path, *, label: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Images and labels from a ``.npz`` with ``images`` ``(n, H, W)`` / ``(n, C, H, W)`` (uint8 or floats in
    [0, 1]) and ``labels`` ``(n,)`` non-negative ints. Returns ``(n, C, H, W)`` float32 and ``(n,)`` int64.

    Read with ``allow_pickle=False`` through :func:`iclr25_shared.inputs.read_npz`.

    Args:
        path: the file.
        label: the option that named it, for the messages (e.g. ``"--data"``).

    Raises:
        InputError: the file is missing, empty or not an ``.npz`` archive; a key is missing; shapes disagree;
            values are out of range or not finite (each message names the file).
    """
    from iclr25_shared.inputs import check_file, read_npz

    where = f"{label}: {str(path)!r}" if label else repr(str(path))
    expected = "an .npz archive with arrays images, labels"
    p = check_file(path, label=label, expected=expected)
    with p.open("rb") as fh:
        if (
            fh.read(2) != b"PK"
        ):  # every .npz is a zip; numpy's own error for text or pickles advises allow_pickle
            raise InputError(f"{where} is not {expected} (not a zip archive)")
    z = read_npz(p, label=label, keys=_NPZ_KEYS)
    x, y = z["images"], z["labels"]
    if x.ndim == 3:
        x = x[:, None]
    if x.ndim != 4 or y.ndim != 1 or x.shape[0] != y.shape[0] or y.size == 0:
        raise InputError(
            f"{where}: images must be (n, H, W) or (n, C, H, W) and labels (n,) with n >= 1, got "
            f"{z['images'].shape}, {y.shape}"
        )
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
        raise InputError(f"{where}: labels must be non-negative integers, got dtype {y.dtype}")
    if x.dtype == np.uint8:
        x = x.astype(np.float32) / 255.0
    elif x.dtype.kind not in "fiub":
        raise InputError(f"{where}: images must be uint8 or floats in [0, 1], got dtype {x.dtype}")
    x = x.astype(np.float32)
    if x.min() < 0 or x.max() > 1:
        raise InputError(f"{where}: float images must lie in [0, 1], got [{x.min()}, {x.max()}]")
    return x, y.astype(np.int64)


def check_data(value: str | Path, label: str) -> None:
    """The CLI's check of ``--data``: a named data set passes; anything else must be a readable ``.npz``."""
    if str(value) in NAMED_DATA:
        return
    load_npz(value, label=label)


def _load(name: str, root: Path | None, per_class: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from iclr25_debgcd._data import load_images

    if name in NAMED_DATA:  # --root's files are the user's: their problems are InputErrors naming --root
        return load_images(name, root=root, per_class=per_class or None, seed=seed, label="--root")
    x, y = load_npz(name, label="--data")
    if per_class:
        rng = np.random.default_rng(seed)
        keep = np.sort(
            np.concatenate([rng.permutation(np.flatnonzero(y == c))[:per_class] for c in np.unique(y)])
        )
        x, y = x[keep], y[keep]
    return x, y


def _train_config(
    method: str,
    *,
    backbone: str,
    epochs: int,
    batch_size: int,
    lr: float,
    hidden: int,
    data: str,
    threshold: float,
    adl_weight: float,
    sdl_weight: float,
) -> Any:
    from iclr25_debgcd._losses import GCDLossConfig
    from iclr25_debgcd._train import TrainConfig

    # teacher warm-up: 30 of 200 epochs in the paper, kept as the same share of the schedule
    warmup = max(1, round(0.15 * epochs))
    loss = GCDLossConfig(
        memax_weight=1.0,  # official CIFAR-10 script (a 10-class set like ours)
        warmup_teacher_epochs=warmup,
        threshold=threshold,
        adl_weight=adl_weight,
        sdl_weight=sdl_weight,
    )
    return TrainConfig(
        method=method,
        backbone=backbone,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        hidden=hidden,
        flip=data == "fashion-mnist",
        shift=2 if data != "digits" else 1,
        loss=loss,
    )


def _join_group(ctx: RunContext, seed: int) -> Any:
    """``--device``, after joining the launcher's process group (torchrun / accelerate launch; a no-op in one
    process): this rank's GPU on CUDA, and every rank must have the same ``--seed`` (the global batches are drawn
    alike on every rank)."""
    import torch

    from iclr25_shared.distributed import check_same, init_process_group

    device = ctx.torch_device()
    here = init_process_group(device)
    if here.is_distributed:
        check_same(seed, "--seed")
        if device.type == "cuda":
            device = torch.device("cuda", here.local_rank)
            ctx.device_label = f"{device} (rank {here.rank} of {here.world_size})"
    return device


def discover(cfg: DiscoverConfig, ctx: RunContext) -> Result:
    """Train DebGCD (or SimGCD) on one GCD split and report All/Old/New on the unlabelled images."""
    from iclr25_debgcd._data import gcd_split
    from iclr25_debgcd._train import train_gcd

    device = _join_group(ctx, cfg.seed)
    if cfg.backbone == "efficientnet-lite0":  # timm and the weights, before any data is read
        from iclr25_debgcd._model import efficientnet_lite0_weights

        efficientnet_lite0_weights()
    x, y = _load(cfg.data, cfg.root, cfg.per_class, cfg.seed)
    with validating("--known-classes/--num-classes"):  # they must fit the classes present in --data
        split = gcd_split(
            y, cfg.known_classes, cfg.labelled_fraction, num_classes=cfg.num_classes, seed=cfg.seed
        )
    if split.labelled.all():
        raise InputError(
            f"--known-classes {' '.join(map(str, cfg.known_classes))} with --labelled-fraction "
            f"{cfg.labelled_fraction} label every image of --data {cfg.data}: nothing is left to discover; "
            "leave a class out of --known-classes or lower --labelled-fraction"
        )
    tcfg = _train_config(
        cfg.method,
        backbone=cfg.backbone,
        epochs=cfg.epochs,
        batch_size=cfg.batch_size,
        lr=cfg.lr,
        hidden=512,
        data=cfg.data,
        threshold=cfg.threshold,
        adl_weight=cfg.adl_weight,
        sdl_weight=cfg.sdl_weight,
    )
    ctx.log.info(
        f"{x.shape[0]} images, {int(split.labelled.sum())} labelled, {split.num_old} known + "
        f"{split.num_classes - split.num_old} new classes; training {cfg.method} for {cfg.epochs} epochs on {device}"
    )
    bar = iter(ctx.progress(range(cfg.epochs), desc=cfg.method))
    res = train_gcd(x, split, tcfg, seed=cfg.seed, device=device, on_epoch=lambda _row: next(bar, None))
    ctx.save_array("predictions", res.predictions)
    ctx.save_array("unlabelled_index", np.flatnonzero(split.unlabelled))
    metrics = {k: round(float(v), 4) for k, v in res.final.items()}
    metrics |= {"images": int(x.shape[0]), "labelled": int(split.labelled.sum()), "method": cfg.method}
    return Result(
        metrics=metrics,
        tables={"epochs": [{k: round(v, 4) for k, v in row.items()} for row in res.history]},
        timings={"train": res.seconds},
        notes=[
            "accuracy on the unlabelled images, one Hungarian assignment over all classes (GCD protocol)",
            f"predictions.npy: the model's class index of each unlabelled image (unlabelled_index.npy); indices "
            f"0..{split.num_old - 1} are the known classes {list(split.original[: split.num_old])}, the others are "
            "discovered clusters",
            *(
                [
                    f"data-parallel over {ctx.world.world_size} ranks (DDP): global batch {cfg.batch_size} split "
                    "across ranks, outputs gathered for the loss, BatchNorm over the global batch"
                ]
                if ctx.world.is_distributed
                else []
            ),
        ],
    )


@dataclass(frozen=True)
class ReproduceSize:
    per_class: dict[str, int | None]
    epochs: int
    hidden: int
    batch_size: int


SIZES = {
    "tiny": ReproduceSize({"fashion-mnist": 12, "digits": 12}, epochs=2, hidden=32, batch_size=32),
    "quick": ReproduceSize({"fashion-mnist": 150, "digits": None}, epochs=30, hidden=256, batch_size=128),
    "full": ReproduceSize({"fashion-mnist": 1000, "digits": None}, epochs=100, hidden=512, batch_size=128),
    # about a minute on one H200 with --seeds 5 (never run on a GPU; estimate in the README), ~20x quick
    "gpu": ReproduceSize({"fashion-mnist": 600, "digits": None}, epochs=60, hidden=512, batch_size=256),
}
_PAPER = [
    # DINO ViT-B/16, All / Old / New on the unlabelled training images. SimGCD: its README (github.com/CVMI-Lab/
    # SimGCD, mean of 3 runs). DebGCD: only the All values we could check (benchmark listing of arXiv:2504.04804);
    # Old/New of DebGCD are in the paper's tables, not copied here unchecked.
    {"data": "CIFAR-10", "SimGCD": "97.1 / 95.1 / 98.1", "DebGCD": "see paper"},
    {"data": "CIFAR-100", "SimGCD": "80.1 / 81.2 / 77.8", "DebGCD": "83.0 / – / –"},
    {"data": "ImageNet-100", "SimGCD": "83.0 / 93.1 / 77.9", "DebGCD": "85.9 / – / –"},
    {"data": "CUB", "SimGCD": "60.3 / 65.6 / 57.7", "DebGCD": "see paper"},
]


def _kmeans(x: np.ndarray, split: Any, seed: int) -> dict[str, float]:
    from sklearn.cluster import KMeans

    from iclr25_debgcd._metrics import gcd_accuracy

    flat = x.reshape(x.shape[0], -1)
    km = KMeans(n_clusters=split.num_classes, n_init=10, random_state=seed).fit(flat)
    unl = split.unlabelled
    acc = gcd_accuracy(split.labels[unl], km.labels_[unl], range(split.num_old))
    return acc.as_dict()


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """k-means on pixels, SimGCD and DebGCD on Fashion-MNIST and digits GCD splits (Old 0-4, half labelled)."""
    from iclr25_debgcd._data import gcd_split
    from iclr25_debgcd._train import train_gcd
    from iclr25_shared.metrics import paired_t_interval

    device = ctx.torch_device()
    size = SIZES[cfg.size]
    rows: list[dict[str, Any]] = []
    curves: dict[tuple[str, str], list[list[dict[str, float]]]] = {}
    t_total = time.perf_counter()
    timings: dict[str, float] = {}
    for data in cfg.datasets:
        x, y = _load(data, cfg.root, size.per_class[data], 0)
        for s in range(cfg.seeds):
            seed = cfg.seed + s
            split = gcd_split(y, [0, 1, 2, 3, 4], 0.5, seed=seed)
            t = time.perf_counter()
            rows.append({"data": data, "seed": seed, "method": "k-means (pixels)", **_kmeans(x, split, seed)})
            timings[f"{data}/k-means"] = timings.get(f"{data}/k-means", 0.0) + time.perf_counter() - t
            for method in ("simgcd", "debgcd"):
                tcfg = _train_config(
                    method,
                    backbone="mlp",
                    epochs=size.epochs,
                    batch_size=size.batch_size,
                    lr=0.1,
                    hidden=size.hidden,
                    data=data,
                    threshold=0.9,
                    adl_weight=2.0,
                    sdl_weight=0.01,
                )
                res = train_gcd(x, split, tcfg, seed=seed, device=device, eval_every=max(1, size.epochs // 5))
                ctx.log.info(
                    f"{data} seed {seed} {method}: { ({k: round(v, 3) for k, v in res.final.items()}) }"
                )
                rows.append({"data": data, "seed": seed, "method": method, **res.final})
                curves.setdefault((data, method), []).append(res.history)
                timings[f"{data}/{method}"] = timings.get(f"{data}/{method}", 0.0) + res.seconds
    timings["total"] = time.perf_counter() - t_total

    summary, paired = [], []
    for data in cfg.datasets:
        by = {
            m: [r for r in rows if r["data"] == data and r["method"] == m]
            for m in ("k-means (pixels)", "simgcd", "debgcd")
        }
        for m, rs in by.items():
            line: dict[str, Any] = {"data": data, "method": m, "seeds": len(rs)}
            for k in ("all", "old", "new", "deb_all", "auroc", "certainty", "pl_rate"):
                vals = [r[k] for r in rs if k in r and r[k] == r[k]]
                sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
                line[k] = f"{100 * np.mean(vals):.1f} ± {100 * sd:.1f}" if vals else "–"
            summary.append(line)
        for a, b in (("debgcd", "simgcd"), ("simgcd", "k-means (pixels)"), ("debgcd", "k-means (pixels)")):
            line = {"data": data, "difference": f"{a} − {b}"}
            for k in ("all", "old", "new"):
                d = [ra[k] - rb[k] for ra, rb in zip(by[a], by[b], strict=True)]
                est = paired_t_interval(d)
                line[k] = f"{100 * est.value:+.1f} [{100 * est.low:+.1f}, {100 * est.high:+.1f}]"
            paired.append(line)
    run_keys = [
        "data",
        "seed",
        "method",
        "all",
        "old",
        "new",
        "deb_all",
        "deb_old",
        "deb_new",
        "auroc",
        "certainty",
        "pl_rate",
    ]
    _plot(ctx, curves)
    return Result(
        metrics={"size": cfg.size, "seeds": cfg.seeds, "epochs": size.epochs},
        tables={
            "summary (unlabelled images, % mean ± sd over seeds)": summary,
            "paired differences (percentage points, mean [95% t-interval])": paired,
            "paper (DINO ViT-B/16; other data sets, for reference only)": _PAPER,
            "runs": [
                {k: (round(r[k], 4) if isinstance(r.get(k), float) else r.get(k, "–")) for k in run_keys}
                for r in rows
            ],
        },
        timings=timings,
        notes=[
            "GCD split: classes 0-4 Old with half their images labelled, 5-9 New; scored on the unlabelled images "
            "(transductive), one Hungarian assignment over all classes, last epoch (no model selection).",
            "Equal budget: SimGCD and DebGCD get the same backbone (MLP from scratch), epochs, batches and views.",
            "auroc = the DebGCD detector's known-vs-new AUROC; certainty = mean |2 s_unk − 1|; pl_rate = share of "
            "unlabelled images whose GCD pseudo-label passes the 0.9 threshold.",
        ],
    )


def _plot(ctx: RunContext, curves: dict[tuple[str, str], list[list[dict[str, float]]]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - plot extra not installed
        ctx.log.info("matplotlib not installed: no curves.png (pip install 'iclr25-debgcd[plot]')")
        return
    datasets = sorted({d for d, _ in curves})
    fig, axes = plt.subplots(1, 2 * len(datasets), figsize=(5 * 2 * len(datasets), 3.6), squeeze=False)
    for i, data in enumerate(datasets):
        for j, key in enumerate(("all", "new")):
            ax = axes[0, 2 * i + j]
            for method, colour in (("simgcd", "tab:blue"), ("debgcd", "tab:red")):
                runs = curves.get((data, method), [])
                for h in runs:
                    pts = [(r["epoch"], r[key]) for r in h if key in r]
                    if pts:
                        e, v = zip(*pts, strict=True)
                        ax.plot(e, [100 * a for a in v], color=colour, alpha=0.35, marker="o", ms=3)
                ax.plot([], [], color=colour, label=method)
            ax.set_title(f"{data}: {key.capitalize()} accuracy")
            ax.set_xlabel("epoch")
            ax.set_ylabel("% (unlabelled images)")
            ax.grid(alpha=0.3)
            ax.legend()
    fig.tight_layout()
    ctx.save_figure("curves.png", fig, dpi=110)


def _saved_bytes(step: Any) -> int:
    """Bytes of the tensors autograd saves for backward during one call of ``step`` (device-independent)."""
    import torch

    saved = {"bytes": 0}

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved["bytes"] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    return saved["bytes"]


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Step time (shared interleaved protocol), memory (parameters, activations saved for backward, CUDA peak) and
    bytes communicated per step (under torchrun) of DebGCD against SimGCD, same backbone and batch."""
    import torch

    from iclr25_debgcd import _distributed
    from iclr25_debgcd._data import GCDSplit
    from iclr25_debgcd._distributed import DataParallel, global_batchnorm
    from iclr25_debgcd._losses import debgcd_loss, simgcd_loss
    from iclr25_debgcd._train import _step, build_model
    from iclr25_shared.bench import interleaved
    from iclr25_shared.device import PeakMemory
    from iclr25_shared.distributed import ByteCounter

    device = _join_group(ctx, cfg.seed)
    here = ctx.world
    if "efficientnet-lite0" in cfg.backbones:  # timm and the weights, before the other backbones run
        from iclr25_debgcd._model import efficientnet_lite0_weights

        efficientnet_lite0_weights()
    b = cfg.batch_size
    split = GCDSplit(
        labels=np.zeros(1, np.int64), labelled=np.zeros(1, bool), num_old=5, num_classes=10, original=()
    )
    g = torch.Generator().manual_seed(cfg.seed)
    x = torch.rand(b, 1, cfg.image_size, cfg.image_size, generator=g).to(device)
    y = torch.randint(0, 5, (b,), generator=g).to(device)
    lab = (torch.rand(b, generator=g) < 0.5).to(device)
    idx = torch.arange(b, device=device)
    arms, info = {}, {}
    for backbone in cfg.backbones:
        for method, fn in (("simgcd", simgcd_loss), ("debgcd", debgcd_loss)):
            tcfg = _train_config(
                method,
                backbone=backbone,
                epochs=1,
                batch_size=b,
                lr=0.1,
                hidden=cfg.hidden,
                data="fashion-mnist",
                threshold=0.0,
                adl_weight=2.0,
                sdl_weight=0.01,
            )
            torch.manual_seed(cfg.seed)
            model = build_model(split, (1, cfg.image_size, cfg.image_size), tcfg).to(device)
            if here.is_distributed:
                model = global_batchnorm(model)
            model.train()
            counter = ByteCounter()
            # model, optimizer and DDP wrapper are built here, outside the timed calls
            net = DataParallel([model], comm_hook=counter.hook)
            opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01, momentum=0.9)
            gen = torch.Generator().manual_seed(cfg.seed)
            name = f"{backbone}/{method}"
            sent = {"bytes": 0}

            def step(net=net, model=model, opt=opt, gen=gen, tcfg=tcfg, fn=fn, sent=sent) -> None:
                before = _distributed.SENT["bytes"]
                _step(net, model, x, y, lab, idx, gen, 0, tcfg, fn, opt)
                sent["bytes"] = _distributed.SENT["bytes"] - before

            arms[name] = step
            info[name] = {
                "model": model,
                "counter": counter,
                "sent": sent,
                "params": sum(p.numel() for p in model.parameters()),
            }
    for arm in info.values():
        arm["counter"].reset()
    run = interleaved(arms, repeats=cfg.repeats, warmup=2, device=device, progress=ctx.progress)
    calls = cfg.repeats + 2
    for name, arm in info.items():  # untimed: memory of one more step (bytes per step read before it)
        arm["ddp_bytes"] = arm["counter"].bytes // calls
        arm["saved"] = _saved_bytes(arms[name])
        if device.type == "cuda":
            with PeakMemory(device) as mem:
                arms[name]()
            arm["peak_cuda_mb"] = mem.peak_bytes / 2**20
    rows = []
    for backbone in cfg.backbones:
        base, deb = f"{backbone}/simgcd", f"{backbone}/debgcd"
        est = run.ratio(deb, base)
        row: dict[str, Any] = {
            "backbone": backbone,
            "device": str(device),
            "processes": here.world_size,
            "batch": b,
        }
        row["simgcd step_ms"] = round(1000 * run.median(base), 2)
        row["debgcd step_ms"] = round(1000 * run.median(deb), 2)
        row["ratio step_ms"] = round(est.value, 3)
        row["interval"] = f"[{est.low:.3g}, {est.high:.3g}]"
        for key, scale in (("params", 1), ("saved", 2**-20), ("peak_cuda_mb", 1)):
            if key in info[base]:
                label = "saved_activations_mb" if key == "saved" else key
                row[f"simgcd {label}"] = round(info[base][key] * scale, 2)
                row[f"debgcd {label}"] = round(info[deb][key] * scale, 2)
                row[f"ratio {label}"] = round(info[deb][key] / info[base][key], 3)
        for method, arm in (("simgcd", base), ("debgcd", deb)):
            row[f"{method} ddp_bytes/step"] = info[arm]["ddp_bytes"]
            row[f"{method} gather_bytes/step"] = info[arm]["sent"]["bytes"]
        rows.append(row)
    notes = [
        "step = augmentation of both views + forward + loss + backward + SGD step (the training loop's step); "
        f"iclr25_shared.bench.interleaved: 2 warm-up calls per arm, then {cfg.repeats} rounds running every arm "
        "once in rotated order; ratio = median of per-round DebGCD/SimGCD ratios with a 95% bootstrap interval. "
        "Held equal: backbone, batch, heads' widths, optimizer; not equal: DebGCD's two extra heads and loss "
        "terms (what the ratio measures). Models and optimizers are built before the timed calls.",
        "saved_activations_mb = bytes of the tensors autograd saves for backward (device-independent memory).",
        f"heads' MLP width {cfg.hidden} (paper: 2048); images {cfg.image_size}x{cfg.image_size}, 1 channel; "
        f"global batch {b} over {here.world_size} process(es).",
        "ddp_bytes/step: gradient bytes this rank all-reduced per step (ByteCounter); gather_bytes/step: payload "
        "of the differentiable all-gathers of the outputs and the BatchNorm all-reduces (forward and backward). "
        "Both 0 in one process.",
    ]
    if here.is_distributed:
        notes.append(
            f"{here.world_size} processes on this machine: each rank computes 1/{here.world_size} of the batch; on "
            "2 shared CPU cores no speed-up is expected (the ranks compete for the same cores)."
        )
    return Result(
        metrics={f"{r['backbone']} step time ratio": r["ratio step_ms"] for r in rows}
        | {"processes": here.world_size, "bench_run": run.as_dict()},
        tables={"DebGCD / SimGCD, one training step (two views of the batch)": rows},
        notes=notes,
    )
