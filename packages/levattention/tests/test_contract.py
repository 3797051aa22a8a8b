"""The package contract every iclr25 package satisfies (names, --help, --version, errors, --out, light import)."""

from iclr25_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "iclr25_levattention"
    heavy_allowed = frozenset()  # torch only when LevAttention / ViT are first used

    def extra_input_args(self, command: str, field: str, folder):
        if (command, field) == ("find", "q"):  # --q needs --k
            import numpy as np

            folder.mkdir(parents=True, exist_ok=True)
            np.save(folder / "k.npy", np.ones((3, 2)))
            return ("--k", str(folder / "k.npy"))
        return ()
