"""Issue 40: the CUDA path of the retraining strategies (collected everywhere, skipped without a CUDA device).

Tolerances: fp32 on CUDA vs the CPU, with TF32 off, differs only by the order of floating-point reductions in the
kernels (cuBLAS / cuDNN vs oneDNN): ~1e-6 relative per op, so 1e-4 relative on a loss and its gradients after a few
layers. bf16 keeps 8 mantissa bits (relative step 2**-8 = 3.9e-3 per rounding); a forward of a few layers under bf16
autocast stays within 3e-2 of fp32 relative to the output's scale.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from iclr25_diffusion_shapley._diffusion import (
    MLPDenoiser,
    make_scheduler,
    make_unet,
    predict_noise,
    prune_model,
    sample_images,
    train_denoiser,
)

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _models():
    torch.manual_seed(0)
    return {"mlp": MLPDenoiser((1, 14, 14), hidden=64, depth=3), "unet": make_unet(14, channels=(16, 32))}


def _batch(device, n=16):
    g = torch.Generator().manual_seed(1)
    x = torch.rand((n, 1, 14, 14), generator=g) * 2 - 1
    t = torch.randint(0, 1000, (n,), generator=g)
    return x.to(device), t.to(device)


@pytest.mark.parametrize("kind", ["mlp", "unet"])
def test_forward_and_backward_on_cuda_fp32_match_the_cpu(kind):
    from iclr25_shared.device import require_cuda

    dev = require_cuda()
    cpu = _models()[kind]
    gpu = copy.deepcopy(cpu).to(dev)
    losses, grads = [], []
    for model, device in ((cpu, "cpu"), (gpu, dev)):
        x, t = _batch(device)
        loss = torch.mean((predict_noise(model, x, t) - x) ** 2)
        loss.backward()
        losses.append(loss.detach().cpu())
        grads.append([p.grad.detach().cpu() for p in model.parameters()])
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-4, atol=1e-6)
    for gc, gg in zip(grads[0], grads[1]):
        torch.testing.assert_close(gg, gc, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["mlp", "unet"])
def test_bf16_autocast_forward_stays_within_3e_2_of_fp32(kind):
    from iclr25_shared.device import require_cuda

    dev = require_cuda()
    model = _models()[kind].to(dev).eval()
    x, t = _batch(dev)
    with torch.no_grad():
        ref = predict_noise(model, x, t).float()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            low = predict_noise(model, x, t).float()
    assert low.dtype == torch.float32 and torch.isfinite(low).all()
    assert float((low - ref).abs().max()) <= 3e-2 * float(ref.abs().max())


def test_training_copies_to_the_device_per_chunk_of_steps_not_per_step():
    # the minibatch indices, noise and timesteps are drawn on the CPU generator (so CPU and CUDA runs see the same
    # batches) and copied once per 64 steps; the one device-to-host read per step is the NaN/inf check
    from iclr25_shared.device import count_memcpy, require_cuda

    dev = require_cuda()
    images = np.random.default_rng(0).uniform(-1, 1, (64, 1, 14, 14)).astype(np.float32)
    counts = {}
    for steps in (4, 12):
        torch.manual_seed(0)
        model = MLPDenoiser((1, 14, 14), hidden=32).to(dev)
        counts[steps] = count_memcpy(train_denoiser, model, images, steps=steps, batch_size=8, seed=0)
    assert counts[4]["HtoD"] == counts[12]["HtoD"]  # does not grow with the steps
    assert counts[12]["DtoH"] - counts[4]["DtoH"] == 8  # one per step: the finiteness check


def test_training_on_cuda_follows_the_cpu_run():
    # same init, same CPU-drawn batches: 20 Adam steps on CUDA end close to the CPU run (Adam divides by sqrt(v):
    # reduction-order noise in tiny gradients is amplified, hence a looser 1e-3 on the weights)
    from iclr25_shared.device import require_cuda

    dev = require_cuda()
    images = np.random.default_rng(0).uniform(-1, 1, (64, 1, 14, 14)).astype(np.float32)
    torch.manual_seed(0)
    cpu = MLPDenoiser((1, 14, 14), hidden=32)
    gpu = copy.deepcopy(cpu).to(dev)
    train_denoiser(cpu, images, steps=20, batch_size=8, seed=0)
    train_denoiser(gpu, images, steps=20, batch_size=8, seed=0)
    for pc, pg in zip(cpu.parameters(), gpu.parameters()):
        torch.testing.assert_close(pg.detach().cpu(), pc.detach(), rtol=1e-3, atol=1e-3)


def test_pruning_and_sampling_on_cuda_match_the_cpu():
    from iclr25_shared.device import require_cuda

    dev = require_cuda()
    torch.manual_seed(0)
    cpu = make_unet(14, channels=(16, 32)).eval()
    gpu = copy.deepcopy(cpu).to(dev)
    p_cpu, p_gpu = prune_model(cpu, 0.5), prune_model(gpu, 0.5)
    assert [tuple(p.shape) for p in p_cpu.parameters()] == [tuple(p.shape) for p in p_gpu.parameters()]
    sched = make_scheduler()
    a = sample_images(p_cpu, 8, image_shape=(1, 14, 14), steps=4, seed=0, scheduler=sched)
    b = sample_images(p_gpu, 8, image_shape=(1, 14, 14), steps=4, seed=0, scheduler=sched)
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4)
