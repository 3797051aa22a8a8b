"""Fixtures: tiny random LLaVA models (no hub, no weights)."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from iclr25_vl_interp._tiny import tiny_inputs, tiny_llava  # noqa: E402


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    return tiny_llava()


@pytest.fixture
def inputs():
    return tiny_inputs()
