"""CUDA tier (issue 40): the LevAttention layer on a GPU. Skipped where no CUDA device is visible.

The finder (``heavy_entries``, ``universal_set``: the README's time and memory table) is numpy on the host whatever
``--device`` says; what runs on a GPU is the torch layer (``LevAttention``, ``ViT``, ``leverage_scores_torch``):
forward and backward against the CPU in fp32, bf16 against fp32, its host reads, and its attention memory (O(n k)
for the weights instead of O(n^2)).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from iclr25_levattention import LevAttention, ViT  # noqa: E402
from iclr25_levattention._layer import leverage_scores_torch, select_top_keys  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.fixture(autouse=True)
def _no_tf32():
    """fp32 means fp32 here: TF32 matmuls (10-bit mantissa) would dominate the CPU/CUDA difference."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _heavy_tailed(b, n, dim, seed, heavy=8):
    """Gaussian tokens, ``heavy`` of them per example scaled 10x: their keys dominate the leverage scores, so the
    top-``heavy`` selection has a wide margin (no near-tie for rounding to flip)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, n, dim, generator=g)
    x[:, :heavy] *= 10
    return x


@pytest.mark.parametrize(("normalization", "top_k"), [("softmax", 8), ("polynomial", 48)])
def test_layer_forward_and_backward_on_cuda_fp32_match_the_cpu(normalization, top_k):
    """Same weights and input: the same keys selected, outputs and every parameter gradient within 1e-4 relative /
    1e-5 absolute (fp32 summation order of matmuls of length <= 64 and of the batched QR, ~1e-6; a wrong gather,
    head split or selection shows at O(1e-1)). Softmax selects 8 of 48 keys with a wide margin (the 8 scaled
    tokens); |x|^4 keeps all 48 (its tensor-power scores have no wide margin here: the 8 heavy rows span 8 of the
    36 feature dimensions, the rest share the others), which still runs the p = 4 scoring and normalisation."""
    torch.manual_seed(0)
    layer = LevAttention(
        32, 4, top_k=top_k, normalization=normalization, p=4 if normalization != "softmax" else 2
    )
    x = _heavy_tailed(2, 48, 32, seed=1)
    out_cpu = layer(x)
    out_cpu.square().sum().backward()
    grads_cpu = {k: p.grad.clone() for k, p in layer.named_parameters()}
    _, k_cpu, _ = layer.qkv(x).view(2, 48, 3, 4, 8).permute(2, 0, 3, 1, 4)
    layer.zero_grad(set_to_none=True)

    layer = layer.cuda()
    xg = x.cuda()
    out_gpu = layer(xg)
    out_gpu.square().sum().backward()
    _, k_gpu, _ = layer.qkv(xg).view(2, 48, 3, 4, 8).permute(2, 0, 3, 1, 4)
    rank_p = layer.p if normalization == "polynomial" else 2
    assert torch.equal(select_top_keys(k_gpu, top_k, p=rank_p).cpu(), select_top_keys(k_cpu, top_k, p=rank_p))
    torch.testing.assert_close(out_gpu.cpu(), out_cpu, rtol=1e-4, atol=1e-5)
    for name, p in layer.named_parameters():
        torch.testing.assert_close(p.grad.cpu(), grads_cpu[name], rtol=1e-4, atol=1e-5, msg=name)


def test_leverage_scores_on_cuda_match_the_cpu_including_the_rank_deficient_fallback():
    """Full-rank keys take the QR path, rank-deficient ones the SVD path; both agree with the CPU within 1e-5 (scores
    in [0, 1], fp32 rank-revealing factorisations of 40 x 8 matrices)."""
    g = torch.Generator().manual_seed(2)
    full = torch.randn(3, 40, 8, generator=g)
    low = torch.randn(3, 40, 3, generator=g) @ torch.randn(3, 3, 8, generator=g)  # rank 3 of 8 columns
    for keys in (full, low):
        cpu = leverage_scores_torch(keys)
        gpu = leverage_scores_torch(keys.cuda()).cpu()
        torch.testing.assert_close(gpu, cpu, rtol=0, atol=1e-5)
    torch.testing.assert_close(
        leverage_scores_torch(low.cuda()).sum(-1).cpu(), torch.full((3,), 3.0), atol=1e-4, rtol=0
    )


def test_bf16_layer_on_cuda_is_within_bf16_rounding_of_fp32():
    """bf16 weights and activations (8-bit mantissa, 3.9e-3 relative), fp32 accumulation in the matmuls, leverage
    scores computed in fp32 from the bf16 keys: the same keys selected (wide-margin input), outputs within 10 % of
    the output scale: the 10x tokens give attention logits of O(50), which bf16 rounds by O(0.2), enough to move
    softmax weights by a few per cent (4.4 % measured with bf16 on the CPU); a wrong head, gather or selection
    errs by O(1) of the scale."""
    torch.manual_seed(3)
    ref = LevAttention(64, 4, top_k=8).cuda()
    low = LevAttention(64, 4, top_k=8).cuda()
    low.load_state_dict(ref.state_dict())
    low = low.to(torch.bfloat16)
    x = _heavy_tailed(2, 96, 64, seed=4).cuda()
    out32 = ref(x)
    out16 = low(x.to(torch.bfloat16))
    assert out16.dtype == torch.bfloat16
    err = (out16.float() - out32).abs().max()
    assert err <= 1e-1 * out32.abs().max(), float(err)
    assert err > 0, "bf16 must actually run in bf16"
    out16.float().square().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in low.parameters())


def test_host_reads_per_forward_are_one_per_layer_and_none_for_full_attention():
    """count_memcpy on a 3-block ViT forward: top-k attention reads one boolean back per LevAttention layer (the
    batched QR's rank check that picks QR or the rank-revealing SVD), whatever the batch (2 or 16 images x 4 heads);
    full attention reads nothing back. A per-head or per-example host read would multiply these counts."""
    from iclr25_shared.device import count_memcpy

    torch.manual_seed(5)
    model = ViT(image_size=16, patch_size=4, dim=32, depth=3, num_heads=4, top_k=6).cuda().eval()
    small = torch.randn(2, 1, 16, 16, device="cuda")
    big = torch.randn(16, 1, 16, 16, device="cuda")
    with torch.no_grad():
        model(small)  # warm-up
        top_small = count_memcpy(lambda: model(small))
        top_big = count_memcpy(lambda: model(big))
        model.set_top_k(None)
        full = count_memcpy(lambda: model(big))
    # 3 on a plain cuSOLVER QR; a factorisation backend that reads its own status back once per call gives 6: a
    # constant per layer either way, never a count that grows with the batch
    assert top_small == top_big, (top_small, top_big)
    assert top_big["DtoH"] in (3, 6), top_big
    assert top_small["HtoD"] == top_big["HtoD"] == full["HtoD"] == 0, (top_small, top_big, full)
    assert full["DtoH"] == 0, full


def test_top_k_attention_memory_is_linear_in_n_not_quadratic():
    """Forward and backward at n = 2048, B = 2, H = 4: full attention keeps the (B, H, n, n) fp32 weights for
    backward (>= 134 MB); top-32 keeps (B, H, n, 32) (2 MiB). The measured peak of top-k is below a tenth of full's,
    and full's peak is at least the size of its weights (the measurement is real)."""
    from iclr25_shared.device import PeakMemory

    b, n, dim, heads = 2, 2048, 64, 4
    torch.manual_seed(6)
    layer = LevAttention(dim, heads, top_k=32).cuda()
    x = torch.randn(b, n, dim, device="cuda", requires_grad=True)

    def step():
        layer(x).sum().backward()

    peaks = {}
    for top_k in (32, None):
        layer.top_k = top_k
        step()  # warm-up (cuBLAS / cuSOLVER workspaces)
        with PeakMemory("cuda") as mem:
            step()
        peaks[top_k] = mem.peak_bytes
    assert peaks[None] >= b * heads * n * n * 4, peaks
    assert peaks[32] <= peaks[None] / 10, peaks
