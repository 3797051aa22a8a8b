"""The boundary between the user and the method (Template v3): readers, exit codes by meaning, Ctrl-C, file modes,
orphaned temporary folders, --quiet. Each test is a regression test for a defect measured on main before the
change (issue "Template v3")."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from iclr25_shared import data, inputs
from iclr25_shared.cli import CommonOptions, Result, run
from iclr25_shared.errors import DatasetUnavailable, InputError

# ------------------------------------------------------------------------------------------------------------------
# Readers
# ------------------------------------------------------------------------------------------------------------------


def _write(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path


def test_torch_reader_refuses_empty_corrupt_and_pickled_files_without_advising_an_unsafe_load(tmp_path):
    torch = pytest.importorskip("torch")
    empty = _write(tmp_path / "empty.pt", b"")
    with pytest.raises(InputError, match=r"--encoder: '.*empty.pt' is empty \(0 bytes\)"):
        inputs.read_torch(empty, label="--encoder")
    junk = _write(tmp_path / "junk.pt", b"not a checkpoint at all")
    with pytest.raises(
        InputError, match=r"junk.pt' is not a PyTorch checkpoint .*no zip or pickle header"
    ) as info:
        inputs.read_torch(junk, label="--checkpoint")
    assert "\n" not in str(info.value) and "Python objects" not in str(info.value)
    truncated = tmp_path / "truncated.pt"
    torch.save({"w": torch.ones(3)}, truncated)
    truncated.write_bytes(truncated.read_bytes()[:40])
    with pytest.raises(InputError, match="truncated.pt' is not a PyTorch checkpoint") as info:
        inputs.read_torch(truncated, label="--checkpoint")
    assert "Python objects" not in str(info.value)

    pickled = tmp_path / "pickled.pt"  # a pickled object: torch's message would advise weights_only=False
    torch.save({"obj": argparse.Namespace(a=1)}, pickled)
    with pytest.raises(InputError, match="Python objects that only unsafe unpickling can load") as info:
        inputs.read_torch(pickled, label="--models")
    assert "weights_only=False" not in str(info.value)


def test_torch_reader_names_the_non_finite_tensor(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "models.pt"
    weights = torch.ones(3, 4)
    weights[1, 2] = float("nan")
    torch.save({"prior": {"head.weight": weights, "steps": torch.tensor(3)}}, path)
    with pytest.raises(InputError, match=r"1 of 12 entries of 'prior.head.weight' are NaN or inf"):
        inputs.read_torch(path, label="--models")
    state = inputs.read_torch(path, finite=False)
    assert torch.isnan(state["prior"]["head.weight"]).sum() == 1


def test_npz_reader_refuses_empty_text_single_arrays_objects_missing_keys_and_nan(tmp_path):
    with pytest.raises(InputError, match="empty.npz' is empty"):
        inputs.read_npz(_write(tmp_path / "empty.npz", b""), label="--data")
    with pytest.raises(InputError, match=r"text.npz' is not an .npz archive") as info:
        inputs.read_npz(_write(tmp_path / "text.npz", b"x,y\n1,2\n"), label="--data")
    assert "allow_pickle" not in str(info.value)  # numpy's advice to unpickle never reaches the user
    np.save(tmp_path / "one.npy", np.ones(3))
    with pytest.raises(InputError, match=r"holds a single array \(.npy\)"):
        inputs.read_npz(tmp_path / "one.npy", label="--data")
    np.savez(tmp_path / "objects.npz", x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(InputError, match="Python objects, which are never unpickled"):
        inputs.read_npz(tmp_path / "objects.npz", label="--data")
    np.savez(tmp_path / "xy.npz", x=np.ones((2, 2)), z=np.zeros(2))
    with pytest.raises(InputError, match=r"has no array 'y'; it holds 'x', 'z'"):
        inputs.read_npz(tmp_path / "xy.npz", label="--data", keys=("x", "y"))
    np.savez(tmp_path / "nan.npz", x=np.array([1.0, np.inf]))
    with pytest.raises(InputError, match=r"1 of 2 entries of 'x' are NaN or inf"):
        inputs.read_npz(tmp_path / "nan.npz", label="--data")
    got = inputs.read_npz(tmp_path / "xy.npz", keys=("x",))
    np.testing.assert_array_equal(got["x"], np.ones((2, 2)))


def test_npy_reader_checks_axes_and_refuses_an_archive(tmp_path):
    np.save(tmp_path / "v.npy", np.ones(4))
    with pytest.raises(InputError, match=r"has shape \(4,\); expected a .npy array with 2 axes"):
        inputs.read_npy(tmp_path / "v.npy", label="--k", ndim=2)
    np.savez(tmp_path / "a.npz", x=np.ones(2))
    with pytest.raises(InputError, match="is an .npz archive"):
        inputs.read_npy(tmp_path / "a.npz", label="--k")
    assert inputs.read_npy(tmp_path / "v.npy").shape == (4,)


def test_image_reader_refuses_a_text_file_named_png(tmp_path):
    pytest.importorskip("PIL")
    fake = _write(tmp_path / "cat.png", b"this is a caption, not an image\n")
    with pytest.raises(InputError, match=r"--images: '.*cat.png' is not an image Pillow can decode"):
        inputs.read_image(fake, label="--images")


def test_video_reader_refuses_junk(tmp_path):
    pytest.importorskip("av")
    fake = _write(tmp_path / "clip.mp4", b"\x00\x00\x00junk")
    with pytest.raises(InputError, match="clip.mp4' is not a video PyAV can decode"):
        inputs.check_video(fake, label="--videos")
    (tmp_path / "vids").mkdir()
    with pytest.raises(InputError, match="holds no video"):
        inputs.check_video_folder(tmp_path / "vids", label="--videos-dir")


def test_table_reader_checks_layout_keys_numbers_and_lines(tmp_path):
    csv_file = _write(tmp_path / "t.csv", b"id,time,y\n1,0,0.5\n2,1,nan\n")
    with pytest.raises(InputError, match=r"record 1: 'y' is 'nan'; expected a finite number"):
        inputs.read_table(csv_file, label="--data", required=("id", "y"), numeric=("y",))
    with pytest.raises(InputError, match=r"record 0 has no 'treatment'"):
        inputs.read_table(csv_file, label="--data", required=("id", "treatment"))
    rows = inputs.read_table(_write(tmp_path / "t.tsv", b"a\tb\n1\tx\n"), numeric=("a",))
    assert rows == [{"a": 1.0, "b": "x"}]
    bad_line = _write(tmp_path / "t.jsonl", b'{"a": 1}\n{"a": \n')
    with pytest.raises(InputError, match="line 2 is not valid JSON"):
        inputs.read_table(bad_line)
    with pytest.raises(InputError, match="holds a JSON list; expected an object of records"):
        inputs.read_table(_write(tmp_path / "l.json", b"[{}]"), layout="mapping")
    with pytest.raises(InputError, match="record 0 is a int; expected an object"):
        inputs.read_table(_write(tmp_path / "n.json", b"[1, 2]"))
    with pytest.raises(InputError, match="holds no records"):
        inputs.read_table(_write(tmp_path / "e.json", b"[]"))


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "is empty (0 bytes)"),
        (b'[{"extract": "x", "topic": "y"}]', "holds a JSON list; expected an object of records"),
        (b'{"a": {"extract": "x", "title": "t"}}', "record 0 has no 'topic'"),
        (b"{not json", "is not valid JSON"),
    ],
)
def test_wiki_loader_names_the_file_for_every_malformed_layout(tmp_path, content, needle):
    """Before: a JSON list raised AttributeError, a record without topic KeyError, an empty file JSON's message
    without the file name (issue: all exit 1 or nameless after SmolLM2 had loaded)."""
    path = _write(tmp_path / "wiki.json", content)
    with pytest.raises(InputError) as info:
        data.wiki_summaries(path=path, label="--data")
    assert needle in str(info.value) and "--data: " in str(info.value) and "wiki.json" in str(info.value)


def test_hf_model_folder_needs_config_and_weights(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    with pytest.raises(InputError, match="has no config.json"):
        inputs.check_hf_model_folder(folder, label="--model")
    (folder / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(InputError, match="has config.json but no weights"):
        inputs.check_hf_model_folder(folder, label="--model")
    (folder / "model.safetensors").write_bytes(b"x")
    assert inputs.check_hf_model_folder(folder) == folder


def test_model_ref_checks_paths_and_leaves_names_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inputs.check_model_ref("smollm2-135m-instruct", label="--model")  # a packaged name
    inputs.check_model_ref("HuggingFaceTB/SmolLM2-135M", label="--model")  # a Hub id
    with pytest.raises(InputError, match="'./nope' does not exist"):
        inputs.check_model_ref("./nope", label="--model")
    _write(tmp_path / "m.gguf", b"GGML....")
    with pytest.raises(InputError, match="is not a GGUF file"):
        inputs.check_model_ref(str(tmp_path / "m.gguf"), label="--model")
    _write(tmp_path / "m.bin", b"weights")
    with pytest.raises(InputError, match="is a file; expected a model folder or a .gguf file"):
        inputs.check_model_ref(str(tmp_path / "m.bin"), label="--model")


def test_validating_converts_validator_errors_only_inside_the_block():
    with pytest.raises(InputError, match="--q/--k: K must have 2 axes"), inputs.validating("--q/--k"):
        raise ValueError("K must have 2 axes")
    with pytest.raises(InputError, match="--x: already input"), inputs.validating("--y"):
        raise InputError("--x: already input")


# ------------------------------------------------------------------------------------------------------------------
# The runner
# ------------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class _FileCfg(CommonOptions):
    INPUTS: ClassVar = {"data": inputs.npz(keys=("x",))}
    OUTPUTS: ClassVar = {"cache": inputs.output_folder()}
    data: Path | None = None
    cache: Path | None = None


def _cmds(fn):
    return {"go": (_FileCfg, fn)}


def test_a_bad_declared_file_exits_2_before_the_command_is_imported(tmp_path, capsys):
    _write(tmp_path / "empty.npz", b"")
    # a command named as a module that does not exist: importing it would fail with exit 1
    code = run(
        "iclr25-toy",
        {"go": (_FileCfg, "no_such_module:fn")},
        ["--data", str(tmp_path / "empty.npz")],
        default="go",
    )
    err = capsys.readouterr().err.strip()
    assert (
        code == 2
        and err
        == f"iclr25-toy go: error: --data: '{tmp_path / 'empty.npz'}' is empty (0 bytes); expected an .npz archive with arrays x"
    )
    _write(tmp_path / "file", b"x")
    assert (
        run("iclr25-toy", _cmds(lambda c, x: Result()), ["--cache", str(tmp_path / "file")], default="go")
        == 2
    )
    assert "is a file; expected a folder to write into" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ValueError("non-finite loss at step 7"), 1),  # before: any ValueError during the run exited 2
        (TypeError("unsupported operand"), 1),
        (FileNotFoundError("internal cache file vanished"), 1),
        (EOFError("No data left in file"), 1),
        (InputError("--data: 'x.npz' has no array 'y'"), 2),
        (DatasetUnavailable("fashion-mnist is not installed; run: apt-get download ..."), 2),
    ],
)
def test_exit_codes_follow_the_meaning_not_the_class(error, code, capsys):
    def fails(cfg, ctx):
        raise error

    assert run("iclr25-toy", _cmds(fails), [], default="go") == code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(error) in err
    assert ("failed:" in err) == (code == 1)


def test_config_validation_errors_are_still_bad_input(capsys):
    assert run("iclr25-toy", _cmds(lambda c, x: Result()), ["--seed", "-1"], default="go") == 2
    assert "seed must be" in capsys.readouterr().err


def test_a_swallowed_ctrl_c_stops_the_run_and_writes_nothing(tmp_path, capsys):
    """prdp/qqa: JAX's GC callback swallowed the KeyboardInterrupt; the run wrote its results and exited 0."""

    def swallowing(cfg, ctx):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            pass
        ctx.save_text("x.txt", "x")
        return Result(metrics={"done": 1})

    out = tmp_path / "run"
    assert run("iclr25-toy", _cmds(swallowing), ["--out", str(out)], default="go") == 130
    assert not out.exists() and not list(tmp_path.iterdir())
    assert (
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )  # the caller's handler is back (conftest)


