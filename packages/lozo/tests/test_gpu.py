"""CUDA checks (issue 40): skipped where no GPU is visible, run by `uv run nox -s gpu` (under a minute on one H100).

- A CUDA step against a CPU step from the same weights, seed and perturbation. The optimizer draws its Gaussians
  with a generator on the parameter's device, and CUDA's generator (Philox) gives other numbers than the CPU's for
  the same seed; so the test draws the directions on the CPU for both (``_gaussian`` patched to draw on the CPU
  and move the result), which leaves exactly the CUDA arithmetic to compare: the two perturbed losses, c, and the
  low-rank update. fp32 with TF32 off: the losses agree to ~1e-6 relative, c = (L+ - L-) / 2 eps amplifies their
  rounding by 1/eps, so c within 1e-2 relative (eps = 1e-3) and the weights (lr = 1e-4) within 1e-4 of their
  scale.
- bf16: the exact per-module restore leaves every weight bit-identical after steps at lr = 0 on CUDA (as on CPU),
  and a bf16 LOZO step's c is within 0.25 of fp32's relative to its scale (bf16's 8-bit mantissa in both losses,
  divided by 2 eps).
- Memory: the peak of a LOZO / LOZO-M step is at most 1.2x the peak of one inference forward pass of the same
  model and batch (the paper's and the README's claim), weights included, fp32 and bf16.
- No host synchronisation inside the step beyond reading the two losses (which the skip rule needs): the
  perturbation, restore and update run under ``no_host_sync``, and a whole step copies between host and device
  exactly what its two forward passes copy plus the two loss reads, for a 2-layer and a 4-layer model alike
  (nothing per parameter).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from iclr25_lozo import LOZO

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _ieee_fp32():
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _cuda() -> torch.device:
    from iclr25_shared.device import require_cuda

    return require_cuda()


def _llama(layers: int = 2, hidden: int = 64, vocab: int = 256) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def _batch(vocab: int = 256, batch: int = 8, seq: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, vocab, (batch, seq), generator=g), torch.randint(0, vocab, (batch,), generator=g)


def _closure(model, ids, labels):
    def closure():
        return F.cross_entropy(model(input_ids=ids).logits[:, -1].float(), labels)

    return closure


def _cpu_drawn(opt: LOZO) -> None:
    """Make ``opt`` draw every Gaussian with a CPU generator, then move it: the same numbers on any device."""
    real = type(opt)._gaussian

    def gaussian(p, shape, *key):
        z = real(opt, torch.empty((), device="cpu", dtype=p.dtype), shape, *key)
        return z.to(p.device)

    opt._gaussian = gaussian


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_a_cuda_step_equals_the_cpu_step_with_the_same_perturbation(momentum: float) -> None:
    device = _cuda()
    cpu = _llama()
    gpu = copy.deepcopy(cpu).to(device)
    ids, labels = _batch()
    opts = []
    for model in (cpu, gpu):
        opt = LOZO(model, lr=1e-4, eps=1e-3, rank=2, interval=2, momentum=momentum, seed=3)
        _cpu_drawn(opt)
        opts.append(opt)
    for _ in range(3):  # crosses a V redraw (interval 2)
        a = opts[0].step(_closure(cpu, ids, labels))
        b = opts[1].step(_closure(gpu, ids.to(device), labels.to(device)))
        assert float(b) == pytest.approx(float(a), rel=1e-5)
        c_cpu, c_gpu = opts[0].last_projected_grad, opts[1].last_projected_grad
        assert c_gpu == pytest.approx(c_cpu, rel=1e-2, abs=1e-3)
    for p, q in zip(gpu.parameters(), cpu.parameters()):
        scale = q.detach().abs().max().item()
        assert (p.detach().cpu() - q.detach()).abs().max().item() <= 1e-4 * scale


def test_bf16_exact_restore_is_bit_identical_on_cuda_and_c_follows_fp32() -> None:
    device = _cuda()
    ids, labels = (t.to(device) for t in _batch())
    model = _llama().to(device=device, dtype=torch.bfloat16)
    before = [p.detach().clone() for p in model.parameters()]
    opt = LOZO(model, lr=0.0, eps=1e-3, rank=2, interval=2, seed=3)
    assert opt.restore == "exact"
    for _ in range(5):
        opt.step(_closure(model, ids, labels))
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), before))
    # c of the same direction in bf16 and fp32 (eps = 1e-2 so that bf16 resolves the difference)
    cs = []
    for dtype in (torch.float32, torch.bfloat16):
        m = _llama().to(device=device, dtype=dtype)
        o = LOZO(m, lr=0.0, eps=1e-2, rank=2, interval=2, seed=3)
        o.step(_closure(m, ids, labels))
        cs.append(o.last_projected_grad)
    assert abs(cs[1] - cs[0]) <= 0.25 * max(abs(cs[0]), 1.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_step_peak_memory_is_at_most_1_2x_inference(dtype: torch.dtype, momentum: float) -> None:
    device = _cuda()
    # proportions like SmolLM2-135M's: the largest module (the tied embedding) ~10 % of the weights (21 % there),
    # which bounds the extra copy of the exact restore in bf16
    model = _llama(layers=4, hidden=512, vocab=2048).to(device=device, dtype=dtype)
    ids, labels = (t.to(device) for t in _batch(vocab=2048, batch=8, seq=64))
    closure = _closure(model, ids, labels)
    opt = LOZO(model, lr=1e-7, eps=1e-3, rank=2, interval=50, momentum=momentum, seed=0)
    opt.step(closure)  # first step: V and the momentum allocated
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    with torch.no_grad():
        closure()
    torch.cuda.synchronize()
    inference = torch.cuda.max_memory_allocated(device)  # weights included, as in the README's bench
    torch.cuda.reset_peak_memory_stats(device)
    opt.step(closure)
    torch.cuda.synchronize()
    step = torch.cuda.max_memory_allocated(device)
    assert step <= 1.2 * inference, (step / 2**20, inference / 2**20)


def test_no_host_sync_inside_the_step_beyond_the_two_loss_reads() -> None:
    from iclr25_shared.device import count_memcpy, no_host_sync

    device = _cuda()
    copies = []
    for layers in (2, 4):
        model = _llama(layers=layers).to(device)
        ids, labels = (t.to(device) for t in _batch())
        closure = _closure(model, ids, labels)
        opt = LOZO(model, lr=1e-3, eps=1e-3, rank=2, interval=2, momentum=0.9, seed=0)
        opt.step(closure)  # V, momentum allocated
        params = opt._trainable()
        torch.cuda.synchronize()
        with no_host_sync():  # the step's device work: redraw, perturb, restore, update
            opt._begin_step()
            opt._perturb(params, opt.eps)
            opt._perturb(params, -opt.eps)
            for index, p, group in params:
                opt._update(index, p, group, 0.5)
        torch.cuda.synchronize()
        with torch.no_grad():
            forward = count_memcpy(closure)  # whatever the model's own forward copies (masks, positions)
        copies.append((count_memcpy(opt.step, closure), forward))
    for step, forward in copies:
        # two forwards plus the two loss reads; nothing per parameter, so the same for 2 and 4 layers
        assert step["DtoH"] == 2 * forward["DtoH"] + 2, copies
        assert step["HtoD"] == 2 * forward["HtoD"], copies
    assert copies[0][0]["DtoH"] - 2 * copies[0][1]["DtoH"] == copies[1][0]["DtoH"] - 2 * copies[1][1]["DtoH"]
