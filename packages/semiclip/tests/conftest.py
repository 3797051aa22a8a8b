import pytest

from iclr25_shared.testing import require


@pytest.fixture(scope="session")
def tiny():
    """Small random towers (an in-memory word-piece tokenizer, 1-layer BERT, 2-layer CNN; no packaged weights);
    skipped, with the install command, when transformers is not installed (a failure under ICLR25_REQUIRE_DATA=1)."""
    from iclr25_semiclip._model import tiny_towers

    return require(tiny_towers, resolution=16, seed=0)
