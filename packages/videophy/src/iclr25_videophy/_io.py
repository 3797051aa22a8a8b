"""Prompt sets, label files and prompt→video mappings: the CSV formats VideoPhy publishes, read and written safely.

Formats (arXiv:2406.03520 data release; the column names are the published ones):

- **test** (``videophy_test_public.csv``): ``video_url, caption, states_of_matter, source, complexity,
  majority_sa, majority_pc``. This is also what :func:`write_labels` writes (plus the continuous ``sa_score``,
  ``pc_score`` columns when the labels came from a judge).
- **train** (``train.csv``): ``video_url, caption, states_of_matter, sa, physics, source, complexity``.
- **example** (the code's ``train_example.csv``): ``videopath, caption, sa, pc``.
- **judge output** (the code's ``videocon_physics_{sa,pc}_testing.csv``): no header; ``videopath, prompt, score``.

All CSV goes through the standard-library ``csv`` module (RFC 4180 quoting), so paths and captions with commas,
semicolons, quotes, apostrophes and newlines survive a round trip. Files are written through a temporary file and a
rename, so an interrupted write never truncates an existing file.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from iclr25_videophy._judge import PC_TEMPLATE, SA_TEMPLATE

__all__ = [
    "STATES_OF_MATTER",
    "Judgement",
    "Prompt",
    "caption_filename_stem",
    "match_videos",
    "read_judge_output",
    "read_labels",
    "read_mapping",
    "read_prompts",
    "write_labels",
    "write_mapping",
    "write_prompts",
]

STATES_OF_MATTER = ("solid_solid", "solid_fluid", "fluid_fluid")
"""The interaction categories of the prompt set (solid-solid, solid-fluid, fluid-fluid; arXiv:2406.03520, abstract and dataset description)."""

FILENAME_LIMIT_BYTES = 255
"""Longest file name (in UTF-8 bytes) common file systems accept (ext4, APFS, NTFS in practice)."""

VIDEO_SUFFIXES = (".mp4", ".avi", ".webm", ".mkv", ".mov", ".gif")


@dataclass(frozen=True)
class Prompt:
    """One caption of the prompt set with its metadata.

    Attributes:
        caption: the text prompt.
        states_of_matter: one of :data:`STATES_OF_MATTER`, or ``""`` when unknown.
        complexity: 0 (easy) or 1 (hard), or ``None`` when unknown.
    """

    caption: str
    states_of_matter: str = ""
    complexity: int | None = None


@dataclass(frozen=True)
class Judgement:
    """The SA and PC scores of one generated video.

    Attributes:
        videopath: the video (a path or URL, as written in the file).
        caption: the prompt it was generated from.
        source: the text-to-video model that made it ("" when unknown).
        sa, pc: scores: 0/1 human labels, judge probabilities in ``[0, 1]``, or 1..5 in VideoPhy-2 mode;
            ``nan`` when that score is missing.
        states_of_matter, complexity: the prompt's metadata (see :class:`Prompt`).
    """

    videopath: str
    caption: str
    sa: float
    pc: float
    source: str = ""
    states_of_matter: str = ""
    complexity: int | None = None


def _atomic_write(path: str | os.PathLike[str], write: Any) -> Path:
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name[:40]}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as fh:
            write(fh)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _read_rows(path: str | os.PathLike[str]) -> tuple[list[str], list[dict[str, str]]]:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"CSV file {str(p)!r} does not exist")
    with open(p, newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        reader.fieldnames = header
        rows = [dict(r) for r in reader]
    return header, rows


def _complexity(value: str | None, where: str) -> int | None:
    if value is None or value.strip() == "":
        return None
    try:
        c = int(float(value))
    except ValueError:
        raise ValueError(f"{where}: complexity must be 0 or 1, got {value!r}") from None
    if c not in (0, 1):
        raise ValueError(f"{where}: complexity must be 0 or 1, got {value!r}")
    return c


def _state(value: str | None, where: str) -> str:
    v = (value or "").strip()
    if v and v not in STATES_OF_MATTER:
        raise ValueError(f"{where}: states_of_matter must be one of {', '.join(STATES_OF_MATTER)}, got {v!r}")
    return v


def read_prompts(path: str | os.PathLike[str]) -> list[Prompt]:
    """Read a prompt set: a CSV with a ``caption`` (or ``prompt``) column and optional metadata columns.

    Accepts the published test/train CSVs too (one row per video): the unique captions are returned in first-seen
    order, with their metadata.

    Returns:
        The prompts, unique by caption, in file order.

    Raises:
        FileNotFoundError: no such file.
        ValueError: no caption column; an empty caption (row number named); bad metadata; the same caption with
            conflicting metadata; no prompt at all.
    """
    header, rows = _read_rows(path)
    col = "caption" if "caption" in header else "prompt" if "prompt" in header else None
    if col is None:
        raise ValueError(f"{str(path)!r} has no 'caption' (or 'prompt') column; columns are {header}")
    seen: dict[str, Prompt] = {}
    for i, row in enumerate(rows, start=2):
        where = f"{path}, line {i}"
        caption = row.get(col) or ""
        if not caption.strip():
            raise ValueError(f"{where}: empty caption")
        p = Prompt(
            caption, _state(row.get("states_of_matter"), where), _complexity(row.get("complexity"), where)
        )
        old = seen.get(caption)
        if old is None:
            seen[caption] = p
        elif old != p:
            raise ValueError(f"{where}: caption {caption!r} appears with conflicting metadata ({old} vs {p})")
    if not seen:
        raise ValueError(f"the prompt set {str(path)!r} is empty")
    return list(seen.values())


def write_prompts(path: str | os.PathLike[str], prompts: Sequence[Prompt]) -> Path:
    """Write ``prompts`` as ``caption, states_of_matter, complexity`` (atomically)."""

    def write(fh: Any) -> None:
        w = csv.writer(fh)
        w.writerow(["caption", "states_of_matter", "complexity"])
        for p in prompts:
            w.writerow([p.caption, p.states_of_matter, "" if p.complexity is None else p.complexity])

    return _atomic_write(path, write)


def _score(value: str | None, name: str, where: str) -> float:
    if value is None or value.strip() == "":
        return math.nan
    try:
        x = float(value)
    except ValueError:
        raise ValueError(f"{where}: {name} must be a number, got {value!r}") from None
    if not math.isfinite(x):
        raise ValueError(f"{where}: {name} must be finite, got {value!r}")
    return x


def read_labels(path: str | os.PathLike[str]) -> list[Judgement]:
    """Read per-video SA/PC labels in any of the published formats (test, train, example; see the module doc).

    With ``sa_score``/``pc_score`` columns (written by :func:`write_labels` from a judge) those continuous scores
    are returned; otherwise the 0/1 labels.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the header matches no known format (it is named); a non-numeric score; an empty video path.
    """
    header, rows = _read_rows(path)
    hs = set(header)
    video_col = "video_url" if "video_url" in hs else "videopath" if "videopath" in hs else None
    for sa_col, pc_col in (
        ("sa_score", "pc_score"),
        ("majority_sa", "majority_pc"),
        ("sa", "physics"),
        ("sa", "pc"),
    ):
        if {sa_col, pc_col} <= hs:
            break
    else:
        sa_col = pc_col = ""
    if video_col is None or "caption" not in hs or not sa_col:
        raise ValueError(
            f"{str(path)!r} is not a VideoPhy label file: need a video_url/videopath column, caption, and "
            f"majority_sa+majority_pc, sa+physics or sa+pc; columns are {header}"
        )
    out = []
    for i, row in enumerate(rows, start=2):
        where = f"{path}, line {i}"
        video = row.get(video_col) or ""
        if not video.strip():
            raise ValueError(f"{where}: empty {video_col}")
        out.append(
            Judgement(
                videopath=video,
                caption=row.get("caption") or "",
                sa=_score(row.get(sa_col), sa_col, where),
                pc=_score(row.get(pc_col), pc_col, where),
                source=(row.get("source") or "").strip(),
                states_of_matter=_state(row.get("states_of_matter"), where),
                complexity=_complexity(row.get("complexity"), where),
            )
        )
    return out


TEST_COLUMNS = (
    "video_url",
    "caption",
    "states_of_matter",
    "source",
    "complexity",
    "majority_sa",
    "majority_pc",
)


def write_labels(
    path: str | os.PathLike[str],
    judgements: Iterable[Judgement],
    *,
    threshold: float = 0.5,
    scores: bool = True,
) -> Path:
    """Write per-video labels in the published **test** format (atomically).

    ``majority_sa``/``majority_pc`` are ``score >= threshold`` as 0/1 (a score equal to the threshold gives 1; for VideoPhy-2 1..5 scores pass
    ``threshold=4``); with ``scores=True`` the continuous scores follow in ``sa_score``/``pc_score`` so nothing is
    lost. A missing (nan) score is written as an empty cell.
    """

    def fmt_bin(x: float) -> str:
        return "" if math.isnan(x) else str(int(x >= threshold))

    def fmt(x: float) -> str:
        return "" if math.isnan(x) else repr(float(x))

    rows = list(judgements)

    def write(fh: Any) -> None:
        w = csv.writer(fh)
        w.writerow(list(TEST_COLUMNS) + (["sa_score", "pc_score"] if scores else []))
        for j in rows:
            line = [
                j.videopath,
                j.caption,
                j.states_of_matter,
                j.source,
                "" if j.complexity is None else j.complexity,
                fmt_bin(j.sa),
                fmt_bin(j.pc),
            ]
            w.writerow(line + ([fmt(j.sa), fmt(j.pc)] if scores else []))

    return _atomic_write(path, write)


_SA_HEAD, _SA_TAIL = SA_TEMPLATE.split("{caption}")


def read_judge_output(path: str | os.PathLike[str]) -> list[tuple[str, str, str, float]]:
    """Read the authors' judge output (no header; ``videopath, prompt, score`` per row).

    Returns:
        ``(videopath, task, caption, score)`` per row, ``task`` in ``{"sa", "pc"}`` (recognised from the filled
        template; ``caption`` is ``""`` for PC). Duplicate rows (the script appends) are kept; see
        :func:`iclr25_videophy.dedupe`.

    Raises:
        ValueError: a row without three fields, a prompt that is neither template, or a non-numeric score.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"judge output {str(p)!r} does not exist")
    out = []
    with open(p, newline="", encoding="utf-8-sig") as fh:
        for i, row in enumerate(csv.reader(fh), start=1):
            if not row:
                continue
            if len(row) != 3:
                raise ValueError(
                    f"{path}, row {i}: expected 3 fields (videopath, prompt, score), got {len(row)}"
                )
            video, prompt, score = row
            if prompt == PC_TEMPLATE:
                task, caption = "pc", ""
            elif prompt.startswith(_SA_HEAD) and prompt.endswith(_SA_TAIL):
                task, caption = "sa", prompt[len(_SA_HEAD) : len(prompt) - len(_SA_TAIL)]
            else:
                raise ValueError(f"{path}, row {i}: the prompt is neither the SA nor the PC template")
            out.append((video, task, caption, _score(score, "score", f"{path}, row {i}")))
    return out


