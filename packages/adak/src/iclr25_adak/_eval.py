"""Evaluation of a patched MoE: validation loss, k per layer and per token type, FLOPs and throughput."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from iclr25_adak._ppo import token_log_likelihood
from iclr25_adak._routing import AdaKPatch

__all__ = ["TOKEN_TYPES", "evaluate_lm", "interpolate_static", "token_types"]

TOKEN_TYPES = ("function", "content", "other")


def token_types(pieces: list[str]) -> np.ndarray:
    """Classify vocabulary pieces: 0 = function word (scikit-learn's English stop-word list), 1 = content word
    (alphabetic, at least 2 letters, not a stop word), 2 = other (punctuation, digits, word fragments, specials).

    Args:
        pieces: ``(vocab,)`` decoded text of each token id.

    Returns:
        ``(vocab,)`` int64 codes into :data:`TOKEN_TYPES`.
    """
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    out = np.full(len(pieces), 2, dtype=np.int64)
    for i, p in enumerate(pieces):
        starts_word = p.startswith(" ")
        w = p.strip().lower()
        if not w.isalpha():
            continue
        if w in ENGLISH_STOP_WORDS and starts_word:
            out[i] = 0
        elif len(w) >= 2 and starts_word:
            out[i] = 1
    return out


@torch.no_grad()
def evaluate_lm(
    patch: AdaKPatch,
    blocks: np.ndarray,
    *,
    mode: str = "argmax",
    k: int | None = None,
    batch: int = 16,
    types: np.ndarray | None = None,
    device: Any = "cpu",
) -> dict[str, Any]:
    """Mean next-token NLL and expert usage of the patched model on ``blocks``.

    Args:
        patch: a patched model.
        blocks: ``(rows, seq)`` int64 token ids.
        mode: ``"argmax"`` (Ada-K inference) or ``"fixed"`` (static top-``k``).
        k: the static k in fixed mode.
        batch: rows per forward pass.
        types: optional ``(vocab,)`` token-type codes (:func:`token_types`); adds the mean k (over layers) of
            the tokens of each type, by the type of the token being routed.
        device: where the model is.

    Under an initialised process group each rank evaluates rows ``rank, rank + W, ...`` of ``blocks`` and the
    sums (NLL, tokens, experts per layer, k per token type) are reduced over ranks, so every rank returns the
    metrics of all of ``blocks`` (the same as one process up to summation order); ``tokens_per_s`` is all tokens
    over the slowest rank's time.

    Returns:
        ``{"loss" (nats/token), "mean_k", "k_per_layer" (L,), "flops_reduction", "tokens_per_s", "k_by_type"}``.
        ``flops_reduction`` is ``1 - mean(k)/K`` over routed expert FLOPs (see :meth:`AdaKPatch.flops`).
    """
    from iclr25_adak._ppo import _group
    from iclr25_shared.distributed import all_reduce_sum, gather_objects

    here = _group()
    n_total = blocks.size
    if here.is_distributed:  # data-parallel evaluation: this rank's rows, sums reduced below
        blocks = blocks[here.rank :: here.world_size]
    nll_sum, n_pred = 0.0, 0
    type_k = np.zeros(3)
    type_n = np.zeros(3)
    patch.reset_counters()
    old_record = patch.record
    elapsed = 0.0
    with patch.mode_as(mode, k):  # type: ignore[arg-type]
        patch.record = types is not None
        try:
            for start in range(0, len(blocks), batch):
                ids = torch.as_tensor(blocks[start : start + batch], device=device)
                t0 = time.perf_counter()
                logits = patch.model(input_ids=ids).logits
                elapsed += time.perf_counter() - t0
                ll = token_log_likelihood(logits, ids)
                nll_sum -= float(ll.sum())
                n_pred += ll.numel()
                if types is not None:
                    recs = patch.take_records()
                    if mode == "fixed":
                        kk = np.full(ids.numel(), float(k))
                    else:
                        acts = torch.stack([r[0][1] for r in recs]).cpu().numpy()  # (L, n)
                        kmins = np.array([rt.allocator.k_min for rt in patch.routers])[:, None]
                        kk = (acts + kmins).mean(axis=0)
                    tt = types[ids.reshape(-1).cpu().numpy()]
                    np.add.at(type_k, tt, kk)
                    np.add.at(type_n, tt, 1)
        finally:
            patch.record = old_record
            patch.take_records()
    if here.is_distributed:
        sums = all_reduce_sum(
            {
                "nll": nll_sum,
                "n": float(n_pred),
                **{f"type_k{i}": float(v) for i, v in enumerate(type_k)},
                **{f"type_n{i}": float(v) for i, v in enumerate(type_n)},
                **{f"tokens{i}": float(r.counters.tokens) for i, r in enumerate(patch.routers)},
                **{f"experts{i}": float(r.counters.experts) for i, r in enumerate(patch.routers)},
            }
        )
        nll_sum, n_pred = sums["nll"], int(sums["n"])
        type_k = np.array([sums[f"type_k{i}"] for i in range(3)])
        type_n = np.array([sums[f"type_n{i}"] for i in range(3)])
        for i, r in enumerate(patch.routers):
            r.counters.tokens = int(sums[f"tokens{i}"])
            r.counters.experts = int(sums[f"experts{i}"])
        elapsed = max(gather_objects(elapsed))  # the ranks run side by side: the slowest one's time
    flops = patch.flops()
    per_layer = patch.mean_k_per_layer()
    out = {
        "loss": nll_sum / max(n_pred, 1),
        "mean_k": float(np.mean(per_layer)),
        "k_per_layer": per_layer,
        "flops_reduction": flops["flops_reduction"],
        "tokens_per_s": n_total / elapsed if elapsed > 0 else float("nan"),
    }
    if types is not None:
        out["k_by_type"] = {
            name: float(type_k[i] / type_n[i]) if type_n[i] else float("nan")
            for i, name in enumerate(TOKEN_TYPES)
        }
        out["tokens_by_type"] = {name: int(type_n[i]) for i, name in enumerate(TOKEN_TYPES)}
    return out


def interpolate_static(static_k: list[int], static_loss: list[float], mean_k: float) -> float:
    """The static top-k loss at a fractional ``mean_k``: linear interpolation between the neighbouring integer
    k (mixing top-k and top-(k+1) tokens in proportion gives that mean k and, to first order, that loss).

    Raises:
        ValueError: ``mean_k`` outside ``[min k, max k]`` of the static points.
    """
    ks = np.asarray(static_k, dtype=float)
    if not ks.min() <= mean_k <= ks.max():
        raise ValueError(
            f"mean_k must be within the static points' range [{ks.min()}, {ks.max()}], got {mean_k}"
        )
    return float(np.interp(mean_k, ks, np.asarray(static_loss, dtype=float)))
