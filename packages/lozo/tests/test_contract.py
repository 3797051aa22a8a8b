"""The package contract (names, --help, --version, errors, --out, light import), shared by every iclr25 package."""

from iclr25_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "iclr25_lozo"
    heavy_allowed = frozenset({"torch"})  # LOZO and MeZO subclass torch.optim.Optimizer
