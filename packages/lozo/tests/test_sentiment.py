"""The movie-review sentiment task: the sdist loader (on small tarballs built here with the sdist's layout), its
fetch into the user cache (from a local file:// URL), the k-shot split, the CLI end to end on the tiny Llama, and
the real file, fetched from PyPI when it is not in the cache."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pytest

from iclr25_lozo import _data
from iclr25_lozo._data import (
    SENTIMENT_CLASSES,
    VADER_SDIST,
    VADER_SDIST_SHA256,
    default_sentiment_path,
    movie_review_sentiment,
)
from iclr25_lozo._task import kshot_split
from iclr25_lozo.cli import main
from iclr25_shared.errors import DatasetUnavailable
from iclr25_shared.fetch import digest
from iclr25_shared.testing import require

INNER = "vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz"
MOVIE = "hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"


def _tar_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def make_sdist(path, lines: list[str], *, movie: str = MOVIE, inner: str = INNER):
    """A tarball with the sdist's nesting: outer .tar.gz -> inner .tar.gz -> the ratings file."""
    inner_bytes = _tar_bytes({movie: ("\n".join(lines) + "\n").encode("utf-8")})
    path.write_bytes(_tar_bytes({inner: inner_bytes, "vaderSentiment-3.3.2/setup.py": b""}))
    return path


WORDS_POS = ["wonderful", "moving", "brilliant", "funny", "charming"]
WORDS_NEG = ["dull", "tedious", "clumsy", "boring", "lifeless"]


def synthetic_lines(per_class: int) -> list[str]:
    lines = []
    for i in range(per_class):
        lines.append(f"{2 * i + 1}\t{1.5 + (i % 3) * 0.5}\ta {WORDS_POS[i % 5]} film number {i}")
        lines.append(f"{2 * i + 2}\t{-1.5 - (i % 3) * 0.5}\ta {WORDS_NEG[i % 5]} film number {i}")
    return lines


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    return make_sdist(tmp_path_factory.mktemp("vader") / VADER_SDIST, synthetic_lines(30))


def test_labels_follow_the_sign_and_the_neutral_band_is_dropped(tmp_path):
    lines = [
        "1\t2.5\tgreat fun",
        "2\t-3.1\ta mess",
        "3\t0.4\tmildly pleasant",  # inside the default band (0.5): dropped
        "4\t-0.5\tmildly off",  # on the band's edge: dropped
        "5\t0\tneither",  # exactly 0: dropped at every margin
        "6\t0.75\tquite nice",
        "7\t1.9\tgreat fun",  # a repeat of line 1: kept once
        "",
        "8\t-0.2\ta bit flat",
    ]
    path = make_sdist(tmp_path / VADER_SDIST, lines)
    data = movie_review_sentiment(path)
    assert data.texts == ["great fun", "a mess", "quite nice"]
    assert data.labels.tolist() == [1, 0, 1]
    assert data.classes == SENTIMENT_CLASSES == ["negative", "positive"]
    assert data.titles == ["1", "2", "6"] and data.descriptions == ["2.5", "-3.1", "0.75"]
    wide = movie_review_sentiment(path, neutral_margin=0.0)
    assert wide.texts == ["great fun", "a mess", "mildly pleasant", "mildly off", "quite nice", "a bit flat"]
    assert wide.labels.tolist() == [1, 0, 1, 0, 1, 0]
    assert movie_review_sentiment(path, neutral_margin=1.0).texts == ["great fun", "a mess"]


def test_a_missing_file_names_the_fetch_command(tmp_path):
    with pytest.raises(
        DatasetUnavailable, match="pip download --no-deps --no-binary :all: vadersentiment==3.3.2"
    ):
        movie_review_sentiment(tmp_path / "nowhere.tar.gz")


def test_default_path_is_in_the_iclr25_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("ICLR25_CACHE", str(tmp_path))
    monkeypatch.setenv("ICLR25_NO_FETCH", "1")
    assert default_sentiment_path() == tmp_path / "vader-sentiment" / VADER_SDIST
    with pytest.raises(DatasetUnavailable, match=str(tmp_path / "vader-sentiment")):
        movie_review_sentiment()


@pytest.fixture
def local_pypi(monkeypatch, tmp_path):
    """An empty user cache, fetching on, and the sdist URL pointed at a small sdist built here (file:// URL) with
    its real SHA-256 pinned; returns the local file."""
    (tmp_path / "pypi").mkdir()
    source = make_sdist(tmp_path / "pypi" / VADER_SDIST, synthetic_lines(5))
    monkeypatch.setenv("ICLR25_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ICLR25_NO_FETCH", raising=False)
    monkeypatch.setattr(_data, "VADER_SDIST_URL", source.as_uri())
    monkeypatch.setattr(_data, "VADER_SDIST_SHA256", digest(source, "sha256"))
    return source


