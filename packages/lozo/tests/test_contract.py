"""The package contract (names, --help, --version, errors, --out, light import), shared by every iclr25 package."""

from iclr25_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "iclr25_lozo"
    heavy_allowed = frozenset()  # torch only when LOZO / MeZO are first used (lazy exports)

    def extra_input_args(self, command: str, field: str, folder):
        if (command, field) == ("finetune", "data_path"):  # --data-path is read by the sentiment task only
            return ("--task", "sentiment")
        return ()