def write_mapping(path: str | os.PathLike[str], entries: Sequence[tuple[str, Prompt, str]]) -> Path:
    """Write a prompt→video mapping ``videopath, caption, states_of_matter, complexity, source`` (atomically).

    Args:
        entries: ``(videopath, prompt, source)`` per video.
    """

    def write(fh: Any) -> None:
        w = csv.writer(fh)
        w.writerow(["videopath", "caption", "states_of_matter", "complexity", "source"])
        for video, p, source in entries:
            w.writerow(
                [video, p.caption, p.states_of_matter, "" if p.complexity is None else p.complexity, source]
            )

    return _atomic_write(path, write)


def read_mapping(path: str | os.PathLike[str]) -> list[tuple[str, Prompt, str]]:
    """Read a prompt→video mapping: the CSV of :func:`write_mapping`, or a JSON object ``{caption: path or
    [paths]}``. Relative video paths are resolved against the mapping file's folder.

    Returns:
        ``(videopath, prompt, source)`` per video.

    Raises:
        ValueError: malformed file, an empty caption or video path.
    """
    p = Path(path)
    base = p.parent
    out: list[tuple[str, Prompt, str]] = []

    def resolve(v: str) -> str:
        return v if (os.path.isabs(v) or "://" in v) else str(base / v)

    if p.suffix.lower() == ".json":
        if not p.is_file():
            raise FileNotFoundError(f"mapping {str(p)!r} does not exist")
        data = json.loads(p.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"{str(p)!r} must hold a JSON object {{caption: path or [paths]}}")
        for caption, videos in data.items():
            if not caption.strip():
                raise ValueError(f"{str(p)!r}: empty caption")
            for v in [videos] if isinstance(videos, str) else list(videos):
                if not isinstance(v, str) or not v.strip():
                    raise ValueError(
                        f"{str(p)!r}: caption {caption!r} maps to an empty or non-string path {v!r}"
                    )
                out.append((resolve(v), Prompt(caption), ""))
        return out
    header, rows = _read_rows(p)
    if "videopath" not in header or "caption" not in header:
        raise ValueError(f"{str(p)!r} needs videopath and caption columns; columns are {header}")
    for i, row in enumerate(rows, start=2):
        where = f"{p}, line {i}"
        video, caption = row.get("videopath") or "", row.get("caption") or ""
        if not video.strip() or not caption.strip():
            raise ValueError(f"{where}: empty videopath or caption")
        prompt = Prompt(
            caption, _state(row.get("states_of_matter"), where), _complexity(row.get("complexity"), where)
        )
        out.append((resolve(video), prompt, (row.get("source") or "").strip()))
    return out


