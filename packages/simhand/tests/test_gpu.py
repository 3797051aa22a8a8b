"""GPU tier (issue 40): SiMHand's adaptive-weight NT-Xent and a pre-training step on CUDA against the CPU, bf16
against fp32, and the step's host copies. Skipped where no CUDA device is visible (root conftest); never run yet
(no GPU was lent to this package).

Tolerances. fp32 CUDA vs CPU: rtol 1e-4 / atol 1e-5 on the loss and every gradient, TF32 off (cuBLAS / cuDNN and
MKL / oneDNN sum in different orders: float32 round-off ~1e-7 per op; the temperature 0.5 softmax over 2N
candidates and the (2N, 2N, 21, 2) pose-distance sums keep it near 1e-6; TF32 would be ~1e-3). bf16 autocast vs
fp32 on CUDA: rel 3e-2 on the loss and gradient cosine > 0.99 (8-bit mantissa, ~4e-3 per rounding, through four
conv blocks with BatchNorm, the projection and a softmax at temperature 0.5).
"""

import numpy as np
import pytest
import torch

from iclr25_shared.device import count_memcpy, require_cuda
from iclr25_simhand import HandEncoder, pair_weights, weighted_ntxent
from iclr25_simhand._model import SmallConvNet
from iclr25_simhand._pose import undo_latent_transform
from iclr25_simhand._training import _norm2d, _pretrain_step

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _no_tf32():
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _loss_and_grads(device, autocast=False, n=32):
    """SiM-W's loss on a batch of two views through the encoder: value and every gradient."""
    torch.manual_seed(0)
    model = HandEncoder(SmallConvNet(8)).to(device).train()
    g = torch.Generator().manual_seed(1)
    v1, v2 = (torch.rand(n, 3, 32, 32, generator=g).to(device) for _ in range(2))
    k1, k2 = (torch.rand(n, 21, 2, generator=g) * 31 for _ in range(2))
    ang, shift = (
        (torch.rand(n, generator=g) - 0.5).to(device),
        (0.1 * torch.rand(n, 2, generator=g)).to(device),
    )
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        z1 = undo_latent_transform(model(v1).float(), ang, shift)
        z2 = undo_latent_transform(model(v2).float(), -ang, shift)
        wp, wn = pair_weights(_norm2d(k1), _norm2d(k2))
        loss = weighted_ntxent(z1, z2, wp.to(device), wn.to(device), temperature=0.5)
    loss.backward()
    return float(loss.detach()), {
        k: p.grad.float().cpu() for k, p in model.named_parameters() if p.grad is not None
    }


def test_weighted_loss_forward_and_backward_on_cuda_fp32_match_the_cpu():
    cuda = require_cuda()
    want, want_grads = _loss_and_grads(torch.device("cpu"))
    got, got_grads = _loss_and_grads(cuda)
    assert got == pytest.approx(want, rel=1e-4, abs=1e-5)
    assert got_grads.keys() == want_grads.keys() and len(want_grads) > 10
    for k, w in want_grads.items():
        torch.testing.assert_close(got_grads[k], w, rtol=1e-4, atol=1e-5, msg=k)


def test_bf16_autocast_stays_close_to_fp32():
    cuda = require_cuda()
    want, want_grads = _loss_and_grads(cuda)
    got, got_grads = _loss_and_grads(cuda, autocast=True)
    assert got == pytest.approx(want, rel=3e-2)
    for k, w in want_grads.items():
        cos = torch.nn.functional.cosine_similarity(got_grads[k].flatten(), w.flatten(), dim=0)
        assert cos > 0.99, (k, float(cos))


def test_pretraining_step_host_copies_do_not_grow_with_the_batch():
    """A step's copies (the CPU-rendered views and their transforms up, the finiteness checks of the projections
    down) are a fixed number per step, whatever the batch: nothing is copied per image, and the loss stays on the
    device (the curve is read once at the end of training)."""
    cuda = require_cuda()
    rng = np.random.default_rng(0)
    images = torch.from_numpy(rng.random((128, 3, 32, 32)).astype(np.float32))
    kp = torch.from_numpy((rng.random((128, 21, 2)) * 31).astype(np.float32))
    counts = []
    for b in (16, 64):
        torch.manual_seed(0)
        model = HandEncoder(SmallConvNet(8)).to(cuda)
        step = _pretrain_step("simw", model, images, kp, torch.roll(torch.arange(128), 1), batch_size=b, lr=1e-3,
                              temperature=0.5, gen=torch.Generator().manual_seed(0), device=cuda)  # fmt: skip
        step()  # warm-up
        loss = step()
        assert loss.device.type == "cuda"
        counts.append(count_memcpy(step))
    assert counts[0] == counts[1], counts
