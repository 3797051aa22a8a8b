"""The CLI contract every iclr25 package follows (DESIGN.md §4).

A package describes each subcommand as a frozen, keyword-only config dataclass (validated in ``__post_init__``)
plus a function that runs it, and hands them to :func:`run`::

    @dataclass(frozen=True, kw_only=True)
    class FinetuneConfig(CommonOptions):
        \"\"\"Fine-tune a model.\"\"\"
        steps: int = 100
        \"\"\"Optimizer steps.\"\"\"
        def __post_init__(self):
            super().__post_init__()
            check_range("steps", self.steps, low=1)

    def main(argv=None) -> int:
        return run("iclr25-x", {"finetune": (FinetuneConfig, finetune)}, argv, default="finetune")

Options are parsed by tyro from the dataclass (field docstrings become ``--help`` text). :func:`run` adds:

- no subcommand → the ``default`` one runs on its embedded real default;
- ``--config FILE`` (JSON) supplies defaults that explicit flags override;
- exit codes: 0 done; 2 bad usage or bad input (one line on stderr, no traceback); 1 a failure during the run;
  130 interrupted. ``ICLR25_DEBUG=1`` prints the traceback as well.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from iclr25_shared.errors import SourceUnavailable

__all__ = ["CommonOptions", "UsageError", "check_choice", "check_range", "progress", "run"]

T = TypeVar("T")
_DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?|mps)$")


class UsageError(ValueError):
    """Bad input from the user; the CLI prints the message as one line and exits 2."""


def check_range(
    name: str,
    value: float,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> None:
    """Raise ``ValueError`` naming ``name``, its value and the allowed range when ``value`` is outside it."""
    ok = True
    if low is not None:
        ok &= value >= low if low_inclusive else value > low
    if high is not None:
        ok &= value <= high if high_inclusive else value < high
    if not ok or (isinstance(value, float) and value != value):
        lo = "-inf" if low is None else f"{low}"
        hi = "inf" if high is None else f"{high}"
        interval = f"{'[' if low_inclusive and low is not None else '('}{lo}, {hi}{']' if high_inclusive and high is not None else ')'}"
        raise ValueError(f"{name} must be in {interval}, got {value!r}")


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> None:
    """Raise ``ValueError`` naming ``name``, its value and the allowed choices when ``value`` is not one of them."""
    choices = list(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(str, choices))}; got {value!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CommonOptions:
    """Options every subcommand has."""

    device: str = "auto"
    """auto, cpu, cuda or cuda:<index>."""
    seed: int = 0
    """Random seed (every source of randomness derives from it)."""
    out: Path | None = None
    """Folder for results.json, results.md and plots (nothing is written when omitted)."""
    config: Path | None = None
    """JSON file of option values; flags given on the command line override it."""
    quiet: bool = False
    """No progress bars or per-step logs."""

    def __post_init__(self) -> None:
        if not isinstance(self.device, str) or not _DEVICE_RE.match(self.device):
            raise ValueError(f"device must be one of auto, cpu, cuda, cuda:<index>, mps; got {self.device!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")


def progress(
    iterable: Iterable[T], *, total: int | None = None, desc: str = "", quiet: bool = False
) -> Iterable[T]:
    """A tqdm progress bar on stderr (plain iteration when ``quiet``)."""
    if quiet:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, leave=False, dynamic_ncols=True)


Command = tuple[type, Callable[[Any], "int | None"]]

_BOX = re.compile(r"[╭╮╰╯│─━┃┏┓┗┛]")


def _one_line(text: str) -> str:
    """Condense tyro's error panel (title, message, help sections) into one line: the message."""
    lines = [_BOX.sub("", raw).strip() for raw in text.splitlines()]
    lines = [ln for ln in lines if ln]
    if len(lines) > 1 and not set(lines[1]) <= {"-", " "}:
        title_skipped = lines  # no title line
    else:
        title_skipped = lines[1:]
    sections: list[list[str]] = [[]]
    for line in title_skipped:
        if set(line) <= {"-", " "}:
            sections.append([])
        else:
            sections[-1].append(line)
    sections = [s for s in sections if s]
    if not sections:
        return "invalid arguments"
    parts = [" ".join(sections[0])]
    parts += [" ".join(s) for s in sections[1:] if s[0].startswith("Perhaps you meant")]
    message = " ".join(parts)
    message = re.sub(r"^Error parsing (--[\w.-]+): ", r"\1: ", message)
    return re.sub(r"^Error parsing [\w.]+: ", "", message)


