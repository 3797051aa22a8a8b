"""Generation runner: one or more videos per prompt from any text-to-video model, with a prompt→file mapping.

File names never come from the prompt (long prompts, slashes and quotes broke peers' filename matching); each video
is ``videos/<sha1(caption)[:16]>_<k>.mp4`` and ``mapping.csv`` (``videopath, caption, states_of_matter, complexity,
source``) says which prompt it belongs to. The mapping is rewritten atomically after every video, and a re-run skips
the videos it already lists whose file decodes, so an interrupted run resumes where it stopped. Seeds are derived
from ``(seed, caption, k)``, so a resumed or reordered run produces the same videos.

Under ``torchrun`` / ``accelerate launch`` (a process group of several ranks) the videos are a job farm
(:func:`iclr25_shared.distributed.farm`): rank ``r`` generates videos ``r, r + world_size, ...`` of the
``(prompt, k)`` list into the shared folder and records them in its own ``mapping.rank<r>.csv`` after each video
(resumable); at the end rank 0 writes ``mapping.csv`` from every rank's videos, in the one-process order, and removes
the rank files. The videos and the mapping are the one-process run's whatever the number of ranks.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from iclr25_shared.checks import check_float, check_int
from iclr25_shared.distributed import farm, world
from iclr25_videophy._io import Prompt, read_mapping, write_mapping
from iclr25_videophy._video import VideoDecodeError, count_frames, write_video

__all__ = ["DiffusersGenerator", "generate", "video_seed"]


def video_seed(seed: int, caption: str, k: int) -> int:
    """The seed of the ``k``-th video of ``caption`` (a 31-bit int from ``SeedSequence((seed, sha1, k))``)."""
    digest = int(hashlib.sha1(caption.encode("utf-8")).hexdigest()[:8], 16)
    return int(np.random.SeedSequence([seed, digest, k]).generate_state(1)[0] & 0x7FFFFFFF)


class DiffusersGenerator:
    """Adapter: a diffusers text-to-video pipeline as a ``(prompt, seed) -> frames`` callable.

    Calls ``pipe(prompt, num_frames=..., num_inference_steps=..., generator=torch.Generator().manual_seed(seed),
    output_type="np", **call_kwargs)`` and returns ``output.frames[0]`` as ``(T, H, W, 3)``. Works with
    ``TextToVideoSDPipeline``, ``CogVideoXPipeline`` and other pipelines that return ``.frames``.

    Args:
        pipe: the pipeline object (already on its device).
        num_frames: frames per video; num_inference_steps: denoising steps.
        call_kwargs: more keyword arguments for the pipeline (height, width, guidance_scale, ...).
    """

    def __init__(
        self, pipe: Any, *, num_frames: int = 16, num_inference_steps: int = 25, **call_kwargs: Any
    ) -> None:
        if not callable(pipe):
            raise TypeError(f"pipe must be a callable diffusers pipeline, got {type(pipe).__name__}")
        self.pipe = pipe
        self.num_frames = check_int("num_frames", num_frames, low=1)
        self.num_inference_steps = check_int("num_inference_steps", num_inference_steps, low=1)
        self.call_kwargs = call_kwargs

    def __call__(self, prompt: str, seed: int) -> np.ndarray:
        import torch

        gen = torch.Generator(device="cpu").manual_seed(int(seed))
        out = self.pipe(
            prompt,
            num_frames=self.num_frames,
            num_inference_steps=self.num_inference_steps,
            generator=gen,
            output_type="np",
            **self.call_kwargs,
        )
        frames = out.frames[0] if hasattr(out, "frames") else out[0][0]
        if hasattr(frames, "detach"):
            frames = frames.detach().float().cpu().numpy()
        return np.asarray(frames)


def _decodes(path: Path) -> bool:
    try:
        count_frames(path)
    except (VideoDecodeError, FileNotFoundError):
        return False
    return True


def generate(
    generator: Callable[[str, int], Any],
    prompts: Sequence[Prompt],
    out_dir: str | os.PathLike[str],
    *,
    videos_per_prompt: int = 1,
    seed: int = 0,
    fps: float = 8.0,
    source: str = "",
    resume: bool = True,
    progress: Callable[[Any], Any] | None = None,
) -> list[tuple[str, Prompt, str]]:
    """Generate ``videos_per_prompt`` videos for each prompt into ``out_dir`` and write ``out_dir/mapping.csv``.

    Args:
        generator: ``generator(prompt, seed) -> frames`` with frames ``(T, H, W, 3)`` uint8 or float in [0, 1]
            (:class:`DiffusersGenerator` wraps a diffusers pipeline).
        prompts: the prompt set (non-empty).
        out_dir: output folder (created). An existing ``mapping.csv`` is resumed when ``resume``; without
            ``resume`` a folder that already has one is refused (nothing is overwritten).
        videos_per_prompt: videos per prompt (``>= 1``); seed: base seed (:func:`video_seed`).
        fps: frame rate written into the files; source: the model's name, stored in the mapping.
        progress: optional wrapper for the work iterable (e.g. a tqdm factory).

    Returns:
        ``(videopath, prompt, source)`` per video (absolute paths), in prompt order.

    Raises:
        ValueError: an empty prompt set; ``out_dir`` has a mapping and ``resume`` is false; the generator returned
            something that is not ``(T, H, W, 3)`` frames (the prompt is named).
        TypeError: ``generator`` not callable.
    """
    videos_per_prompt, seed = _checked(generator, prompts, videos_per_prompt, seed, fps)
    out = Path(out_dir)
    mapping_path = out / "mapping.csv"
    here = world()
    if mapping_path.exists() and not resume:
        raise ValueError(f"{str(mapping_path)!r} exists; pass resume=True (--resume) to continue that run")
    done = _listed(out, mapping_path) if resume else {}
    (out / "videos").mkdir(parents=True, exist_ok=True)
    work = [(p, k) for p in prompts for k in range(videos_per_prompt)]
    batch = _Batch(generator, work, out, done, seed=seed, fps=fps, source=source, here=here)
    progress_fn = (lambda it: progress(list(it))) if progress is not None else None
    outcome = farm(list(range(len(work))), batch.one, progress=progress_fn)
    if here.is_distributed:  # every rank's new videos, in the one-process order
        for key, entry, new in outcome:
            if new:
                batch.entries[key] = entry
    if (
        here.is_main
    ):  # the final mapping: this run's videos in prompt order, then earlier ones it did not ask for
        parts = sorted(out.glob("mapping.rank*.csv"))
        ordered = {key: entry for key, entry, _ in outcome}
        ordered.update((key, entry) for key, entry in batch.entries.items() if key not in ordered)
        batch.save(mapping_path, ordered)
        for part in parts:  # merged into mapping.csv
            part.unlink(missing_ok=True)
    return [entry for _, entry, _ in outcome]


_Key = tuple[str, str]
"""(caption, file name) of one video."""
_Entry = tuple[str, Prompt, str]
"""(absolute video path, prompt, source) of one video."""


def _checked(
    generator: Any, prompts: Sequence[Prompt], videos_per_prompt: int, seed: int, fps: float
) -> tuple[int, int]:
    """Refuse a generator that is not callable, an empty prompt set and bad counts; the checked count and seed."""
    if not callable(generator):
        raise TypeError(
            f"generator must be callable (prompt, seed) -> frames, got {type(generator).__name__}"
        )
    if not prompts:
        raise ValueError("the prompt set is empty; nothing to generate")
    videos_per_prompt = check_int("videos_per_prompt", videos_per_prompt, low=1)
    seed = check_int("seed", seed, low=0)
    check_float("fps", fps, low=0.0, low_inclusive=False)
    return videos_per_prompt, seed


def _listed(out: Path, mapping_path: Path) -> dict[_Key, _Entry]:
    """The videos an earlier run listed: the mapping, then the rank files a distributed run left (killed before
    rank 0 merged them); the first listing of a video wins."""
    done: dict[_Key, _Entry] = {}
    for m in [mapping_path, *sorted(out.glob("mapping.rank*.csv"))]:
        if m.exists():
            for video, p, src in read_mapping(m):
                done.setdefault((p.caption, Path(video).name), (video, p, src))
    return done


class _Batch:
    """One call of :func:`generate`: the ``(prompt, k)`` work list, what earlier runs left (``done``), every video
    listed so far (``entries``) and this rank's new videos (``mine``, distributed runs)."""

    def __init__(
        self,
        generator: Callable[[str, int], Any],
        work: list[tuple[Prompt, int]],
        out: Path,
        done: dict[_Key, _Entry],
        *,
        seed: int,
        fps: float,
        source: str,
        here: Any,
    ) -> None:
        self.generator, self.work, self.out, self.done = generator, work, out, done
        self.seed, self.fps, self.source, self.here = seed, fps, source, here
        self.entries: dict[_Key, _Entry] = dict(done)
        self.mine: dict[_Key, _Entry] = {}

    def save(self, path: Path, rows: dict[_Key, _Entry]) -> None:
        """Write ``rows`` as a mapping at ``path``, video paths relative to the output folder."""
        write_mapping(path, [(os.path.relpath(v, self.out), p, s) for v, p, s in rows.values()])

    def one(self, index: int) -> tuple[_Key, _Entry, bool]:
        """Video ``index`` of the work list: kept when an earlier run listed it and it decodes, else generated,
        written and recorded in the mapping (this rank's own file under a process group); ``True`` when new."""
        p, k = self.work[index]
        name = f"{hashlib.sha1(p.caption.encode('utf-8')).hexdigest()[:16]}_{k}.mp4"
        path = self.out / "videos" / name
        key = (p.caption, name)
        if key in self.done and path.is_file() and _decodes(path):
            return key, (str(path.resolve()), p, self.done[key][2]), False
        frames = self.generator(p.caption, video_seed(self.seed, p.caption, k))
        try:
            write_video(path, frames, fps=self.fps)
        except ValueError as exc:
            raise ValueError(
                f"the generator's output for prompt {p.caption!r} is not a video: {exc}"
            ) from exc
        entry = (str(path.resolve()), p, self.source)
        if self.here.is_distributed:  # this rank's own file: resumable without a shared writer
            self.mine[key] = entry
            self.save(self.out / f"mapping.rank{self.here.rank}.csv", self.mine)
        else:
            self.entries[key] = entry
            self.save(self.out / "mapping.csv", self.entries)
        return key, entry, True
