"""The label-word task, the CLI end to end on the tiny Llama, PEFT/LoRA, and every bad input the issue names."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from iclr25_lozo import LOZO
from iclr25_lozo._models import tiny_llama
from iclr25_lozo._task import WIKI_LABEL_WORDS, LabelWordTask, balanced_split
from iclr25_lozo.cli import main
from iclr25_shared.data import wiki_summaries

TINY = ["--model", "tiny", "--shots", "4", "--eval-per-class", "2", "--batch-size", "4", "--quiet"]


@pytest.fixture(scope="module")
def wiki():
    return wiki_summaries()


@pytest.fixture(scope="module")
def tiny(wiki):
    return tiny_llama(wiki.texts[:300], list(WIKI_LABEL_WORDS.values()), seed=0)


def test_balanced_split_is_disjoint_and_balanced(wiki):
    train, held = balanced_split(wiki.labels, shots=5, eval_per_class=3, seed=0)
    assert len(set(train) & set(held)) == 0
    assert np.bincount(wiki.labels[train]).tolist() == [5] * 11
    assert np.bincount(wiki.labels[held]).tolist() == [3] * 11
    again, _ = balanced_split(wiki.labels, shots=5, eval_per_class=3, seed=0)
    assert np.array_equal(train, again)


def test_shots_larger_than_the_data(wiki):
    with pytest.raises(ValueError, match=r"smallest class \('Mathematics'\); at most shots=246"):
        balanced_split(wiki.labels, shots=500, eval_per_class=10, seed=0, class_names=wiki.classes)


def test_select_trims_shared_padding_and_keeps_logits(tiny, wiki):
    task = LabelWordTask(tiny.tokenizer, wiki.classes, max_text_tokens=12)
    full = task.encode(wiki.subset(range(6)))
    part = LabelWordTask.select(full, [1, 3])
    assert part.input_ids.shape[1] <= full.input_ids.shape[1]
    assert bool(part.attention_mask[:, -1].all())  # left padding: the last column is real text
    with torch.no_grad():
        a = task.class_logits(tiny.model, part)
        b = task.class_logits(tiny.model, LabelWordTask.select(full, [1, 3, 0, 2]))[:2]
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)  # padding does not change a row's prediction


def test_loss_is_float32_for_a_bf16_model(wiki):
    lm = tiny_llama(wiki.texts[:200], list(WIKI_LABEL_WORDS.values()), seed=1)
    lm.model.to(torch.bfloat16)
    task = LabelWordTask(lm.tokenizer, wiki.classes, max_text_tokens=8)
    batch = task.encode(wiki.subset(range(4)))
    loss = task.loss(lm.model, batch)
    assert loss.dtype == torch.float32 and torch.isfinite(loss) and loss > 0


def test_label_words_must_be_single_tokens(tiny, wiki):
    with pytest.raises(ValueError, match="must be one"):
        LabelWordTask(tiny.tokenizer, wiki.classes, label_words={**WIKI_LABEL_WORDS, "Arts": " Fine arts"})
    with pytest.raises(ValueError, match="no word for class"):
        LabelWordTask(tiny.tokenizer, [*wiki.classes, "Sports"])


def test_lozo_decreases_the_task_loss_on_the_tiny_llama(tiny, wiki):
    """LOZO on a real HF Llama: the loss is finite, non-zero and goes down (regression for https://github.com/optsuite/LOZO/issues/2: zero loss with LOZO)."""
    task = LabelWordTask(tiny.tokenizer, wiki.classes, max_text_tokens=10)
    batch = task.encode(wiki.subset(range(0, 9000, 400)))
    model = tiny.model
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    opt = LOZO(model, lr=3e-3, rank=2, interval=10, seed=0)
    with torch.no_grad():
        start = float(task.loss(model, batch))
    for _ in range(60):
        loss = opt.step(lambda: task.loss(model, batch))
        assert torch.isfinite(loss) and loss > 0
    with torch.no_grad():
        end = float(task.loss(model, batch))
    model.load_state_dict(initial)
    assert end < start - 0.08, (start, end)


def test_lozo_on_lora_adapters_leaves_the_base_model_untouched(wiki):
    peft = pytest.importorskip("peft")
    lm = tiny_llama(wiki.texts[:200], list(WIKI_LABEL_WORDS.values()), seed=2)
    base = {k: v.clone() for k, v in lm.model.state_dict().items()}
    model = peft.get_peft_model(
        lm.model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    )
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    task = LabelWordTask(lm.tokenizer, wiki.classes, max_text_tokens=8)
    batch = task.encode(wiki.subset(range(8)))
    opt = LOZO(model, lr=1e-2, rank=2)
    for _ in range(3):
        opt.step(lambda: task.loss(model, batch))
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert any(p.abs().sum() > 0 for p in lora_b)  # LoRA B starts at zero and has moved
    for name, value in model.get_base_model().state_dict().items():
        key = name.replace("base_layer.", "")
        if "lora_" not in name and key in base:
            assert torch.equal(value, base[key]), name


# ---------------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------------


def test_cli_finetune_end_to_end(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["finetune", *TINY, "--steps", "3", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert set(results["metrics"]) >= {
        "zero_shot_accuracy",
        "finetuned_accuracy",
        "peak_memory_mib",
        "steps_per_second",
    }
    assert results["metrics"]["forward_passes"] == 6
    assert results["config"]["optimizer"] == "lozo"
    assert (out / "results.md").is_file() and (out / "loss.png").is_file()
    assert json.loads((out / "config.json").read_text())["steps"] == 3


@pytest.mark.parametrize("optimizer", ["lozo-m", "mezo", "adam"])
def test_cli_every_optimizer(optimizer, tmp_path):
    assert main(["finetune", *TINY, "--steps", "2", "--optimizer", optimizer, "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "results.json").read_text())["config"]["optimizer"] == optimizer


def test_cli_lora(tmp_path):
    pytest.importorskip("peft")
    assert (
        main(["finetune", *TINY, "--steps", "2", "--lora", "--lora-rank", "2", "--out", str(tmp_path)]) == 0
    )


def test_cli_config_file_and_override(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(
        json.dumps(
            {"model": "tiny", "steps": 2, "shots": 4, "eval_per_class": 2, "batch_size": 4, "quiet": True}
        )
    )
    out = tmp_path / "o"
    assert main(["finetune", "--config", str(cfg), "--steps", "1", "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["steps"] == 1


def test_cli_reproduce_on_the_wiki_task(tmp_path):
    out = tmp_path / "r"
    argv = ["reproduce", "--model", "tiny", "--lm-task", "wiki", "--lm-steps", "3", "--seeds", "2"]
    argv += ["--shots", "2", "--val-per-class", "1", "--test-per-class", "2", "--batch-size", "4"]
    argv += ["--mezo-lrs", "1e-3", "--lozo-lrs", "1e-3", "--lozo-m-lrs", "1e-3", "--betas", "0.9"]
    argv += ["--adam-lrs", "1e-3", "--quiet", "--out", str(out)]
    assert main(argv) == 0
    tables = json.loads((out / "results.json").read_text())["tables"]
    rows = tables["B. LM, chosen setting per method (mean and sd over seeds)"]
    assert [r["method"] for r in rows] == ["zero-shot", "mezo", "lozo", "lozo-m", "adam"]
    assert all(r["seeds"] == 2 for r in rows)
    assert "A. digits MLP, chosen setting per method" not in tables  # digits only with --digits


@pytest.mark.slow  # two fresh worker processes
def test_cli_bench_low_rank_add_times_both_paths_natively_and_on_avx2(tmp_path):
    argv = [
        "bench",
        "--model",
        "tiny",
        "--methods",
        "--low-rank-add",
        "--repeats",
        "1",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    rows = result["tables"]["low-precision low-rank add, one pass over the model's matrices (CPU)"]
    assert [(r["instruction set"][:6], r["dtype"]) for r in rows] == [
        ("native", "bfloat16"), ("native", "float16"), ("AVX2 (", "bfloat16"), ("AVX2 (", "float16")
    ]  # fmt: skip
    assert {r["cpu_capability"] for r in rows[2:]} == {"AVX2"}  # the environment reached the worker
    assert all(r["addmm_ms"] > 0 and r["blocked_ms"] > 0 and r["elements"] > 0 for r in rows)
    assert "ratios to one inference forward pass" in result["tables"]  # no methods: an empty table, no timing


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rank", "0"], "rank must be an integer in [1, inf), got 0"),
        (["--eps", "0"], "eps must be in (0.0, inf)"),
        (["--betas", "1.0"], "betas must be in [0.0, 1.0)"),
        (["--seeds", "0"], "seeds must be an integer in [1, inf)"),
    ],
)
def test_reproduce_bad_input_exits_2_with_one_line(argv, message, capsys, tmp_path):
    argv = [
        "reproduce",
        "--model",
        "tiny",
        "--lm-task",
        "wiki",
        "--quiet",
        *argv,
        "--out",
        str(tmp_path / "r"),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_reproduce_optimizers_take_eps_rank_interval_and_beta_from_the_config():
    from torch import nn

    from iclr25_lozo._reproduce import _reproduce_optimizer
    from iclr25_lozo.cli import ReproduceConfig

    cfg = ReproduceConfig(lm_task="wiki", eps=2e-3, rank=3, interval=7)
    opt = _reproduce_optimizer(cfg, "lozo-m", nn.Linear(8, 6), 0.1, 0.5, seed=4)
    assert (opt.eps, opt.rank, opt.interval, opt.momentum, opt.seed) == (2e-3, 3, 7, 0.5, 4)
    assert _reproduce_optimizer(cfg, "mezo", nn.Linear(8, 6), 0.1, 0.0, seed=4).eps == 2e-3
    assert cfg.lr_grid("lozo-m") == [(lr, b) for b in cfg.betas for lr in cfg.lozo_m_lrs]


@pytest.mark.slow  # two fresh worker processes (~40 s on 2 cores)
def test_cli_bench_on_tiny(tmp_path, capsys):
    assert (
        main(
            [
                "bench",
                "--model",
                "tiny",
                "--methods",
                "lozo",
                "adam",
                "--repeats",
                "1",
                "--batch-size",
                "2",
                "--seq-len",
                "16",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    rows = json.loads((tmp_path / "results.json").read_text())["tables"][
        "ratios to one inference forward pass"
    ]
    assert [r["method"] for r in rows] == ["lozo", "adam"]
    assert all(r["time_vs_inference"] > 0 and r["memory_vs_inference"] > 0 for r in rows)
    result = json.loads((tmp_path / "results.json").read_text())
    timed = result["tables"]["time per step / one inference forward (interleaved, one process)"]
    assert [r["method"] for r in timed] == ["inference", "lozo", "adam"]
    assert timed[0]["time_vs_inference"] == 1.0 and timed[0]["95 % CI"] == "[1.00, 1.00]"
    # one round, arms in the given order (the shared protocol's record)
    assert result["metrics"]["bench_run"]["order"] == [["inference", "lozo", "adam"]]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rank", "0"], "rank must be an integer in [1, inf), got 0"),
        # a newcomer's --steps 0 ran a minute and printed zero-shot accuracy as "fine-tuned"
        (["--steps", "0"], "steps must be an integer in [1, inf), got 0"),
        (["--eps", "0"], "eps must be in (0.0, inf)"),
        (["--eps", "inf"], "eps must be a finite number"),
        (["--lr", "inf"], "lr must be a finite number"),
        (["--lr", "-1"], "lr must be in [0.0, inf)"),
        (["--interval", "0"], "interval must be an integer in [1, inf)"),
        (["--momentum", "1.0"], "momentum must be in [0.0, 1.0)"),
        (["--optimizer", "sgd"], "--optimizer"),
        (["--shots", "5000"], "exceeds the"),
        (["--model", "./no/such/model"], "does not exist"),
        (["--model", "not-a-model-id"], "neither an existing path nor a Hub id"),
        (["--device", "tpu"], "device must be one of"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(argv, message, capsys):
    args = ["finetune", "--model", "tiny", "--quiet", "--steps", "1", *argv]
    if "--model" in argv:
        args = ["finetune", "--quiet", "--steps", "1", *argv]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("iclr25-lozo finetune: error:")


def test_cli_bad_input_keeps_existing_results(tmp_path):
    out = tmp_path / "keep"
    out.mkdir()
    (out / "results.json").write_text('{"old": true}')
    assert main(["finetune", *TINY, "--rank", "0", "--out", str(out)]) == 2
    assert json.loads((out / "results.json").read_text()) == {"old": True}


def test_cli_help_lists_subcommands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "finetune" in out and "reproduce" in out and "bench" in out


def test_model_with_no_trainable_parameters_is_refused():
    with pytest.raises(ValueError, match="no trainable parameters"):
        LOZO(nn.Linear(2, 2).requires_grad_(False), lr=0.1)


def test_reproduce_gpu_size_presets_the_quick_defaults_and_keeps_explicit_options():
    from iclr25_lozo.cli import ReproduceConfig

    quick = ReproduceConfig()
    assert quick.resolved() is quick
    gpu = ReproduceConfig(size="gpu").resolved()
    assert (gpu.lm_steps, gpu.seeds, gpu.val_per_class, gpu.test_per_class) == (200, 5, 32, 200)
    assert gpu.lm_steps == 10 * quick.lm_steps and gpu.test_per_class == 4 * quick.test_per_class
    assert (gpu.shots, gpu.methods, gpu.lozo_lrs) == (quick.shots, quick.methods, quick.lozo_lrs)
    assert ReproduceConfig(size="gpu", seeds=2).resolved().seeds == 2
