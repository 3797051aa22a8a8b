"""The package contract every iclr25 package satisfies (names, --help, --version, errors, --out, light import)."""

from iclr25_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "iclr25_videophy"
    heavy_allowed = frozenset()  # torch, PyAV and scikit-learn load inside the functions that use them

    def extra_input_args(self, command, field, folder):
        if (command, field) == ("evaluate", "videos"):  # --videos needs --prompts
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "prompts.csv").write_text("caption\nA ball falls\n")
            return ("--prompts", str(folder / "prompts.csv"))
        return ()
