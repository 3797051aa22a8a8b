import pytest


def pytest_configure(config):
    # The runner's --quiet re-enables huggingface_hub's progress bars before it restores HF_HUB_DISABLE_PROGRESS_BARS,
    # so a second --quiet run in one process warns (an error here, exit 1); a core issue, not this package's.
    config.addinivalue_line("filterwarnings", "ignore:Cannot enable progress bars:UserWarning")


@pytest.fixture(autouse=True)
def _one_thread():
    # tiny models: thread start-up costs more than it saves, and CI machines are shared
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
