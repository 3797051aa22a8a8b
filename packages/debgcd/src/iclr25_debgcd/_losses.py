"""The losses of SimGCD and DebGCD, written from the papers.

Batch layout used throughout (the GCD convention): two augmented views of the same ``B`` images are stacked,
``(2B, ...)``, rows ``0..B-1`` view 1 and rows ``B..2B-1`` view 2, in the same image order. ``mask_lab`` ``(B,)``
marks the images with a label; labelled images belong to Old classes, whose ids are ``0..K_old-1``.

SimGCD (Wen, Zhao & Qi, ICCV 2023, arXiv:2211.11727, Section 3): a cosine classifier trained with
cross-view self-distillation (sharpened teacher, student temperature 0.1), a mean-entropy regulariser, supervised
cross-entropy on the labelled images, plus unsupervised (InfoNCE) and supervised (SupCon) contrastive learning on
a projection of the features.

DebGCD (Liu & Han, ICLR 2025, arXiv:2504.04804, Section 3, "method"; the constants follow the official
code, github.com/Visual-AI/DebGCD ``train_DebGCD.py``): adds

* a one-vs-all (OVA) *semantic distribution detector* in a separate feature space: ``K_old`` binary
  classifiers on its own MLP features, trained with the OVA loss on labelled images, an entropy term and a soft
  consistency term between the views on unlabelled ones (the OpenMatch losses, Saito et al., NeurIPS 2021,
  arXiv:2105.14148);
* an auxiliary *debiased classifier* in the same feature space as the GCD classifier, trained with
  cross-entropy on the labels and on confident hard pseudo-labels of the GCD classifier;
* a *curriculum by distribution certainty*: the pseudo-label loss of each unlabelled image is
  weighted by ``|2 s_unk − 1|``, the detector's certainty that the image is known or unknown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from iclr25_shared.checks import check_float, check_int, check_probability

if TYPE_CHECKING:
    import torch

__all__ = [
    "GCDLossConfig",
    "GCDOutputs",
    "certainty",
    "debgcd_loss",
    "debiased_loss",
    "distill_loss",
    "info_nce_loss",
    "mean_entropy_regulariser",
    "ova_consistency",
    "ova_entropy",
    "ova_loss",
    "ova_probabilities",
    "simgcd_loss",
    "supcon_loss",
    "teacher_temperature",
    "unknown_score",
]


@dataclass(frozen=True, kw_only=True)
class GCDLossConfig:
    """Weights and temperatures of the SimGCD and DebGCD losses (defaults: the official DebGCD defaults).

    ``sdl_weight = adl_weight = 0`` turns DebGCD into SimGCD exactly.
    """

    sup_weight: float = 0.35
    """λ_sup: weight of the supervised terms; the unsupervised ones get 1 − λ_sup (SimGCD's total loss)."""
    memax_weight: float = 2.0
    """ε: weight of the mean-entropy regulariser inside the unsupervised classification term."""
    student_temp: float = 0.1
    """Temperature of the student (and of the supervised cross-entropy) for the GCD classifier."""
    teacher_temp_start: float = 0.07
    teacher_temp_end: float = 0.04
    warmup_teacher_epochs: int = 30
    """Teacher temperature goes linearly from ``teacher_temp_start`` to ``teacher_temp_end`` over these epochs."""
    contrast_temp: float = 1.0
    """InfoNCE temperature (SimGCD's code uses 1.0)."""
    supcon_temp: float = 0.07
    """SupCon temperature."""
    sdl_weight: float = 0.01
    """Weight of semantic distribution learning (the OVA detector); 0 = detector off."""
    lambda_oem: float = 0.1
    """Weight of the OVA entropy term on unlabelled images."""
    lambda_socr: float = 1.0
    """Weight of the OVA soft consistency term between the two views."""
    adl_weight: float = 1.0
    """Weight of the auxiliary debiased learning ; 0 = debiased classifier off."""
    pl_weight: float = 0.5
    """Share of the pseudo-label term in the debiased loss (the labelled term gets 1 − this)."""
    pseudo_temp: float = 0.1
    """Temperature of the debiased classifier's logits."""
    threshold: float = 0.95
    """Pseudo-labels of the GCD classifier are used only where its max probability is ≥ this."""
    curriculum: bool = True
    """Weight the pseudo-label loss by the detector's certainty |2 s_unk − 1| (DebGCD's curriculum); False = 1."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "curriculum":
                if not isinstance(value, bool):
                    raise TypeError(f"curriculum must be True or False, got {value!r}")
            elif f.name == "warmup_teacher_epochs":
                check_int(f.name, value, low=0)
            elif f.name.endswith("temp") or f.name.startswith("teacher_temp"):
                check_float(f.name, value, low=0.0, low_inclusive=False)
            elif f.name in ("sup_weight", "pl_weight", "threshold"):
                check_probability(f.name, value)
            else:
                check_float(f.name, value, low=0.0)


@dataclass(frozen=True)
class GCDOutputs:
    """What a GCD model returns for a two-view batch of ``2B`` images (seeclass:`iclr25_debgcd.GCDModel`).

    ``logits`` and ``logits_deb`` are cosine similarities in [-1, 1] (temperatures are applied by the losses);
    ``logits_ood`` are cosines too, ``(2B, 2·K_old)``, read as ``(2B, 2, K_old)``: index 0 "negative" (not this
    class), index 1 "positive". ``logits_ood`` / ``logits_deb`` are None for a SimGCD model.
    """

    proj: torch.Tensor
    """``(2B, P)`` projection for contrastive learning (not normalised)."""
    logits: torch.Tensor
    """``(2B, K)`` GCD (SimGCD) classifier."""
    logits_ood: torch.Tensor | None = None
    logits_deb: torch.Tensor | None = None


def teacher_temperature(epoch: int, cfg: GCDLossConfig) -> float:
    """Teacher temperature at ``epoch`` (0-based): linear from start to end over the warm-up epochs, then constant.

    Matches ``np.linspace(start, end, warmup)[epoch]`` for ``epoch < warmup``.
    """
    epoch = check_int("epoch", epoch, low=0)
    w = cfg.warmup_teacher_epochs
    if epoch >= w:
        return cfg.teacher_temp_end
    if w == 1:
        return cfg.teacher_temp_start
    return cfg.teacher_temp_start + (cfg.teacher_temp_end - cfg.teacher_temp_start) * epoch / (w - 1)


def _views(x: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    if x.shape[0] % 2:
        raise ValueError(f"{name} must stack two views (an even first axis 2B), got shape {tuple(x.shape)}")
    return x.chunk(2)


def distill_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    *,
    teacher_temp: float,
    student_temp: float = 0.1,
) -> torch.Tensor:
    """Cross-view self-distillation (SimGCD's L^u_cls): the teacher of view v supervises the student of the other view.

    ``mean over the 2 ordered view pairs (v, v'), v ≠ v', of mean_i H(softmax(t_v[i]/τ_t), softmax(s_v'[i]/τ_s))``.
    The teacher is detached.

    Args:
        student_logits, teacher_logits: ``(2B, K)`` float tensors (cosines).
        teacher_temp, student_temp: temperatures ``> 0``.

    Returns:
        0-d tensor.
    """
    import torch.nn.functional as F

    s = _views(student_logits / student_temp, "student_logits")
    t = _views(F.softmax(teacher_logits.detach() / teacher_temp, dim=-1), "teacher_logits")
    total = 0.0
    for iq, q in enumerate(t):
        for v, sv in enumerate(s):
            if v != iq:
                total = total + (-(q * F.log_softmax(sv, dim=-1)).sum(-1)).mean()
    return total / 2


def mean_entropy_regulariser(logits: torch.Tensor, *, temp: float = 0.1) -> torch.Tensor:
    """``log K − H(mean_i softmax(logits_i / temp))`` (SimGCD's mean-entropy regulariser, shifted to be ≥ 0): 0 when the batch-mean
    prediction is uniform, ``log K`` when every image goes to the same class.

    Args:
        logits: ``(N, K)`` float tensor.
    """
    mean = (logits / temp).softmax(dim=-1).mean(0)
    entropy = -(mean * mean.clamp_min(1e-30).log()).sum()
    return math.log(logits.shape[-1]) - entropy


def info_nce_loss(proj: torch.Tensor, *, temperature: float = 1.0) -> torch.Tensor:
    """Unsupervised contrastive (InfoNCE / SimCLR) loss on the two views (SimGCD's ``L^u_rep`` term).

    For each of the 2B rows, the positive is the same image's other view and the negatives are the other 2B − 2
    rows; the similarity is the cosine of the L2-normalised projections divided by ``temperature``.

    Args:
        proj: ``(2B, P)`` float tensor, B ≥ 1.
    """
    import torch
    import torch.nn.functional as F

    n = proj.shape[0]
    _views(proj, "proj")
    z = F.normalize(proj, dim=-1)
    sim = z @ z.T / temperature
    sim = sim.masked_fill(torch.eye(n, dtype=torch.bool, device=proj.device), float("-inf"))
    half = n // 2
    target = torch.cat([torch.arange(half, n), torch.arange(0, half)]).to(proj.device)
    return F.cross_entropy(sim, target)


def supcon_loss(features: torch.Tensor, labels: torch.Tensor, *, temperature: float = 0.07) -> torch.Tensor:
    """Supervised contrastive loss (Khosla et al., NeurIPS 2020, arXiv:2004.11362, Eq. 2 ``L^sup_out``).

    Every one of the ``V·M`` anchors averages ``−log softmax`` over its positives (same label, itself excluded)
    against all other ``V·M − 1`` rows.

    Args:
        features: ``(M, V, P)`` L2-normalised features of M labelled images in V views.
        labels: ``(M,)`` int64 class ids.

    Returns:
        0-d tensor (0 when M = 0).
    """
    import torch

    m, v, _ = features.shape
    if m == 0:
        return features.sum() * 0.0
    z = features.transpose(0, 1).reshape(v * m, -1)
    y = labels.repeat(v)
    logits = z @ z.T / temperature
    self_mask = torch.eye(v * m, dtype=torch.bool, device=z.device)
    logits = logits.masked_fill(self_mask, float("-inf"))
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    positive = (y[:, None] == y[None,]) & ~self_mask
    # every anchor has at least its other view as a positive when V >= 2
    log_prob = log_prob.masked_fill(~positive, 0.0)
    return (-(log_prob.sum(1) / positive.sum(1).clamp_min(1))).mean()


def ova_probabilities(logits_ood: torch.Tensor, *, temp: float = 0.1) -> torch.Tensor:
    """``(N, 2, K_old)`` one-vs-all probabilities from ``(N, 2·K_old)`` detector logits: a softmax over the 2-way axis
    of ``logits_ood / temp`` viewed as ``(N, 2, K_old)``; ``[:, 0, k]`` = p(not class k), ``[:, 1, k]`` = p(class k).
    """
    if logits_ood.ndim != 2 or logits_ood.shape[1] % 2:
        raise ValueError(f"logits_ood must have shape (N, 2*K_old), got {tuple(logits_ood.shape)}")
    return (logits_ood / temp).view(logits_ood.shape[0], 2, -1).softmax(dim=1)


def ova_loss(logits_ood: torch.Tensor, labels: torch.Tensor, *, temp: float = 0.1) -> torch.Tensor:
    """OVA loss on labelled images (DebGCD's semantic distribution learning; OpenMatch's
    L_ova in its hard-negative form):
    ``mean_i [ −log p⁺_{y_i}(x_i) + max_{k ≠ y_i} −log p⁻_k(x_i) ]``.

    Args:
        logits_ood: ``(N, 2·K_old)`` detector logits (cosines). labels: ``(N,)`` int64 in ``[0, K_old)``.

    Returns:
        0-d tensor (0 when N = 0).
    """
    import torch

    p = ova_probabilities(logits_ood, temp=temp)
    if p.shape[0] == 0:
        return logits_ood.sum() * 0.0
    k = p.shape[2]
    if labels.shape != (p.shape[0],) or (labels.numel() and (labels.min() < 0 or labels.max() >= k)):
        raise ValueError(f"labels must be ({p.shape[0]},) ids in [0, {k}), got {tuple(labels.shape)}")
    rows = torch.arange(p.shape[0], device=p.device)
    pos = -torch.log(p[rows, 1, labels] + 1e-8)
    if k == 1:
        return pos.mean()
    neg = -torch.log(
        p[
            :,
            0,
        ]
        + 1e-8
    )
    neg = neg.masked_fill(torch.nn.functional.one_hot(labels, k).bool(), float("-inf")).amax(dim=1)
    return (pos + neg).mean()


def ova_entropy(logits_ood: torch.Tensor, *, temp: float = 0.1) -> torch.Tensor:
    """Open-set entropy minimisation (OpenMatch's L_em): mean over images and the K_old classifiers of the 2-way
    entropy ``−Σ_± p log p``; ``log 2`` for uniform 2-way probabilities. 0 when N = 0."""
    p = ova_probabilities(logits_ood, temp=temp)
    if p.shape[0] == 0:
        return logits_ood.sum() * 0.0
    return (-(p * (p + 1e-8).log()).sum(1)).mean()


def ova_consistency(
    logits_view1: torch.Tensor, logits_view2: torch.Tensor, *, temp: float = 0.1
) -> torch.Tensor:
    """Soft open-set consistency (OpenMatch's L_socr): ``mean_i Σ_k Σ_± |p_view1 − p_view2|²``; 0 for equal views."""
    p1 = ova_probabilities(logits_view1, temp=temp)
    p2 = ova_probabilities(logits_view2, temp=temp)
    if p1.shape != p2.shape:
        raise ValueError(f"the two views must have equal shapes, got {tuple(p1.shape)} and {tuple(p2.shape)}")
    if p1.shape[0] == 0:
        return logits_view1.sum() * 0.0
    return ((p1 - p2) ** 2).sum(dim=(1, 2)).mean()


def unknown_score(logits_ood: torch.Tensor, *, temp: float = 0.1) -> torch.Tensor:
    """``s_unk(x) = p⁻_ĉ(x)`` with ``ĉ = argmax_k p⁺_k(x)`` (DebGCD's unknown score): the detector's probability that the
    image is NOT of its most likely known class. ``(N,)`` in [0, 1]; higher = more likely a New class."""
    import torch

    p = ova_probabilities(logits_ood, temp=temp)
    c = p[
        :,
        1,
    ].argmax(dim=1)
    return p[torch.arange(p.shape[0], device=p.device), 0, c]


def certainty(s_unk: torch.Tensor) -> torch.Tensor:
    """Distribution certainty ``|2 s_unk − 1|`` in [0, 1] (DebGCD's curriculum weight): 0 when the detector is undecided
    (s = 0.5), 1 when it is sure the image is known (s = 0) or unknown (s = 1); detached."""
    return (2 * s_unk.detach() - 1).abs()


def debiased_loss(
    logits_deb_u: torch.Tensor,
    logits_gcd_u: torch.Tensor,
    weight: torch.Tensor | None,
    *,
    threshold: float,
    student_temp: float = 0.1,
    pseudo_temp: float = 0.1,
) -> torch.Tensor:
    """Certainty-weighted pseudo-label loss of the debiased classifier on unlabelled images (DebGCD's auxiliary debiased
    learning with the certainty curriculum):
    ``mean_i w_i · 1[max_k q_ik ≥ τ] · CE(logits_deb_i / T_p, argmax_k q_ik)``, ``q = softmax(logits_gcd/0.1)``
    (detached).

    Args:
        logits_deb_u, logits_gcd_u: ``(N, K)`` cosines of the debiased and the GCD classifier.
        weight: ``(N,)`` per-image weights (the certainty), or None for 1.
        threshold: τ in [0, 1].

    Returns:
        0-d tensor (0 when N = 0).
    """
    import torch.nn.functional as F

    if logits_deb_u.shape[0] == 0:
        return logits_deb_u.sum() * 0.0
    q = (logits_gcd_u.detach() / student_temp).softmax(dim=-1)
    conf, target = q.max(dim=-1)
    mask = (conf >= threshold).to(logits_deb_u.dtype)
    ce = F.cross_entropy(logits_deb_u / pseudo_temp, target, reduction="none")
    w = mask if weight is None else mask * weight.detach()
    return (ce * w).mean()


def _check_batch(out: GCDOutputs, labels: torch.Tensor, mask_lab: torch.Tensor) -> int:
    n2 = out.logits.shape[0]
    if n2 % 2 or out.proj.shape[0] != n2:
        raise ValueError(
            f"proj and logits must stack two views of the same batch, got {n2} and {out.proj.shape[0]}"
        )
    b = n2 // 2
    if tuple(labels.shape) != (b,) or tuple(mask_lab.shape) != (b,):
        raise ValueError(
            f"labels and mask_lab must have shape ({b},), got {tuple(labels.shape)} and {tuple(mask_lab.shape)}"
        )
    return b


def simgcd_loss(
    out: GCDOutputs, labels: torch.Tensor, mask_lab: torch.Tensor, *, epoch: int, cfg: GCDLossConfig
) -> tuple[torch.Tensor, dict[str, float]]:
    """The SimGCD objective (arXiv:2211.11727, Section 3, total loss):
    ``(1−λ)(L_distill + ε L_me) + λ L_cls + (1−λ) L_infonce + λ L_supcon``.

    Args:
        out: two-view model outputs, ``(2B, ·)``.
        labels: ``(B,)`` int64 class ids (used where ``mask_lab``; any value elsewhere).
        mask_lab: ``(B,)`` bool, True for labelled images.
        epoch: 0-based epoch (the teacher temperature schedule).

    Returns:
        ``(loss, parts)``: the 0-d loss and its named terms as floats.
    """
    import torch
    import torch.nn.functional as F

    _check_batch(out, labels, mask_lab)
    lam = cfg.sup_weight
    mask_lab = mask_lab.bool()
    two_lab = torch.cat([mask_lab, mask_lab])
    sup_labels = torch.cat([labels[mask_lab], labels[mask_lab]])
    if sup_labels.numel():
        # view-major order (all view-1 labelled rows, then view-2), as the labels above
        cls = F.cross_entropy(out.logits[two_lab] / cfg.student_temp, sup_labels)
    else:
        cls = out.logits.sum() * 0.0
    distill = distill_loss(
        out.logits, out.logits, teacher_temp=teacher_temperature(epoch, cfg), student_temp=cfg.student_temp
    )
    me = mean_entropy_regulariser(out.logits, temp=cfg.student_temp)
    cluster = distill + cfg.memax_weight * me
    con = info_nce_loss(out.proj, temperature=cfg.contrast_temp)
    p1, p2 = out.proj.chunk(2)
    feats = F.normalize(torch.stack([p1[mask_lab], p2[mask_lab]], dim=1), dim=-1)
    supcon = supcon_loss(feats, labels[mask_lab], temperature=cfg.supcon_temp)
    loss = lam * cls + (1 - lam) * cluster + (1 - lam) * con + lam * supcon
    parts = {"cls": cls, "distill": distill, "me": me, "infonce": con, "supcon": supcon}
    return loss, {k: float(v.detach()) for k, v in parts.items()}


def debgcd_loss(
    out: GCDOutputs, labels: torch.Tensor, mask_lab: torch.Tensor, *, epoch: int, cfg: GCDLossConfig
) -> tuple[torch.Tensor, dict[str, float]]:
    """The DebGCD objective (arXiv:2504.04804, Section 3, overall objective): SimGCD's loss
    ``+ w_sdl (L_ova + λ_oem L_oem + λ_socr L_socr) + w_adl ((1 − w_pl) L_deb^l + w_pl L_deb^u)``.

    ``L_deb^u`` weights each unlabelled image by the detector's certainty ``|2 s_unk − 1|`` (the curriculum) and keeps
    only pseudo-labels with confidence ≥ ``threshold``. With ``cfg.sdl_weight == cfg.adl_weight == 0`` the value is
    exactlyfunc:`simgcd_loss` (the extra terms are not even computed).

    Args:
        out: outputs of a DebGCD model (``logits_ood`` and ``logits_deb`` set, unless both weights are 0).
        labels: ``(B,)`` int64; labelled ids must be in ``[0, K_old)`` with ``K_old = logits_ood.shape[1] // 2``.
        mask_lab: ``(B,)`` bool. epoch: 0-based.

    Returns:
        ``(loss, parts)``.

    Raises:
        ValueError: a DebGCD weight is > 0 but the model has no detector / debiased head; bad shapes.
    """
    import torch
    import torch.nn.functional as F

    loss, parts = simgcd_loss(out, labels, mask_lab, epoch=epoch, cfg=cfg)
    mask_lab = mask_lab.bool()
    two_lab = torch.cat([mask_lab, mask_lab])
    sup_labels = torch.cat([labels[mask_lab], labels[mask_lab]])
    if (cfg.sdl_weight > 0 or cfg.adl_weight > 0) and (out.logits_ood is None or out.logits_deb is None):
        raise ValueError(
            "sdl_weight/adl_weight > 0 need a model with the detector and the debiased classifier"
        )
    if cfg.sdl_weight > 0:
        ood = out.logits_ood
        l_ova = ova_loss(ood[two_lab], sup_labels, temp=cfg.student_temp)
        u1, u2 = (v[~mask_lab] for v in ood.chunk(2))
        l_oem = (ova_entropy(u1, temp=cfg.student_temp) + ova_entropy(u2, temp=cfg.student_temp)) / 2
        l_socr = ova_consistency(u1, u2, temp=cfg.student_temp)
        loss = loss + cfg.sdl_weight * (l_ova + cfg.lambda_oem * l_oem + cfg.lambda_socr * l_socr)
        parts |= {"ova": float(l_ova.detach()), "oem": float(l_oem.detach()), "socr": float(l_socr.detach())}
    if cfg.adl_weight > 0:
        deb = out.logits_deb
        if sup_labels.numel():
            l_lab = F.cross_entropy(deb[two_lab] / cfg.pseudo_temp, sup_labels)
        else:
            l_lab = deb.sum() * 0.0
        weight = None
        if cfg.curriculum:
            if out.logits_ood is None:
                raise ValueError("curriculum=True needs the detector's logits_ood")
            weight = certainty(unknown_score(out.logits_ood[~two_lab], temp=cfg.student_temp))
        l_unl = debiased_loss(
            deb[~two_lab],
            out.logits[~two_lab],
            weight,
            threshold=cfg.threshold,
            student_temp=cfg.student_temp,
            pseudo_temp=cfg.pseudo_temp,
        )
        loss = loss + cfg.adl_weight * ((1 - cfg.pl_weight) * l_lab + cfg.pl_weight * l_unl)
        parts |= {"deb_lab": float(l_lab.detach()), "deb_unl": float(l_unl.detach())}
    return loss, parts
