"""The CLI contract every iclr25 package follows (docs/package-contract.md, docs/cli.md).

A package describes each subcommand as a frozen, keyword-only config dataclass (validated in ``__post_init__`` with
:mod:`iclr25_shared.checks`) plus a function ``fn(cfg, ctx) -> Result`` that lives in the package's
``_experiment.py``. ``cli.py`` only declares them and calls :func:`run`::

    # cli.py
    @dataclass(frozen=True, kw_only=True)
    class SolveConfig(CommonOptions):
        \"\"\"Solve one instance.\"\"\"
        steps: int = 100
        \"\"\"Optimizer steps.\"\"\"
        def __post_init__(self) -> None:
            super().__post_init__()
            check_int("steps", self.steps, low=1)

    COMMANDS = {"solve": (SolveConfig, "iclr25_x._experiment:solve")}

    def main(argv: list[str] | None = None) -> int:
        return run("iclr25-x", COMMANDS, argv, default="solve", description=__doc__)

    # _experiment.py
    def solve(cfg: SolveConfig, ctx: RunContext) -> Result:
        ctx.log.info("solving ...")
        return Result(metrics={"objective": 3.0}, tables={"runs": [...]})

The function is named as ``"module:function"`` so that ``--help`` and argument errors never import the heavy
modules. :func:`run` adds, for every package:

- no subcommand → the ``default`` one runs on its embedded real default;
- ``--config FILE`` (JSON) supplies defaults that explicit flags override;
- ``--threads N`` applied before the command runs (0 = the libraries' default);
- ``--out DIR`` checked before any work: an existing file, a non-empty folder or an unwritable place is refused
  with exit 2 unless ``--overwrite``; the run writes into a temporary sibling folder that replaces ``DIR`` only when
  the command succeeds, so an interrupted or failed run leaves the old results untouched;
- the returned :class:`Result` becomes ``results.json`` / ``results.md`` / ``config.json`` and is printed;
- every user file the config declares (``INPUTS``, :mod:`iclr25_shared.inputs`) checked before the command is
  imported, so a bad file never waits for a model to load;
- exit codes by meaning, not by Python class: 0 done; 2 bad usage or bad input (one line on stderr, no traceback:
  any error while parsing or validating the config, :class:`~iclr25_shared.errors.InputError` or
  :class:`~iclr25_shared.errors.SourceUnavailable` from anywhere); 1 anything else that fails while the method
  runs (a plain ``ValueError`` from a diverging run included); 130 Ctrl-C at any moment, with nothing written —
  also when a library swallowed the ``KeyboardInterrupt`` (the runner's own SIGINT handler records it);
- every file of the results folder gets ordinary permissions (``0o666`` less the umask; folders ``0o777``), whoever
  wrote it; temporary folders of killed runs beside ``--out`` are removed by the next run;
- ``--quiet`` also silences transformers / diffusers / huggingface_hub progress bars and warnings.
  ``ICLR25_DEBUG=1`` prints the traceback as well;
- under ``torchrun`` / ``accelerate launch`` (:mod:`iclr25_shared.distributed`): only rank 0 gets the results folder,
  commits it and prints the result (``ctx.writes`` is False on the other ranks); a failure names its rank; a process
  group left initialised is destroyed when the run ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import io
import json
import logging
import os
import platform
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from iclr25_shared.checks import check_choice, check_int, check_range
from iclr25_shared.errors import InputError, SourceUnavailable

__all__ = [
    "DEFAULT_THREADS",
    "CommonOptions",
    "Result",
    "RunContext",
    "UsageError",
    "apply_threads",
    "check_choice",
    "check_interrupted",
    "check_range",
    "parse",
    "progress",
    "run",
]

T = TypeVar("T")
_DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?|mps)$")

DEFAULT_THREADS = 1
"""Default ``--threads``. Measured on the 2-core reference machine (docs/measurements.md): ``iclr25-lozo finetune
--steps 5`` ran fastest with one intra-op thread; 0 keeps each library's own default (all cores)."""

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


