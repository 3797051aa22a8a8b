"""The package contract every iclr25 package satisfies (names, --help, --version, errors, --out, light import)."""

from iclr25_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "iclr25_hyper_connections"
    heavy_allowed = (
        frozenset()
    )  # torch is imported when a public name is first used, transformers by _hf only
