"""The package contract every iclr25 package satisfies (names, --help, --version, errors, --out, light import)."""

from iclr25_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "iclr25_adak"
    heavy_allowed = frozenset()  # e.g. {"torch"} when the public API subclasses torch classes

    def extra_input_args(self, command: str, field: str, folder):
        if field == "text":  # --text needs a --model folder (the runner only checks its files)
            model = folder / "model"
            model.mkdir(parents=True, exist_ok=True)
            (model / "config.json").write_text('{"model_type": "mixtral"}')
            (model / "model.safetensors").write_bytes(b"not read: the command is a stub")
            return ("--model", str(model))
        return ()
