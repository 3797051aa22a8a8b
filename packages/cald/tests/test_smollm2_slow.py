"""The packaged SmolLM2-135M (slow tier): exact reduction to the teacher and weight transfer on real weights."""

import pytest
import torch

from iclr25_cald import MambaConfig, convert, generate
from iclr25_shared.data import wiki_summaries
from iclr25_shared.models import load_causal_lm
from iclr25_shared.testing import require

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    return require(load_causal_lm)


def test_identity_linformer_reproduces_smollm2_prefix_on_wikipedia_text(smollm2):
    from iclr25_cald._task import prefix_model

    teacher = prefix_model(smollm2.model, 2, task="lm")
    text = require(wiki_summaries).texts[0]
    ids = smollm2.tokenizer(text, return_tensors="pt")["input_ids"][:, :24]
    student = convert(
        teacher, "linformer", k=24, max_seq_len=24, init="identity", scale="none", allow_bidirectional=True
    ).model
    with torch.no_grad():
        want = teacher(ids, attention_mask=torch.zeros(1, 1, 24, 24), output_hidden_states=True)
        got = student(ids, output_hidden_states=True)
    for a, b in zip(got.hidden_states, want.hidden_states):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_full_smollm2_conversion_keeps_weights_and_generates_recurrently(smollm2):
    teacher = smollm2.model
    conv = convert(teacher, "mamba", mamba=MambaConfig(expand=1))
    assert conv.report.layers == 30
    s = conv.model.state_dict()
    kept = [k for k in teacher.state_dict() if k in s]
    assert all(torch.equal(s[k], teacher.state_dict()[k]) for k in kept)
    ids = smollm2.tokenizer("The capital of France is", return_tensors="pt")["input_ids"]
    out = generate(conv.model, ids, max_new_tokens=3)
    assert out.shape == (1, ids.shape[1] + 3)