def caption_filename_stem(caption: str) -> str:
    """The file-name stem VideoPhy's released videos use for a caption: spaces become underscores.

    (Followed by ``_<k>`` for the k-th video of the caption, e.g. ``Shoe_squishes_a_bug._0.mp4``.)
    """
    return caption.strip().replace(" ", "_").replace("/", "_")


def match_videos(prompts: Sequence[Prompt], folder: str | os.PathLike[str]) -> list[tuple[str, Prompt, str]]:
    """Find each prompt's videos in ``folder`` by VideoPhy's file-name convention (``<stem>.mp4``,
    ``<stem>_<k>.mp4`` or ``<stem>-<k>.mp4`` with :func:`caption_filename_stem`).

    Prefer an explicit mapping (:func:`read_mapping`): file names cannot hold long prompts. This function exists for
    folders of released videos, and fails loudly instead of returning an empty list.

    Returns:
        ``(videopath, prompt, "")`` per video found, prompts in order.

    Raises:
        ValueError: an empty prompt set; a prompt whose file name would exceed 255 bytes (use a mapping); a prompt
            with no video in the folder (the prompt is named: the VBench empty-match failure).
        FileNotFoundError: no such folder.
    """
    d = Path(folder)
    if not d.is_dir():
        raise FileNotFoundError(f"video folder {str(d)!r} does not exist")
    if not prompts:
        raise ValueError("the prompt set is empty; nothing to match")
    files: dict[str, list[Path]] = {}
    for f in sorted(d.iterdir()):
        if f.is_file() and f.suffix.lower() in VIDEO_SUFFIXES:
            m = re.fullmatch(r"(.*?)(?:[_-]\d+)?", f.stem)
            assert m is not None
            files.setdefault(f.stem, []).append(f)
            if m.group(1) != f.stem:
                files.setdefault(m.group(1), []).append(f)
    out = []
    for i, p in enumerate(prompts):
        stem = caption_filename_stem(p.caption)
        if len((stem + ".mp4").encode("utf-8")) > FILENAME_LIMIT_BYTES:
            raise ValueError(
                f"prompt #{i} ({p.caption[:60]!r}...) is {len(stem.encode('utf-8'))} bytes as a file name, over the "
                f"{FILENAME_LIMIT_BYTES}-byte limit; pass a prompt->video mapping (--mapping CSV or JSON) instead"
            )
        found = files.get(stem, [])
        if not found:
            raise ValueError(
                f"no video in {str(d)!r} matches prompt #{i} {p.caption!r} (looked for {stem}[_k].mp4 and other "
                f"video suffixes); pass a prompt->video mapping (--mapping) if the files are named otherwise"
            )
        out.extend((str(f), p, "") for f in found)
    return out


def with_scores(j: Judgement, sa: float | None = None, pc: float | None = None) -> Judgement:
    """A copy of ``j`` with the given scores replaced."""
    return replace(j, sa=j.sa if sa is None else float(sa), pc=j.pc if pc is None else float(pc))