class UsageError(InputError):
    """Bad usage (an option, a subcommand, ``--out``); an :class:`InputError`, so the CLI exits 2 with one line."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class CommonOptions:
    """Options every subcommand has."""

    device: str = "auto"
    """auto, cpu, cuda or cuda:<index>."""
    seed: int = 0
    """Random seed (every source of randomness derives from it)."""
    threads: int = DEFAULT_THREADS
    """CPU threads for torch / BLAS / XLA (0 = the libraries' default, all cores)."""
    out: Path | None = None
    """Folder for results.json, results.md and plots (nothing is written when omitted). Must not exist yet or be
    empty, unless --overwrite."""
    overwrite: bool = False
    """Replace the results already in --out (the old folder is replaced only when the new run succeeds)."""
    config: Path | None = None
    """JSON file of option values; flags given on the command line override it."""
    quiet: bool = False
    """No progress bars or info logs."""

    def __post_init__(self) -> None:
        # Lists (a --config file, or a caller in Python) become the declared tuples, strings the declared Paths, so a
        # subclass never converts its own fields.
        try:
            hints = typing.get_type_hints(type(self))
        except (
            NameError,
            TypeError,
        ):  # an annotation that does not resolve at runtime: leave values as given
            hints = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, (list, str)):
                object.__setattr__(self, field.name, _from_json(value, hints.get(field.name)))
        if not isinstance(self.device, str) or not _DEVICE_RE.match(self.device):
            raise ValueError(f"device must be one of auto, cpu, cuda, cuda:<index>, mps; got {self.device!r}")
        check_int("seed", self.seed, low=0)
        check_int("threads", self.threads, low=0, high=1024)


@dataclasses.dataclass
class Result:
    """What a command returns; the runner turns it into results.json / results.md and prints it.

    Attributes:
        metrics: scalar or small structured results (JSON-able: numbers, strings, lists, dicts, arrays).
        tables: named lists of row dicts, rendered as markdown tables (printed, and in results.md).
        timings: named durations in seconds.
        notes: lines for results.md (and printed unless ``--quiet``).
        exit_code: 0 normally; 1 when the command ran but found a failure it must report (e.g. a check failed).
    """

    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    tables: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    exit_code: int = 0


def apply_threads(threads: int) -> None:
    """Limit torch / BLAS / OpenMP / XLA CPU threads to ``threads`` (0 leaves the libraries' defaults).

    Environment variables take effect for libraries imported afterwards; pools that already exist are limited
    directly: torch's (``torch.set_num_threads``; :meth:`RunContext.torch_device` also sets it when it imports torch)
    and numpy's BLAS (threadpoolctl).
    """
    threads = check_int("threads", threads, low=0)
    if threads == 0:
        return
    for var in _THREAD_VARS:
        os.environ[var] = str(threads)
    if "jax" not in sys.modules:
        flags = os.environ.get("XLA_FLAGS", "")
        if "intra_op_parallelism_threads" not in flags:
            extra = f"--xla_cpu_multi_thread_eigen={'false' if threads == 1 else 'true'} "
            extra += f"intra_op_parallelism_threads={threads}"
            os.environ["XLA_FLAGS"] = f"{flags} {extra}".strip()
    if "torch" in sys.modules:
        _set_torch_threads(threads)
    if "numpy" in sys.modules:  # its BLAS pool already exists: the environment variables come too late for it
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=threads)


def _set_torch_threads(threads: int) -> None:
    import torch

    if threads > 0 and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def progress(
    iterable: Iterable[T], *, total: int | None = None, desc: str = "", quiet: bool = False
) -> Iterable[T]:
    """A tqdm progress bar on stderr (plain iteration when ``quiet``)."""
    if not quiet:
        from tqdm.auto import tqdm

        iterable = tqdm(iterable, total=total, desc=desc, leave=False, dynamic_ncols=True)
    return _Interruptible(iterable)


