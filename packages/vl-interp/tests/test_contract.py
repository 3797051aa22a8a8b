"""The package contract every iclr25 package satisfies (names, --help, --version, errors, --out, light import)."""

from iclr25_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "iclr25_vl_interp"
    heavy_allowed = frozenset()

    def extra_input_args(self, command: str, field: str, folder):
        """--model and --image go together: each bad case gets a valid companion (the runner only checks files)."""
        folder.mkdir(parents=True, exist_ok=True)
        if field == "image":
            model = folder / "model"
            model.mkdir(exist_ok=True)
            (model / "config.json").write_text('{"model_type": "llava"}')
            (model / "model.safetensors").write_bytes(b"not read: the command is a stub")
            return ("--model", str(model))
        if field == "model":
            from PIL import Image

            Image.new("RGB", (4, 4)).save(folder / "image.png")
            return ("--image", str(folder / "image.png"))
        return ()
