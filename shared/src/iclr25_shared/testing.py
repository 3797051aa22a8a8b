"""Test helpers every package uses: the CLI/package contract tests and ``require`` for data-backed tests.

The contract (docs/package-contract.md) is tested once here and run by every package, in its own environment,
by subclassing :class:`ContractTests` in ``tests/test_contract.py``::

    from iclr25_shared.testing import ContractTests

    class TestContract(ContractTests):
        package = "iclr25_qqa"            # import name; cli module is iclr25_qqa.cli
        heavy_allowed = frozenset({"jax"})  # heavy modules the package may import at `import iclr25_qqa`

The package's ``cli.py`` must define ``PROG``, ``COMMANDS`` (name → (config class, "module:function")),
``DEFAULT`` and ``main(argv)``. The tests replace the command functions by a stub, so no real work runs.

The boundary between the user and the method (docs/package-contract.md) is proven here once, for every package,
with no per-package code: every config field typed as a path is declared (``INPUTS`` or ``NOT_INPUTS``), and every
declared input fed a missing path, an empty file, a junk file, a folder where a file is expected and a file where a
folder is expected exits 2 with one line naming the path, writes nothing and leaves an existing ``--out`` as it was;
Ctrl-C while parsing, and one a library swallows, exit 130 with nothing written; ``--help`` and ``--version`` import
no heavy library; the files of a run are ``0o644`` under umask 022 whoever wrote them; a failure during the run
exits 1 and an :class:`~iclr25_shared.errors.InputError` 2; every default config builds with an empty cache.

This module imports pytest: use it from tests only.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from iclr25_shared._ranks import RankFailed, run_ranks, torchrun_argv
from iclr25_shared.errors import SourceUnavailable

__all__ = [
    "HEAVY_MODULES",
    "ContractTests",
    "HFIntegrationContract",
    "RankFailed",
    "require",
    "require_data",
    "run_ranks",
    "torchrun_argv",
]

HEAVY_MODULES = frozenset(
    {
        "torch",
        "jax",
        "flax",
        "optax",
        "transformers",
        "diffusers",
        "accelerate",
        "peft",
        "torch_geometric",
        "torchvision",
        "sklearn",
        "scipy",
        "pandas",
        "matplotlib",
        "networkx",
        "datasets",
        "sentence_transformers",
        "openai",
        "faiss",
    }
)
"""Modules whose import costs seconds; ``import iclr25_<slug>`` loads none it does not list in heavy_allowed."""


def require_data() -> bool:
    """True when a missing data/weights source must fail the test run instead of skipping (``ICLR25_REQUIRE_DATA=1``,
    set by CI)."""
    return os.environ.get("ICLR25_REQUIRE_DATA", "") not in ("", "0")


def require(loader: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``loader(*args, **kwargs)``; when its source is missing, skip the test with the install command.

    Under ``ICLR25_REQUIRE_DATA=1`` (CI) a missing source fails the test instead, so CI never goes green by skipping.
    Anything else the loader raises propagates. Also catches ``ImportError`` of an optional package, whose message
    names it.
    """
    try:
        return loader(*args, **kwargs)
    except (SourceUnavailable, ImportError) as exc:
        message = f"source unavailable: {exc}"
        if require_data():
            pytest.fail(f"{message} (ICLR25_REQUIRE_DATA is set)")
        pytest.skip(message)


def _stub_result() -> Any:
    from iclr25_shared.cli import Result

    return Result(metrics={"stub": 1.0}, tables={"rows": [{"a": 1, "b": 2.5}]})


_JUNK = b"\x89\x00junk: not what this option reads \xff\xfe\n"