class _Interruptible:
    """Iterates ``inner``, raising ``KeyboardInterrupt`` at the next item once the runner saw a Ctrl-C (which a
    library such as JAX may have swallowed); every other attribute (``update``, ``close``, ...) is the inner bar's."""

    def __init__(self, inner: Iterable[Any]) -> None:
        self._inner = inner

    def __iter__(self) -> Any:
        for item in self._inner:
            check_interrupted()
            yield item

    def __len__(self) -> int:
        return len(self._inner)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Interrupt:
    """The runner's SIGINT handler: records the Ctrl-C, then raises ``KeyboardInterrupt`` as Python's own does.

    While it is installed, a ``KeyboardInterrupt`` that a library swallows and reports as unraisable (JAX's GC
    callback: "Exception ignored in ...") prints nothing and is raised again as the next Python function is
    entered; the recorded Ctrl-C also stops the run at the next progress item and before the results are committed. Once the results are committed (:attr:`committed`), a Ctrl-C is
    dropped: the run has finished. A SIGINT the process inherited as ignored (a background job) stays ignored.
    """

    def __init__(self) -> None:
        self.fired = False
        self.committed = False
        self._previous: Any = None
        self._installed = False
        self._hook: Any = None

    def _handler(self, signum: int, frame: Any) -> None:
        if self.committed:
            return
        self.fired = True
        raise KeyboardInterrupt

    def _unraisable(self, unraisable: Any) -> None:
        if self.fired and isinstance(unraisable.exc_value, KeyboardInterrupt):
            sys.settrace(_interrupt_at_the_next_call)  # stop at once, not only at the next progress item
            return
        self._hook(unraisable)

    def __enter__(self) -> _Interrupt:
        self.fired = self.committed = False
        self._installed = False
        try:
            previous = signal.getsignal(signal.SIGINT)
            if previous is not signal.SIG_IGN:
                self._previous = signal.signal(signal.SIGINT, self._handler)
                self._installed = True
        except ValueError:  # not the main thread: Python's own handling stays
            pass
        self._hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.unraisablehook = self._hook
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False
        self.fired = self.committed = False


def _interrupt_at_the_next_call(frame: Any, event: str, arg: Any) -> None:
    """A one-shot trace function: raise the swallowed Ctrl-C as the next Python function is entered."""
    sys.settrace(None)
    raise KeyboardInterrupt


_INTERRUPT = _Interrupt()


def check_interrupted() -> None:
    """Raise ``KeyboardInterrupt`` if a Ctrl-C reached the runner during this command, even one a library swallowed.

    :meth:`RunContext.progress` calls it at every item; a command with its own loop (or a library callback) may call
    it too. A no-op outside :func:`run`.
    """
    if _INTERRUPT.fired:
        raise KeyboardInterrupt


def _logger(name: str, quiet: bool) -> logging.Logger:
    log = logging.getLogger(f"iclr25.{name}")
    log.propagate = False
    for handler in list(log.handlers):
        log.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.WARNING if quiet else logging.INFO)
    return log


