"""Test settings for every suite run from this repository (nox runs pytest with --rootdir at the root)."""

from __future__ import annotations

import signal
import threading

import pytest


@pytest.fixture(autouse=True)
def _sigint_raises_keyboard_interrupt():
    """Tests that send themselves SIGINT need Python's own handling of it; a test run started as a background job
    (a non-interactive shell's `cmd &`, some CI runners) inherits SIGINT as ignored, which the CLI runner keeps."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _gpu_visible() -> bool:
    """A CUDA device torch or JAX can use (whichever the suite's environment has)."""
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        import torch

        return bool(torch.cuda.is_available())
    if importlib.util.find_spec("jax") is not None:
        import jax

        try:
            return bool(jax.devices("gpu"))
        except RuntimeError:
            return False
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`gpu`-marked tests are collected everywhere and skipped where no GPU is visible; under ICLR25_REQUIRE_GPU=1
    (the `gpu` nox session) a missing GPU fails them instead, so a GPU check never goes green by skipping."""
    import os

    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items or _gpu_visible():
        return
    if os.environ.get("ICLR25_REQUIRE_GPU") == "1":
        raise pytest.UsageError("ICLR25_REQUIRE_GPU=1 but no CUDA device is visible to torch or JAX")
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run `uv run nox -s gpu` on a GPU machine)")
    for item in gpu_items:
        item.add_marker(skip)
