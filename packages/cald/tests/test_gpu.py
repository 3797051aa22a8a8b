"""The CUDA path of the converted mixers (issue 40): skipped when no CUDA device is visible (never run in this task).

What each test would catch on a GPU:

- CUDA fp32 vs CPU fp32, forward and backward of a converted model (Linformer classifier, Mamba causal LM with the
  plain recurrence and the blocked scan): device placement bugs (a tensor made on the CPU inside a mixer), a
  kernel that computes something else. Tolerance rtol 1e-4 / atol 1e-5 on logits, loss and every parameter's
  gradient: the same float32 arithmetic summed in another order (cuBLAS/cuDNN blocking; TF32 is switched off for
  the test, since it keeps only 10 mantissa bits), on a model whose values are O(1).
- CUDA bf16 vs CUDA fp32: the low-precision path stays finite and close. Relative Frobenius error of the logits
  < 3e-2 and of the whole gradient vector < 5e-2 (bf16 keeps 8 bits: 2^-8 = 3.9e-3 per rounding; the same check
  on the CPU measured 4.2e-3 / 8.6e-3 on the logits (Linformer / Mamba) and 6.1e-3 / 1.3e-2 on the gradient, so
  the bounds leave 3-4x room for other kernels' rounding).
- No host synchronisation in the hot loop: the selective scan (both forms), the Mamba mixer's forward and backward
  and the Linformer attention without a padding mask run under ``iclr25_shared.device.no_host_sync`` (a ``.item()``,
  ``bool(tensor)`` or synchronising copy raises), and make no host-device copies (``count_memcpy``). A padding mask is
  validated on the host by design (left padding is refused), once per layer, outside the loop.
- Memory: the README says Linformer's memory is linear in n (its ``n x k`` scores), not quadratic: the peak memory of
  one Linformer mixer forward at 4n is at most 4.5x the one at n (eager attention's n x n scores would give 16x).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import tiny_llama

from iclr25_cald import MambaConfig, MambaMixer, convert, selective_scan

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _no_tf32():
    """Full float32 on CUDA for the comparisons (TF32 keeps 10 mantissa bits)."""
    if not torch.cuda.is_available():
        yield
        return
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _batch(seq=12, rows=3, vocab=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (rows, seq), generator=g)
    mask = (torch.arange(seq) < torch.tensor([[seq], [seq - 3], [seq - 5]])[:rows]).long()
    return {"input_ids": ids.masked_fill(mask == 0, 0), "attention_mask": mask}


def _converted(mixer: str, chunk: int = 1):
    """A float32 converted model and a batch with labels: Linformer on a classifier, Mamba on a causal LM."""
    if mixer == "linformer":
        model = tiny_llama(2, dtype=torch.float32, seq=12, labels=3)
        conv = convert(model, "linformer", k=6, max_seq_len=12, seed=0).model
        batch = {**_batch(), "labels": torch.tensor([0, 2, 1])}
    else:
        model = tiny_llama(2, dtype=torch.float32, seq=12)
        conv = convert(model, "mamba", mamba=MambaConfig(d_state=4, expand=2, chunk=chunk), seed=0).model
        b = _batch()
        batch = {**b, "labels": b["input_ids"].masked_fill(b["attention_mask"] == 0, -100)}
    return conv.train(), batch


def _run(model, batch, device, dtype=torch.float32):
    model = model.to(device=device, dtype=dtype)
    model.zero_grad(set_to_none=True)
    out = model(**{k: v.to(device) for k, v in batch.items()})
    out.loss.backward()
    grads = {n: p.grad.detach().float().cpu() for n, p in model.named_parameters() if p.grad is not None}
    return out.logits.detach().float().cpu(), out.loss.detach().float().cpu(), grads


def _rel(a, b):
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


CASES = [("linformer", 1), ("mamba", 1), ("mamba", 4)]


@pytest.mark.parametrize(("mixer", "chunk"), CASES)
def test_cuda_fp32_forward_and_backward_match_the_cpu(mixer, chunk):
    from iclr25_shared.device import require_cuda

    cuda = require_cuda()
    model, batch = _converted(mixer, chunk)
    want = _run(model, batch, "cpu")
    model, batch = _converted(mixer, chunk)
    got = _run(model, batch, cuda)
    torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-5)
    assert got[2].keys() == want[2].keys() and len(want[2]) > 0
    for name in want[2]:
        torch.testing.assert_close(got[2][name], want[2][name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize(("mixer", "chunk"), CASES)
def test_cuda_bf16_stays_close_to_fp32(mixer, chunk):
    from iclr25_shared.device import require_cuda

    cuda = require_cuda()
    model, batch = _converted(mixer, chunk)
    ref = _run(model, batch, cuda)
    model, batch = _converted(mixer, chunk)
    low = _run(model, batch, cuda, torch.bfloat16)
    assert torch.isfinite(low[0]).all() and torch.isfinite(low[1])
    assert _rel(low[0], ref[0]) < 3e-2
    g_low = torch.cat([low[2][n].flatten() for n in sorted(ref[2])])
    g_ref = torch.cat([ref[2][n].flatten() for n in sorted(ref[2])])
    assert torch.isfinite(g_low).all()
    assert _rel(g_low, g_ref) < 5e-2


def _scan_inputs(device, n=64, c=8, ns=4):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, n, c, generator=g)
    delta = torch.rand(2, n, c, generator=g) * 0.5 + 0.01
    A = -torch.rand(c, ns, generator=g) - 0.1
    B, C = torch.randn(2, n, ns, generator=g), torch.randn(2, n, ns, generator=g)
    D = torch.randn(c, generator=g)
    return [t.to(device) for t in (x, delta, A, B, C, D)]


@pytest.mark.parametrize("chunk", [1, 16])
def test_the_scan_and_the_mixers_make_no_host_sync_and_no_copies(chunk):
    from iclr25_cald._mixers import LinformerProjection, linformer_attention
    from iclr25_shared.device import count_memcpy, no_host_sync, require_cuda

    cuda = require_cuda()
    inputs = _scan_inputs(cuda)
    torch.manual_seed(0)
    mixer = MambaMixer(8, MambaConfig(d_state=4, chunk=chunk)).to(cuda)
    u = torch.randn(2, 64, 8, device=cuda, requires_grad=True)
    proj = LinformerProjection(64, 16).to(cuda)
    q, k, v = (torch.randn(2, 4, 64, 8, device=cuda) for _ in range(3))

    def hot() -> None:
        selective_scan(*inputs, chunk=chunk)
        mixer(u).square().mean().backward()
        linformer_attention(q, *proj.project(k, v, None), 8**-0.5)

    hot()  # warm-up: lazy CUDA initialisation may synchronise once
    torch.cuda.synchronize()
    with no_host_sync():
        hot()
    torch.cuda.synchronize()
    copies = count_memcpy(hot)
    assert copies["HtoD"] == 0 and copies["DtoH"] == 0, copies


def test_linformer_memory_grows_linearly_with_the_sequence():
    from iclr25_shared.device import PeakMemory, require_cuda

    cuda = require_cuda()
    model = tiny_llama(1, dtype=torch.float32, seq=8192)
    layer = convert(model, "linformer", k=64, max_seq_len=8192, seed=0).model.to(cuda).model.layers[0]
    peaks = {}
    for n in (2048, 8192):
        x = torch.randn(1, n, 16, device=cuda)
        pe = tuple(t.to(cuda) for t in model.model.rotary_emb(x.cpu(), torch.arange(n)[None]))
        with torch.no_grad():
            layer.self_attn(x, position_embeddings=pe)  # warm-up
            torch.cuda.synchronize()
            with PeakMemory(cuda) as mem:
                layer.self_attn(x, position_embeddings=pe)
        peaks[n] = mem.peak_bytes
    assert peaks[2048] > 0
    assert peaks[8192] / peaks[2048] <= 4.5, peaks
