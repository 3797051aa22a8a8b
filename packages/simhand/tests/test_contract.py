"""The package contract every iclr25 package satisfies (names, --help, --version, errors, --out, light import)."""

from iclr25_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "iclr25_simhand"
    heavy_allowed = frozenset()  # torch / sklearn / skimage load on first use of a public name
