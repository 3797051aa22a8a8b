"""The VideoCon-Physics auto-evaluator's scoring rule and its two prompt templates (arXiv:2406.03520, the VideoCon-Physics auto-evaluator).

VideoPhy's judge (VideoCon-Physics, an mPLUG-Owl-Video 7B model fine-tuned on the human labels) answers one of two
questions about a video, and the score is the probability of "Yes" renormalised over {"Yes", "No"} at the position
that predicts the answer's first token:

    s = P(Yes) / (P(Yes) + P(No)) = sigmoid(l_Yes - l_No)                      (1)  (our numbering)

where ``l`` are the logits at the last non-pad token of the prompt. The prompt templates below are byte-exact with
the ones the authors' inference script fills (mPLUG-Owl's conversation preamble, the ``<|video|>`` media token, the
question, and ``AI: `` with its trailing space). The physical-commonsense (PC) question does not include the caption.

Nothing here needs the 7B weights: :func:`entailment_score` works on any logits, so the same rule serves the real
judge (when its checkpoint and the mPLUG-Owl code are present locally) and any other vision-language model.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from iclr25_shared.checks import check_choice, check_int

__all__ = [
    "PC_TEMPLATE",
    "PREAMBLE",
    "SA_TEMPLATE",
    "TASKS",
    "entailment_score",
    "last_non_pad_index",
    "pc_prompt",
    "sa_prompt",
    "task_prompt",
    "yes_no_token_ids",
]

TASKS = ("sa", "pc")
"""The two questions: semantic adherence (the video entails the caption) and physical commonsense."""

PREAMBLE = (
    "The following is a conversation between a curious human and AI assistant. The assistant gives helpful, "
    "detailed, and polite answers to the user's questions.\nHuman: <|video|>\nHuman: "
)
"""mPLUG-Owl's conversation preamble with the video media token, shared by both templates."""

SA_TEMPLATE = PREAMBLE + 'Does this video entail the description: "{caption}"?\nAI: '
"""Semantic-adherence question; ``{caption}`` is replaced verbatim (no escaping of quotes inside the caption)."""

PC_TEMPLATE = PREAMBLE + "Does this video follow the physical laws?\nAI: "
"""Physical-commonsense question; caption-independent."""


def _check_caption(caption: Any) -> str:
    if not isinstance(caption, str):
        raise TypeError(f"caption must be a str, got {type(caption).__name__}")
    if not caption.strip():
        raise ValueError("caption must be a non-empty string, got an empty or blank caption")
    return caption


def sa_prompt(caption: str) -> str:
    """The semantic-adherence prompt for ``caption``, byte-exact with the authors' template.

    The caption is inserted by string concatenation, so braces or quotes in it are kept as they are.

    Raises:
        TypeError: ``caption`` is not a str.
        ValueError: ``caption`` is empty or blank.
    """
    caption = _check_caption(caption)
    head, tail = SA_TEMPLATE.split("{caption}")
    return head + caption + tail


def pc_prompt(caption: str | None = None) -> str:
    """The physical-commonsense prompt; the caption is accepted for symmetry and ignored (the question has none)."""
    if caption is not None:
        _check_caption(caption)
    return PC_TEMPLATE


def task_prompt(task: str, caption: str) -> str:
    """``sa_prompt(caption)`` for ``task="sa"``, ``pc_prompt()`` for ``task="pc"``.

    Raises:
        ValueError: ``task`` not in ``("sa", "pc")``; empty caption.
    """
    check_choice("task", task, TASKS)
    return sa_prompt(caption) if task == "sa" else pc_prompt(caption)


def yes_no_token_ids(tokenizer: Any) -> tuple[int, int]:
    """First sub-token ids of "Yes" and "No" under ``tokenizer`` (a Hugging Face tokenizer), as the judge reads them.

    Raises:
        ValueError: the tokenizer maps "Yes" or "No" to no token, or both to the same first token.
    """
    ids = []
    for word in ("Yes", "No"):
        enc = tokenizer.encode(word, add_special_tokens=False)
        if len(enc) == 0:
            raise ValueError(f"the tokenizer encodes {word!r} to no token; it cannot serve as a yes/no judge")
        ids.append(int(enc[0]))
    if ids[0] == ids[1]:
        raise ValueError(f"'Yes' and 'No' share their first token id {ids[0]}; the score (1) is undefined")
    return ids[0], ids[1]


