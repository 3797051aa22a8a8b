"""Test configuration: single-threaded torch (the models are tiny; extra threads only contend on shared CPUs)."""

from __future__ import annotations

import pytest
import torch


def pytest_configure(config: pytest.Config) -> None:
    torch.set_num_threads(1)