def _error(prog: str, message: str) -> int:
    message = " ".join(str(message).split())
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def _config_path(args: list[str]) -> Path | None:
    """The value of ``--config`` in ``args`` (tyro parses the flag itself too: it is a CommonOptions field)."""
    path = None
    for i, a in enumerate(args):
        if a == "--config" and i + 1 < len(args):
            path = Path(args[i + 1])
        elif a.startswith("--config="):
            path = Path(a.split("=", 1)[1])
    return path


def _defaults_from_file(cls: type, path: Path) -> Any:
    if not path.is_file():
        raise UsageError(f"--config: file {str(path)!r} does not exist")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UsageError(f"--config: {path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise UsageError(f"--config: {path} must hold a JSON object of option values")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise UsageError(
            f"--config: unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(fields))}"
        )
    data = {
        k: (Path(v) if isinstance(v, str) and "Path" in str(fields[k].type) else v) for k, v in data.items()
    }
    data["config"] = path
    return cls(**data)


def _top_help(prog: str, description: str, commands: Mapping[str, Command], default: str) -> str:
    lines = [f"usage: {prog} [{{{','.join(commands)}}}] [OPTIONS]", ""]
    if description:
        lines += [description.strip(), ""]
    lines.append("subcommands:")
    width = max(len(n) for n in commands)
    for name, (cls, _) in commands.items():
        paragraph = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        doc = paragraph.split(". ")[0].rstrip(".") if paragraph else ""
        mark = " (default)" if name == default else ""
        lines.append(f"  {name:<{width}}  {doc}{mark}")
    lines += ["", f"Run '{prog} <subcommand> --help' for its options. With no subcommand, '{default}' runs."]
    return "\n".join(lines)


def run(
    prog: str,
    commands: Mapping[str, Command],
    argv: Sequence[str] | None = None,
    *,
    default: str,
    description: str = "",
    version: str | None = None,
) -> int:
    """Parse ``argv`` into one subcommand's config, run it, and map errors to exit codes.

    Args:
        prog: the console-script name, e.g. ``"iclr25-lozo"``.
        commands: subcommand name → (config dataclass, function taking the config and returning an exit code).
        argv: arguments without the program name (``sys.argv[1:]`` when ``None``).
        default: the subcommand that runs when none is given.
        description: one paragraph for the top-level ``--help``.
        version: printed by ``--version``.

    Returns:
        The process exit code (0, 1, 2 or 130).
    """
    import tyro

    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(_top_help(prog, description, commands, default))
        return 0
    if args and args[0] == "--version":
        print(f"{prog} {version or ''}".strip())
        return 0
    if not args or args[0].startswith("-"):
        args.insert(0, default)
    name, rest = args[0], args[1:]
    if name not in commands:
        return _error(prog, f"unknown subcommand {name!r}; choose from {', '.join(commands)}")
    cls, fn = commands[name]
    debug = bool(os.environ.get("ICLR25_DEBUG"))
    try:
        config_path = _config_path(rest)
        default_cfg = _defaults_from_file(cls, config_path) if config_path is not None else None
        captured_out, captured_err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(captured_out), contextlib.redirect_stderr(captured_err):
                cfg = tyro.cli(
                    cls,
                    args=rest,
                    prog=f"{prog} {name}",
                    default=default_cfg,
                    description=(cls.__doc__ or "").strip(),
                )
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
            if code == 0:
                sys.stdout.write(captured_out.getvalue())
                sys.stderr.write(captured_err.getvalue())
                return 0
            return _error(f"{prog} {name}", _one_line(captured_err.getvalue() + captured_out.getvalue()))
        sys.stdout.write(captured_out.getvalue())
    except (ValueError, TypeError, SourceUnavailable, FileNotFoundError) as exc:
        if debug:
            traceback.print_exc()
        return _error(f"{prog} {name}", str(exc))
    try:
        code = fn(cfg)
    except KeyboardInterrupt:
        print(f"{prog} {name}: interrupted; no partial results were written", file=sys.stderr)
        return 130
    except (UsageError, SourceUnavailable, FileNotFoundError) as exc:
        if debug:
            traceback.print_exc()
        return _error(f"{prog} {name}", str(exc))
    except (ValueError, TypeError) as exc:
        # Validation errors raised by library code on user-supplied values are bad input, not crashes.
        if debug:
            traceback.print_exc()
        return _error(f"{prog} {name}", str(exc))
    except Exception as exc:
        if debug:
            traceback.print_exc()
        print(
            f"{prog} {name}: failed: {type(exc).__name__}: {exc} (set ICLR25_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1
    return int(code or 0)
