"""The user/method boundary (issue 37): bad images, checkpoints, option values that do not fit the data and a
missing optional dependency exit 2 with one line naming what to fix, before any tower loads. None of these tests
needs the towers extra."""

import gzip
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from iclr25_semiclip.cli import main


def _user_data(tmp_path, n=12):
    (tmp_path / "img").mkdir()
    (tmp_path / "unl").mkdir()
    rng = np.random.default_rng(0)
    names = ["coat", "dress", "bag"]
    lines = []
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(tmp_path / "img" / f"{i}.png")
        lines.append(f"img/{i}.png\ta picture of a {names[i % 3]} on a table")
    for i in range(4):
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(tmp_path / "unl" / f"{i}.png")
    (tmp_path / "pairs.tsv").write_text("\n".join(lines) + "\n")
    return tmp_path / "pairs.tsv", tmp_path / "unl"


@pytest.fixture
def no_towers(monkeypatch):
    """Fail the test if a tower is loaded: the input must be refused before any model."""
    import iclr25_semiclip._experiment as experiment

    def boom(*args, **kwargs):
        raise AssertionError("loaded the towers although the input was bad")

    monkeypatch.setattr(experiment, "_towers", boom)


def _exit_2_one_line(argv, capsys) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


USER = ["--min-count", "2", "--max-frequency", "0.5", "--towers", "tiny", "--quiet"]


def test_a_text_file_named_png_in_the_pairs_exits_2_naming_it(tmp_path, capsys, no_towers):
    """Was exit 1: PIL.UnidentifiedImageError."""
    pairs, unl = _user_data(tmp_path)
    fake = tmp_path / "img" / "5.png"
    fake.write_text("this is not a picture\n")
    err = _exit_2_one_line(["train", "--pairs", str(pairs), "--images", str(unl), *USER], capsys)
    assert str(fake) in err and "--pairs" in err


def test_a_text_file_named_png_in_the_image_folder_exits_2_naming_it(tmp_path, capsys, no_towers):
    pairs, unl = _user_data(tmp_path)
    fake = unl / "2.png"
    fake.write_text("this is not a picture\n")
    err = _exit_2_one_line(["train", "--pairs", str(pairs), "--images", str(unl), *USER], capsys)
    assert str(fake) in err and "--images" in err


@pytest.mark.parametrize("option", ["--topk", "--words"])
def test_topk_or_words_beyond_the_concept_set_exit_2(tmp_path, capsys, no_towers, option):
    """Was silently clipped to the 3 mined concepts (coat, dress, bag)."""
    pairs, unl = _user_data(tmp_path)
    err = _exit_2_one_line(["train", "--pairs", str(pairs), "--images", str(unl), option, "5", *USER], capsys)
    assert f"{option} 5" in err and "3 concepts" in err


def test_topk_beyond_the_concept_set_is_fine_without_stage_2(tmp_path, capsys, monkeypatch):
    """Without stage 2 the pseudo-labels are never built: nothing to refuse (the run reaches the towers)."""
    import iclr25_semiclip._experiment as experiment

    class Reached(Exception):
        pass

    def reached(*args, **kwargs):
        raise Reached

    monkeypatch.setattr(experiment, "_towers", reached)
    pairs, unl = _user_data(tmp_path)
    argv = ["train", "--pairs", str(pairs), "--images", str(unl), "--topk", "5", "--stage2-steps", "0", *USER]
    assert main(argv) == 1
    assert "failed: Reached" in capsys.readouterr().err


def test_missing_timm_exits_2_with_the_install_line(capsys, monkeypatch):
    """Was exit 1: ModuleNotFoundError: No module named 'timm' (the towers extra not installed)."""
    monkeypatch.setitem(sys.modules, "timm", None)
    err = _exit_2_one_line(["train", "--pool", "20", "--test-size", "10", "--quiet"], capsys)
    assert "pip install 'iclr25-semiclip[towers]'" in err