class RunContext:
    """What the runner hands a command besides its config: logger, devices, seed and the output folder.

    Attributes:
        command: ``"iclr25-x verb"``.
        config: the parsed config.
        seed: ``config.seed``.
        quiet: ``config.quiet``.
        log: a stderr logger (INFO, WARNING when quiet); use it instead of ``print`` for progress text.
        out: the final results folder, or ``None`` when ``--out`` was not given (then nothing is written).

    Files go through :meth:`path` / :meth:`save_array` / :meth:`save_figure` / :meth:`save_text`: they land in a
    temporary folder that becomes ``out`` only when the command returns successfully.
    """

    def __init__(self, command: str, config: Any, *, staging: Path | None = None) -> None:
        self.command = command
        self.config = config
        self.seed: int = getattr(config, "seed", 0)
        self.quiet: bool = bool(getattr(config, "quiet", False))
        self.threads: int = int(getattr(config, "threads", 0))
        self.out: Path | None = getattr(config, "out", None)
        self.log = _logger(command.replace(" ", "."), self.quiet)
        self.device_label: str = str(getattr(config, "device", "cpu"))
        self._staging = staging
        self.started_at: float | None = None
        """``time.perf_counter()`` when the command started (the runner sets it; results.json's ``wall_s``)."""
        self.command_module: str | None = None
        """The module of the command's function (results.json's ``git`` revision is that file's checkout)."""
        from iclr25_shared.distributed import world

        self.world = world()
        """This process's rank and world size (:class:`iclr25_shared.distributed.World`)."""

    # -- devices ---------------------------------------------------------------------------------------------
    def torch_device(self) -> Any:
        """``--device`` as a ``torch.device`` (``auto`` → CUDA when available); applies ``--threads`` to torch."""
        from iclr25_shared.device import resolve_device
        from iclr25_shared.inputs import validating

        with validating("--device"):  # a device this machine does not have is the user's input (exit 2)
            device = resolve_device(getattr(self.config, "device", "auto"))
        if self.threads:
            _set_torch_threads(self.threads)
        self.device_label = str(device)
        return device

    def join_group(self, **same: Any) -> Any:
        """``--device`` after joining the launcher's process group (torchrun / ``accelerate launch``; a no-op in
        one process): under a launcher with CUDA, this rank's GPU ``cuda:<LOCAL_RANK>`` (made current). Every
        keyword must have the same value on every rank (``join_group(seed=cfg.seed)``), else ``ValueError`` naming
        it. The runner destroys the group when the command ends.

        Returns:
            torch.device
        """
        import torch

        from iclr25_shared.distributed import check_same, init_process_group

        device = self.torch_device()
        if device.type == "cuda" and self.world.is_distributed:
            device = torch.device("cuda", self.world.local_rank)
            torch.cuda.set_device(device)
        here = init_process_group(device.type)
        if here.is_distributed:
            for name, value in same.items():
                check_same(value, f"--{name.replace('_', '-')}")
            self.device_label = f"{device} (rank {here.rank} of {here.world_size})"
        return device

    def jax_devices(self) -> list[Any]:
        """``--device`` as a list of JAX devices (see :func:`iclr25_shared.device.resolve_jax_devices`)."""
        from iclr25_shared.device import resolve_jax_devices
        from iclr25_shared.inputs import validating

        with validating("--device"):
            devices = resolve_jax_devices(getattr(self.config, "device", "auto"))
        self.device_label = f"{devices[0].platform}x{len(devices)}"
        return devices

    def progress(self, iterable: Iterable[T], *, total: int | None = None, desc: str = "") -> Iterable[T]:
        """A progress bar on stderr (none when ``--quiet``)."""
        return progress(iterable, total=total, desc=desc, quiet=self.quiet)

    # -- files ----------------------------------------------------------------------------------------------
    @property
    def writes(self) -> bool:
        """Whether this process writes files: ``--out`` was given and it is rank 0 (every process of a
        one-process run is)."""
        return self._staging is not None

    def path(self, name: str) -> Path:
        """Where to write the result file ``name`` (a relative path) in this run's folder.

        Raises:
            RuntimeError: the run has no ``--out`` (check :attr:`writes` first).
        """
        if self._staging is None:
            raise RuntimeError("this run has no --out folder; check ctx.writes before saving files")
        rel = Path(name)
        if rel.is_absolute() or ".." in rel.parts:
            raise ValueError(f"result file name must be a relative path inside --out, got {name!r}")
        target = self._staging / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def save_text(self, name: str, text: str) -> Path | None:
        """Write ``text`` to ``name`` in the results folder (nothing without ``--out``)."""
        if not self.writes:
            return None
        from iclr25_shared.results import atomic_write_text

        return atomic_write_text(self.path(name), text)

    def save_json(self, name: str, data: Any) -> Path | None:
        """Write ``data`` (anything :func:`~iclr25_shared.results.to_jsonable` takes) as sorted JSON."""
        from iclr25_shared.results import to_jsonable

        return self.save_text(name, json.dumps(to_jsonable(data), indent=2, sort_keys=True) + "\n")

    def save_array(self, name: str, array: Any) -> Path | None:
        """Save an array as ``name`` (``.npy`` added when missing) in the results folder; nothing without --out."""
        if not self.writes:
            return None
        import numpy as np

        from iclr25_shared.results import atomic_write_bytes

        if not name.endswith(".npy"):
            name += ".npy"
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(array.detach().cpu() if hasattr(array, "detach") else array))
        return atomic_write_bytes(self.path(name), buffer.getvalue())

    def save_figure(self, name: str, fig: Any, **kwargs: Any) -> Path | None:
        """Save (and close) a matplotlib figure as ``name`` in the results folder; only closes it without --out."""
        from iclr25_shared.results import save_figure

        if not self.writes:
            import matplotlib.pyplot as plt

            plt.close(fig)
            return None
        return save_figure(fig, self.path(name), **kwargs)


Command = tuple[type, "Callable[..., Any] | str"]

