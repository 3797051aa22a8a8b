"""Tests run in float64 (the gradient identities are checked to ~1e-10); float32 cases build float32 arrays."""

import jax

jax.config.update("jax_enable_x64", True)


def pytest_configure(config):
    # equinox/lineax emit these on some JAX versions; they are not about our code.
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:equinox.*")
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:lineax.*")
    config.addinivalue_line("filterwarnings", "ignore::FutureWarning:equinox.*")
