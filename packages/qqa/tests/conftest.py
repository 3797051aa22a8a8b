"""Shared fixtures for the iclr25-qqa tests."""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def pytest_configure(config):
    # jax/optax deprecation chatter is not ours (the root config already ignores jax.*; optax is added here).
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:optax.*")
