"""SemiCLIP's two training stages and the evaluation (OpenReview 97D725GJtQ, Sec. 3; Sec. 4 for the metrics).

Stage 1 (supervised): ``L = L_CLIP(labelled) + λ1 · SoftCE(z_l / T_r, q_l)`` with ``q_l`` the normalised
multi-hot concepts of the labelled captions. After stage 1 the weak-view concept logits of every unlabelled image
are stored. Stage 2 (semi-supervised, resumed from stage 1):
``L = L_CLIP(labelled) + λ1 · SoftCE(z_s / T_r, topk-uniform(z_w^stored)) + λ2 · L_in + λ3 · L_cross`` where the
trapezoidal terms run on the labelled pairs plus the ``⌊ρ U⌋`` unlabelled images (per batch) whose learnable
surrogate caption (built from their top-``W`` stored concepts) matches best.

The towers are frozen (LiT-style), so their features are computed once and passed in as tensors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from iclr25_semiclip._distributed import DataParallel, gather_rows, local_rows
from iclr25_semiclip._losses import (
    clip_contrastive_loss,
    normalize_multi_hot,
    soft_cross_entropy,
    topk_uniform_targets,
    trapezoidal_consistency_loss,
)
from iclr25_semiclip._model import SemiCLIPHead, SurrogateCaptions, TextTower

__all__ = [
    "Features",
    "Settings",
    "Stage1",
    "Stage2",
    "evaluate",
    "retrieval_recall",
    "store_concept_logits",
    "train_stage1",
    "train_stage2",
]


@dataclass
class Features:
    """Frozen-tower features of one training set (float32 tensors on one device).

    Attributes:
        labelled_image: ``(N_l, F)`` image features of the captioned images.
        labelled_text: ``(N_l, H)`` text features of their captions.
        concept_targets: ``(N_l, K)`` multi-hot concepts of the captions (0/1).
        unlabelled_weak: ``(N_u, F)`` features of the unlabelled images (weak view).
        unlabelled_strong: ``(N_u, F)`` features of a strong augmentation of the same images.
    """

    labelled_image: torch.Tensor
    labelled_text: torch.Tensor
    concept_targets: torch.Tensor
    unlabelled_weak: torch.Tensor
    unlabelled_strong: torch.Tensor

    def __post_init__(self) -> None:
        n = self.labelled_image.shape[0]
        if n == 0:
            raise ValueError("labelled_image must hold at least one captioned image, got 0")
        for name in ("labelled_text", "concept_targets"):
            if getattr(self, name).shape[0] != n:
                raise ValueError(f"{name} has {getattr(self, name).shape[0]} rows, labelled_image has {n}")
        if self.unlabelled_weak.shape != self.unlabelled_strong.shape:
            raise ValueError(
                f"unlabelled_weak {tuple(self.unlabelled_weak.shape)} and unlabelled_strong "
                f"{tuple(self.unlabelled_strong.shape)} must have the same shape"
            )


@dataclass(frozen=True)
class Settings:
    """Hyper-parameters (paper/official defaults where they transfer; ``lr`` re-tuned for linear projections)."""

    lr: float = 1e-3
    weight_decay: float = 0.2
    warmup: int = 10
    batch_size: int = 64
    unlabelled_batch: int = 64
    lambda1: float = 1.0  # concept soft CE (stage 1 and 2)
    lambda2: float = 1.0  # in-modal trapezoid
    lambda3: float = 1.0  # cross-modal trapezoid
    temperature: float = 1.0  # T_r
    topk: int = 3  # concepts in the stage-2 pseudo-label
    words: int = 4  # concept slots per surrogate caption
    select_ratio: float = 0.3  # ρ, fraction of unlabelled batch used in the trapezoid


def _optimizer(params: dict[str, torch.nn.Parameter], s: Settings, steps: int):
    decay = [p for n, p in params.items() if p.ndim >= 2 and "concept" not in n]
    rest = [p for n, p in params.items() if not (p.ndim >= 2 and "concept" not in n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": s.weight_decay}, {"params": rest, "weight_decay": 0.0}], lr=s.lr
    )

    def factor(step: int) -> float:  # linear warm-up, then cosine to 0 (as open_clip's schedule)
        if step < s.warmup:
            return (step + 1) / s.warmup
        return 0.5 * (1 + math.cos(math.pi * (step - s.warmup) / max(1, steps - s.warmup)))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


def _batches(n: int, size: int, steps: int, generator: torch.Generator):
    """Indices of ``steps`` batches of ``min(size, n)`` items, cycling through random permutations."""
    size = min(size, n)
    perm, pos = torch.randperm(n, generator=generator), 0
    for _ in range(steps):
        if pos + size > n:
            perm, pos = torch.randperm(n, generator=generator), 0
        yield perm[pos : pos + size]
        pos += size


def _trainable(head: SemiCLIPHead, extra: torch.nn.Module | None = None) -> dict[str, torch.nn.Parameter]:
    params = {n: p for n, p in head.named_parameters() if p.requires_grad}
    if extra is not None:
        params.update({f"surrogate.{n}": p for n, p in extra.named_parameters() if p.requires_grad})
    return params


class Stage1:
    """One optimizer step of stage 1 at a time (the optimizer, schedule and DDP wrapper are built once, here).

    ``step(idx)`` trains on the global batch ``idx`` (row indices of ``feats``' labelled set) and returns the
    step's loss terms as detached 0-d tensors (no host synchronisation). Under a process group of several ranks
    each rank computes its block of ``idx`` and the loss runs on the gathered global batch (see
    :mod:`iclr25_semiclip._distributed`).
    """

    def __init__(
        self,
        head: SemiCLIPHead,
        feats: Features,
        *,
        steps: int,
        settings: Settings,
        comm_hook: Callable | None = None,
    ) -> None:
        s = self.settings = settings
        self.head, self.feats = head, feats
        self.concepts = head.concept_emb is not None and s.lambda1 > 0
        self.opt, self.sched = _optimizer(_trainable(head), s, steps)
        self.targets = normalize_multi_hot(feats.concept_targets) if self.concepts else None
        unused = head.concept_emb is not None and not self.concepts
        self.net = DataParallel([head], find_unused=unused, comm_hook=comm_hook)

    def step(self, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        s, head, feats = self.settings, self.head, self.feats
        part, sizes = local_rows(len(idx))
        mine = idx[part]

        def local():
            img = head.image(feats.labelled_image[mine])
            z = head.concept_logits(img) if self.concepts else None
            return img, head.text(feats.labelled_text[mine]), z, head.scale()

        img, txt, z, scale = self.net(local)
        img, txt = gather_rows(img, sizes), gather_rows(txt, sizes)
        loss = clip_contrastive_loss(img, txt, scale)
        row = {"clip": loss.detach()}
        if self.concepts:
            soft = soft_cross_entropy(gather_rows(z, sizes) / s.temperature, self.targets[idx])
            row["concept"] = soft.detach()
            loss = loss + s.lambda1 * soft
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.sched.step()
        return row


def _floats(history: list[dict[str, torch.Tensor]]) -> list[dict[str, float]]:
    """The per-step tensors of a run as Python numbers (one host synchronisation for the whole run)."""
    if not history:
        return []
    keys = list(history[0])
    table = torch.stack([torch.stack([row[k].double() for k in keys]) for row in history]).tolist()
    return [{k: (int(v) if k == "selected" else float(v)) for k, v in zip(keys, values)} for values in table]


def train_stage1(
    head: SemiCLIPHead, feats: Features, *, steps: int, settings: Settings, generator: torch.Generator
) -> list[dict[str, float]]:
    """Stage 1: CLIP loss on the labelled pairs plus ``λ1`` times the concept soft CE (``λ1 = 0``: plain CLIP).

    Runs data-parallel when a process group of several ranks is initialised (``settings.batch_size`` is the global
    batch; ``generator`` must be seeded alike on every rank). Returns one dict of loss values per step.
    """
    trainer = Stage1(head, feats, steps=steps, settings=settings)
    batches = _batches(feats.labelled_image.shape[0], settings.batch_size, steps, generator)
    return _floats([trainer.step(idx) for idx in batches])


@torch.no_grad()
def store_concept_logits(head: SemiCLIPHead, image_feats: torch.Tensor, batch: int = 4096) -> torch.Tensor:
    """``(N_u, K)`` concept logits of the unlabelled weak views after stage 1 (kept fixed during stage 2)."""
    return torch.cat(
        [
            head.concept_logits(head.image(image_feats[i : i + batch]))
            for i in range(0, len(image_feats), batch)
        ]
    )


def _top_rows(scores: torch.Tensor, ratio: float) -> torch.Tensor:
    """The rows :func:`select_top_fraction` keeps, as ascending indices (its mask's True rows, in order): indexing
    with them needs no host synchronisation (a boolean mask's row count is only known on the host after a copy)."""
    keep = math.floor(ratio * scores.shape[0] + 1e-9)  # as select_top_fraction
    if keep == 0:
        return torch.zeros(0, dtype=torch.long, device=scores.device)
    return torch.sort(torch.topk(scores.detach(), keep).indices).values


class Stage2:
    """One optimizer step of stage 2 at a time (see :class:`Stage1`); ``step(idx, uidx)`` takes the global
    labelled and unlabelled batches."""

    def __init__(
        self,
        head: SemiCLIPHead,
        surrogate: SurrogateCaptions,
        tower: TextTower,
        feats: Features,
        stored_logits: torch.Tensor,
        *,
        steps: int,
        settings: Settings,
        comm_hook: Callable | None = None,
    ) -> None:
        if feats.unlabelled_weak.shape[0] == 0:
            raise ValueError("stage 2 needs unlabelled images, got 0")
        if stored_logits.shape[0] != feats.unlabelled_weak.shape[0]:
            raise ValueError(
                f"stored_logits has {stored_logits.shape[0]} rows, unlabelled_weak {feats.unlabelled_weak.shape[0]}"
            )
        self.settings, self.head, self.surrogate, self.tower = settings, head, surrogate, tower
        self.feats, self.stored = feats, stored_logits
        self.opt, self.sched = _optimizer(_trainable(head, surrogate), settings, steps)
        self.net = DataParallel([head, surrogate], comm_hook=comm_hook)

    def step(self, idx: torch.Tensor, uidx: torch.Tensor) -> dict[str, torch.Tensor]:
        s, head, feats = self.settings, self.head, self.feats
        part, sizes = local_rows(len(idx))
        upart, usizes = local_rows(len(uidx))
        mine, umine = idx[part], uidx[upart]

        def local():
            weak = self.stored[umine]
            topw = torch.topk(weak, s.words, dim=1).indices
            return (
                head.image(feats.labelled_image[mine]),
                head.text(feats.labelled_text[mine]),
                head.concept_logits(head.image(feats.unlabelled_strong[umine])),
                head.image(feats.unlabelled_weak[umine]),
                head.text(self.surrogate(self.tower, topw)),
                head.scale(),
            )

        img, txt, strong, q_img, q_txt, scale = self.net(local)
        img, txt = gather_rows(img, sizes), gather_rows(txt, sizes)
        strong, q_img, q_txt = (gather_rows(t, usizes) for t in (strong, q_img, q_txt))
        clip = clip_contrastive_loss(img, txt, scale)
        pseudo = soft_cross_entropy(strong / s.temperature, topk_uniform_targets(self.stored[uidx], s.topk))
        keep = _top_rows((q_txt * q_img).sum(dim=1), s.select_ratio)
        in_modal, cross = trapezoidal_consistency_loss(
            torch.cat([img, q_img[keep]]), torch.cat([txt, q_txt[keep]]), weight=float(len(idx))
        )
        loss = clip + s.lambda1 * pseudo + s.lambda2 * in_modal + s.lambda3 * cross
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.sched.step()
        return {
            "clip": clip.detach(),
            "concept": pseudo.detach(),
            "trapezoid_in": in_modal.detach(),
            "trapezoid_cross": cross.detach(),
            "selected": torch.full((), len(keep), device=keep.device),  # a fill, not a host-to-device copy
        }


def train_stage2(
    head: SemiCLIPHead,
    surrogate: SurrogateCaptions,
    tower: TextTower,
    feats: Features,
    stored_logits: torch.Tensor,
    *,
    steps: int,
    settings: Settings,
    generator: torch.Generator,
) -> list[dict[str, float]]:
    """Stage 2 of SemiCLIP (resumes ``head`` from stage 1; trains ``surrogate``'s template embeddings too).

    Data-parallel as :func:`train_stage1`. Returns one dict per step: the four loss terms and the number of
    selected unlabelled pairs.
    """
    s = settings
    trainer = Stage2(head, surrogate, tower, feats, stored_logits, steps=steps, settings=s)
    n_l, n_u = feats.labelled_image.shape[0], feats.unlabelled_weak.shape[0]
    unl = _batches(n_u, s.unlabelled_batch, steps, generator)
    return _floats([trainer.step(idx, next(unl)) for idx in _batches(n_l, s.batch_size, steps, generator)])


def retrieval_recall(similarity: torch.Tensor, relevant: torch.Tensor, ks: Sequence[int]) -> dict[int, float]:
    """Recall@k: fraction of queries (rows) with a relevant item among their ``k`` most similar columns.

    Args:
        similarity: ``(Q, G)`` scores, larger is closer.
        relevant: ``(Q, G)`` bool, which gallery items count as a match for each query.
        ks: cut-offs, each in ``[1, G]``.

    Returns:
        ``{k: recall}`` in ``[0, 1]``.

    Raises:
        ValueError: shapes differ or a ``k`` is outside ``[1, G]``.
    """
    if similarity.shape != relevant.shape or similarity.ndim != 2:
        raise ValueError(
            f"similarity and relevant must be (Q, G) of the same shape, got {tuple(similarity.shape)} "
            f"and {tuple(relevant.shape)}"
        )
    g = similarity.shape[1]
    out = {}
    for k in ks:
        if not 1 <= int(k) <= g:
            raise ValueError(f"k must be in [1, {g}], got {k}")
        top = torch.topk(similarity, int(k), dim=1).indices
        out[int(k)] = float(relevant.gather(1, top).any(dim=1).float().mean())
    return out


@torch.no_grad()
def evaluate(
    head: SemiCLIPHead,
    image_feats: torch.Tensor,
    labels: torch.Tensor,
    class_prompt_feats: torch.Tensor,
    caption_feats: torch.Tensor,
    caption_labels: torch.Tensor,
    *,
    ks: Sequence[int] = (1, 5),
) -> dict[str, float]:
    """Zero-shot accuracy and image↔text recall@k on a test set (Sec. 4's two metrics).

    Args:
        image_feats: ``(N, F)`` test image features; ``labels``: ``(N,)`` their classes.
        class_prompt_feats: ``(C, H)`` features of one prompt per class (e.g. ``"a photo of a {class}."``).
        caption_feats: ``(M, H)`` features of the test captions; ``caption_labels``: ``(M,)`` the class each
            caption describes. A caption is relevant to an image when both have the same class.

    Returns:
        ``zero_shot``, ``i2t_R@k``, ``t2i_R@k``.
    """
    img = head.image(image_feats)
    cls = head.text(class_prompt_feats)
    zero_shot = float(((img @ cls.T).argmax(1) == labels.to(img.device)).float().mean())
    cap = head.text(caption_feats)
    sim = img @ cap.T
    rel = labels.view(-1, 1).to(img.device) == caption_labels.view(1, -1).to(img.device)
    out = {"zero_shot": zero_shot}
    for k, v in retrieval_recall(sim, rel, ks).items():
        out[f"i2t_R@{k}"] = v
    for k, v in retrieval_recall(sim.T, rel.T, ks).items():
        out[f"t2i_R@{k}"] = v
    return out