def test_the_default_sdist_is_fetched_into_an_empty_cache_on_first_use(local_pypi, tmp_path):
    """Issue 42: from an empty user cache nothing fetched the sdist (the error printed a `pip download` command
    for the user to run), so CI with an empty cache failed. The default source is now fetched and verified."""
    data = movie_review_sentiment()
    assert len(data) == 10 and data.labels.tolist() == [1, 0] * 5
    installed = tmp_path / "cache" / "vader-sentiment" / VADER_SDIST
    assert installed.read_bytes() == local_pypi.read_bytes()
    local_pypi.unlink()  # fetched once: later uses read the cache
    assert movie_review_sentiment().texts == data.texts
    _data.require_task_data("sentiment", "")  # the command's start-of-run check finds it too


def test_a_fetch_whose_checksum_differs_is_refused_and_nothing_is_installed(
    local_pypi, monkeypatch, tmp_path
):
    monkeypatch.setattr(_data, "VADER_SDIST_SHA256", "0" * 64)
    with pytest.raises(DatasetUnavailable) as caught:
        movie_review_sentiment()
    message = str(caught.value)
    assert f"SHA-256 {digest(local_pypi, 'sha256')}, expected {'0' * 64}" in message
    assert "pip download --no-deps --no-binary :all: vadersentiment==3.3.2" in message
    folder = tmp_path / "cache" / "vader-sentiment"
    assert not [p.name for p in folder.iterdir() if p.name != ".fetch.lock"]  # no sdist, no temporary file
    with pytest.raises(DatasetUnavailable, match="fetching it failed"):
        _data.require_task_data("sentiment", "")


def test_with_fetching_off_a_missing_sdist_names_the_pip_download_command(local_pypi, monkeypatch, tmp_path):
    monkeypatch.setenv("ICLR25_NO_FETCH", "1")
    folder = tmp_path / "cache" / "vader-sentiment"
    with pytest.raises(DatasetUnavailable, match="fetching is off") as caught:
        movie_review_sentiment()
    assert f"pip download --no-deps --no-binary :all: vadersentiment==3.3.2 -d {folder}" in str(caught.value)
    assert not (folder / VADER_SDIST).exists()


def test_a_given_data_path_is_never_fetched(local_pypi, tmp_path):
    with pytest.raises(DatasetUnavailable, match="pip download"):
        movie_review_sentiment(tmp_path / "elsewhere" / VADER_SDIST)
    assert (
        not (tmp_path / "elsewhere").exists()
        and not (tmp_path / "cache" / "vader-sentiment" / VADER_SDIST).exists()
    )


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda p: p.write_bytes(b"not a tarball"), "not a tar archive"),
        (lambda p: make_sdist(p, ["1\t1.0\tx"], inner="other/file.tar.gz"), "has no vaderSentiment-3.3.2/"),
        (
            lambda p: make_sdist(p, ["1\t1.0\tx"], movie="hutto_ICWSM_2014/tweets.txt"),
            "has no hutto_ICWSM_2014/",
        ),
        (lambda p: make_sdist(p, ["1\t2.0\tok", "2\tgood\tbad rating"]), "line 2 is not"),
        (lambda p: make_sdist(p, ["1\t2.0\tok", "2\t1.0"]), "line 2 is not"),
        (lambda p: make_sdist(p, ["1\tnan\tnot finite"]), "line 1 is not"),
        (lambda p: make_sdist(p, ["1\t0.1\tonly neutral"]), "no sentence is rated outside"),
    ],
)
def test_files_that_are_not_the_sdist_are_refused(tmp_path, build, message):
    path = tmp_path / VADER_SDIST
    build(path)
    with pytest.raises(ValueError, match=message):
        movie_review_sentiment(path)


@pytest.mark.parametrize("margin", [-0.1, float("inf"), float("nan"), "0.5"])
def test_bad_margin(sdist, margin):
    with pytest.raises(ValueError, match="neutral_margin must be a finite number >= 0"):
        movie_review_sentiment(sdist, neutral_margin=margin)