_BOX = re.compile(r"[╭╮╰╯│─━┃┏┓┗┛]")


_SEPARATOR = re.compile(r"^[\s│┃|]*[-─━]{3,}[\s│┃|]*$")


def _one_line(text: str) -> str:
    """Condense tyro's error panel into one line: the message (plus "Perhaps you meant ..." when present).

    tyro prints a panel with a title, sections separated by rules, and a "For full helptext" footer; as a boxed
    panel (tyro < 1.0.10, or on a terminal) or as plain text with dashed rules. Both forms are handled, and the
    supported range (tyro>=1.0; 0.9 replays the first error of a process on later in-process calls) is tested by the lowest-direct CI job.
    """
    raw = [line for line in text.splitlines() if line.strip()]
    if not raw:
        return "invalid arguments"
    if raw[0].lstrip().startswith(("╭", "┏")):  # boxed: the title sits in the top border
        raw = raw[1:]
    elif len(raw) > 1 and _SEPARATOR.match(raw[1]):  # plain: title, then a rule
        raw = raw[2:]
    sections: list[list[str]] = [[]]
    for line in raw:
        if _SEPARATOR.match(line) or line.lstrip().startswith(("╰", "┗")):
            sections.append([])
            continue
        cleaned = " ".join(_BOX.sub(" ", line).split())
        if cleaned:
            sections[-1].append(cleaned)
    sections = [sec for sec in sections if sec and not sec[0].startswith("For full helptext")]
    if not sections:
        return "invalid arguments"
    parts = [" ".join(sections[0])]
    parts += [" ".join(sec) for sec in sections[1:] if sec[0].startswith("Perhaps you meant")]
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
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UsageError(
            f"--config: {str(path)!r} is not UTF-8 text; expected a JSON file of options"
        ) from None
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
    hints = typing.get_type_hints(cls)
    data = {k: _from_json(v, hints.get(k)) for k, v in data.items()}
    data["config"] = path
    return cls(**data)


def _from_json(value: Any, hint: Any) -> Any:
    """A JSON value as the field's type: lists become tuples for tuple fields, strings become Paths for paths."""
    if hint is None or value is None:
        return value
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return _from_json(value, options[0]) if len(options) == 1 else value
    if (origin is tuple or hint is tuple) and isinstance(value, list):
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_from_json(v, args[0]) for v in value)
        if args and len(args) == len(value):
            return tuple(_from_json(v, a) for v, a in zip(value, args))
        return tuple(value)
    if isinstance(hint, type) and issubclass(hint, Path) and isinstance(value, str):
        return Path(value)
    return value


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


def _check_out(out: Path, overwrite: bool) -> None:
    """Refuse an ``--out`` that would lose data or cannot be written, before any work (raises UsageError)."""
    if out.exists() and not out.is_dir():
        if not overwrite:
            raise UsageError(f"--out: {str(out)!r} is an existing file; give a folder, or pass --overwrite")
    elif out.is_dir() and any(out.iterdir()) and not overwrite:
        held = sorted(p.name for p in out.iterdir())
        shown = ", ".join(held[:4]) + (", ..." if len(held) > 4 else "")
        raise UsageError(
            f"--out: folder {str(out)!r} already holds {shown}; pass --overwrite to replace it, or choose a new folder"
        )
    parent = out.resolve().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"--out: {str(out)!r} cannot be created: {str(parent)!r} is a file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out: {str(out)!r} cannot be created: no write permission in {str(parent)!r}")


_OWNER = ".iclr25-owner.json"
"""Written into every temporary results folder: the host, pid and start time of the process writing it."""


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _process_started(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), or ``None`` when it does not exist."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def _is_orphan(folder: Path) -> bool:
    """A temporary results folder whose writing process no longer exists (on this host)."""
    try:
        owner = json.loads((folder / _OWNER).read_text())
        host, pid, started = owner["host"], int(owner["pid"]), float(owner["started"])
    except (OSError, ValueError, KeyError, TypeError):
        return False  # no owner record (yet): maybe a run that has just created it; never touch it
    if host != platform.node():
        return False
    alive = _process_started(pid)
    return alive is None or abs(alive - started) > 1.0


