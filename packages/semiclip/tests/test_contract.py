"""The package contract every iclr25 package satisfies (names, --help, --version, errors, --out, light import)."""

from iclr25_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "iclr25_semiclip"
    heavy_allowed = (
        frozenset()
    )  # torch, transformers and timm are imported only when a command or class needs them
