"""The reproduction's statistics and bookkeeping: paired t-intervals, per-variant LR choice, resumable runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from iclr25_hyper_connections import _experiment
from iclr25_hyper_connections._experiment import (
    ModelSpec,
    build_model,
    consecutive_layer_similarity,
    consecutive_sublayer_similarity,
)
from iclr25_hyper_connections._variants import Variant
from iclr25_hyper_connections.cli import main

TINY = ["--dim", "16", "--num-layers", "2", "--num-heads", "2", "--context", "16", "--batch-size", "4"]
TINY += ["--max-docs", "40", "--eval-batches", "1", "--eval-every", "2", "--quiet"]


def test_sublayer_probe_at_init_is_the_same_for_residual_and_hc() -> None:
    spec = ModelSpec(dim=16, num_layers=3, num_heads=2, context=8)
    ids = torch.randint(0, 50, (2, 8), generator=torch.Generator().manual_seed(0))
    base = build_model(50, spec, Variant.parse("residual"), seed=1)
    hc = build_model(50, spec, Variant.parse("dhc4"), seed=1)
    a, b = consecutive_sublayer_similarity(base, ids), consecutive_sublayer_similarity(hc, ids)
    assert len(a) == 2 * 3 - 1
    assert a == pytest.approx(b, abs=1e-6)
    # every second pair (attention input -> FFN input of the same block) contains the per-layer probe's pairs' ends
    assert len(consecutive_layer_similarity(base, ids)) == 2


def test_reproduce_tunes_each_variant_and_resumes_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = [
        "reproduce",
        "--variants",
        "residual",
        "shc2",
        "--num-seeds",
        "2",
        "--steps",
        "2",
        "--lrs",
        "1e-3",
    ]
    args += ["3e-2", "--checkpoints", "2", *TINY, "--cache", str(tmp_path / "cache")]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    first = json.loads((tmp_path / "a" / "results.json").read_text())
    grid = first["tables"]["lr grid"]
    assert [r["variant"] for r in grid] == ["residual", "SHCx2"]
    for row in grid:  # the chosen rate is the grid's best for that variant
        assert row["chosen"] == min((1e-3, 3e-2), key=lambda lr: row[f"lr {lr:g}"])
    comp = first["tables"]["comparisons"]
    # no DHCx4 here: the second variant is the primary; its loss at the first token count is secondary
    assert [(r["name"], r["role"]) for r in comp] == [
        ("SHCx2 - residual, final validation loss (nats/token)", "primary"),
        ("SHCx2 - residual, validation loss at 64 tokens", "secondary"),
        ("SHCx2 - residual, mean consecutive sub-layer cos", "exploratory"),
    ]
    table = {(r["variant"], r["seed"]): r for r in first["tables"]["per_seed"]}
    diffs = [table["SHCx2", s]["final_val_loss"] - table["residual", s]["final_val_loss"] for s in (0, 1)]
    assert comp[0]["mean_difference"] == pytest.approx(sum(diffs) / 2)
    assert all(
        table[k]["val_loss@128"] == table[k]["final_val_loss"] for k in table
    )  # the end is the last count
    assert len(list((tmp_path / "cache").glob("run-*.json"))) == 2 * 2 + 2 * 2  # tuning + reported runs

    def fail(*_a: object, **_k: object) -> None:
        raise AssertionError("a cached run was trained again")

    monkeypatch.setattr(_experiment, "train_lm", fail)
    assert main([*args, "--out", str(tmp_path / "b")]) == 0
    second = json.loads((tmp_path / "b" / "results.json").read_text())
    assert second["tables"] == first["tables"]
    # a subset of the variants reuses every run too: a run is keyed by its own variant and rate, not the comparison
    subset = [a for a in args if a != "shc2"]
    assert main([*subset, "--out", str(tmp_path / "c")]) == 0

    # widening the grid trains only the new rate's tuning runs, plus the seeds of a variant whose choice moved
    monkeypatch.undo()
    real_train = _experiment.train_lm
    trained: list[float] = []

    def counting(*a: object, **k: object) -> object:
        trained.append(float(k["lr"]))  # type: ignore[arg-type]
        return real_train(*a, **k)

    monkeypatch.setattr(_experiment, "train_lm", counting)
    widened = [*args[: args.index("--lrs") + 3], "1e-2", *args[args.index("--lrs") + 3 :]]
    assert main([*widened, "--out", str(tmp_path / "d")]) == 0
    third = json.loads((tmp_path / "d" / "results.json").read_text())
    moved = sum(row["chosen"] == 1e-2 for row in third["tables"]["lr grid"])
    assert trained.count(1e-2) == 2 + 2 * moved and len(trained) == 2 + 2 * moved

    # a second tuning seed trains each (variant, rate) once more; the choice is the argmin of the two-seed mean
    trained.clear()
    assert main([*args, "--tuning-seeds", "2", "--out", str(tmp_path / "e")]) == 0
    fourth = json.loads((tmp_path / "e" / "results.json").read_text())["tables"]["lr grid"]
    changed = sum(a["chosen"] != b["chosen"] for a, b in zip(grid, fourth, strict=True))
    assert len(trained) == 2 * 2 + 2 * changed
    for row in fourth:
        assert row["chosen"] == min((1e-3, 3e-2), key=lambda lr: row[f"lr {lr:g}"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["reproduce", "--lrs", "0"], "lrs must be in (0.0, inf), got 0.0"),
        (["reproduce", "--checkpoints", "0"], "checkpoints must be an integer in [1, inf), got 0"),
        (["reproduce", "--size", "huge"], "--size"),
        (["reproduce", "--dim", "30", "--num-heads", "4"], "num_heads must divide dim"),
        (["peer", "--expansion-rate", "0"], "expansion_rate must be an integer in [1, 16], got 0"),
    ],
)
def test_bad_reproduce_input_exits_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert len(err.splitlines()) == 1


def test_a_cache_that_is_a_file_exits_2_before_any_training(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    cache = tmp_path / "cache"
    cache.write_text("a file, not a folder")
    out = tmp_path / "out"
    assert main(["reproduce", *TINY, "--cache", str(cache), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--cache" in err and str(cache) in err, err
    assert not out.exists() and cache.read_text() == "a file, not a folder"


@pytest.mark.parametrize(
    "content", ["{not json", '{"key": 1, "result": []}', "[]", '{"key": KEY, "result": {}}']
)
def test_a_corrupt_cache_entry_is_trained_again_not_a_crash(tmp_path: Path, content: str) -> None:
    from iclr25_hyper_connections._experiment import TrainResult
    from iclr25_hyper_connections._reproduce import _cached

    key = {"variant": "residual", "seed": 0}
    fresh = TrainResult(variant="residual", seed=0, num_params=3, final_val_loss=1.5, lr=1e-3)
    assert _cached(tmp_path, key, lambda: fresh) == fresh
    (entry,) = tmp_path.glob("run-*.json")
    entry.write_text(content.replace("KEY", json.dumps(key)))
    assert _cached(tmp_path, key, lambda: fresh) == fresh  # read as a miss, trained again and rewritten

    def fail() -> TrainResult:
        raise AssertionError("a valid cached run was trained again")

    assert _cached(tmp_path, key, fail) == fresh


@pytest.mark.parametrize("command", ["train", "reproduce"])
def test_a_context_longer_than_the_corpus_exits_2_naming_the_options(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    args = [command, "--max-docs", "2", "--context", "1024", "--steps", "1", "--quiet", "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--context" in err and "--max-docs 2" in err, err
    assert not out.exists()


def test_ngram_cross_entropy_matches_hand_counts() -> None:
    from types import SimpleNamespace

    from iclr25_hyper_connections._reproduce import ngram_cross_entropy

    n = 50
    alternating = torch.tensor([0, 1] * n)  # 0 -> 1 n times, 1 -> 0 n - 1 times
    corpus = SimpleNamespace(train=alternating, val=torch.tensor([0, 1, 0]), vocab_size=2)
    out = ngram_cross_entropy(corpus)
    assert out["unigram_cross_entropy"] == pytest.approx(math.log(2))  # n + 1 of each token
    p01 = (n + 1) / (n + 2)  # add-one: (n + 1) / (n + 0 + 2)
    p10 = n / (n - 1 + 2)
    assert out["bigram_cross_entropy"] == pytest.approx(-(math.log(p01) + math.log(p10)) / 2)


def test_comparisons_primary_is_dhc4_and_nulls_drop_seeds() -> None:
    from iclr25_hyper_connections._reproduce import comparisons

    rng = np.random.default_rng(0)
    table = []
    for seed in (2, 0, 1, 3):
        for variant in ("residual", "SHCx4", "DHCx4"):
            row = {"variant": variant, "seed": seed, "sublayer_cos": float(rng.uniform(0.5, 1))}
            row |= {f"val_loss@{t}": float(rng.uniform(2, 3)) for t in (10, 20)}
            row["final_val_loss"] = row["val_loss@20"]
            table.append(row)
    table[0]["final_val_loss"] = None  # residual, seed 2 diverged
    rows, main = comparisons(table, ["residual", "SHCx4", "DHCx4"], [1, 2], 10)
    assert main == "DHCx4"
    assert rows[0].role == "primary" and rows[0].name.startswith("DHCx4 - residual, final")
    by = {(r["variant"], r["seed"]): r["final_val_loss"] for r in table}
    diffs = [by["DHCx4", s] - by["residual", s] for s in (0, 1, 3)]
    assert rows[0].estimate.n == 3 and rows[0].estimate.value == pytest.approx(sum(diffs) / 3)
    assert [r.name for r in rows if r.role == "secondary"] == [
        "DHCx4 - residual, validation loss at 10 tokens",
        "SHCx4 - residual, validation loss at 10 tokens",
        "SHCx4 - residual, final validation loss (nats/token)",
    ]
    assert sum(r.role == "exploratory" for r in rows) == 2
    assert comparisons(table, ["residual"], [1, 2], 10) == ([], "residual")