def _remove_orphans(parent: Path, name: str) -> None:
    """Remove ``.NAME.partial-*`` / ``.NAME.old-*`` folders left in ``parent`` by killed runs (SIGKILL, power loss);
    a concurrent run's folders (its process alive) are kept."""
    for folder in [*parent.glob(f".{name}.partial-*"), *parent.glob(f".{name}.old-*")]:
        if folder.is_dir() and _is_orphan(folder):
            shutil.rmtree(folder, ignore_errors=True)


def _staging_dir(out: Path) -> Path:
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    _remove_orphans(parent, out.name)
    staging = Path(tempfile.mkdtemp(dir=parent, prefix=f".{out.name}.partial-"))
    staging.chmod(0o777 & ~_umask())
    _write_owner(staging)
    return staging


def _write_owner(folder: Path) -> None:
    started = _process_started(os.getpid()) or 0.0
    owner = {"host": platform.node(), "pid": os.getpid(), "started": started}
    (folder / _OWNER).write_text(json.dumps(owner))


def _ordinary_modes(root: Path) -> None:
    """Give every file under ``root`` the permissions of a new file (``0o666`` less the umask; ``0o777`` for
    executables and folders), whichever library wrote it (safetensors and ``mkstemp`` write ``0o600``)."""
    umask = _umask()
    root.chmod(0o777 & ~umask)
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            path = Path(dirpath, d)
            if not path.is_symlink():
                path.chmod(0o777 & ~umask)
        for f in filenames:
            path = Path(dirpath, f)
            if path.is_symlink():
                continue
            executable = path.stat().st_mode & 0o100
            path.chmod((0o777 if executable else 0o666) & ~umask)


def _commit(staging: Path, out: Path) -> None:
    """Make ``staging`` the results folder ``out`` in one rename (the old ``out`` is removed afterwards).

    The last Ctrl-C that stops the run is one before the renames; while they run SIGINT is blocked, and one that
    arrives then is dropped (the run has finished), so no Ctrl-C can leave the old results half-moved.
    """
    out = out.resolve()
    (staging / _OWNER).unlink(missing_ok=True)
    _ordinary_modes(staging)
    check_interrupted()
    with _sigint_blocked():
        if out.exists() or out.is_symlink():
            old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
            os.replace(out, old / "previous")
            os.replace(staging, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging, out)
        _INTERRUPT.committed = True


@contextlib.contextmanager
def _sigint_blocked(*, deliver: bool = False) -> Any:
    """Hold SIGINT back during the block; afterwards deliver it (``deliver``) or drop it."""
    if _main_thread() and hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            yield
        finally:
            if deliver:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
            else:
                handler = signal.signal(
                    signal.SIGINT, signal.SIG_IGN
                )  # discards a Ctrl-C that arrived meanwhile
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
                signal.signal(signal.SIGINT, handler)
    else:
        yield


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _resolve(fn: Callable[..., Any] | str) -> Callable[..., Any]:
    if callable(fn):
        return fn
    module, _, name = fn.partition(":")
    return getattr(importlib.import_module(module), name)


def _takes_context(fn: Callable[..., Any]) -> bool:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


def _print_result(result: Result, quiet: bool) -> None:
    from iclr25_shared.results import markdown_table, to_jsonable

    for key, value in to_jsonable(result.metrics).items():
        print(f"{key}: {value}")
    for name, rows in result.tables.items():
        if rows:
            print(f"\n{name}\n{markdown_table(rows)}")
    if not quiet:
        for note in result.notes:
            print(f"note: {note}", file=sys.stderr)


def parse(
    prog: str, commands: Mapping[str, Command], argv: Sequence[str] | None = None, *, default: str
) -> tuple[str, Any]:
    """Parse ``argv`` into ``(subcommand, config)`` without running anything.

    Raises:
        UsageError: unknown subcommand, bad option or value, bad ``--config`` file, or a refused ``--out``.
        SystemExit: ``--help`` (code 0).
    """
    import tyro

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0].startswith("-"):
        args.insert(0, default)
    name, rest = args[0], args[1:]
    if name not in commands:
        raise UsageError(f"unknown subcommand {name!r}; choose from {', '.join(commands)}")
    cls, _ = commands[name]
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
            raise
        raise UsageError(_one_line(captured_err.getvalue() + captured_out.getvalue())) from None
    sys.stdout.write(captured_out.getvalue())
    out = getattr(cfg, "out", None)
    if out is not None:
        _check_out(Path(out), bool(getattr(cfg, "overwrite", False)))
    return name, cfg


