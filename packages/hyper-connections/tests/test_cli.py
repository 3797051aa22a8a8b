"""The CLI end to end on tiny inputs, its exit codes, and the experiment helpers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from iclr25_hyper_connections._experiment import (
    ModelSpec,
    Variant,
    build_model,
    consecutive_layer_similarity,
    load_corpus,
    saved_activation_bytes,
)
from iclr25_hyper_connections.cli import main

TINY = [
    "--dim",
    "16",
    "--num-layers",
    "2",
    "--num-heads",
    "2",
    "--context",
    "16",
    "--batch-size",
    "4",
    "--max-docs",
    "40",
    "--eval-every",
    "2",
    "--eval-batches",
    "1",
    "--quiet",
]


def test_train_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["train", "--variant", "dhc2", "--steps", "4", *TINY, "--out", str(out)]) == 0
    printed = capsys.readouterr().out  # the runner prints the metrics
    assert "final_val_loss: " in printed
    result = json.loads((out / "results.json").read_text())
    assert result["metrics"]["variant"] == "DHCx2"
    loss = result["metrics"]["final_val_loss"]
    assert 0 < loss < 2 * torch.log(torch.tensor(256.0)).item()
    assert [r["step"] for r in result["tables"]["loss curve"]] == [1, 2, 3, 4]
    assert len(result["metrics"]["layer_similarity"]) == 1
    assert json.loads((out / "config.json").read_text())["variant"] == "dhc2"


def test_reproduce_end_to_end_writes_table_and_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rep"
    args = [
        "reproduce",
        "--variants",
        "residual",
        "dhc2",
        "--num-seeds",
        "2",
        "--steps",
        "2",
        *TINY,
        "--out",
        str(out),
    ]
    assert main(args) == 0
    table = capsys.readouterr().out
    assert "| residual |" in table
    assert "| DHCx2 |" in table
    assert (out / "loss_curves.png").stat().st_size > 1000
    assert (out / "layer_similarity.png").stat().st_size > 1000
    runs = json.loads((out / "results.json").read_text())["tables"]["per_seed"]
    assert sorted((r["variant"], r["seed"]) for r in runs) == [
        ("DHCx2", 0),
        ("DHCx2", 1),
        ("residual", 0),
        ("residual", 1),
    ]


def test_bench_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "bench",
        "--dim",
        "16",
        "--num-layers",
        "2",
        "--num-heads",
        "2",
        "--context",
        "8",
        "--batch-size",
        "2",
        "--expansion-rates",
        "1",
        "4",
        "--repeats",
        "1",
        "--warmup-steps",
        "0",
        "--quiet",
        "--out",
        str(tmp_path),
    ]
    assert main(args) == 0
    rows = json.loads((tmp_path / "results.json").read_text())["tables"]["bench"]
    assert [r["variant"] for r in rows] == ["residual", "DHCx1", "DHCx4"]
    assert rows[0]["params ratio"] == 1.0
    assert rows[1]["params"] - rows[0]["params"] == 2 * 2 * (
        16 * 3 + 3 + 2
    )  # 4 branches x paper formula (n=1)
    assert (
        rows[2]["activation ratio"] > rows[1]["activation ratio"] > 1.0
    )  # n streams are stored for backward
    assert "time ratio" in capsys.readouterr().out
    run = json.loads((tmp_path / "results.json").read_text())["metrics"]["bench_run"]
    assert run["order"] == [["residual", "DHCx1", "DHCx4"]]  # the shared interleaved protocol's record
    assert rows[0]["time ratio 95 % CI"] == "[1.000, 1.000]"


@pytest.mark.slow
def test_bench_data_parallel_rows_count_the_gradient_bytes(tmp_path: Path) -> None:
    args = ["bench", "--dim", "16", "--num-layers", "2", "--num-heads", "2", "--context", "8"]
    args += ["--batch-size", "2", "--expansion-rates", "4", "--repeats", "1", "--warmup-steps", "0"]
    assert main([*args, "--processes", "1", "2", "--quiet", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "results.json").read_text())["tables"]["data parallel (DDP)"]
    assert [(r["processes"], r["variant"], r["batch per process"]) for r in rows] == [
        (1, "residual", 2),
        (1, "DHCx4", 2),
        (2, "residual", 1),
        (2, "DHCx4", 1),
    ]
    for r in rows:  # one process: no DDP; two: every float32 gradient entry all-reduced once per step
        assert r["bytes all-reduced per step"] == (0 if r["processes"] == 1 else 4 * r["params"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "--variant", "hc4"], "variant must be residual, dhc<n> or shc<n>"),
        (["train", "--variant", "dhc0"], "variant must be residual"),
        (["train", "--variant", "dhc32"], "expansion rate must be in 1..16"),
        (["train", "--dim", "30", "--num-heads", "4"], "num_heads must divide dim"),
        (["train", "--steps", "0"], "steps must be an integer in [1, inf), got 0"),
        (["train", "--lr", "-1"], "lr must be in (0.0, inf), got -1.0"),
        (["train", "--tokenizer", "gpt2"], "--tokenizer"),
        (["reproduce", "--variants", "residual", "residual"], "variants must be distinct"),
        (["reproduce", "--num-seeds", "0"], "num_seeds must be an integer in [1, inf), got 0"),
        (["bench", "--expansion-rates", "0"], "expansion_rates must be an integer in [1, 16], got 0"),
        (["bench", "--device", "tpu"], "device must be one of"),
        (["bench", "--processes", "3"], "processes: 3 does not divide batch_size=8"),
        (["bench", "--processes", "0"], "processes must be an integer in [1, 64], got 0"),
        (["fly"], "unknown subcommand 'fly'"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert len(err.splitlines()) == 1


def test_help_lists_the_verbs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(verb in out for verb in ("train", "reproduce", "bench"))


def test_variant_parsing() -> None:
    assert Variant.parse("residual").expansion_rate == 0
    v = Variant.parse("SHC8")
    assert (v.name, v.expansion_rate, v.dynamic, v.tanh) == ("SHCx8", 8, False, True)
    v = Variant.parse("dhc4-notanh")
    assert (v.name, v.dynamic, v.tanh) == ("DHCx4 w/o tanh", True, False)
    with pytest.raises(ValueError, match="variant must be"):
        Variant.parse("dhc")


def test_corpus_split_is_fixed_and_disjoint() -> None:
    a, b = load_corpus("bytes", max_docs=30), load_corpus("bytes", max_docs=30)
    assert torch.equal(a.train, b.train)
    assert torch.equal(a.val, b.val)
    assert a.num_docs == (27, 3)
    assert a.vocab_size == 256
    assert int(a.train.max()) < 256
    with pytest.raises(ValueError, match="tokenizer must be one of bytes, smollm2"):
        load_corpus("chars")  # type: ignore[arg-type]


def test_same_seed_same_base_weights_across_variants() -> None:
    spec = ModelSpec(dim=16, num_layers=2, num_heads=2, context=8)
    base = build_model(50, spec, Variant.parse("residual"), seed=3)
    hc = build_model(50, spec, Variant.parse("dhc4"), seed=3)
    hc_weights = {k.replace(".layer.", "."): v for k, v in hc.state_dict().items()}
    for k, v in base.state_dict().items():
        assert torch.equal(v, hc_weights[k]), k
    ids = torch.randint(0, 50, (2, 8))
    with torch.no_grad():
        # the probe reads each layer's input: identical streams at init give identical similarities
        assert consecutive_layer_similarity(base, ids) == pytest.approx(
            consecutive_layer_similarity(hc, ids), abs=1e-6
        )


def test_saved_activation_bytes_counts_what_autograd_keeps() -> None:
    w = torch.randn(8, 8, requires_grad=True)
    x = torch.randn(5, 8)

    # x @ w saves x (160 B; w is excluded), tanh saves its output (160 B)
    assert saved_activation_bytes(lambda: torch.tanh(x @ w), exclude=[w]) == 2 * 5 * 8 * 4


def test_gpu_size_is_quick_at_15x_the_tokens_per_run() -> None:
    from iclr25_hyper_connections._reproduce import _setting
    from iclr25_hyper_connections.cli import ReproduceConfig

    quick, gpu = _setting(ReproduceConfig(size="quick")), _setting(ReproduceConfig(size="gpu"))
    tokens = [s.steps * s.batch_size * s.context for s in (quick, gpu)]
    assert tokens == [81_920, 1_228_800] and tokens[1] == 15 * tokens[0]
    assert (
        gpu.variants == quick.variants and gpu.lrs == quick.lrs and gpu.num_layers == quick.num_layers == 12
    )