class _NoTransformers:
    """A meta-path finder under which ``import transformers`` fails as if it were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "transformers" or name.startswith("transformers."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None


def test_missing_transformers_exits_2_with_the_install_line(capsys, monkeypatch):
    for name in [m for m in sys.modules if m == "transformers" or m.startswith("transformers.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_NoTransformers(), *sys.meta_path])
    err = _exit_2_one_line(["bench", "--towers", "tiny", "--repeats", "1", "--quiet"], capsys)
    assert "pip install 'iclr25-semiclip[towers]'" in err


def test_evaluate_without_a_checkpoint_exits_2(capsys):
    err = _exit_2_one_line(["evaluate", "--quiet"], capsys)
    assert "--checkpoint" in err


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not a checkpoint",
        {"weights": torch.ones(2)},
        {
            "head": {"w": torch.ones(2)},
            "meta": {"towers": "huge", "resolution": 16, "dim": 8, "image_dim": 8},
        },
        {"head": {"w": torch.full((2,), float("nan"))}, "meta": {}},
    ],
)
def test_a_bad_checkpoint_exits_2_before_any_tower(tmp_path, capsys, no_towers, content):
    path = tmp_path / "model.pt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        torch.save(content, path)
    err = _exit_2_one_line(["evaluate", "--checkpoint", str(path), "--quiet"], capsys)
    assert str(path) in err and "weights_only" not in err


def test_data_root_without_fashion_mnist_exits_2(tmp_path, capsys, no_towers):
    err = _exit_2_one_line(["train", "--data-root", str(tmp_path), "--quiet"], capsys)
    assert "--data-root" in err and str(tmp_path) in err


_FASHION_HEADERS = {
    "train-images-idx3-ubyte.gz": b"\0\0\x08\x03" + b"".join(n.to_bytes(4, "big") for n in (60_000, 28, 28)),
    "train-labels-idx1-ubyte.gz": b"\0\0\x08\x01" + (60_000).to_bytes(4, "big"),
    "t10k-images-idx3-ubyte.gz": b"\0\0\x08\x03" + b"".join(n.to_bytes(4, "big") for n in (10_000, 28, 28)),
    "t10k-labels-idx1-ubyte.gz": b"\0\0\x08\x01" + (10_000).to_bytes(4, "big"),
}


@pytest.mark.parametrize(
    ("broken", "needle"),
    [
        (b"not a gzip stream", "not a gzip-compressed IDX file"),
        (gzip.compress(b"\0\0\x08\x01" + (5).to_bytes(4, "big") + b"abcde"), "holds 5 examples"),
        (
            gzip.compress(_FASHION_HEADERS["t10k-labels-idx1-ubyte.gz"] + b"x"),
            "train-images-idx3-ubyte.gz: expected",
        ),
    ],
    ids=["not-gzip", "wrong-count", "cut-short"],
)
@pytest.mark.parametrize("command", ["train", "evaluate", "reproduce"])
def test_data_root_with_a_broken_fashion_mnist_file_exits_2_naming_it_before_any_tower(
    tmp_path, capsys, no_towers, broken, needle, command
):
    """Regression: only the files' presence was checked, so a junk file loaded the towers and failed in the run
    (exit 1). Now the core's check reads each header, and a body cut short is refused when read, before the towers."""
    folder = tmp_path / "fmnist"
    folder.mkdir()
    for name, header in _FASHION_HEADERS.items():
        (folder / name).write_bytes(gzip.compress(header + b"x" * 8))  # headers right, bodies short
    (folder / "t10k-labels-idx1-ubyte.gz").write_bytes(broken)
    argv = [command, "--data-root", str(folder), "--quiet"]
    if command == "evaluate":
        ckpt = tmp_path / "model.pt"
        meta = {"towers": "tiny", "resolution": 16, "dim": 8, "image_dim": 8}
        torch.save({"head": {"w": torch.ones(2)}, "meta": meta}, ckpt)
        argv += ["--checkpoint", str(ckpt)]
    err = _exit_2_one_line(argv, capsys)
    assert "--data-root" in err and str(folder) in err and needle in err, err


def test_frozen_tower_features_are_cached_per_copy_of_the_images(tmp_path, monkeypatch):
    """Regression: the feature cache was keyed by pool size and resolution only, so a --data-root copy whose images
    differ from the one encoded earlier silently got the earlier copy's cached features."""
    import iclr25_semiclip._experiment as experiment
    import iclr25_shared.data

    class Stop(Exception):
        pass

    class Tower:
        resolution = 16

    names = []

    def record(name, kind, fn, device, ctx):
        names.append(name)
        raise Stop

    folder = tmp_path / "fmnist"
    folder.mkdir()
    for name, header in _FASHION_HEADERS.items():  # passes the header check; the arrays come from the patch
        (folder / name).write_bytes(gzip.compress(header))
    monkeypatch.setattr(experiment, "_towers", lambda *a, **k: (Tower(), None))
    monkeypatch.setattr(experiment, "_encode_cached", record)
    argv = ["train", "--data-root", str(folder), "--pool", "20", "--test-size", "10", "--quiet"]
    for fill in (0, 255):
        images, labels = np.full((20, 28, 28), fill, np.uint8), np.arange(20) % 10
        monkeypatch.setattr(
            iclr25_shared.data, "fashion_mnist", lambda *a, _x=images, _y=labels, **k: (_x, _y)
        )
        assert main(argv) == 1  # stopped at the first cache look-up
    assert len(names) == 2 and names[0] != names[1], names


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--pool", "10", "--labelled-fraction", "0.01"], "leaves no captioned image"),
        (["--pool", "10", "--labelled-fraction", "1"], "leaves no unlabelled image"),
    ],
)
def test_fractions_that_leave_a_side_empty_exit_2_before_any_work(args, needle, capsys, no_towers):
    """Were ValueErrors after the towers had loaded (exit 1 under the new runner)."""
    assert needle in _exit_2_one_line(["train", *args, "--quiet"], capsys)


def test_library_readers_raise_input_error_naming_the_image(tmp_path):
    from iclr25_semiclip._data import read_image_folder
    from iclr25_shared.errors import InputError

    (tmp_path / "a.png").write_text("text")
    with pytest.raises(InputError, match="a.png"):
        read_image_folder(tmp_path)
