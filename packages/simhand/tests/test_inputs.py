"""The user/method boundary (issue 37): bad checkpoints and sizes exit 2 with one line naming the file or option,
before any rendering or training; library functions keep their input's dtype."""

import numpy as np
import pytest
import torch

from iclr25_simhand import pair_weights
from iclr25_simhand.cli import main


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _never_render(monkeypatch):
    """Fail the test if the command gets as far as rendering hands (the error must come before any work)."""
    import iclr25_simhand._render as render

    def boom(*args, **kwargs):
        raise AssertionError("rendered hands before refusing the input")

    monkeypatch.setattr(render, "render_hands", boom)


def test_finetune_empty_encoder_exits_2_naming_it(tmp_path, capsys):
    """Was exit 1, ``failed: EOFError``."""
    empty = tmp_path / "EMPTY.pt"
    empty.write_bytes(b"")
    assert main(["finetune", "--encoder", str(empty), "--quiet"]) == 2
    err = _one_line(capsys)
    assert str(empty) in err and "--encoder" in err


def test_evaluate_junk_checkpoint_exits_2_with_one_line(tmp_path, capsys):
    """Was exit 1 with a multi-line UnpicklingError advising weights_only=False."""
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint at all\n" * 4)
    assert main(["evaluate", "--checkpoint", str(junk), "--quiet"]) == 2
    err = _one_line(capsys)
    assert str(junk) in err and "--checkpoint" in err and "weights_only=False" not in err


@pytest.mark.parametrize(
    "blob",
    [
        {"weights": 1},  # a torch file, but not one of ours
        {"state_dict": {"x": torch.ones(2)}, "meta": {"width": 16, "size": 16}},  # wrong tensors
        {"state_dict": {}, "meta": {"width": "wide"}},  # garbage metadata
    ],
)
def test_a_torch_file_that_is_not_a_simhand_checkpoint_exits_2(tmp_path, capsys, monkeypatch, blob):
    _never_render(monkeypatch)
    path = tmp_path / "other.pt"
    torch.save(blob, path)
    assert main(["evaluate", "--checkpoint", str(path), "--size", "16", "--quiet"]) == 2
    assert str(path) in _one_line(capsys)


@pytest.fixture(scope="module")
def checkpoint16(tmp_path_factory):
    """A real model.pt recorded at 16 px (an untrained HandEncoder saved the way finetune saves it)."""
    from iclr25_simhand._model import HandEncoder, SmallConvNet

    path = tmp_path_factory.mktemp("ckpt") / "model.pt"
    torch.save(
        {"state_dict": HandEncoder(SmallConvNet(4)).state_dict(), "meta": {"width": 4, "size": 16}}, path
    )
    return path


@pytest.mark.parametrize("command", ["finetune", "evaluate"])
def test_size_that_disagrees_with_the_checkpoint_exits_2_before_any_work(
    command, checkpoint16, capsys, monkeypatch
):
    """Was not checked: the model silently ran at another size than it was trained at."""
    _never_render(monkeypatch)
    option = "--encoder" if command == "finetune" else "--checkpoint"
    assert main([command, option, str(checkpoint16), "--size", "24", "--quiet"]) == 2
    err = _one_line(capsys)
    assert "--size" in err and "24" in err and "16" in err and str(checkpoint16) in err


def test_evaluate_default_checkpoint_missing_exits_2_naming_it(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no model.pt here
    monkeypatch.setenv("ICLR25_CACHE", str(tmp_path / "empty-cache"))
    from iclr25_simhand.cli import EvaluateConfig

    assert EvaluateConfig().checkpoint.name == "model.pt"  # the default builds without touching anything
    assert main(["evaluate", "--quiet"]) == 2
    err = _one_line(capsys)
    assert "model.pt" in err and "--checkpoint" in err


@pytest.mark.parametrize("kind", ["linear", "nonlinear"])
def test_pair_weights_keep_float64(kind):
    """Was silently computed and returned in float32."""
    g = torch.Generator().manual_seed(0)
    j1 = torch.rand(5, 21, 2, generator=g, dtype=torch.float64) * 32
    j2 = torch.rand(5, 21, 2, generator=g, dtype=torch.float64) * 32
    wp, wn = pair_weights(j1, j2, kind=kind)
    assert wp.dtype == torch.float64 and wn.dtype == torch.float64
    # float64 reference in numpy
    a, b = j1.numpy(), j2.numpy()
    d_pos = np.linalg.norm(a - b, axis=-1).mean(-1)
    allj = np.concatenate([a, b])
    d_neg = np.linalg.norm(allj[:, None] - allj[None], axis=-1).mean(-1)

    def weights(d):
        if kind == "linear":
            return (d.max() - d) / (d.max() - d.min())
        return 1.0 / (1.0 + np.exp(d - d.mean()))

    np.testing.assert_allclose(wp.numpy(), weights(d_pos), rtol=0, atol=1e-12)
    np.testing.assert_allclose(wn.numpy(), weights(d_neg), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pair_weights_keep_other_float_dtypes(dtype):
    j1, j2 = torch.rand(3, 21, 2, dtype=dtype), torch.rand(3, 21, 2, dtype=dtype)
    for apply_to in ("both", "pos", "neg"):
        wp, wn = pair_weights(j1, j2, apply_to=apply_to)
        assert wp.dtype == dtype and wn.dtype == dtype, apply_to


def test_evaluate_refuses_a_pretraining_encoder(tmp_path, capsys, monkeypatch):
    """encoder.pt from `pretrain` has a random 3-D head: evaluating it printed meaningless errors as a result."""
    from iclr25_simhand._model import HandEncoder, SmallConvNet

    _never_render(monkeypatch)
    path = tmp_path / "encoder.pt"
    meta = {"method": "simw", "width": 4, "size": 16}
    torch.save({"state_dict": HandEncoder(SmallConvNet(4)).state_dict(), "meta": meta}, path)
    assert main(["evaluate", "--checkpoint", str(path), "--size", "16", "--quiet"]) == 2
    err = _one_line(capsys)
    assert "pre-training encoder" in err and str(path) in err
