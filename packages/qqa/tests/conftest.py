"""Shared fixtures for the iclr25-qqa tests."""

from __future__ import annotations

import os

# CPU unless the GPU tier runs (the `gpu` nox session sets ICLR25_REQUIRE_GPU=1): there JAX must see CUDA as well as
# the CPU, which tests/test_gpu.py uses as its reference.
os.environ.setdefault("JAX_PLATFORMS", "cuda,cpu" if os.environ.get("ICLR25_REQUIRE_GPU") == "1" else "cpu")


def pytest_configure(config):
    # jax/optax deprecation chatter is not ours (the root config already ignores jax.*; optax is added here).
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:optax.*")
