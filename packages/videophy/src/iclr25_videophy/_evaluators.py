"""Evaluators behind one protocol: ``score(videos, captions, task) -> (n,) scores``.

- :class:`HumanLabels`: the human (or any stored) labels of a label file.
- :class:`LogitJudge`: any vision-language model that returns next-token logits, read with the paper's prompt
  templates and Eq. (1) (:mod:`iclr25_videophy._judge`). VideoCon-Physics is this with the authors' mPLUG-Owl-Video
  model as ``forward``.
- :class:`FrameEvaluator` subclasses score sampled frames: :class:`TemporalCoherence` (training-free; detects
  shuffled frames) and :class:`iclr25_videophy.PhysicsPlausibility` (trained on rendered clips).

:func:`evaluate_videos` runs an SA and a PC evaluator over a prompt→video mapping and returns
:class:`~iclr25_videophy.Judgement` rows for :func:`~iclr25_videophy.aggregate`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from iclr25_shared.checks import check_choice, check_int
from iclr25_videophy._io import Judgement, Prompt, read_labels
from iclr25_videophy._judge import TASKS, entailment_score, task_prompt
from iclr25_videophy._video import read_video

__all__ = ["Evaluator", "FrameEvaluator", "HumanLabels", "LogitJudge", "TemporalCoherence", "evaluate_videos"]


@runtime_checkable
class Evaluator(Protocol):
    """Anything with ``tasks`` (a subset of ``("sa", "pc")``) and ``score(videos, captions, task)``."""

    tasks: tuple[str, ...]

    def score(self, videos: Sequence[str], captions: Sequence[str], task: str) -> np.ndarray: ...


def _check_task(evaluator: Any, task: str) -> None:
    check_choice("task", task, TASKS)
    if task not in evaluator.tasks:
        raise ValueError(f"{type(evaluator).__name__} scores only {evaluator.tasks}, not task {task!r}")


class HumanLabels:
    """Scores looked up in a label file (:func:`~iclr25_videophy.read_labels` formats) by video path.

    Args:
        labels: a path to a label CSV, or :class:`~iclr25_videophy.Judgement` rows.

    A video is found by its exact path, else by its file name when exactly one labelled video has it (label files
    often hold relative paths or URLs).

    Raises (``score``):
        ValueError: a video with no label, or an ambiguous file name (the video is named); labels for one video
            that disagree (at construction).
    """

    tasks = TASKS
    name = "human-labels"

    def __init__(self, labels: Any) -> None:
        rows = read_labels(labels) if not isinstance(labels, (list, tuple)) else list(labels)
        self._by_video: dict[str, Judgement] = {}
        for j in rows:
            old = self._by_video.get(j.videopath)
            if old is not None and (old.sa, old.pc) != (j.sa, j.pc):
                raise ValueError(
                    f"labels for video {j.videopath!r} disagree: {old.sa, old.pc} vs {j.sa, j.pc}"
                )
            self._by_video[j.videopath] = j

    def _lookup(self, video: str) -> Judgement:
        j = self._by_video.get(video)
        if j is not None:
            return j
        # label files often hold relative paths or URLs: fall back to the file name when it is unambiguous
        name = os.path.basename(video)
        hits = [j for key, j in self._by_video.items() if os.path.basename(key) == name]
        if len(hits) == 1:
            return hits[0]
        why = "several labelled videos share its file name" if hits else "no label for it"
        raise ValueError(f"no label for video {video!r} in the label file ({why})")

    def score(self, videos: Sequence[str], captions: Sequence[str], task: str) -> np.ndarray:
        _check_task(self, task)
        out = []
        for v in videos:
            j = self._lookup(str(v))
            out.append(j.sa if task == "sa" else j.pc)
        return np.asarray(out, dtype=np.float64)


class FrameEvaluator:
    """Base class: decode ``num_frames`` sampled frames per video (at ``size``) and call ``score_frames``."""

    tasks: tuple[str, ...] = ("pc",)
    num_frames: int = 32
    size: tuple[int, int] | None = None

    def score_frames(self, frames: np.ndarray) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def score(self, videos: Sequence[str], captions: Sequence[str], task: str) -> np.ndarray:
        _check_task(self, task)
        return np.asarray(
            [self.score_frames(read_video(v, self.num_frames, size=self.size)) for v in videos],
            dtype=np.float64,
        )


class TemporalCoherence(FrameEvaluator):
    """Training-free PC proxy: how much smaller adjacent-frame changes are than changes between arbitrary frames.

    ``s = 1 - d_adj / d_all`` clipped to ``[0, 1]``, where ``d_adj`` is the mean absolute difference of consecutive
    sampled frames and ``d_all`` the mean over all frame pairs. Natural footage changes smoothly (``s`` near 1);
    shuffled frames give ``s`` near 0. The score is exactly invariant to playing the video backwards, so it cannot
    see the arrow of time (a limitation the reproduction measures). Frames are converted to grey at ``size``.

    Args:
        num_frames: frames sampled per video (``>= 3``).
        size: ``(height, width)`` frames are resized to before comparison.
    """

    tasks = ("pc",)
    name = "temporal-coherence"

    def __init__(self, num_frames: int = 32, size: tuple[int, int] = (64, 64)) -> None:
        self.num_frames = check_int("num_frames", num_frames, low=3)
        self.size = (check_int("size[0]", size[0], low=1), check_int("size[1]", size[1], low=1))

    def score_frames(self, frames: np.ndarray) -> float:
        """Score ``(T, H, W[, 3])`` frames (uint8 or float), ``T >= 3``."""
        f = np.asarray(frames, dtype=np.float64)
        if f.ndim == 4:
            f = f.mean(axis=-1)
        if f.ndim != 3 or f.shape[0] < 3:
            raise ValueError(
                f"frames must have shape (T, H, W[, 3]) with T >= 3, got {np.asarray(frames).shape}"
            )
        flat = f.reshape(f.shape[0], -1)
        # Reversing the frames permutes the rows |f_a - f_b| without changing any row, so per-row means are
        # bit-identical; math.fsum (exactly rounded, order independent) then adds them. The score is therefore
        # bit-for-bit reversal invariant (no tie broken by rounding noise). All rows have the same length, so the
        # mean of row means is the mean of all entries.
        adj = np.abs(np.diff(flat, axis=0)).mean(axis=1)
        d_adj = math.fsum(adj.tolist()) / adj.size
        i, j = np.triu_indices(flat.shape[0], k=1)
        pairs = np.abs(flat[i] - flat[j]).mean(axis=1)
        d_all = math.fsum(pairs.tolist()) / pairs.size
        if d_all == 0:
            return 1.0  # a still video is perfectly coherent
        return float(np.clip(1.0 - d_adj / d_all, 0.0, 1.0))


class LogitJudge:
    """A vision-language judge read through Eq. (1) with the paper's two templates.

    Args:
        forward: ``forward(frames, prompts) -> (logits, attention_mask)`` where ``frames`` is a list of
            ``(num_frames, H, W, 3)`` uint8 arrays, ``prompts`` the filled templates, ``logits`` ``(batch, seq,
            vocab)`` and ``attention_mask`` ``(batch, seq)`` (1 = real token). The model does its own media-token
            expansion and padding (any side).
        yes_id, no_id: token ids of the first sub-token of "Yes"/"No" (:func:`~iclr25_videophy.yes_no_token_ids`).
        num_frames: frames per video (32 in the paper); size: ``(H, W)`` to decode at (224x224 in mPLUG-Owl).
        batch_size: videos per forward call.
    """

    tasks = TASKS
    name = "logit-judge"

    def __init__(
        self,
        forward: Callable[[list[np.ndarray], list[str]], tuple[Any, Any]],
        *,
        yes_id: int,
        no_id: int,
        num_frames: int = 32,
        size: tuple[int, int] | None = (224, 224),
        batch_size: int = 8,
    ) -> None:
        if not callable(forward):
            raise TypeError("forward must be callable: forward(frames, prompts) -> (logits, attention_mask)")
        self.forward = forward
        self.yes_id, self.no_id = yes_id, no_id
        self.num_frames = check_int("num_frames", num_frames, low=1)
        self.size = size
        self.batch_size = check_int("batch_size", batch_size, low=1)

    def score(self, videos: Sequence[str], captions: Sequence[str], task: str) -> np.ndarray:
        _check_task(self, task)
        if len(videos) != len(captions):
            raise ValueError(f"videos and captions differ in length: {len(videos)} vs {len(captions)}")
        out: list[np.ndarray] = []
        for s in range(0, len(videos), self.batch_size):
            vids, caps = videos[s : s + self.batch_size], captions[s : s + self.batch_size]
            frames = [read_video(v, self.num_frames, size=self.size) for v in vids]
            prompts = [task_prompt(task, c) for c in caps]
            logits, mask = self.forward(frames, prompts)
            out.append(entailment_score(logits, yes_id=self.yes_id, no_id=self.no_id, attention_mask=mask))
        return np.concatenate(out) if out else np.zeros(0)


def _score_batch(ev: Evaluator, task: str, videos: list[str], captions: list[str]) -> np.ndarray:
    s = np.asarray(ev.score(videos, captions, task), dtype=np.float64)
    if s.shape != (len(videos),):
        raise ValueError(
            f"{type(ev).__name__} returned {s.shape} {task} scores for a batch of {len(videos)} videos "
            f"(first: {videos[0]!r})"
        )
    return s


def evaluate_videos(
    entries: Sequence[tuple[str, Prompt, str]],
    *,
    sa: Evaluator | None,
    pc: Evaluator | None,
    source: str | None = None,
) -> list[Judgement]:
    """Score every video of a prompt→video mapping for SA and PC.

    Args:
        entries: ``(videopath, prompt, source)`` per video (:func:`~iclr25_videophy.read_mapping`,
            :func:`~iclr25_videophy.match_videos`, or what :func:`~iclr25_videophy.generate` returns).
        sa, pc: the evaluators (``None`` leaves that score nan).
        source: overrides every entry's source (the model's name) when given.

    Returns:
        One :class:`~iclr25_videophy.Judgement` per entry, in order.

    Under ``torchrun`` / ``accelerate launch`` the videos are farmed over the ranks in batches of the evaluator's
    ``batch_size`` (one video for frame evaluators and labels) and every rank gets every score: the same scores as
    one process, whatever the number of ranks.

    Raises:
        ValueError: no entries; an evaluator returning the wrong number of scores or scores outside [0, 1] / 1..5.
    """
    if not entries:
        raise ValueError("no videos to evaluate (the mapping is empty)")
    from iclr25_shared.distributed import farm

    videos = [e[0] for e in entries]
    captions = [e[1].caption for e in entries]
    scores = {}
    for task, ev in (("sa", sa), ("pc", pc)):
        if ev is None:
            scores[task] = np.full(len(entries), math.nan)
            continue
        # a job farm over the ranks (a loop in one process): one job per batch of the evaluator's own batch size,
        # so every video is scored in the batch it has in a one-process run (same padding, same arithmetic)
        size = int(getattr(ev, "batch_size", 1))
        chunks = [(s, min(s + size, len(videos))) for s in range(0, len(videos), size)]
        parts = farm(
            chunks,
            lambda c, ev=ev, task=task: _score_batch(ev, task, videos[c[0] : c[1]], captions[c[0] : c[1]]),
        )
        s = np.concatenate(parts)
        if not np.isfinite(s).all() or s.min() < 0 or s.max() > 5:
            raise ValueError(
                f"{type(ev).__name__} returned {task} scores outside [0, 1] (or 1..5) or non-finite"
            )
        scores[task] = s
    return [
        Judgement(
            videopath=v,
            caption=p.caption,
            sa=float(scores["sa"][i]),
            pc=float(scores["pc"][i]),
            source=source if source is not None else src,
            states_of_matter=p.states_of_matter,
            complexity=p.complexity,
        )
        for i, (v, p, src) in enumerate(entries)
    ]
