import pytest


@pytest.fixture(scope="session")
def tiny():
    """Small random towers (MiniLM's packaged tokenizer, 1-layer BERT, 2-layer CNN)."""
    from iclr25_semiclip._model import tiny_towers

    return tiny_towers(resolution=16, seed=0)
