"""Test helpers every package uses: the CLI/package contract tests and ``require`` for data-backed tests.

The contract (docs/package-contract.md) is tested once here and run by every package, in its own environment,
by subclassing :class:`ContractTests` in ``tests/test_contract.py``::

    from iclr25_shared.testing import ContractTests

    class TestContract(ContractTests):
        package = "iclr25_qqa"            # import name; cli module is iclr25_qqa.cli
        heavy_allowed = frozenset({"jax"})  # heavy modules the package may import at `import iclr25_qqa`

The package's ``cli.py`` must define ``PROG``, ``COMMANDS`` (name → (config class, "module:function")),
``DEFAULT`` and ``main(argv)``. The tests replace the command functions by a stub, so no real work runs.

This module imports pytest: use it from tests only.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from iclr25_shared.errors import SourceUnavailable

__all__ = ["HEAVY_MODULES", "ContractTests", "require", "require_data"]

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


class ContractTests:
    """The package contract, as pytest tests. Subclass it and set :attr:`package`.

    Attributes:
        package: the import name, e.g. ``"iclr25_qqa"``.
        heavy_allowed: modules of :data:`HEAVY_MODULES` that ``import <package>`` may load (e.g. torch for a
            package whose public API subclasses ``torch.nn.Module``).
    """

    package: ClassVar[str] = ""
    heavy_allowed: ClassVar[frozenset[str]] = frozenset()

    # -- helpers --------------------------------------------------------------------------------------------
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

    def test_config_file_round_trip(self, tmp_path: Path, stubbed: list) -> None:
        """The defaults written as a --config file parse back to the same config."""
        from iclr25_shared.results import to_jsonable

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
