"""Issue 40: the local judge's scorer on CUDA (collected everywhere, skipped without a CUDA device).

Tolerances: fp32 on CUDA vs the CPU, with TF32 off, differs by the order of floating-point reductions only (~1e-6
relative per op); the next-token log-probabilities of a 2-layer model agree within 1e-4, with the shared-prefix
key/value cache and with padded batches alike. In bf16 (8 mantissa bits, 3.9e-3 relative per rounding) the
log-softmax is taken in fp32 from bf16 logits: within 0.1 of fp32 (logits of a few units, a few roundings each).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from iclr25_icai._backends import LocalChatBackend
from iclr25_icai._icai import choice_vote_messages

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _prompts():
    texts = [("the cat sat", "a dog ran far"), ("who was born", "the river in the city")]
    principles = ["is shorter", "is about a person", "mentions a number"]
    return [
        choice_vote_messages("", a, b, f"Select the response that {p}", ["A", "B"])
        for a, b in texts
        for p in principles
    ]


def _on(lm, device, dtype=torch.float32):
    moved = copy.copy(lm)
    moved.model = copy.deepcopy(lm.model).to(device=device, dtype=dtype)
    return moved


@pytest.mark.parametrize(("batch_size", "share_prefix"), [(1, False), (4, False), (4, True)])
def test_local_scorer_on_cuda_fp32_matches_the_cpu(tiny_lm, batch_size, share_prefix):
    from iclr25_shared.device import require_cuda

    dev = require_cuda()
    cpu = LocalChatBackend(lm=tiny_lm, batch_size=batch_size, share_prefix=share_prefix)
    gpu = LocalChatBackend(lm=_on(tiny_lm, dev), batch_size=batch_size, share_prefix=share_prefix)
    assert gpu.device.type == "cuda"
    ref = cpu.choice_logprobs(_prompts(), ["A", "B"])
    got = gpu.choice_logprobs(_prompts(), ["A", "B"])
    assert got.shape == (6, 2) and np.isfinite(got).all()
    np.testing.assert_allclose(got, ref, atol=1e-4)


def test_local_scorer_in_bf16_stays_within_0_1_of_fp32(tiny_lm):
    from iclr25_shared.device import require_cuda

    dev = require_cuda()
    ref = LocalChatBackend(lm=_on(tiny_lm, dev), batch_size=4).choice_logprobs(_prompts(), ["A", "B"])
    low = LocalChatBackend(lm=_on(tiny_lm, dev, torch.bfloat16), batch_size=4).choice_logprobs(
        _prompts(), ["A", "B"]
    )
    assert low.dtype == np.float64 and np.isfinite(low).all()
    np.testing.assert_allclose(low, ref, atol=0.1)
