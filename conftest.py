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
