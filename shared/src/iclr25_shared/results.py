"""One run record: config, metrics, timings, versions and device, written atomically.

A run writes ``config.json``, ``results.json`` and ``results.md`` (and any plots) into its ``--out`` folder.
Files are written to a temporary name and renamed, so an interrupted run never leaves a half-written result,
and an existing result is only replaced by a complete new one.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import importlib.metadata
import json
import math
import os
import platform
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "RunRecord",
    "atomic_write_bytes",
    "atomic_write_text",
    "git_revision",
    "machine_description",
    "markdown_table",
    "package_versions",
    "save_figure",
    "to_jsonable",
]


def to_jsonable(value: Any) -> Any:
    """Convert dataclasses, paths, numpy and torch scalars/arrays into JSON-serialisable values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy / torch
        return to_jsonable(value.tolist())
    if hasattr(value, "item") and callable(value.item):
        return to_jsonable(value.item())
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    return str(value)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temporary file in the same folder and an atomic rename.

    The file gets the ordinary permissions of a new file (``0o666`` less the umask), not ``mkstemp``'s ``0o600``.
    A failure leaves the previous file (if any) untouched and no temporary file behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; see :func:`atomic_write_bytes`.

    Raises:
        TypeError: ``text`` is not a ``str`` (nothing is written).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return atomic_write_bytes(path, text.encode("utf-8"))


def save_figure(
    fig: Any, path: str | os.PathLike[str], *, dpi: int = 120, close: bool = True, **kwargs: Any
) -> Path:
    """Save a matplotlib figure atomically (temporary file, then rename) and close it; return the path.

    The format follows the suffix of ``path``; ``kwargs`` go to ``fig.savefig`` (e.g. ``bbox_inches="tight"``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=dpi, **kwargs)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if close:
            import matplotlib.pyplot as plt

            plt.close(fig)
    return path


def package_versions(names: Iterable[str] = ()) -> dict[str, str]:
    """Installed versions of python, numpy and the given distributions (missing ones are skipped)."""
    versions = {"python": platform.python_version()}
    for name in ("numpy", *names):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def git_revision(where: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """The git commit of the checkout holding ``where`` (a file or folder; default: this module) and whether
    tracked files differ from it (``{"commit": "<40 hex>", "dirty": bool}``); ``None`` outside a git checkout
    (an installed wheel) or without git."""
    import subprocess

    folder = Path(where if where is not None else __file__).resolve()
    folder = folder if folder.is_dir() else folder.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(status.strip())}


def machine_description() -> dict[str, Any]:
    """The machine a result was measured on: platform, CPU count, load average, thread settings, accelerator."""
    from iclr25_shared.bench import machine_state

    return machine_state()


def markdown_table(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None, floatfmt: str = ".4g"
) -> str:
    """A GitHub markdown table of ``rows`` (dicts); floats formatted with ``floatfmt``.

    Without ``columns``, every key of any row is a column, in first-seen order (a key missing from a row is an
    empty cell), so nothing a later row adds is dropped.
    """
    if not rows:
        return ""
    columns = list(columns) if columns else list(dict.fromkeys(k for r in rows for k in r))

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return format(v, floatfmt)
        return "" if v is None else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


@dataclasses.dataclass
class RunRecord:
    """Everything one run reports. Fill ``metrics``/``tables``/``timings``, then :meth:`save`.

    Attributes:
        command: e.g. ``"iclr25-lozo finetune"``.
        config: the run's config (a dataclass or mapping), saved as sorted JSON.
        metrics: scalar or small structured results.
        tables: named lists of row dicts, rendered as markdown tables in results.md.
        timings: named durations in seconds.
        notes: free-text lines added to results.md.
    """

    command: str
    config: Any = None
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    tables: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    device: str = "cpu"
    versions: dict[str, str] = dataclasses.field(default_factory=dict)
    git: dict[str, Any] | None = None
    machine: dict[str, Any] = dataclasses.field(default_factory=dict)
    wall_s: float | None = None
    started: str = dataclasses.field(
        default_factory=lambda: _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    )

    def as_dict(self) -> dict[str, Any]:
        return to_jsonable(
            {
                "command": self.command,
                "started": self.started,
                "device": self.device,
                "versions": self.versions,
                "git": self.git,
                "machine": self.machine,
                "wall_s": self.wall_s,
                "config": self.config,
                "metrics": self.metrics,
                "tables": self.tables,
                "timings": self.timings,
                "notes": self.notes,
            }
        )

    def to_markdown(self) -> str:
        data = self.as_dict()
        out = [f"# {self.command}", "", f"started {self.started} on {self.device}", ""]
        if self.wall_s is not None or self.git:
            commit = (self.git or {}).get("commit", "unknown")
            dirty = " (with uncommitted changes)" if (self.git or {}).get("dirty") else ""
            wall = f"{self.wall_s:.1f} s wall" if self.wall_s is not None else "wall time not recorded"
            out[-1:] = [f"{wall}; code at git {commit}{dirty}", ""]
        scalars = {k: v for k, v in data["metrics"].items() if not isinstance(v, (dict, list))}
        structured = {k: v for k, v in data["metrics"].items() if isinstance(v, (dict, list))}
        if scalars:
            out += ["## Metrics", ""]
            out += [f"- **{k}**: {v}" for k, v in scalars.items()]
            out.append("")
        for name, rows in self.tables.items():
            out += [f"## {name}", "", markdown_table(rows), ""]
        if data["timings"]:
            out += ["## Timings (s)", ""]
            out += [
                f"- {k}: {v:.3f}" if isinstance(v, float) else f"- {k}: {v}"
                for k, v in data["timings"].items()
            ]
            out.append("")
        if self.notes:
            out += ["## Notes", "", *[f"- {n}" for n in self.notes], ""]
        if structured:  # raw per-round timings, nested records: last, readable as JSON (also in results.json)
            out += ["## Structured metrics", ""]
            for k, v in structured.items():
                out += [f"### {k}", "", "```json", json.dumps(v, indent=1, sort_keys=True), "```", ""]
        out += ["## Config", "", "```json", json.dumps(data["config"], indent=2, sort_keys=True), "```", ""]
        return "\n".join(out)

    def save(self, out_dir: str | os.PathLike[str]) -> Path:
        """Write ``config.json``, ``results.json`` and ``results.md`` into ``out_dir`` atomically; return it."""
        out = Path(out_dir)
        data = self.as_dict()
        atomic_write_text(out / "config.json", json.dumps(data["config"], indent=2, sort_keys=True) + "\n")
        atomic_write_text(out / "results.json", json.dumps(data, indent=2, sort_keys=True) + "\n")
        atomic_write_text(out / "results.md", self.to_markdown())
        return out
