import pytest


@pytest.fixture(autouse=True)
def _one_thread():
    # tiny models: thread start-up costs more than it saves, and CI machines are shared
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
