"""What the commands share: the towers, the Fashion-MNIST features, fitting one method, the evaluation and the
checkpoint (``train`` in ``_train.py``, ``evaluate`` in ``_evaluate.py``, ``reproduce`` in ``_reproduce.py``,
``bench`` in ``_bench.py``). The commands reach these through the module (``ex._towers``), so a test can replace one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_shared.cli import RunContext
from iclr25_shared.errors import InputError
from iclr25_shared.inputs import validating

if TYPE_CHECKING:
    import torch

    from iclr25_semiclip._model import ImageTower, SemiCLIPHead, SurrogateCaptions, TextTower

CLASS_PROMPT = "a photo of a {}."
CONCEPT_PROMPT = "a photo includes {}."
STRONG_VIEW_SEED = 777


def _towers(kind: str, device: Any, resolution: int, text_tower: Path | None = None):
    from iclr25_semiclip._model import load_image_tower, load_text_tower, tiny_towers

    if kind == "tiny":
        return tiny_towers(resolution=min(resolution, 32), device=device)
    return load_image_tower(resolution=resolution, device=device), load_text_tower(text_tower, device=device)


@dataclass
class _Fashion:
    """Fashion-MNIST pool and test features from the frozen image tower."""

    pool_labels: np.ndarray
    weak: torch.Tensor
    strong: torch.Tensor
    test_labels: np.ndarray
    test: torch.Tensor


def _encode_cached(name: str, kind: str, fn, device: Any, ctx: RunContext) -> torch.Tensor:
    """Features from ``fn()``, cached on disk for the packaged towers (they are frozen and deterministic)."""
    import torch

    from iclr25_shared import cache_dir

    if kind != "packaged":
        return fn().to(device)
    path = cache_dir("semiclip-features") / f"{name}.pt"
    if path.is_file():
        ctx.log.info("features from cache %s", path)
        return torch.load(path, map_location="cpu", weights_only=True).to(device)
    feats = fn()
    tmp = path.with_suffix(f".tmp{time.monotonic_ns()}")
    torch.save(feats.cpu(), tmp)
    tmp.replace(path)
    return feats.to(device)


def _fashion_images(pool: int, test_size: int, data_root: Path | None):
    """The first ``pool`` training and ``test_size`` test images (uint8) and labels of Fashion-MNIST, read before
    any tower loads. With ``--data-root`` only that folder is read, and a file the check before the run passed (its
    header) but whose body is cut short is an InputError naming it (exit 2)."""
    from iclr25_shared.data import fashion_mnist

    x, y = fashion_mnist("train", root=data_root, label="--data-root")
    xt, yt = fashion_mnist("test", root=data_root, label="--data-root")
    return np.array(x[:pool]), y[:pool], np.array(xt[:test_size]), yt[:test_size]


def _fashion(images, tower: ImageTower, kind: str, device, ctx):
    """Frozen-tower features of :func:`_fashion_images`; the cache key holds a digest of the pixels encoded, so a
    ``--data-root`` copy that differs from the one cached earlier is encoded afresh."""
    import hashlib

    import torch

    from iclr25_semiclip._model import strong_view

    x, y, xt, yt = images
    pool, test_size = len(x), len(xt)
    tag = hashlib.sha256(x.tobytes()).hexdigest()[:12]
    test_tag = hashlib.sha256(xt.tobytes()).hexdigest()[:12]
    res = tower.resolution
    gen = torch.Generator().manual_seed(STRONG_VIEW_SEED)
    t0 = time.perf_counter()
    weak = _encode_cached(
        f"fmnist-train{pool}-{tag}-r{res}-weak", kind, lambda: tower.encode(torch.from_numpy(x)), device, ctx
    )
    strong = _encode_cached(
        f"fmnist-train{pool}-{tag}-r{res}-strong{STRONG_VIEW_SEED}",
        kind,
        lambda: tower.encode(strong_view(torch.from_numpy(x), gen)),
        device,
        ctx,
    )
    test = _encode_cached(
        f"fmnist-test{test_size}-{test_tag}-r{res}",
        kind,
        lambda: tower.encode(torch.from_numpy(xt)),
        device,
        ctx,
    )
    ctx.log.info("image features ready in %.1f s", time.perf_counter() - t0)
    return _Fashion(y, weak, strong, yt, test)


class _TextBank:
    """Frozen text-tower features of strings, each encoded once."""

    def __init__(self, tower: TextTower) -> None:
        self.tower, self.cache = tower, {}

    def __call__(self, texts: list[str]) -> torch.Tensor:
        import torch

        new = sorted({t for t in texts if t not in self.cache})
        if new:
            for t, f in zip(new, self.tower.encode_texts(new)):
                self.cache[t] = f
        return torch.stack([self.cache[t] for t in texts])


def _settings(cfg: Any, **over: Any):
    from iclr25_semiclip._stages import Settings

    keys = (
        "lr",
        "batch_size",
        "unlabelled_batch",
        "lambda1",
        "lambda2",
        "lambda3",
        "topk",
        "words",
        "select_ratio",
    )
    values = {k: getattr(cfg, k) for k in keys if hasattr(cfg, k)}
    values.update(over)
    return Settings(**values)


def _fit(
    method: str,
    *,
    labelled_image: torch.Tensor,
    captions: list[str],
    unlabelled_weak: torch.Tensor,
    unlabelled_strong: torch.Tensor,
    text: _TextBank,
    tower: TextTower,
    stage1_steps: int,
    stage2_steps: int,
    settings: Any,
    seed: int,
    dim: int,
    min_count: int = 5,
    max_frequency: float = 0.3,
) -> tuple[SemiCLIPHead, SurrogateCaptions | None, dict[str, Any]]:
    """Train one method: 'clip' (labelled pairs only), 'stage1' (+ concept CE) or 'semiclip' (stage 1 + 2),
    all for ``stage1_steps + stage2_steps`` optimizer steps."""
    import dataclasses

    import torch

    from iclr25_semiclip._concepts import concept_multi_hot, mine_concepts
    from iclr25_semiclip._model import SemiCLIPHead, SurrogateCaptions
    from iclr25_semiclip._stages import Features, store_concept_logits, train_stage1, train_stage2

    device = labelled_image.device
    torch.manual_seed(seed)
    head = SemiCLIPHead(labelled_image.shape[1], tower.dim, dim=dim).to(device)
    info: dict[str, Any] = {}
    concepts: list[str] = []
    targets = torch.zeros(len(captions), 1)
    if method != "clip":
        concepts = mine_concepts(captions, min_count=min_count, max_frequency=max_frequency)
        targets = torch.from_numpy(concept_multi_hot(captions, concepts))
        head.init_concepts(text([CONCEPT_PROMPT.format(c) for c in concepts]))
        info["concepts"] = concepts
    feats = Features(labelled_image, text(captions), targets.to(device), unlabelled_weak, unlabelled_strong)
    gen = torch.Generator().manual_seed(seed)
    total = stage1_steps + stage2_steps
    s1 = dataclasses.replace(settings, lambda1=0.0) if method == "clip" else settings
    t0 = time.perf_counter()
    h1 = train_stage1(
        head, feats, steps=total if method != "semiclip" else stage1_steps, settings=s1, generator=gen
    )
    info["history"] = h1
    surrogate = None
    if method == "semiclip" and stage2_steps > 0:
        stored = store_concept_logits(head, unlabelled_weak)
        info["stored_logits"] = stored
        _fits_concepts(settings.topk, settings.words, len(concepts))  # never clipped silently
        surrogate = SurrogateCaptions(tower, concepts, words=settings.words).to(device)
        info["history"] = h1 + train_stage2(
            head, surrogate, tower, feats, stored, steps=stage2_steps, settings=settings, generator=gen
        )
    info["seconds"] = time.perf_counter() - t0
    return head, surrogate, info


def _fits_concepts(topk: int, words: int, concepts: int) -> None:
    """Refuse a stage-2 pseudo-label (``topk``) or surrogate caption (``words``) longer than the concept set.

    SemiCLIP's pseudo-label is the uniform distribution over an image's top-k concepts and its surrogate caption
    holds its top-W concepts: with fewer than k (or W) concepts neither exists, and quietly using all the concepts
    instead would run a different method than the one asked for.

    Raises:
        InputError: naming the option, its value and the concept-set size.
    """
    for option, value in (("--topk", topk), ("--words", words)):
        if value > concepts:
            raise InputError(
                f"{option} {value} is larger than the {concepts} concepts mined from the captions; pass "
                f"{option} {concepts} or less, or mine more concepts (lower --min-count, raise --max-frequency)"
            )


def _mine(captions: list[str], cfg: Any) -> list[str]:
    """The concept set of the labelled captions, refused (InputError) when empty or smaller than --topk/--words."""
    from iclr25_semiclip._concepts import mine_concepts

    with validating("--min-count/--max-frequency"):
        concepts = mine_concepts(captions, min_count=cfg.min_count, max_frequency=cfg.max_frequency)
    if cfg.stage2_steps > 0:
        _fits_concepts(cfg.topk, cfg.words, len(concepts))
    return concepts


def _concept_hit(
    stored: torch.Tensor, concepts: list[str], classes: np.ndarray, k: int
) -> tuple[float, float]:
    """Fraction of unlabelled images whose own class word is among their top-k stored concepts, and chance."""
    import torch

    from iclr25_semiclip._concepts import words
    from iclr25_semiclip._data import FASHION_NAMES

    index = {c: i for i, c in enumerate(concepts)}
    hits, top = 0, torch.topk(stored, min(k, len(concepts)), dim=1).indices.cpu().numpy()
    for row, c in zip(top, classes):
        own = {index[w] for w in words(FASHION_NAMES[int(c)]) if w in index}
        hits += bool(own & set(row.tolist()))
    return hits / max(1, len(classes)), min(k, len(concepts)) / len(concepts)


def _eval_fashion(head: SemiCLIPHead, data: _Fashion, text: _TextBank) -> dict[str, float]:
    """Zero-shot accuracy, and recall@k between the test images and the distinct test captions (every template
    × every class; a caption is relevant to the images of the class it names)."""
    import torch

    from iclr25_semiclip._data import FASHION_NAMES, TEMPLATES
    from iclr25_semiclip._stages import evaluate as evaluate_head

    caps = [t.format(c) for t in TEMPLATES for c in FASHION_NAMES]
    cap_labels = torch.arange(len(FASHION_NAMES)).repeat(len(TEMPLATES))
    labels = torch.from_numpy(data.test_labels)
    return evaluate_head(
        head,
        data.test,
        labels,
        text([CLASS_PROMPT.format(c) for c in FASHION_NAMES]),
        text(caps),
        cap_labels,
        ks=(1, 5, 10),
    )


def _checkpoint(ctx: RunContext, head, surrogate, concepts, meta: dict[str, Any]) -> None:
    import torch

    if not ctx.writes:
        return
    state = {
        "head": head.state_dict(),
        "surrogate": surrogate.state_dict() if surrogate is not None else None,
        "concepts": concepts,
        "meta": meta,
    }
    torch.save(state, ctx.path("model.pt"))


_CHECKPOINT = "a model.pt written by `iclr25-semiclip train --out DIR`"


def read_checkpoint(path: str | Path, *, label: str | None = None) -> dict[str, Any]:
    """A checkpoint written by ``train --out``, read safely (``weights_only=True``) and checked.

    Returns:
        ``{"head": state dict, "surrogate": state dict or None, "concepts": [...], "meta": {...}}``.

    Raises:
        InputError: missing, empty, not a safe torch file, non-finite weights, or not a SemiCLIP checkpoint
            (the message names the file and what is wrong).
    """
    from collections.abc import Mapping

    import torch

    from iclr25_shared.inputs import read_torch

    where = f"{label}: {str(path)!r}" if label else repr(str(path))
    state = read_torch(path, label=label, expected=_CHECKPOINT)
    if not isinstance(state, Mapping) or not {"head", "meta"} <= set(state):
        what = sorted(map(str, state)) if isinstance(state, Mapping) else type(state).__name__
        raise InputError(f"{where} is not {_CHECKPOINT} (it holds {what}; expected 'head' and 'meta')")
    head, meta = state["head"], state["meta"]
    if not isinstance(head, Mapping) or not all(isinstance(v, torch.Tensor) for v in head.values()):
        raise InputError(f"{where} is not {_CHECKPOINT} ('head' is not a state dict of tensors)")
    if not isinstance(meta, Mapping):
        raise InputError(f"{where} is not {_CHECKPOINT} ('meta' is a {type(meta).__name__})")
    if meta.get("towers") not in ("packaged", "tiny"):
        raise InputError(f"{where} records towers={meta.get('towers')!r}; expected 'packaged' or 'tiny'")
    for key in ("resolution", "dim", "image_dim"):
        value = meta.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{where} records {key}={value!r}; expected a positive integer")
    if meta.get("text_tower") is not None and not isinstance(meta["text_tower"], str):
        raise InputError(f"{where} records text_tower={meta['text_tower']!r}; expected a folder path")
    return dict(state)


def check_checkpoint(path: Path, label: str) -> None:
    """The CLI's check of ``--checkpoint`` (runs before any tower loads)."""
    read_checkpoint(path, label=label)