def test_a_ctrl_c_that_surfaces_as_another_error_is_still_130(capsys):
    """edgeprompt: a Ctrl-C inside numpy's import left a half-imported module; the next import raised
    AttributeError and the run exited 1."""

    def half_imported(cfg, ctx):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            pass
        raise AttributeError("module 'numpy._core' has no attribute '_multiarray_umath'")

    assert run("iclr25-toy", _cmds(half_imported), [], default="go") == 130
    assert "interrupted" in capsys.readouterr().err


def test_a_swallowed_ctrl_c_stops_a_loop_at_its_next_progress_item(capsys):
    seen = []

    def loop(cfg, ctx):
        for i in ctx.progress(range(1000), desc="steps"):
            seen.append(i)
            if i == 3:
                try:
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(5)
                except KeyboardInterrupt:
                    pass
        return Result()

    assert run("iclr25-toy", _cmds(loop), ["--quiet"], default="go") == 130
    assert seen == [0, 1, 2, 3]


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _run_killed(tmp_path: Path, out: Path) -> Path:
    """Start a run that stalls, SIGKILL it, and return the temporary folder it left beside ``out``."""
    script = (
        "import time\n"
        "from iclr25_shared.cli import CommonOptions, Result, run\n"
        "def stall(cfg, ctx):\n"
        "    ctx.save_text('x.txt', 'x'); print('ready', flush=True); time.sleep(60); return Result()\n"
        f"run('iclr25-toy', {{'go': (CommonOptions, stall)}}, ['--out', {str(out)!r}], default='go')\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, preexec_fn=_sigint_default
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.kill()
    proc.wait()
    proc.stdout.close()
    (left,) = tmp_path.glob(f".{out.name}.partial-*")
    return left


def test_the_next_run_removes_folders_of_killed_runs_but_not_of_live_ones(tmp_path):
    out = tmp_path / "run"
    orphan = _run_killed(tmp_path, out)
    owner = json.loads((orphan / ".iclr25-owner.json").read_text())
    assert owner["pid"] > 0 and owner["host"]
    live = tmp_path / f".{out.name}.partial-live"  # a concurrent run: its process (this one) is alive
    live.mkdir()
    from iclr25_shared.cli import _write_owner

    _write_owner(live)
    unknown = tmp_path / f".{out.name}.partial-noowner"  # no record yet: never touched
    unknown.mkdir()
    assert run("iclr25-toy", _cmds(lambda c, x: Result()), ["--out", str(out)], default="go") == 0
    assert not orphan.exists() and live.exists() and unknown.exists()
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "results.json", "results.md"]


