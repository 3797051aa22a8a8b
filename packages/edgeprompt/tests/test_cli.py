"""The CLI end to end on tiny inputs, and every bad input the issue names (exit 2, one line)."""

from __future__ import annotations

import json

import pytest

from iclr25_edgeprompt.cli import main

FAST = ["--quiet", "--pretrain-epochs", "2", "--epochs", "3", "--hidden-channels", "8"]


def test_tune_on_karate_end_to_end(tmp_path, capsys):
    out = tmp_path / "tune"
    assert main(["tune", *FAST, "--prompt", "edgeprompt+", "--seeds", "2", "--out", str(out)]) == 0
    assert "karate edgeprompt+ 1-shot: accuracy" in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert results["metrics"]["seeds"] == 2
    assert results["metrics"]["num_anchors"] == 10
    runs = results["tables"]["runs"]
    assert [r["num_train"] for r in runs] == [4, 4]
    assert [r["num_test"] for r in runs] == [30, 30]
    assert 0.0 <= results["metrics"]["accuracy_mean"] <= 1.0
    assert (out / "config.json").is_file()
    assert (out / "results.md").is_file()


def test_pretrain_then_tune_with_the_checkpoint(tmp_path):
    ckpt = tmp_path / "pre"
    assert (
        main(
            [
                "pretrain",
                "--quiet",
                "--dataset",
                "karate",
                "--strategy",
                "edgepred",
                "--pretrain-epochs",
                "2",
                "--hidden-channels",
                "8",
                "--out",
                str(ckpt),
            ]
        )
        == 0
    )
    assert (ckpt / "backbone.pt").is_file()
    assert (ckpt / "backbone.json").is_file()
    out = tmp_path / "tune"
    assert (
        main(
            [
                "tune",
                "--quiet",
                "--prompt",
                "gpf-plus",
                "--epochs",
                "2",
                "--backbone",
                str(ckpt / "backbone.pt"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    notes = json.loads((out / "results.json").read_text())["notes"]
    assert any("backbone loaded from" in n for n in notes)


def test_bench_reports_ratios_against_classifier_only(tmp_path, capsys):
    out = tmp_path / "bench"
    args = [
        "bench",
        "--quiet",
        "--dataset",
        "digits-grid",
        "--num-graphs",
        "16",
        "--batch-size",
        "8",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--hidden-channels",
        "8",
        "--num-layers",
        "2",
        "--subgraph-nodes",
        "300",
        "--subgraph-baseline-nodes",
        "20",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    tables = json.loads((out / "results.json").read_text())["tables"]
    sub = tables["subgraphs"]
    assert [r["speedup_per_node"] for r in sub][1] == 1.0 and sub[0]["seconds_all_nodes"] > 0
    assert tables["prompts"][0]["mode"] == "head on precomputed embeddings"
    rows = json.loads((out / "results.json").read_text())["tables"]["prompts"]
    assert [r["prompt"] for r in rows] == ["none", "gpf", "gpf-plus", "edgeprompt", "edgeprompt+"]
    assert rows[0]["time_ratio"] == 1.0
    assert all(r["rounds"] == 2 and r["held_equal"] for r in rows)
    order = json.loads((out / "results.json").read_text())["metrics"]["bench"]["prompts"]["order"]
    assert order[1] == order[0][1:] + order[0][:1]  # interleaved: one step per prompt per round, rotated
    # EdgePrompt+ keeps per-edge prompts and the backbone's activations for backward: more saved memory
    assert rows[-1]["saved_for_backward_mib"] > rows[0]["saved_for_backward_mib"]


def test_reproduce_tiny_on_tu_files(tmp_path, capsys, write_tiny_tu):
    write_tiny_tu(tmp_path)
    out = tmp_path / "repro"
    args = [
        "reproduce",
        "--quiet",
        "--datasets",
        "TINYTU",
        "--tu-root",
        str(tmp_path),
        "--strategies",
        "graphcl",
        "--prompts",
        "none",
        "edgeprompt",
        "edgeprompt+",
        "--inits",
        "glorot",
        "zero",
        "--lrs",
        "0.01",
        "0.1",
        "--seeds",
        "2",
        "--shots",
        "3",
        "--epochs",
        "2",
        "--pretrain-epochs",
        "2",
        "--hidden-channels",
        "8",
        "--num-layers",
        "2",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    results = json.loads((out / "results.json").read_text())
    tables = results["tables"]
    acc = tables["accuracy"]
    # none once, each prompt method once per init
    assert [(r["prompt"], r["init"]) for r in acc] == [
        ("none", "-"),
        ("edgeprompt", "glorot"),
        ("edgeprompt", "zero"),
        ("edgeprompt+", "glorot"),
        ("edgeprompt+", "zero"),
    ]
    assert all(r["train/val/test"] == "6/2/10" for r in acc)  # 3 shots x 2 classes; 10 % / 40 % of 24
    assert len(tables["lr_grid"]) == 2 * 5
    comps = tables["comparisons"]
    # the declared primary first (first init), the rest of that init secondary, the other init exploratory
    assert [(c["role"], c["name"]) for c in comps] == [
        ("primary", "TINYTU graphcl glorot: edgeprompt+ - none"),
        ("secondary", "TINYTU graphcl glorot: edgeprompt - none"),
        ("secondary", "TINYTU graphcl glorot: edgeprompt+ - edgeprompt"),
        ("exploratory", "TINYTU graphcl zero: edgeprompt+ - none"),
        ("exploratory", "TINYTU graphcl zero: edgeprompt - none"),
        ("exploratory", "TINYTU graphcl zero: edgeprompt+ - edgeprompt"),
    ]
    assert all(c["n"] == 2 for c in comps)
    assert comps[0]["p_adjusted"] is None and comps[1]["p_adjusted"] is not None
    # the primary's difference is recomputed from the per-seed table (same seed paired)
    acc_of = {(r["prompt"], r["init"], r["seed"]): r["test_acc_%"] for r in tables["per_seed"]}
    diffs = [acc_of[("edgeprompt+", "glorot", s)] - acc_of[("none", "-", s)] for s in (0, 1)]
    assert comps[0]["mean_difference"] == pytest.approx(sum(diffs) / 2)
    assert results["metrics"]["verdict"]
    assert tables["diagnostics"][0]["shots"] == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tune", "--shots", "5"], "shots=5 but class 2 has only 4 samples"),
        (["tune", "--dataset", "imagenet"], "dataset must be one of karate"),
        (["tune", "--dataset", "Cora"], "pass root=<folder>"),
        (
            ["tune", "--prompt", "allinone"],
            "prompt must be one of none, gpf, gpf-plus, edgeprompt, edgeprompt+",
        ),
        (
            ["tune", "--backbone", "/nonexistent/backbone.pt"],
            "--backbone: '/nonexistent/backbone.pt' does not exist",
        ),
        (["tune", "--dataset", "Cora", "--root", "/nonexistent"], "root: '/nonexistent' does not exist"),
        (["tune", "--test-fraction", "0"], "test_fraction must be in (0.0, 1.0]"),
        (
            ["pretrain", "--strategy", "attrmask", "--out", "x"],
            "strategy must be one of graphcl, simgrace, edgepred",
        ),
        (["pretrain"], "out: pretrain writes the checkpoint"),
        (["reproduce", "--prompts", "gpt"], "prompts must be one of"),
        (["reproduce", "--inits", "he"], "inits must be one of glorot, zero, small"),
        (
            ["reproduce", "--datasets", "NOPE", "--tu-root", "/nonexistent"],
            "--tu-root: '/nonexistent' does not exist",
        ),
        (["reproduce", "--datasets", "NOPE", "--tu-root", "{tmp}"], "NOPE_A.txt' does not exist"),
        (["tune", "--init", "he"], "init must be one of glorot, zero, small"),
        (["bench", "--dataset", "karate"], "dataset must be one of fashion-superpixels, digits-grid"),
        (["frobnicate"], "unknown subcommand 'frobnicate'"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, message, tmp_path, capsys):
    assert main([*[a.format(tmp=tmp_path) for a in args], "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert len(err.splitlines()) == 1


def test_offline_pyg_dataset_says_what_would_download(tmp_path, capsys):
    assert main(["tune", "--dataset", "Cora", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "would fetch it from https://github.com/kimiyoung/planetoid" in err
    assert "--download" in err


def test_checkpoint_for_other_features_is_rejected(tmp_path, capsys):
    ckpt = tmp_path / "pre"
    assert (
        main(
            [
                "pretrain",
                "--quiet",
                "--dataset",
                "digits-grid",
                "--strategy",
                "edgepred",
                "--pretrain-epochs",
                "1",
                "--hidden-channels",
                "4",
                "--num-layers",
                "1",
                "--out",
                str(ckpt),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["tune", "--quiet", "--backbone", str(ckpt / "backbone.pt")]) == 2
    assert "expects 3-dim node features but karate has 34" in capsys.readouterr().err


def test_help_lists_the_verbs(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for verb in ("tune", "pretrain", "reproduce", "bench"):
        assert verb in out


def test_import_is_light_and_every_public_name_resolves():
    import subprocess
    import sys

    code = (
        "import sys, iclr25_edgeprompt as m; assert 'torch_geometric' not in sys.modules; "
        "[getattr(m, n) for n in m.__all__]; print(len(m.__all__))"
    )
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, check=True
    )
    assert int(done.stdout.strip()) >= 30


def test_size_gpu_takes_the_paper_backbone_and_more_seeds_and_explicit_options_win():
    from iclr25_edgeprompt.cli import GPU_SIZE, ReproduceConfig

    quick = ReproduceConfig()
    assert quick.sized() == quick
    gpu = ReproduceConfig(size="gpu").sized()
    assert {k: getattr(gpu, k) for k in GPU_SIZE} == GPU_SIZE
    flops = lambda c: c.num_layers * c.hidden_channels**2 * c.seeds  # noqa: E731  (GIN MLP FLOPs x steps)
    assert 10 <= flops(gpu) / flops(quick) <= 100
    assert ReproduceConfig(size="gpu", seeds=2).sized().seeds == 2
