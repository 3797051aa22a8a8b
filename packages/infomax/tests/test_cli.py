"""The CLI end to end on tiny inputs, and every bad input named in the issue exits 2 with one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from iclr25_infomax.cli import main


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(200, 8)).astype(np.float32)
    scores = rng.random(200)
    labels = (feats[:, 0] > 0).astype(np.int64)
    paths = {}
    for name, arr in {"features": feats, "scores": scores, "labels": labels}.items():
        paths[name] = tmp_path / f"{name}.npy"
        np.save(paths[name], arr)
    return paths


def test_select_writes_exact_budget(files, tmp_path):
    out = tmp_path / "run"
    argv = [
        "select",
        "--features",
        str(files["features"]),
        "--scores",
        str(files["scores"]),
        "--budget",
        "0.1",
        "--alpha",
        "1",
        "--k",
        "10",
        "--out",
        str(out),
        "--quiet",
    ]
    assert main(argv) == 0
    idx = np.load(out / "indices.npy")
    assert idx.shape == (20,)
    assert np.unique(idx).size == 20
    assert main(argv) == 2  # an existing results folder is refused without --overwrite
    assert main([*argv, "--overwrite"]) == 0
    np.testing.assert_array_equal(np.load(out / "indices.npy"), idx)  # deterministic


def test_select_count_budget_folder_output_and_baseline(files, tmp_path):
    folder = tmp_path / "run"
    assert (
        main(
            [
                "select",
                "--features",
                str(files["features"]),
                "--scores",
                str(files["scores"]),
                "--budget",
                "37",
                "--method",
                "kcenter",
                "--out",
                str(folder),
                "--quiet",
            ]
        )
        == 0
    )
    assert np.load(folder / "indices.npy").size == 37
    rec = json.loads((folder / "results.json").read_text())
    assert rec["metrics"]["num_selected"] == 37


def test_select_computes_scores_from_labels(files, tmp_path):
    out = tmp_path / "run"
    assert (
        main(
            [
                "select",
                "--features",
                str(files["features"]),
                "--labels",
                str(files["labels"]),
                "--budget",
                "15",
                "--partitions",
                "3",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    assert np.load(out / "indices.npy").size == 15


def test_bench_tiny(tmp_path, capsys):
    assert (
        main(
            [
                "bench",
                "--sizes",
                "400",
                "--small-n",
                "14",
                "--small-p",
                "4",
                "--small-k",
                "4",
                "--small-trials",
                "2",
                "--dense-n",
                "12",
                "--dense-p",
                "4",
                "--alphas",
                "0.3",
                "3",
                "--repeats",
                "2",
                "--out",
                str(tmp_path / "b"),
                "--quiet",
            ]
        )
        == 0
    )
    rec = json.loads((tmp_path / "b" / "results.json").read_text())
    rows = rec["tables"]["selection"]
    assert rows[0]["N"] == 400
    assert rows[0]["objective_vs_greedy"] >= 1.0 - 1e-9
    assert rows[0]["rounds"] == 2 and rows[0]["held_equal"]
    order = rec["metrics"]["bench"]["400"]["order"]  # interleaved: the methods rotate round by round
    assert order[1] == order[0][1:] + order[0][:1]
    quality = rec["tables"]["quality_vs_milp"]
    assert {(r["instance"].split()[0], r["α"]) for r in quality} == {
        ("knn", 0.3),
        ("knn", 3.0),
        ("dense", 0.3),
        ("dense", 3.0),
    }
    for r in quality:
        assert r["gap max (%)"] >= -1e-6  # nothing beats the exact optimum
        if r["method"].endswith("default)"):
            assert r["win/tie/loss vs greedy"].endswith("/0")  # never below greedy
    assert rec["metrics"]["win_rate_vs_greedy_where_redundancy_binds"].endswith("0 worse")
    assert "quality_vs_milp" in capsys.readouterr().out
    assert (
        main(
            [
                "bench",
                "--sizes",
                "500",
                "--graph",
                "random",
                "--small-n",
                "12",
                "--small-p",
                "3",
                "--small-k",
                "3",
                "--small-trials",
                "1",
                "--dense-n",
                "8",
                "--dense-p",
                "2",
                "--alphas",
                "1",
                "--quiet",
            ]
        )
        == 0
    )
    assert main(["bench", "--graph", "grid", "--quiet"]) == 2


def test_help_lists_subcommands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "select" in out
    assert "reproduce" in out
    assert "bench" in out


def _bad(tmp_path, name, arr):
    path = tmp_path / name
    np.save(path, arr)
    return str(path)


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--budget", "0"], "budget"),
        (["--budget", "-3"], "budget"),
        (["--budget", "201"], "budget"),
        (["--budget", "2.5"], "whole count"),
        (["--k", "200"], "k must be"),
        (["--partitions", "21"], "partitions"),
        (["--alpha", "-1"], "alpha"),
        (["--method", "dpp"], "method"),
    ],
)
def test_bad_options_exit_2(files, extra, match, capsys):
    argv = [
        "select",
        "--features",
        str(files["features"]),
        "--scores",
        str(files["scores"]),
        "--quiet",
        *extra,
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert match in err


def test_bad_files_exit_2(files, tmp_path, capsys):
    feats = str(files["features"])
    cases = [
        (["--scores", _bad(tmp_path, "short.npy", np.ones(150))], "must match"),
        (["--scores", _bad(tmp_path, "nan.npy", np.r_[np.nan, np.ones(199)])], "finite"),
        (["--scores", _bad(tmp_path, "inf.npy", np.r_[np.ones(199), np.inf])], "finite"),
        (["--scores", str(tmp_path / "missing.npy")], "does not exist"),
    ]
    for extra, match in cases:
        assert main(["select", "--features", feats, "--quiet", *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert match in err, err
    nan_feats = np.load(files["features"])
    nan_feats[5, 2] = np.nan
    path = _bad(tmp_path, "nanf.npy", nan_feats)
    assert main(["select", "--features", path, "--scores", str(files["scores"]), "--quiet"]) == 2
    assert "finite" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--budgets", "0.1", "1.5"], "budgets"),
        (["--schedule", "cosine"], "schedule"),
        (["--alphas", "1", "-3"], "alphas"),
        (["--methods", "random", "d2"], "methods"),
    ],
)
def test_reproduce_rejects_bad_options_before_any_work(extra, match, capsys):
    assert main(["reproduce", "--quiet", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert match in err


@pytest.mark.parametrize("which", ["features", "scores", "labels"])
def test_empty_or_corrupt_npy_exits_2(files, tmp_path, which, capsys):
    empty = tmp_path / "empty.npy"
    empty.write_bytes(b"")  # a 0-byte file: what an interrupted writer leaves behind
    args = {
        name: str(path) for name, path in files.items() if name != ("labels" if which == "scores" else "x")
    }
    if which == "labels":
        args.pop("scores")
    args[which] = str(empty)
    argv = ["select", "--quiet"]
    for name, path in args.items():
        argv += [f"--{name}", path]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"--{which}" in err and "is empty (0 bytes)" in err, err
    truncated = tmp_path / "truncated.npy"
    np.save(truncated, np.ones(200))
    truncated.write_bytes(truncated.read_bytes()[:100])
    argv[argv.index(str(empty))] = str(truncated)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--{which}" in err and "is not a .npy array" in err, err


def test_user_arrays_that_do_not_fit_exit_2_naming_the_file(files, tmp_path, capsys):
    # Regression: these were ValueError/TypeError raised while the run computed scores (exit 1, "failed"), after
    # the digits/torch imports; a features vs labels row mismatch is the user's input, not a failure.
    feats = str(files["features"])
    out = tmp_path / "out"
    cases = [
        (["--labels", _bad(tmp_path, "short_labels.npy", np.zeros(150, np.int64))], "--labels", "must match"),
        (["--labels", _bad(tmp_path, "float_labels.npy", np.zeros(200))], "--labels", "integer class ids"),
        (["--labels", _bad(tmp_path, "one_class.npy", np.zeros(200, np.int64))], "--labels", "2 classes"),
        (["--labels", _bad(tmp_path, "2d_labels.npy", np.zeros((200, 1), np.int64))], "--labels", "1 axes"),
        (["--scores", _bad(tmp_path, "2d_scores.npy", np.ones((200, 1)))], "--scores", "1 axes"),
    ]
    for extra, option, needle in cases:
        assert main(["select", "--features", feats, *extra, "--out", str(out), "--quiet"]) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and option in err[0] and extra[-1] in err[0] and needle in err[0], err
    flat = _bad(tmp_path, "flat.npy", np.ones(200, np.float32))  # 1-D features
    assert main(["select", "--features", flat, "--score-method", "ssp", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--features" in err and flat in err and "2 axes" in err, err
    assert not out.exists()


def test_size_gpu_scales_the_defaults_and_explicit_options_win():
    from iclr25_infomax.cli import GPU_SIZE, ReproduceConfig

    quick = ReproduceConfig()
    assert quick.sized() == quick
    gpu = ReproduceConfig(size="gpu").sized()
    assert {k: getattr(gpu, k) for k in GPU_SIZE} == GPU_SIZE
    # classifier work (steps x batch x seeds) is 10-100x quick's, the issue-40 band
    work = lambda c: c.train_steps * c.batch_size * c.seeds  # noqa: E731
    assert 10 <= work(gpu) / work(quick) <= 100
    assert ReproduceConfig(size="gpu", seeds=2).sized().seeds == 2
    with pytest.raises(ValueError, match="size"):
        ReproduceConfig(size="huge")
