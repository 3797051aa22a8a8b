"""Prompt-based classification by label-word likelihood (the MeZO/LOZO evaluation protocol), for causal LMs.

An example is a prompt ``template.format(text=...)``; the model's next-token logits at the prompt's last position,
restricted to one label word per class, are the class scores. Training minimises the cross-entropy of those
scores (computed in float32 whatever the model's dtype); accuracy is the argmax.

Two tasks: Wikipedia topic classification (11 topics, :func:`iclr25_shared.data.wiki_summaries`; the CLI's
default) and binary movie-review sentiment (:func:`iclr25_lozo._data.movie_review_sentiment`), the SST-2 setting of
the paper (arXiv:2410.07698, Section 5) with MeZO's SST-2 prompt ``<sentence> It was [great|terrible]``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from iclr25_shared.data import TextClassification

__all__ = [
    "SENTIMENT_LABEL_WORDS",
    "SENTIMENT_TEMPLATE",
    "WIKI_LABEL_WORDS",
    "WIKI_TEMPLATE",
    "Batch",
    "LabelWordTask",
    "balanced_split",
    "kshot_split",
]

# One single-token label word per Wikipedia topic (checked against the SmolLM2 tokenizer in the tests).
WIKI_LABEL_WORDS = {
    "Arts": " Art",
    "Biology and health sciences": " Biology",
    "Everyday life": " Everyday",
    "Geography": " Geography",
    "History": " History",
    "Mathematics": " Mathematics",
    "People": " People",
    "Philosophy and religion": " Religion",
    "Physical sciences": " Physics",
    "Society and social sciences": " Society",
    "Technology": " Technology",
}
WIKI_TEMPLATE = "Article: {text}\nTopic (Art, Biology, Everyday, Geography, History, Mathematics, People, Religion, Physics, Society or Technology):"

# MeZO's SST-2 prompt (Malladi et al. 2023, arXiv:2305.17333, prompt table: "<S1> It was [MASK] ." with great /
# terrible), asked as a causal LM next-token question. One token each in the SmolLM2 tokenizer (checked in the tests).
SENTIMENT_LABEL_WORDS = {"negative": " terrible", "positive": " great"}
SENTIMENT_TEMPLATE = "{text} It was"


@dataclass
class Batch:
    """Tokenised prompts. ``input_ids``/``attention_mask``: ``(batch, seq)`` int64, left-padded; ``labels``: ``(batch,)``."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor

    def to(self, device: Any) -> Batch:
        return Batch(self.input_ids.to(device), self.attention_mask.to(device), self.labels.to(device))

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def balanced_split(
    labels: np.ndarray,
    *,
    shots: int,
    eval_per_class: int,
    seed: int,
    class_names: Sequence[str] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """A k-shot training set (``shots`` per class) and a disjoint balanced evaluation set.

    Returns:
        ``(train_index, eval_index)`` int64 arrays into ``labels``, each shuffled.

    Raises:
        ValueError: ``shots < 1``, ``eval_per_class < 1``, or some class has fewer than
            ``shots + eval_per_class`` examples (the message names the class and its count).
    """
    if shots < 1:
        raise ValueError(f"shots must be >= 1, got {shots}")
    if eval_per_class < 1:
        raise ValueError(f"eval_per_class must be >= 1, got {eval_per_class}")
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    smallest = int(counts.min())
    if shots + eval_per_class > smallest:
        label = int(classes[counts.argmin()])
        name = repr(class_names[label]) if class_names is not None else f"label {label}"
        raise ValueError(
            f"shots={shots} plus eval_per_class={eval_per_class} exceeds the {smallest} examples of the smallest "
            f"class ({name}); at most shots={smallest - eval_per_class} fits"
        )
    train, held = [], []
    for cls in classes:
        idx = rng.permutation(np.flatnonzero(labels == cls))
        train.append(idx[:shots])
        held.append(idx[shots : shots + eval_per_class])
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(held))


