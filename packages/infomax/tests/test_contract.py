"""The package contract every iclr25 package satisfies (names, --help, --version, errors, --out, light import)."""

from iclr25_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "iclr25_infomax"
    heavy_allowed = frozenset()

    def extra_input_args(self, command, field, folder):
        if (command, field) == ("select", "features"):  # el2n (the default) would also need --labels
            return ("--score-method", "ssp")
        if (command, field) in (("select", "scores"), ("select", "labels")):  # both need --features
            import numpy as np

            folder.mkdir(parents=True, exist_ok=True)
            np.save(folder / "features.npy", np.ones((20, 3), np.float32))
            return ("--features", str(folder / "features.npy"))
        return ()
