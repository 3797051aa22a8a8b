"""Fast-tier settings: one torch thread."""

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)
