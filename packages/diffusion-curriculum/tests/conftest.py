import pytest


def pytest_configure(config):
    # diffusers/torch emit these at import or on first use; they are not about our code.
    config.addinivalue_line("filterwarnings", "ignore::FutureWarning:diffusers.*")
    config.addinivalue_line("filterwarnings", "ignore::UserWarning:diffusers.*")
    config.addinivalue_line("filterwarnings", "ignore:.*torch.utils._pytree.*:FutureWarning")


@pytest.fixture(autouse=True)
def _few_threads():
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is fastest, and far faster on a shared machine
    yield
    torch.set_num_threads(old)
