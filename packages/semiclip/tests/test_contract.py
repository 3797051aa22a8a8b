"""The package contract every iclr25 package satisfies (names, --help, --version, errors, --out, light import)."""

from iclr25_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "iclr25_semiclip"
    heavy_allowed = (
        frozenset()
    )  # torch, transformers and timm are imported only when a command or class needs them

    def extra_input_args(self, command, field, folder):
        """--pairs and --images go together: give the bad one a valid companion."""
        if command != "train" or field not in ("pairs", "images"):
            return ()
        import numpy as np
        from PIL import Image

        (folder / "unl").mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(folder / "unl" / "a.png")
        (folder / "pairs.tsv").write_text("unl/a.png\ta black square\n")
        return (
            ("--images", str(folder / "unl")) if field == "pairs" else ("--pairs", str(folder / "pairs.tsv"))
        )
