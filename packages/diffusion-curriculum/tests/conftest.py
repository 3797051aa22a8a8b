import pytest


def pytest_configure(config):
    # diffusers/torch emit these at import or on first use; they are not about our code.
    config.addinivalue_line("filterwarnings", "ignore::FutureWarning:diffusers.*")
    config.addinivalue_line("filterwarnings", "ignore::UserWarning:diffusers.*")
    config.addinivalue_line("filterwarnings", "ignore:.*torch.utils._pytree.*:FutureWarning")
    # The runner's --quiet re-enables huggingface_hub's progress bars before it restores HF_HUB_DISABLE_PROGRESS_BARS,
    # so a second --quiet run in one process warns (an error here, exit 1); a core issue, not this package's.
    config.addinivalue_line("filterwarnings", "ignore:Cannot enable progress bars:UserWarning")


@pytest.fixture(autouse=True)
def _few_threads():
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is fastest, and far faster on a shared machine
    yield
    torch.set_num_threads(old)