def test_kshot_split_is_disjoint_balanced_and_seeded():
    labels = np.repeat([0, 1], 40)
    train, val, test = kshot_split(labels, shots=5, val_per_class=4, test_per_class=10, seed=3)
    assert not (set(train) & set(val) or set(train) & set(test) or set(val) & set(test))
    assert np.bincount(labels[train]).tolist() == [5, 5]
    assert np.bincount(labels[val]).tolist() == [4, 4]
    assert np.bincount(labels[test]).tolist() == [10, 10]
    again = kshot_split(labels, shots=5, val_per_class=4, test_per_class=10, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip((train, val, test), again, strict=True))
    other = kshot_split(labels, shots=5, val_per_class=4, test_per_class=10, seed=4)
    assert not np.array_equal(np.sort(train), np.sort(other[0]))
    with pytest.raises(ValueError, match="val_per_class must be >= 1"):
        kshot_split(labels, shots=5, val_per_class=0, test_per_class=10, seed=3)
    with pytest.raises(ValueError, match="at most shots=26"):
        kshot_split(labels, shots=30, val_per_class=4, test_per_class=10, seed=3)


def test_cli_finetune_sentiment_end_to_end(sdist, tmp_path):
    out = tmp_path / "o"
    argv = ["finetune", "--task", "sentiment", "--data-path", str(sdist), "--model", "tiny", "--steps", "3"]
    argv += ["--shots", "4", "--eval-per-class", "5", "--batch-size", "4", "--quiet", "--out", str(out)]
    assert main(argv) == 0
    metrics = json.loads((out / "results.json").read_text())["metrics"]
    assert metrics["zero_shot_accuracy"]["n"] == 10 and metrics["forward_passes"] == 6