def test_every_file_and_folder_of_a_run_gets_ordinary_modes(tmp_path):
    def private(cfg, ctx):
        w = ctx.path("unet/diffusion_pytorch_model.safetensors")
        w.write_bytes(b"0")
        w.chmod(0o600)
        w.parent.chmod(0o700)
        s = ctx.path("tool.sh")
        s.write_text("#!/bin/sh\n")
        s.chmod(0o700)
        return Result()

    out = tmp_path / "run"
    old = os.umask(0o027)
    try:
        assert run("iclr25-toy", _cmds(private), ["--out", str(out)], default="go") == 0
    finally:
        os.umask(old)
    modes = {str(p.relative_to(out)): oct(p.stat().st_mode & 0o777) for p in out.rglob("*")}
    assert modes["unet"] == oct(0o750)
    assert modes["unet/diffusion_pytorch_model.safetensors"] == oct(0o640)
    assert modes["tool.sh"] == oct(0o750)
    assert modes["results.json"] == oct(0o640)
    assert oct(out.stat().st_mode & 0o777) == oct(0o750)


def test_quiet_silences_hugging_face_bars_and_warnings_and_restores_the_environment(monkeypatch):
    for key in ("HF_HUB_DISABLE_PROGRESS_BARS", "TRANSFORMERS_VERBOSITY", "TQDM_DISABLE"):
        monkeypatch.delenv(key, raising=False)
    seen = {}

    def look(cfg, ctx):
        seen.update(
            {
                k: os.environ.get(k)
                for k in ("HF_HUB_DISABLE_PROGRESS_BARS", "TRANSFORMERS_VERBOSITY", "TQDM_DISABLE")
            }
        )
        return Result()

    assert run("iclr25-toy", _cmds(look), ["--quiet"], default="go") == 0
    assert seen == {
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "TRANSFORMERS_VERBOSITY": "error",
        "TQDM_DISABLE": "1",
    }
    assert "TQDM_DISABLE" not in os.environ
    seen.clear()
    assert run("iclr25-toy", _cmds(look), [], default="go") == 0
    assert seen["TQDM_DISABLE"] is None


