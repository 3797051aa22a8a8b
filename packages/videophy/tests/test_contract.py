"""The package contract every iclr25 package satisfies (names, --help, --version, errors, --out, light import)."""

from iclr25_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "iclr25_videophy"
    heavy_allowed = frozenset()  # torch, PyAV and scikit-learn load inside the functions that use them
