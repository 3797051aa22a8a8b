"""The package contract every iclr25 package satisfies (names, --help, --version, errors, --out, light import)."""

from iclr25_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "iclr25_diffusion_curriculum"
    heavy_allowed = frozenset()  # public names are imported lazily (PEP 562): `import` loads no torch