def test_quiet_reaches_an_already_imported_transformers():
    transformers = pytest.importorskip("transformers")
    from transformers.utils import logging as hf_logging

    before = hf_logging.get_verbosity()
    seen = {}

    def look(cfg, ctx):
        seen["verbosity"] = hf_logging.get_verbosity()
        seen["bars"] = hf_logging.is_progress_bar_enabled()
        return Result()

    assert run("iclr25-toy", _cmds(look), ["--quiet"], default="go") == 0
    assert seen == {"verbosity": hf_logging.ERROR, "bars": False}
    assert hf_logging.get_verbosity() == before and hf_logging.is_progress_bar_enabled()
    assert transformers is not None


def test_ctrl_c_in_a_real_process_while_parsing_exits_130_with_one_line(tmp_path):
    """A real SIGINT from outside while the parser is being built (tyro's import and parse take 0.5-2 s)."""
    script = (
        "import sys, time, tyro\n"
        "from iclr25_shared.cli import CommonOptions, Result, run\n"
        "real = tyro.cli\n"
        "def slow(*a, **k):\n"
        "    print('parsing', file=sys.__stdout__, flush=True); time.sleep(30); return real(*a, **k)\n"
        "tyro.cli = slow\n"
        f"sys.exit(run('iclr25-toy', {{'go': (CommonOptions, lambda c, x: Result())}}, ['go', '--out', {str(tmp_path / 'o')!r}], default='go'))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint_default,  # a test run started in the background inherits SIGINT as ignored
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "parsing"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert err.strip() == "iclr25-toy go: interrupted; no results were written"
    assert not list(tmp_path.iterdir())


def test_table_reader_accepts_a_byte_order_mark_and_alternative_columns(tmp_path):
    path = _write(tmp_path / "prompts.csv", "\ufeffcaption,id\nA ball falls,1\n".encode())
    rows = inputs.read_table(path, required=(("caption", "prompt"), "id"))
    assert rows == [{"caption": "A ball falls", "id": "1"}]
    with pytest.raises(InputError, match="record 0 has no 'label' or 'score'"):
        inputs.read_table(path, label="--labels", required=(("label", "score"),))


def test_a_file_without_a_numpy_header_is_not_called_pickled(tmp_path):
    junk = _write(tmp_path / "x.npy", b"just some text\n")
    with pytest.raises(InputError, match="no NPY header") as info:
        inputs.read_npy(junk, label="--k")
    assert "Python objects" not in str(info.value)
    with pytest.raises(InputError, match="no zip header"):
        inputs.read_npz(_write(tmp_path / "x.npz", b"just some text\n"), label="--data")


def test_quiet_leaves_huggingface_hub_bars_on_afterwards_without_a_warning():
    """The hub refuses to enable its bars (UserWarning, an error under the test settings) while its environment
    variable still says no; the runner restores the environment first."""
    hub = pytest.importorskip("huggingface_hub.utils")
    assert run("iclr25-toy", _cmds(lambda c, x: Result()), ["--quiet"], default="go") == 0
    assert not hub.are_progress_bars_disabled()


def test_fashion_mnist_folder_check_names_the_missing_corrupt_or_short_file(tmp_path):
    import gzip

    folder = tmp_path / "fm"
    folder.mkdir()
    with pytest.raises(InputError, match="has no t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz"):
        inputs.check_fashion_mnist_folder(folder, label="--data-root", splits=("test",))
    (folder / "t10k-images-idx3-ubyte.gz").write_bytes(b"not gzip")
    (folder / "t10k-labels-idx1-ubyte.gz").write_bytes(b"not gzip")
    with pytest.raises(InputError, match="t10k-images-idx3-ubyte.gz' is not a gzip-compressed IDX file"):
        inputs.check_fashion_mnist_folder(folder, label="--data-root", splits=("test",))
    for name, header in (("t10k-images-idx3-ubyte.gz", 3), ("t10k-labels-idx1-ubyte.gz", 1)):
        with gzip.open(folder / name, "wb") as fh:
            fh.write(bytes([0, 0, 8, header]) + (7).to_bytes(4, "big"))
    with pytest.raises(InputError, match="holds 7 examples; Fashion-MNIST test has 10000"):
        inputs.check_fashion_mnist_folder(folder, label="--data-root", splits=("test",))


def test_help_into_a_closed_pipe_prints_no_traceback():
    """`iclr25-x --help | head`: the reader is gone before the help is written (the pipe is closed before the child
    has imported anything), so the write fails with EPIPE."""
    script = (
        "import sys\n"
        "from iclr25_shared.cli import CommonOptions, Result, run\n"
        "print(run('iclr25-toy', {'go': (CommonOptions, lambda c, x: Result())}, ['go', '--help'], default='go'),"
        " file=sys.stderr)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    text = err.decode()
    assert "Traceback" not in text and "BrokenPipeError" not in text, text
    assert text.strip() == "0"


def test_an_interrupted_run_leaves_no_interrupt_behind(tmp_path):
    """Before: the recorded Ctrl-C outlived run(), so check_interrupted() raised in every later call of the process
    (a pytest session stopped early with a KeyboardInterrupt banner)."""
    from iclr25_shared.cli import check_interrupted

    def swallowing(cfg, ctx):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            pass
        return Result()

    assert run("iclr25-toy", _cmds(swallowing), [], default="go") == 130
    check_interrupted()  # a no-op outside run()
    assert (
        run(
            "iclr25-toy",
            _cmds(lambda c, x: [None for _ in x.progress(range(3))] and Result()),
            ["--quiet"],
            default="go",
        )
        == 0
    )


def test_a_swallowed_ctrl_c_reported_as_unraisable_prints_nothing(capsys):
    """JAX's GC callback reports the KeyboardInterrupt it swallowed as 'Exception ignored in ...'."""

    def reported(cfg, ctx):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt as exc:
            sys.unraisablehook(sys.UnraisableHookArgs((KeyboardInterrupt, exc, None, None, None)))
        return Result()

    assert run("iclr25-toy", _cmds(reported), [], default="go") == 130
    err = capsys.readouterr().err.strip()
    assert err == "iclr25-toy: interrupted; no results were written", err


def test_a_sigint_the_process_inherited_as_ignored_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job of a non-interactive shell
    try:
        seen = {}

        def look(cfg, ctx):
            seen["handler"] = signal.getsignal(signal.SIGINT)
            return Result()

        assert run("iclr25-toy", _cmds(look), [], default="go") == 0
        assert seen["handler"] is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_junk_config_file_is_named(tmp_path, capsys):
    junk = _write(tmp_path / "opts.json", b"\x89PNG\x00\xff")
    assert run("iclr25-toy", _cmds(lambda c, x: Result()), ["--config", str(junk)], default="go") == 2
    err = capsys.readouterr().err
    assert "--config:" in err and "opts.json" in err and "not UTF-8" in err


def test_a_device_this_machine_lacks_is_bad_input(capsys):
    pytest.importorskip("torch")

    def needs_cuda(cfg, ctx):
        ctx.torch_device()
        return Result()

    if __import__("torch").cuda.device_count() >= 8:
        pytest.skip("this machine has a cuda:7")
    assert run("iclr25-toy", _cmds(needs_cuda), ["--device", "cuda:7"], default="go") == 2
    assert "--device:" in capsys.readouterr().err


def test_a_ctrl_c_while_the_temporary_folder_is_made_leaves_no_folder(tmp_path, monkeypatch):
    """prdp at 0.5 s: the Ctrl-C landed inside the staging folder's creation, before the runner knew its name, and
    a `.out.partial-*` folder stayed behind."""
    import iclr25_shared.cli as core

    real = core._write_owner

    def interrupted_owner(folder):
        real(folder)
        os.kill(os.getpid(), signal.SIGINT)  # arrives while the folder exists but is not yet returned

    monkeypatch.setattr(core, "_write_owner", interrupted_owner)
    out = tmp_path / "out"
    assert run("iclr25-toy", _cmds(lambda c, x: Result()), ["--out", str(out)], default="go") == 130
    assert not list(tmp_path.iterdir()), list(tmp_path.iterdir())
