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
    torch.testing.assert_close(out, ref, rtol=0, atol=2e-3 if reduce == "sum" else 1e-4)
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
