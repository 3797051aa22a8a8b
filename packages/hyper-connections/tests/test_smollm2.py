"""apply_hyper_connections on the packaged pretrained SmolLM2-135M-Instruct (slow: loads real weights)."""

from __future__ import annotations

import pytest
import torch

from iclr25_hyper_connections import apply_hyper_connections, hyper_connections_of, param_groups

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    from iclr25_shared.models import load_causal_lm

    return load_causal_lm("smollm2-135m-instruct")


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_smollm2_logits_unchanged_at_init_and_it_keeps_training(smollm2, reduce: str) -> None:
    import copy

    model, tok = copy.deepcopy(smollm2.model), smollm2.tokenizer
    text = (
        "The capital of France is Paris. Hyper-connections replace residual connections with several streams."
    )
    ids = tok(text, return_tensors="pt").input_ids
    with torch.no_grad():
        ref = model(ids).logits
    apply_hyper_connections(model, expansion_rate=4, reduce=reduce)
    assert len(hyper_connections_of(model)) == 2 * 30
    with torch.no_grad():
        out = model(ids).logits
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)  # measured: max |diff| = 0.0 for both
    assert torch.equal(out.argmax(-1), ref.argmax(-1))

    model.train()
    opt = torch.optim.AdamW(param_groups(model, weight_decay=0.1), lr=1e-4)
    losses = []
    for _ in range(3):
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]


def test_train_with_the_smollm2_tokenizer(tmp_path, capsys) -> None:
    import json

    from iclr25_hyper_connections.cli import main

    args = [
        "train",
        "--tokenizer",
        "smollm2",
        "--variant",
        "shc2",
        "--steps",
        "2",
        "--dim",
        "16",
        "--num-layers",
        "1",
        "--num-heads",
        "2",
        "--context",
        "16",
        "--batch-size",
        "2",
        "--max-docs",
        "20",
        "--eval-batches",
        "1",
        "--quiet",
        "--out",
        str(tmp_path),
    ]
    assert main(args) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["config"]["tokenizer"] == "smollm2"
    assert 0 < result["metrics"]["final_val_loss"] < 2 * 10.8  # ln(49152) = 10.8 nats at chance
    assert result["metrics"]["num_params"] > 49152 * 16  # the SmolLM2 vocabulary's embedding
