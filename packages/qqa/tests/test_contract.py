"""The package contract (names, --help, --version, errors, --out, light import) from iclr25_shared.testing."""

from iclr25_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "iclr25_qqa"
    heavy_allowed = frozenset()  # the public names load numpy/networkx/JAX lazily
