"""Issue 37: the user's files (--data, --model, --cache) are checked before any model loads and refused with exit 2
and one line naming the file; --quiet silences transformers' progress bars."""

from __future__ import annotations

import json
import sys

import pytest

from iclr25_icai.cli import main


@pytest.fixture
def no_model(monkeypatch):
    """Fail the test if the command gets as far as loading a local judge."""
    import iclr25_icai._backends as backends

    def refuse(*args, **kwargs):
        raise AssertionError("the local judge was loaded although an input was bad")

    monkeypatch.setattr(backends, "LocalChatBackend", refuse)


def _exit_2(capsys, argv, *needles):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("pairs.csv", b"text_a,preferred_text\nx,a\n", "lacks column(s) ['text_b'] of the pairs layout"),
        ("pairs.json", b'{"rows": []}', "holds no records"),
        ("pairs.json", b"\x89\x00\xff\xfe", "is not UTF-8 text"),
        ("pairs.parquet", b"PAR1 not really", "Parquet"),  # "... as Parquet", or "needs pyarrow"
        ("pairs.csv", b"", "is empty (0 bytes)"),
    ],
)
def test_a_bad_data_file_exits_2_before_the_command_is_imported(
    tmp_path, capsys, monkeypatch, name, content, needle
):
    monkeypatch.delitem(sys.modules, "iclr25_icai._run", raising=False)
    bad = tmp_path / name
    bad.write_bytes(content)
    _exit_2(capsys, ["run", "--data", str(bad)], needle, repr(str(bad)))
    assert "iclr25_icai._run" not in sys.modules


def test_the_format_is_checked_before_the_model_loads(tmp_path, capsys, no_model):
    data = tmp_path / "pairs.json"
    data.write_text(json.dumps([{"text_a": "x", "text_b": "y", "preferred_text": "a"}]))
    _exit_2(
        capsys,
        ["run", "--data", str(data), "--format", "alpacaeval"],
        "--data: ",
        "record 0 lacks ['instruction', 'output_1', 'output_2', 'preference']",
    )


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda p: p.mkdir(), "is a folder; expected a JSONL cache file"),
        (lambda p: p.write_text("text_a,text_b\nx,y\n"), "no cache record"),
        (lambda p: p.write_bytes(b"\x89\x00\xff\xfe"), "not UTF-8"),
    ],
)
def test_a_bad_cache_exits_2_before_the_model_loads_and_is_left_alone(
    tmp_path, capsys, no_model, make, needle
):
    """A folder as --cache exited 1 after SmolLM2 had loaded; another file was appended to."""
    data = tmp_path / "pairs.csv"
    data.write_text("text_a,text_b,preferred_text\nx,y,a\n")
    cache = tmp_path / "calls.jsonl"
    make(cache)
    before = cache.read_bytes() if cache.is_file() else None
    _exit_2(capsys, ["run", "--data", str(data), "--cache", str(cache)], "--cache: ", needle)
    assert (cache.read_bytes() if cache.is_file() else None) == before


def test_an_empty_or_partly_written_cache_is_accepted(tmp_path):
    from iclr25_icai._backends import check_cache_file

    for text in ("", '{"key": "k", "kind": "chat", "resp'):
        (tmp_path / "c.jsonl").write_text(text)
        assert check_cache_file(tmp_path / "c.jsonl", label="--cache") == tmp_path / "c.jsonl"
    assert check_cache_file(tmp_path / "new" / "c.jsonl") == tmp_path / "new" / "c.jsonl"


@pytest.fixture(scope="module")
def tiny_chat_dir(tmp_path_factory, tiny_lm):
    folder = tmp_path_factory.mktemp("tiny-chat")
    tiny_lm.model.save_pretrained(folder)
    tiny_lm.tokenizer.save_pretrained(folder)
    return folder


def test_a_model_folder_without_chat_template_exits_2_before_it_loads(tmp_path, capsys, tiny_chat_dir):
    import shutil

    folder = tmp_path / "no-template"
    shutil.copytree(tiny_chat_dir, folder)
    for f in folder.glob("chat_template.*"):
        f.unlink()
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    _exit_2(capsys, ["run", "--model", str(folder)], "--model: ", "has no chat template")
    (folder / "config.json").unlink()
    _exit_2(capsys, ["run", "--model", str(folder)], "--model: ", "has no config.json")


@pytest.mark.filterwarnings(
    "ignore:Cannot enable progress bars:UserWarning"
)  # core: _quiet_libraries' restore
def test_quiet_silences_the_model_loading_bars(tmp_path, capsys, tiny_chat_dir):
    import huggingface_hub.constants

    data = tmp_path / "pairs.csv"
    data.write_text(
        "text_a,text_b,preferred_text\nshort text,a long long text,text_a\nlong long text,short,b\n"
    )
    argv = ["run", "--data", str(data), "--model", str(tiny_chat_dir), "--embedder", "tfidf", "--no-cache"]
    argv += ["--max-principles", "1", "--clusters", "1", "--reannotations", "1", "--principles-per-pair", "1"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    if not huggingface_hub.constants.HF_HUB_DISABLE_PROGRESS_BARS:  # bars on in this process: one is shown
        assert "Loading weights" in err, err
    assert main([*argv, "--quiet"]) == 0
    assert capsys.readouterr().err == ""