def last_non_pad_index(attention_mask: Any) -> np.ndarray:
    """Index of the last non-pad token of each row (right or left padding).

    Args:
        attention_mask: ``(batch, seq)`` array of 0/1 (or bool): 1 marks a real token.

    Returns:
        ``(batch,)`` int64 indices.

    Raises:
        ValueError: not 2-D, entries other than 0/1, or a row with no real token.
    """
    mask = np.asarray(_to_numpy(attention_mask))
    if mask.ndim != 2:
        raise ValueError(f"attention_mask must have shape (batch, seq), got shape {mask.shape}")
    if not np.isin(mask, (0, 1)).all():
        raise ValueError("attention_mask must hold only 0 and 1")
    mask = mask.astype(bool)
    empty = ~mask.any(axis=1)
    if empty.any():
        raise ValueError(f"attention_mask row {int(np.flatnonzero(empty)[0])} has no real token")
    seq = mask.shape[1]
    return (seq - 1 - np.argmax(mask[:, ::-1], axis=1)).astype(np.int64)


def _to_numpy(x: Any) -> Any:
    if hasattr(x, "detach"):  # torch tensor (any device, any dtype)
        x = x.detach()
        if str(x.dtype) in ("torch.bfloat16", "torch.float16"):
            x = x.float()
        return x.cpu().numpy()
    return x


def entailment_score(
    logits: Any,
    *,
    yes_id: int,
    no_id: int,
    attention_mask: Any = None,
    input_ids: Any = None,
    pad_id: int | None = None,
) -> np.ndarray:
    """Eq. (1): ``P(Yes) / (P(Yes) + P(No))`` at the last non-pad token of each sequence.

    Computed as ``sigmoid(l_Yes - l_No)`` in float64, which equals the ratio of softmax probabilities exactly (the
    softmax normaliser cancels) and does not overflow for large logits. fp16/bf16 logits are upcast first.

    Args:
        logits: ``(batch, seq, vocab)`` float array (numpy or torch, any device), or ``(batch, vocab)`` already at
            the answer position.
        yes_id, no_id: vocabulary ids of the first sub-token of "Yes" and "No" (:func:`yes_no_token_ids`).
        attention_mask: ``(batch, seq)`` 0/1, 1 = real token. Takes precedence over ``input_ids``/``pad_id``.
        input_ids, pad_id: alternatively, the token ids and the pad id; pad positions are ``input_ids == pad_id``.
            With neither, the last position is used.

    Returns:
        ``(batch,)`` float64 scores in ``[0, 1]``; 0.5 when the two logits are equal; swapping them gives ``1 - s``.

    Raises:
        ValueError: wrong rank; ids outside the vocabulary; mask/ids shape not ``(batch, seq)``; non-finite logits
            at the read position; a row that is all padding.

    References:
        Bansal et al., "VideoPhy: Evaluating Physical Commonsense for Video Generation", ICLR 2025,
        arXiv:2406.03520, VideoCon-Physics auto-evaluator; the authors' ``entailment_inference.py``.
    """
    arr = np.asarray(_to_numpy(logits), dtype=np.float64)
    if arr.ndim not in (2, 3):
        raise ValueError(
            f"logits must have shape (batch, seq, vocab) or (batch, vocab), got shape {arr.shape}"
        )
    vocab = arr.shape[-1]
    yes_id = check_int("yes_id", yes_id, low=0, high=vocab - 1)
    no_id = check_int("no_id", no_id, low=0, high=vocab - 1)
    if yes_id == no_id:
        raise ValueError(f"yes_id and no_id must differ, both are {yes_id}")
    if arr.ndim == 3:
        batch, seq = arr.shape[:2]
        if attention_mask is None and input_ids is not None:
            if pad_id is None:
                raise ValueError("input_ids was given without pad_id; pass pad_id (or an attention_mask)")
            ids = np.asarray(_to_numpy(input_ids))
            if ids.shape != (batch, seq):
                raise ValueError(f"input_ids must have shape {(batch, seq)} (batch, seq), got {ids.shape}")
            attention_mask = (ids != pad_id).astype(np.int64)
        if attention_mask is not None:
            mask = np.asarray(_to_numpy(attention_mask))
            if mask.shape != (batch, seq):
                raise ValueError(
                    f"attention_mask must have shape {(batch, seq)} (batch, seq), got {mask.shape}"
                )
            pos = last_non_pad_index(mask)
        else:
            pos = np.full(batch, seq - 1, dtype=np.int64)
        rows = arr[np.arange(batch), pos]
    else:
        rows = arr
    diff = rows[:, yes_id] - rows[:, no_id]
    bad = ~np.isfinite(diff)
    if bad.any():
        raise ValueError(
            f"logits of Yes/No are not finite at the read position of row {int(np.flatnonzero(bad)[0])}"
        )
    # numerically stable sigmoid
    out = np.empty_like(diff)
    pos_d = diff >= 0
    out[pos_d] = 1.0 / (1.0 + np.exp(-diff[pos_d]))
    e = np.exp(diff[~pos_d])
    out[~pos_d] = e / (1.0 + e)
    return out