def _bad_paths(root: Path, spec: Any) -> list[tuple[str, Path]]:
    """The bad values the contract feeds one declared input: (case name, path)."""
    root.mkdir(parents=True, exist_ok=True)
    suffix = {
        "torch_checkpoint": ".pt",
        "npz": ".npz",
        "npy": ".npy",
        "image": ".png",
        "video": ".mp4",
        "table": ".json",
        "json": ".json",
        "text": ".txt",
    }.get(spec.kind, ".bin")
    missing = root / f"missing{suffix}"
    empty = root / f"empty{suffix}"
    empty.write_bytes(b"")
    junk = root / f"junk{suffix}"
    junk.write_bytes(_JUNK)
    a_folder = root / f"folder{suffix}"
    a_folder.mkdir()
    if spec.may_be_name:  # a model name or path: only values that look like paths are paths
        return [
            ("missing", Path(f"{missing}")),
            ("empty file", empty),
            ("junk file", junk),
            ("empty folder", a_folder),
        ]
    if spec.is_folder:
        return [("missing", missing), ("empty file where a folder is expected", empty), ("junk file", junk)]
    return [("missing", missing), ("empty file", empty), ("junk file", junk), ("folder", a_folder)]


class ContractTests:
    """The package contract, as pytest tests. Subclass it and set :attr:`package`.

    Attributes:
        package: the import name, e.g. ``"iclr25_qqa"``.
        heavy_allowed: modules of :data:`HEAVY_MODULES` that ``import <package>`` may load (e.g. torch for a
            package whose public API subclasses ``torch.nn.Module``).
    """

    package: ClassVar[str] = ""
    heavy_allowed: ClassVar[frozenset[str]] = frozenset()
    input_args: ClassVar[dict[str, tuple[str, ...]]] = {}
    """Extra arguments a bad-file case needs besides the bad option (e.g. ``{"evaluate.images": ("--pairs",
    "x.csv")}``), keyed by ``"command.field"`` or ``"field"``; they may not make the case pass."""

    # -- helpers --------------------------------------------------------------------------------------------
    @pytest.fixture(autouse=True)
    def _sigint_raises_keyboard_interrupt(self) -> Any:
        """The Ctrl-C tests send SIGINT to this process; a test run started as a background job inherits SIGINT as
        ignored (which the runner keeps), so Python's own handling is installed for each test."""
        import threading

        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    @property
    def cli(self) -> Any:
        if not self.package:
            raise TypeError("set `package` on the ContractTests subclass")
        return importlib.import_module(f"{self.package}.cli")

    @property
    def distribution(self) -> str:
        return self.package.replace("_", "-")

    @pytest.fixture
    def stubbed(self, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
        """Replace every command function by a stub that records its config and returns a small Result."""
        calls: list[tuple[str, Any]] = []
        for name, (cls, _) in list(self.cli.COMMANDS.items()):

            def stub(cfg: Any, ctx: Any, _name: str = name) -> Any:
                calls.append((_name, cfg))
                return _stub_result()

            monkeypatch.setitem(self.cli.COMMANDS, name, (cls, stub))
        return calls

    # -- the contract ---------------------------------------------------------------------------------------
    def test_names_agree(self) -> None:
        """folder packages/<slug> → distribution iclr25-<slug> → import iclr25_<slug> → command iclr25-<slug>."""
        assert self.package.startswith("iclr25_")
        assert self.distribution == self.cli.PROG
        assert self.cli.DEFAULT in self.cli.COMMANDS
        assert {"reproduce", "bench"} <= set(self.cli.COMMANDS), "every package has reproduce and bench"

    def test_help_lists_every_subcommand(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert self.cli.main(["--help"]) == 0
        text = capsys.readouterr().out
        for name in self.cli.COMMANDS:
            assert name in text
        for name in self.cli.COMMANDS:
            assert self.cli.main([name, "--help"]) == 0
            assert "--out" in capsys.readouterr().out

    def test_version_comes_from_the_metadata(self, capsys: pytest.CaptureFixture[str]) -> None:
        from importlib.metadata import version

        assert self.cli.main(["--version"]) == 0
        assert capsys.readouterr().out.strip() == f"{self.cli.PROG} {version(self.distribution)}"
        assert importlib.import_module(self.package).__version__ == version(self.distribution)

    def test_unknown_option_exits_2_with_one_line(
        self, stubbed: list, capsys: pytest.CaptureFixture[str]
    ) -> None:
        for name in self.cli.COMMANDS:
            assert self.cli.main([name, "--no-such-option", "1"]) == 2
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and "error" in err, err
        assert not stubbed

    def test_config_file_round_trip(
        self, tmp_path: Path, stubbed: list, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The defaults written as a --config file parse back to the same config (parsing only: the declared
        inputs' checks, which a default such as ``model.pt`` would fail here, are tested on their own)."""
        import iclr25_shared.inputs
        from iclr25_shared.results import to_jsonable

        monkeypatch.setattr(iclr25_shared.inputs, "check_inputs", lambda cfg: None)

        for name, (cls, _) in self.cli.COMMANDS.items():
            defaults = cls()
            data = {k: v for k, v in to_jsonable(defaults).items() if k != "config"}
            path = tmp_path / f"{name}.json"
            path.write_text(json.dumps(data))
            assert self.cli.main([name, "--config", str(path)]) == 0
            got_name, got = stubbed[-1]
            assert got_name == name
            assert dataclasses.replace(got, config=None) == defaults

    def test_bad_out_is_refused_before_any_work(self, tmp_path: Path, stubbed: list, capsys: Any) -> None:
        name = self.cli.DEFAULT
        a_file = tmp_path / "results.json"
        a_file.write_text("{}")
        full = tmp_path / "full"
        full.mkdir()
        (full / "results.json").write_text("{}")
        for out in (a_file, full, a_file / "sub"):
            assert self.cli.main([name, "--out", str(out)]) == 2, out
            assert len(capsys.readouterr().err.strip().splitlines()) == 1
        assert not stubbed
        assert a_file.read_text() == "{}" and (full / "results.json").read_text() == "{}"

    def test_results_replace_the_folder_only_with_overwrite(self, tmp_path: Path, stubbed: list) -> None:
        out = tmp_path / "run"
        assert self.cli.main([self.cli.DEFAULT, "--out", str(out)]) == 0
        record = json.loads((out / "results.json").read_text())
        assert record["metrics"] == {"stub": 1.0}
        mode = (out / "results.json").stat().st_mode & 0o777
        umask = os.umask(0)
        os.umask(umask)
        assert mode == 0o666 & ~umask, oct(mode)
        (out / "stale.txt").write_text("old")
        assert self.cli.main([self.cli.DEFAULT, "--out", str(out), "--overwrite"]) == 0
        assert sorted(p.name for p in out.iterdir()) == ["config.json", "results.json", "results.md"]
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary folders left behind"

    def extra_input_args(self, command: str, field: str, folder: Path) -> tuple[str, ...]:
        """Arguments a bad-file case of ``command``'s ``field`` needs besides the bad option (default:
        :attr:`input_args`). Override to write valid companion files into ``folder`` (created on demand)."""
        return tuple(self.input_args.get(f"{command}.{field}", self.input_args.get(field, ())))

    # -- the boundary (Template v3) -----------------------------------------------------------------------
    def test_every_path_option_is_declared_as_an_input_or_opted_out(self) -> None:
        from iclr25_shared.inputs import declared_inputs, declared_outputs, path_fields

        for name, (cls, _) in self.cli.COMMANDS.items():
            declared = {**declared_inputs(cls), **declared_outputs(cls)}
            opted_out = dict(getattr(cls, "NOT_INPUTS", {}) or {})
            fields = {f.name for f in dataclasses.fields(cls)}
            assert set(declared) <= fields, f"{name}: INPUTS names unknown fields {set(declared) - fields}"
            assert set(opted_out) <= fields, (
                f"{name}: NOT_INPUTS names unknown fields {set(opted_out) - fields}"
            )
            assert all(isinstance(r, str) and len(r) > 10 for r in opted_out.values()), "state each reason"
            undeclared = set(path_fields(cls)) - set(declared) - set(opted_out)
            assert not undeclared, (
                f"{name}: path options {sorted(undeclared)} are in none of INPUTS, OUTPUTS, NOT_INPUTS"
            )

    def test_bad_files_exit_2_naming_the_path_and_write_nothing(
        self, tmp_path: Path, stubbed: list, capsys: pytest.CaptureFixture[str]
    ) -> None:
        from iclr25_shared.inputs import declared_inputs, declared_outputs, option

        out = tmp_path / "previous-results"
        out.mkdir()
        (out / "results.json").write_text('{"kept": true}')
        tried = 0
        for name, (cls, _) in self.cli.COMMANDS.items():
            for field, spec in {**declared_inputs(cls), **declared_outputs(cls)}.items():
                extra = self.extra_input_args(name, field, tmp_path / "valid")
                cases = _bad_paths(tmp_path / f"{name}-{field}", spec)
                if field in declared_outputs(cls):
                    cases = [c for c in cases if c[0] != "missing"]  # a missing output folder is created
                for case, path in cases:
                    code = self.cli.main(
                        [name, option(field), str(path), *extra, "--out", str(out), "--overwrite"]
                    )
                    err = capsys.readouterr().err.strip()
                    where = f"{name} {option(field)} {case}"
                    assert code == 2, f"{where}: exit {code}, stderr {err!r}"
                    assert len(err.splitlines()) == 1 and "Traceback" not in err, f"{where}: {err!r}"
                    assert str(path) in err or repr(str(path)) in err, (
                        f"{where}: the message names no path: {err!r}"
                    )
                    tried += 1
        assert not stubbed, "a command ran although its input was bad"
        assert (out / "results.json").read_text() == '{"kept": true}'
        assert sorted(p.name for p in out.iterdir()) == ["results.json"]
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary folders left behind"
        if not tried:
            pytest.skip("no command of this package reads a user file")

    def test_ctrl_c_while_parsing_exits_130_and_writes_nothing(
        self, tmp_path: Path, stubbed: list, monkeypatch: pytest.MonkeyPatch, capsys: Any
    ) -> None:
        import tyro

        def interrupted_parse(*args: Any, **kwargs: Any) -> Any:
            os.kill(os.getpid(), signal.SIGINT)  # a real SIGINT, handled by the runner's handler
            time.sleep(5)
            raise AssertionError("SIGINT was not delivered")

        monkeypatch.setattr(tyro, "cli", interrupted_parse)
        out = tmp_path / "run"
        assert self.cli.main([self.cli.DEFAULT, "--out", str(out)]) == 130
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "interrupted" in err, err
        assert not stubbed and not out.exists() and not list(tmp_path.iterdir())

    def test_a_ctrl_c_that_a_library_swallows_still_stops_the_run(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
    ) -> None:
        def swallowing(cfg: Any, ctx: Any) -> Any:
            try:  # what JAX's GC callback does with a KeyboardInterrupt ("Exception ignored in ...")
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)
            except KeyboardInterrupt:
                pass
            ctx.save_text("partial.txt", "should never be committed")
            return _stub_result()

        monkeypatch.setitem(
            self.cli.COMMANDS, self.cli.DEFAULT, (self.cli.COMMANDS[self.cli.DEFAULT][0], swallowing)
        )
        out = tmp_path / "run"
        assert self.cli.main([self.cli.DEFAULT, "--out", str(out)]) == 130
        assert "interrupted" in capsys.readouterr().err
        assert not out.exists() and not list(tmp_path.iterdir()), list(tmp_path.iterdir())

    def test_files_a_run_writes_are_ordinary_whoever_wrote_them(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def writes_private_files(cfg: Any, ctx: Any) -> Any:
            weights = ctx.path("unet/diffusion_pytorch_model.safetensors")  # safetensors writes 0600
            weights.write_bytes(b"\0" * 8)
            weights.chmod(0o600)
            weights.parent.chmod(0o700)
            video = ctx.path("videos/clip.mp4")  # mkstemp-then-rename writers leave 0600
            video.write_bytes(b"\0")
            video.chmod(0o600)
            return _stub_result()

        monkeypatch.setitem(
            self.cli.COMMANDS,
            self.cli.DEFAULT,
            (self.cli.COMMANDS[self.cli.DEFAULT][0], writes_private_files),
        )
        out = tmp_path / "run"
        previous = os.umask(0o022)
        try:
            assert self.cli.main([self.cli.DEFAULT, "--out", str(out), "--quiet"]) == 0
        finally:
            os.umask(previous)
        modes = {str(p.relative_to(out)): p.stat().st_mode & 0o777 for p in out.rglob("*")}
        expected = {k: (0o755 if (out / k).is_dir() else 0o644) for k in modes}
        assert modes == expected, {k: oct(v) for k, v in modes.items()}

    def test_a_failure_during_the_run_exits_1_and_bad_input_exits_2(
        self, monkeypatch: pytest.MonkeyPatch, capsys: Any
    ) -> None:
        from iclr25_shared.errors import InputError

        cls = self.cli.COMMANDS[self.cli.DEFAULT][0]
        for error, code in (
            (ValueError("loss is non-finite at step 3"), 1),  # divergence is not the user's input
            (FloatingPointError("overflow"), 1),
            (InputError("--data: 'x.npz' has no array 'y'"), 2),
        ):

            def fails(cfg: Any, ctx: Any, _e: Exception = error) -> Any:
                raise _e

            monkeypatch.setitem(self.cli.COMMANDS, self.cli.DEFAULT, (cls, fails))
            assert self.cli.main([self.cli.DEFAULT, "--quiet"]) == code, error
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and str(error) in err, err

    def test_default_configs_build_with_an_empty_cache(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Constructing a config touches no data (issue: defaults that checked the user cache failed CI)."""
        monkeypatch.setenv("ICLR25_CACHE", str(tmp_path / "empty-cache"))
        monkeypatch.setenv("ICLR25_NO_FETCH", "1")
        for _name, (cls, _) in self.cli.COMMANDS.items():
            cls()

    def test_help_and_version_import_no_heavy_library(self) -> None:
        commands = list(self.cli.COMMANDS)
        code = (
            "import sys, contextlib, io\n"
            f"from {self.package}.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert main(['--help']) == 0 and main(['--version']) == 0\n"
            f"    for name in {commands!r}:\n"
            "        assert main([name, '--help']) == 0\n"
            f"print(' '.join(sorted(m for m in {sorted(HEAVY_MODULES)!r} if m in sys.modules)))\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        assert not done.stdout.split(), f"--help imports {done.stdout.split()}"

    def test_the_cli_module_imports_no_numpy_so_ctrl_c_at_start_up_is_caught(self) -> None:
        """The console script imports ``<package>.cli`` before ``main`` installs the runner's SIGINT handler; a
        Ctrl-C in that window prints Python's traceback. Keeping it to the core's light modules (no numpy: 0.3-0.7 s
        under load when a package's ``__init__`` imported it eagerly) keeps the window to ~0.1 s."""
        code = f"import sys, {self.package}.cli; print('numpy' in sys.modules)"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert done.stdout.strip() == "False", f"import {self.package}.cli imports numpy (use lazy_exports)"

    def test_import_loads_no_heavy_module_it_does_not_need(self) -> None:
        code = (
            f"import sys, {self.package}, {self.package}.cli; "
            f"print(' '.join(sorted(m for m in {sorted(HEAVY_MODULES)!r} if m in sys.modules)))"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        loaded = set(done.stdout.split())
        assert loaded <= set(self.heavy_allowed), (
            f"import {self.package} loads {sorted(loaded - self.heavy_allowed)}"
        )


class HFIntegrationContract:
    """The Hugging Face integration contract, as pytest tests, for a package that patches, converts or hooks a
    transformers model (a user's own stack must keep working): subclass it in ``tests/test_hf_contract.py``.

    The package provides tiny random models of every architecture it claims (:meth:`architectures`) and how it
    patches one (:meth:`patch`); the tests prove, on each:

    - a cast after patching (``bfloat16``, ``float16``, ``float64``) and a device move keep forward and backward
      working; the float64 forward agrees with the float32 one;
    - ``remove()`` (or the context's exit) restores the forward output bit for bit, every parameter's
      ``requires_grad`` and every module's training mode;
    - ``save_pretrained`` → :meth:`load_patched` either restores the patched model exactly (``roundtrip = "exact"``)
      or refuses with a message that says what to do (``roundtrip = "refuse"``, matched by ``refuse_match``) — never
      a model with silently re-initialised weights.

    Attributes:
        roundtrip: ``"exact"`` or ``"refuse"``.
        refuse_match: regex the refusal's message matches (``roundtrip = "refuse"``).
        removable: whether :meth:`patch` returns a handle with ``remove()`` (conversions that replace modules for
            good set ``False``; the removal test is skipped with that reason).
        cast_dtypes: the low-precision dtypes the package claims.
    """

    roundtrip: ClassVar[str] = "exact"
    refuse_match: ClassVar[str] = ""
    removable: ClassVar[bool] = True
    cast_dtypes: ClassVar[tuple[str, ...]] = ("bfloat16", "float16")

    # -- what the package provides ----------------------------------------------------------------------------
    def architectures(self) -> dict[str, Callable[[], Any]]:
        """name → a function returning a tiny random model of that architecture (float32, on CPU)."""
        raise NotImplementedError

    def patch(self, model: Any) -> Any:
        """Patch ``model`` in place; return the handle (with ``remove()`` when :attr:`removable`)."""
        raise NotImplementedError

    def inputs(self, model: Any) -> dict[str, Any]:
        """Forward keyword arguments for ``model`` (default: ``input_ids`` of shape (2, 8) from its vocabulary)."""
        import torch

        generator = torch.Generator().manual_seed(0)
        vocab = int(getattr(model.config, "vocab_size", 32))
        return {"input_ids": torch.randint(0, vocab, (2, 8), generator=generator)}

    def output(self, model: Any, inputs: dict[str, Any]) -> Any:
        """The tensor the tests compare (default: ``model(**inputs).logits``)."""
        return model(**inputs).logits

    def load_patched(self, path: Path) -> Any:
        """Load what ``save_pretrained`` wrote (default: ``AutoModelForCausalLM.from_pretrained``)."""
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(path)

    # -- helpers ----------------------------------------------------------------------------------------------
    def _models(self) -> list[tuple[str, Any]]:
        import torch

        found = []
        for name, make in self.architectures().items():
            torch.manual_seed(0)
            found.append((name, make()))
        assert found, "architectures() returned none"
        return found

    @staticmethod
    def _perturb(model: Any) -> None:
        """Move every parameter off its initial value, so a silently re-initialised load cannot match."""
        import torch

        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * torch.randn(p.shape, generator=generator, dtype=torch.float32).to(p.dtype))

    # -- the contract -------------------------------------------------------------------------------------------
    def test_forward_and_backward_after_a_cast(self) -> None:
        import torch

        for name, model in self._models():
            self.patch(model)
            for dtype_name in (*self.cast_dtypes, "float64"):
                dtype = getattr(torch, dtype_name)
                model.to(dtype)
                model.zero_grad(set_to_none=True)
                out = self.output(model, self.inputs(model))
                assert torch.isfinite(out.float()).all(), f"{name} in {dtype_name}: non-finite output"
                out.float().square().mean().backward()
                bad = [
                    n
                    for n, p in model.named_parameters()
                    if p.requires_grad and p.grad is not None and not torch.isfinite(p.grad.float()).all()
                ]
                assert not bad, f"{name} in {dtype_name}: non-finite gradients in {bad[:3]}"
                floats = {p.dtype for p in model.parameters() if p.is_floating_point()}
                assert floats == {dtype}, f"{name}: .to({dtype_name}) left parameters in {floats}"
            model.to(torch.float32)

    def test_float64_after_patching_agrees_with_float32(self) -> None:
        import torch

        for name, model in self._models():
            self.patch(model)
            model.eval()
            x = self.inputs(model)
            with torch.no_grad():
                single = self.output(model, x).double()
                model.to(torch.float64)
                double = self.output(model, x)
            assert double.dtype == torch.float64, f"{name}: float64 model gave {double.dtype} output"
            scale = double.abs().max().clamp_min(1.0)
            assert (double - single).abs().max() <= 1e-4 * scale, f"{name}: float64 vs float32 differ"

    def test_a_device_move_after_patching(self) -> None:
        import torch

        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        for name, model in self._models():
            self.patch(model)
            model.eval()
            x = self.inputs(model)
            with torch.no_grad():
                reference = self.output(model, x).float()
                for device in devices:
                    model.to(device)
                    moved = {k: v.to(device) if hasattr(v, "to") else v for k, v in x.items()}
                    got = self.output(model, moved).float().cpu()
                    tol = 0.0 if device == "cpu" else 1e-4 * float(reference.abs().max().clamp_min(1.0))
                    assert (got - reference).abs().max() <= tol, f"{name} on {device}"
                model.to("cpu")

    def test_remove_restores_outputs_requires_grad_and_training_mode(self) -> None:
        import torch

        if not self.removable:
            pytest.skip("this package's patch is a conversion with no remove() (documented in its README)")
        for name, model in self._models():
            params = list(model.named_parameters())
            for i, (_, p) in enumerate(params):
                p.requires_grad_(i % 3 != 0)  # a caller's own freezing pattern
            model.train()
            next(iter(model.children())).eval()  # and a submodule in eval mode
            flags = {n: p.requires_grad for n, p in model.named_parameters()}
            modes = {n: m.training for n, m in model.named_modules()}
            x = self.inputs(model)
            model.eval()
            with torch.no_grad():
                before = self.output(model, x).clone()
            model.train()
            next(iter(model.children())).eval()
            handle = self.patch(model)
            handle.remove()
            assert {n: p.requires_grad for n, p in model.named_parameters()} == flags, (
                f"{name}: requires_grad"
            )
            assert {n: m.training for n, m in model.named_modules()} == modes, f"{name}: training modes"
            model.eval()
            with torch.no_grad():
                after = self.output(model, x)
            assert torch.equal(before, after), f"{name}: outputs after remove() differ from before the patch"

    def test_save_pretrained_round_trip_restores_the_patch_or_refuses(self, tmp_path: Path) -> None:
        import torch

        for name, model in self._models():
            self.patch(model)
            self._perturb(model)
            model.eval()
            x = self.inputs(model)
            with torch.no_grad():
                saved = self.output(model, x)
            folder = tmp_path / name
            if self.roundtrip == "refuse":

                def save_and_load(m: Any = model, f: Path = folder) -> None:
                    m.save_pretrained(f)
                    self.load_patched(f)

                with pytest.raises(Exception, match=self.refuse_match):
                    save_and_load()
                continue
            model.save_pretrained(folder)
            loaded = self.load_patched(folder)
            loaded.eval()
            with torch.no_grad():
                got = self.output(loaded, x)
            assert torch.equal(saved, got), f"{name}: the loaded model differs from the saved one"
