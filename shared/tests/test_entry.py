"""iclr25_shared.entry: a Ctrl-C while the package's cli is still importing exits 130 with one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

FAKE_CLI = """
import pathlib, time
pathlib.Path({marker!r}).write_text("importing")
time.sleep({sleep})  # a heavy import (tyro, the package) in progress
def main():
    print("ran main")
    return 3
"""


def _spawn(tmp_path: Path, sleep: float, argv: list[str]) -> tuple[subprocess.Popen, Path]:
    pkg = tmp_path / "iclr25_fake_pkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    marker = tmp_path / "marker"
    (pkg / "cli.py").write_text(FAKE_CLI.format(marker=str(marker), sleep=sleep))
    code = f"import sys; sys.argv = {['iclr25-fake-pkg', *argv]!r}; from iclr25_shared.entry import fake_pkg; sys.exit(fake_pkg())"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return proc, marker


def test_the_entry_point_imports_the_cli_and_returns_mains_exit_code(tmp_path):
    proc, _ = _spawn(tmp_path, 0.0, ["go"])
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out.strip(), err) == (3, "ran main", "")


def test_a_ctrl_c_during_the_cli_import_exits_130_with_one_line(tmp_path):
    proc, marker = _spawn(tmp_path, 2.0, ["go", "--steps", "3"])  # the import finishes, then 130
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err == "iclr25-fake-pkg go: interrupted; no results were written\n" and out == ""


def test_private_names_are_not_entry_points():
    import iclr25_shared.entry as entry

    with pytest.raises(AttributeError):
        entry._secret  # noqa: B018
    assert entry.lozo.__name__ == "lozo"
