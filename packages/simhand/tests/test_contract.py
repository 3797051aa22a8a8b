"""The package contract every iclr25 package satisfies (names, --help, --version, errors, --out, light import)."""

from iclr25_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "iclr25_simhand"
    heavy_allowed = frozenset()  # torch / sklearn / skimage load on first use of a public name

    def test_config_file_round_trip(self, tmp_path, stubbed, monkeypatch):
        """evaluate's default --checkpoint is model.pt in the current folder: run the round trip where one is."""
        import torch

        from iclr25_simhand._model import HandEncoder, SmallConvNet

        here = tmp_path / "cwd"
        here.mkdir()
        torch.save(
            {"state_dict": HandEncoder(SmallConvNet(2)).state_dict(), "meta": {"width": 2}}, here / "model.pt"
        )
        monkeypatch.chdir(here)
        super().test_config_file_round_trip(tmp_path, stubbed)
