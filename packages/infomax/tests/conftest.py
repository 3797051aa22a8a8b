"""Shared fixtures and helpers for the iclr25-infomax tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# --import-mode=importlib keeps test folders off sys.path; the reference helpers live beside this file.
sys.path.insert(0, str(Path(__file__).parent))


def pytest_configure(config: pytest.Config) -> None:
    # Emitted by torch / sklearn internals on some platforms; not by our code.
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:torch.*")


@pytest.fixture(autouse=True, scope="session")
def _single_thread_torch() -> None:
    """Multi-threaded torch on a busy 2-core CI machine is ~100x slower for tiny models; tests use one thread."""
    import sys

    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