def run(
    prog: str,
    commands: Mapping[str, Command],
    argv: Sequence[str] | None = None,
    *,
    default: str,
    description: str = "",
    version: str | None = None,
) -> int:
    """Parse ``argv`` into one subcommand's config, run it, write its results, and map errors to exit codes.

    Args:
        prog: the console-script name, e.g. ``"iclr25-lozo"``.
        commands: subcommand name → (config dataclass, function or ``"module:function"``). The function takes
            ``(cfg, ctx: RunContext)`` and returns a :class:`Result` (or ``None``); a one-argument function taking
            the config alone and returning an exit code is still accepted.
        argv: arguments without the program name (``sys.argv[1:]`` when ``None``).
        default: the subcommand that runs when none is given.
        description: one paragraph for the top-level ``--help``.
        version: printed by ``--version`` (default: the installed version of the distribution ``prog``).

    Returns:
        The process exit code (0, 1, 2 or 130).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    label = f"{prog} {args[0]}" if args and args[0] in commands else prog
    debug = bool(os.environ.get("ICLR25_DEBUG"))
    with _INTERRUPT:
        try:
            code = _run(prog, commands, args, default, description, version, debug)
            if argv is None and _INTERRUPT.committed and _main_thread():
                # a console run whose results are committed: a Ctrl-C during interpreter teardown is dropped too
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                _INTERRUPT._installed = False
            return code
        except KeyboardInterrupt:
            _close_progress_bars()
            print(f"{label}: interrupted; no results were written", file=sys.stderr)
            return 130
        # `iclr25-x --help | head`: the reader left; no traceback, nothing more to print
        except BrokenPipeError:
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0


def _close_progress_bars() -> None:
    """Close live tqdm bars, so that the one-line message does not land on a half-drawn bar."""
    tqdm = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", None) or ()):
        with contextlib.suppress(Exception):
            bar.close()


def _run(
    prog: str,
    commands: Mapping[str, Command],
    args: list[str],
    default: str,
    description: str,
    version: str | None,
    debug: bool,
) -> int:
    if args and args[0] in ("-h", "--help"):
        print(_top_help(prog, description, commands, default))
        return 0
    if args and args[0] == "--version":
        if version is None:
            from iclr25_shared import distribution_version

            version = distribution_version(prog)
        print(f"{prog} {version}")
        return 0
    label = f"{prog} {args[0]}" if args and args[0] in commands else prog
    from iclr25_shared import distributed

    had_group = distributed._initialized()  # a group the caller made is the caller's to destroy
    try:
        here = distributed.world()
    except ValueError as exc:
        return _fail(label, exc, debug, code=2)
    rank = f" [rank {here.rank}/{here.world_size}]" if here.is_distributed else ""
    label += rank
    # 1. The config and the user's files: any error here is bad input (exit 2).
    try:
        name, cfg = parse(prog, commands, args, default=default)
        label = f"{prog} {name}{rank}"
        from iclr25_shared.inputs import check_inputs

        check_inputs(cfg)
    except SystemExit as exc:
        return int(exc.code or 0)
    except (ValueError, TypeError, SourceUnavailable, FileNotFoundError) as exc:
        return _fail(label, exc, debug, code=2)
    check_interrupted()
    # 2. The method: InputError / SourceUnavailable are still the user's (exit 2); anything else is a failure (1).
    apply_threads(getattr(cfg, "threads", 0))
    out = getattr(cfg, "out", None)
    staging: Path | None = None
    try:
        with _quiet_libraries(bool(getattr(cfg, "quiet", False))):
            import numpy  # noqa: F401  (from Python first: torch's and jaxlib's C imports of it swallow a Ctrl-C)

            fn = _resolve(commands[name][1])
            check_interrupted()
            if _takes_context(fn):
                # a Ctrl-C while the folder is made arrives once `staging` is set, so it is removed
                with _sigint_blocked(deliver=True):  # only rank 0 writes
                    staging = _staging_dir(Path(out)) if out is not None and here.is_main else None
                ctx = RunContext(label, cfg, staging=staging)
                ctx.command_module = getattr(fn, "__module__", None)
                ctx.started_at = time.perf_counter()
                result = fn(cfg, ctx)
                check_interrupted()
                code = _finish(label, cfg, ctx, result, staging, out)
                staging = None
            else:  # a command that writes its own files (the pre-v2 form)
                code = int(fn(cfg) or 0)
                check_interrupted()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        if _INTERRUPT.fired:  # a Ctrl-C surfaced as another error (e.g. a half-imported module): still Ctrl-C
            raise KeyboardInterrupt from None
        if isinstance(exc, (InputError, SourceUnavailable)):
            return _fail(label, exc, debug, code=2)
        if isinstance(exc, SystemExit):
            raise
        return _fail(label, exc, debug, code=1)
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if not had_group:  # a group the command left behind (a failed rank's included)
            with contextlib.suppress(Exception):
                distributed.destroy_process_group()
    return code


def _fail(label: str, exc: BaseException, debug: bool, *, code: int) -> int:
    """Print one line for ``exc`` (the traceback too under ``ICLR25_DEBUG=1``) and return ``code``."""
    if debug:
        traceback.print_exception(exc)
    if code == 2:
        return _error(label, str(exc))
    message = " ".join(f"{type(exc).__name__}: {exc}".split())
    print(f"{label}: failed: {message} (set ICLR25_DEBUG=1 for the traceback)", file=sys.stderr)
    return code


_QUIET_ENV = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "DIFFUSERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "TQDM_DISABLE": "1",
}


@contextlib.contextmanager
def _quiet_libraries(quiet: bool) -> Any:
    """Under ``--quiet``: no progress bars or info/warning logs from transformers, diffusers, huggingface_hub or
    tqdm, whether they are imported during the run (environment) or already were (their own switches)."""
    if not quiet:
        yield
        return
    saved = {k: os.environ.get(k) for k in _QUIET_ENV}
    os.environ.update(_QUIET_ENV)
    restore: list[Callable[[], Any]] = []
    for module, off, on in (
        ("transformers", "disable_progress_bar", "enable_progress_bar"),
        ("diffusers", "disable_progress_bar", "enable_progress_bar"),
    ):
        if module in sys.modules:
            logging_module = importlib.import_module(f"{module}.utils.logging")
            level = logging_module.get_verbosity()
            logging_module.set_verbosity_error()
            getattr(logging_module, off)()
            restore.append(lambda m=logging_module, lv=level, f=on: (m.set_verbosity(lv), getattr(m, f)()))
    if "huggingface_hub" in sys.modules:
        hub = importlib.import_module("huggingface_hub.utils")
        hub.disable_progress_bars()
        restore.append(hub.enable_progress_bars)
    try:
        yield
    finally:
        for k, v in saved.items():  # first: huggingface_hub refuses to enable bars while its variable says no
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for undo in restore:
            undo()


def _finish(
    label: str, cfg: Any, ctx: RunContext, result: Any, staging: Path | None, out: Path | None
) -> int:
    if result is None:
        result = Result()
    if isinstance(result, int) and not isinstance(result, bool):
        result = Result(exit_code=result)
    if not isinstance(result, Result):
        raise TypeError(f"{label} returned {type(result).__name__}; commands return iclr25_shared.cli.Result")
    if ctx.world.is_main:
        _print_result(result, ctx.quiet)
    if staging is not None and out is not None:
        from iclr25_shared.results import RunRecord, git_revision, machine_description, package_versions

        module = sys.modules.get(getattr(ctx, "command_module", "") or "")

        record = RunRecord(
            command=label,
            config=cfg,
            metrics=result.metrics,
            tables=result.tables,
            timings=result.timings,
            notes=result.notes,
            device=ctx.device_label,
            versions=package_versions([label.split()[0], "iclr25-shared", "torch", "jax"]),
            git=git_revision(getattr(module, "__file__", None)),
            machine=machine_description(),
            wall_s=time.perf_counter() - ctx.started_at if ctx.started_at is not None else None,
        )
        record.save(staging)
        _commit(staging, Path(out))
        ctx.log.info(f"results in {out}")
    return int(result.exit_code)