@pytest.mark.parametrize("command", ["finetune", "reproduce"])
def test_cli_missing_data_exits_2_with_the_fetch_command(command, tmp_path, capsys):
    argv = [command, "--model", "tiny", "--quiet", "--data-path", str(tmp_path / "absent.tar.gz")]
    if command == "finetune":
        argv += ["--task", "sentiment"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip download --no-deps" in err, err


def test_cli_reproduce_tunes_each_method_and_pairs_the_seeds(sdist, tmp_path):
    out = tmp_path / "r"
    argv = ["reproduce", "--model", "tiny", "--data-path", str(sdist), "--lm-steps", "3", "--seeds", "2"]
    argv += ["--shots", "4", "--val-per-class", "3", "--test-per-class", "4", "--batch-size", "4"]
    argv += ["--mezo-lrs", "1e-3", "1e-2", "--lozo-lrs", "1e-3", "3e-2", "--lozo-m-lrs", "1e-3"]
    argv += ["--betas", "0.5", "0.9", "--adam-lrs", "1e-3", "--digits", "--digits-steps", "6"]
    assert main([*argv, "--quiet", "--out", str(out)]) == 0
    tables = json.loads((out / "results.json").read_text())["tables"]
    runs = tables["B. LM, every run"]
    summary = {r["method"]: r for r in tables["B. LM, chosen setting per method (mean and sd over seeds)"]}
    assert set(summary) == {"zero-shot", "mezo", "lozo", "lozo-m", "adam"}
    for method in ("mezo", "lozo", "lozo-m", "adam"):
        grid = [r for r in runs if r["method"] == method and r["phase"] == "grid"]
        assert {r["seed"] for r in grid} == {0}
        best = min(grid, key=lambda r: r["val_loss"])  # chosen on the validation split, not on test
        assert (summary[method]["lr"], summary[method]["beta"] or 0.0) == (best["lr"], best["beta"])
        chosen = [
            r for r in runs if r["method"] == method and r["lr"] == best["lr"] and r["beta"] == best["beta"]
        ]
        assert sorted(r["seed"] for r in chosen) == [0, 1]
        assert summary[method]["test_accuracy"] == pytest.approx(
            np.mean([r["test_accuracy"] for r in chosen])
        )
    assert len([r for r in runs if r["method"] == "lozo-m" and r["phase"] == "grid"]) == 2  # 1 lr x 2 betas
    # equal forward-pass budgets: 3 ZO steps = 6 forwards; Adam 2 steps x 3 forward-equivalents
    assert {r["method"]: r["forward_passes"] for r in runs} == {"mezo": 6, "lozo": 6, "lozo-m": 6, "adam": 6}
    comparisons = {r["name"]: r for r in tables["comparisons"]}
    assert [r["role"] for r in tables["comparisons"]].count("primary") == 1
    primary = tables["comparisons"][0]
    assert primary["role"] == "primary" and primary["name"] == "LM test accuracy: LOZO - MeZO"
    lozo = {
        r["seed"]: r["test_accuracy"]
        for r in runs
        if r["method"] == "lozo" and r["lr"] == summary["lozo"]["lr"]
    }
    mezo = {
        r["seed"]: r["test_accuracy"]
        for r in runs
        if r["method"] == "mezo" and r["lr"] == summary["mezo"]["lr"]
    }
    assert primary["mean_difference"] == pytest.approx(np.mean([lozo[s] - mezo[s] for s in (0, 1)]))
    assert primary["n"] == 2
    assert comparisons["LM test accuracy: LOZO-M - MeZO"]["role"] == "secondary"
    assert comparisons["LM test accuracy: Adam - zero-shot"]["role"] == "exploratory"
    assert comparisons["digits train loss: LOZO - MeZO"]["role"] == "exploratory"
    per_seed = tables["per_seed"]
    assert {(r["part"], r["method"]) for r in per_seed} >= {
        ("LM", "zero-shot"),
        ("LM", "lozo"),
        ("digits", "adam"),
    }
    assert sorted(r["seed"] for r in per_seed if r["part"] == "LM" and r["method"] == "lozo") == [0, 1]
    verdict = json.loads((out / "results.json").read_text())["metrics"]["verdict"]
    assert verdict == "inconclusive at this scale" or verdict.startswith(("reproduced", "not reproduced"))
    assert {r["method"] for r in tables["A. digits MLP, chosen setting per method"]} == {
        "mezo",
        "lozo",
        "lozo-m",
        "adam",
    }
    assert (out / "lm_loss.png").is_file() and (out / "digits_loss.png").is_file()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--betas", "1.0"], "betas must be in [0.0, 1.0)"),
        (["--lozo-lrs", "0"], "lozo_lrs must be in (0.0, inf)"),
        (["--methods", "sgd"], "methods must be one of"),
        (["--skip-lm"], "leaves nothing to run"),
        (["--neutral-margin", "-1"], "neutral_margin must be in [0.0, inf)"),
        (["--lm-task", "wiki"], "data_path is read by the sentiment task only; the task is 'wiki'"),
    ],
)
def test_reproduce_bad_grids_exit_2(sdist, argv, message, capsys):
    assert main(["reproduce", "--model", "tiny", "--quiet", "--data-path", str(sdist), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_the_real_file():
    """Fetched from PyPI into the user cache when it is not there (skipped with the install command when fetching
    is off or fails; a failure under ICLR25_REQUIRE_DATA=1)."""
    data = require(movie_review_sentiment)  # the counts are stated in the loader's docstring and the README
    assert digest(default_sentiment_path(), "sha256") == VADER_SDIST_SHA256
    assert len(data) == 10041 and np.bincount(data.labels).tolist() == [5060, 4981]
    assert len(set(data.texts)) == len(data)
    assert data.texts[0].startswith("The Rock is destined to be the 21st Century's new")
    assert len(movie_review_sentiment(neutral_margin=0.0)) == 10566


def test_each_reproduce_run_starts_from_the_initial_weights(sdist):
    """Runs share one model: every run must start from (and leave behind) the initial weights, with no gradients."""
    import torch

    from iclr25_lozo._experiment import _label_task, _load_data, _load_lm
    from iclr25_lozo._reproduce import _lm_run
    from iclr25_lozo.cli import ReproduceConfig

    cfg = ReproduceConfig(
        model="tiny", data_path=str(sdist), lm_steps=3, shots=4, val_per_class=2, test_per_class=2
    )
    data = _load_data("sentiment", str(sdist))
    lm = _load_lm("tiny", "sentiment", data, torch.device("cpu"), "float32", 0)
    task = _label_task("sentiment", lm.tokenizer, data.classes, 8)
    splits = {
        0: tuple(
            task.encode(data.subset(i))
            for i in kshot_split(data.labels, shots=4, val_per_class=2, test_per_class=2, seed=0)
        )
    }
    initial = {n: p.detach().clone() for n, p in lm.model.named_parameters()}
    shared = {"model": lm.model, "task": task, "splits": splits, "initial": initial}
    first = _lm_run(cfg, "adam", 1e-2, 0.0, 0, shared)
    for name, p in lm.model.named_parameters():
        assert torch.equal(p, initial[name]) and p.grad is None, name
    _lm_run(cfg, "lozo", 1e-2, 0.0, 0, shared)
    again = _lm_run(cfg, "adam", 1e-2, 0.0, 0, shared)  # same run after another method: same numbers
    assert again["test_loss"] == first["test_loss"] and again["curve"] == first["curve"]
    assert first["forward_passes"] == 6  # Adam: 2 steps x 3 forward-equivalents = the ZO budget of 3 steps
