import pytest
import torch


def pytest_configure(config):
    # emitted by peft/transformers internals, not by our code
    config.addinivalue_line("filterwarnings", "ignore:.*torch_dtype.*is deprecated:FutureWarning")
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:peft.*")
    # iclr25_shared.cli._quiet_libraries re-enables huggingface_hub's bars after a --quiet run while the variable
    # it set is still in force (a core bug, reported): harmless, but an error under filterwarnings=error
    config.addinivalue_line("filterwarnings", "ignore:Cannot enable progress bars:UserWarning")


@pytest.fixture(autouse=True)
def _one_thread():
    # tiny models: thread start-up costs more than it saves, and CI machines are shared
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