def kshot_split(
    labels: np.ndarray, *, shots: int, val_per_class: int, test_per_class: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint k-shot training, validation and test sets, each balanced over the classes (the few-shot protocol
    of MeZO/LOZO: ``shots`` training and as many validation examples per class, drawn per seed).

    Returns:
        ``(train, val, test)`` int64 index arrays into ``labels``, each shuffled.

    Raises:
        ValueError: a size < 1, or some class has fewer than ``shots + val_per_class + test_per_class`` examples.
    """
    for name, value in (
        ("shots", shots),
        ("val_per_class", val_per_class),
        ("test_per_class", test_per_class),
    ):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    train, held = balanced_split(
        labels, shots=shots, eval_per_class=val_per_class + test_per_class, seed=seed
    )
    rng = np.random.default_rng([seed, 1])
    val, test = [], []
    for cls in np.unique(labels):
        idx = held[labels[held] == cls]
        val.append(idx[:val_per_class])
        test.append(idx[val_per_class:])
    return train, rng.permutation(np.concatenate(val)), rng.permutation(np.concatenate(test))


@dataclass
class LabelWordTask:
    """Classification of texts by the LM's likelihood of one label word per class.

    Args:
        tokenizer: a Hugging Face tokenizer.
        classes: class names, in label order.
        label_words: class name -> a word that must encode to exactly one token (with its leading space).
        template: prompt with a ``{text}`` field.
        max_text_tokens: each text is cut to this many tokens before it goes into the template.

    Raises:
        ValueError: a class has no label word, or a label word is not a single token, or two classes share one.
    """

    tokenizer: Any
    classes: Sequence[str]
    label_words: dict[str, str] = field(default_factory=lambda: dict(WIKI_LABEL_WORDS))
    template: str = WIKI_TEMPLATE
    max_text_tokens: int = 24

    def __post_init__(self) -> None:
        missing = [c for c in self.classes if c not in self.label_words]
        if missing:
            raise ValueError(f"label_words has no word for class(es) {missing}")
        ids = []
        for c in self.classes:
            tokens = self.tokenizer(self.label_words[c], add_special_tokens=False).input_ids
            if len(tokens) != 1:
                raise ValueError(
                    f"label word {self.label_words[c]!r} for {c!r} is {len(tokens)} tokens; it must be one"
                )
            ids.append(tokens[0])
        if len(set(ids)) != len(ids):
            raise ValueError("two classes share a label-word token")
        if "{text}" not in self.template:
            raise ValueError("template must contain a {text} field")
        self.label_token_ids = torch.tensor(ids, dtype=torch.long)

    def prompt(self, text: str) -> str:
        ids = self.tokenizer(text, add_special_tokens=False).input_ids[: self.max_text_tokens]
        short = self.tokenizer.decode(ids).strip()
        return self.template.format(text=short)

    def encode(self, data: TextClassification) -> Batch:
        """Tokenise every example of ``data`` into one left-padded batch (split it with :meth:`batches`)."""
        prompts = [self.prompt(t) for t in data.texts]
        old_side = self.tokenizer.padding_side
        self.tokenizer.padding_side = "left"
        try:
            enc = self.tokenizer(prompts, return_tensors="pt", padding=True)
        finally:
            self.tokenizer.padding_side = old_side
        return Batch(enc["input_ids"], enc["attention_mask"], torch.as_tensor(data.labels, dtype=torch.long))

    @staticmethod
    def select(batch: Batch, index: np.ndarray | Sequence[int]) -> Batch:
        """Rows ``index`` of a left-padded batch, without the columns that are padding in every selected row."""
        idx = torch.as_tensor(np.asarray(index), dtype=torch.long)
        mask = batch.attention_mask[idx]
        keep = int(mask.sum(dim=1).max())
        return Batch(batch.input_ids[idx, -keep:], mask[:, -keep:], batch.labels[idx])

    @staticmethod
    def batches(batch: Batch, size: int) -> Iterator[Batch]:
        """Consecutive slices of ``size`` rows, each trimmed like :meth:`select`."""
        for start in range(0, len(batch), size):
            yield LabelWordTask.select(batch, np.arange(start, min(start + size, len(batch))))

    def class_logits(self, model: Any, batch: Batch) -> torch.Tensor:
        """``(batch, num_classes)`` float32 label-word logits at the last prompt position."""
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, logits_to_keep=1)
        logits = out.logits[:, -1, :].float()
        return logits[:, self.label_token_ids.to(logits.device)]

    def loss(self, model: Any, batch: Batch) -> torch.Tensor:
        """Mean cross-entropy over the label words (float32 scalar)."""
        logits = self.class_logits(model, batch)
        return F.cross_entropy(logits, batch.labels.to(logits.device))

    @torch.no_grad()
    def scores(self, model: Any, batch: Batch, batch_size: int = 32) -> torch.Tensor:
        """``(n, num_classes)`` float32 label-word logits of every row, computed ``batch_size`` rows at a time."""
        return torch.cat([self.class_logits(model, b).cpu() for b in self.batches(batch, batch_size)])

    @torch.no_grad()
    def predict(self, model: Any, batch: Batch, batch_size: int = 32) -> np.ndarray:
        """Predicted class ids ``(n,)`` int64."""
        return self.scores(model, batch, batch_size).argmax(dim=1).numpy()
