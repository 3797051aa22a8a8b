"""Data-parallel DebGCD / SimGCD (issue 39): 2 gloo ranks on CPU equal one process on the concatenated batch.

Each rank forwards its block of rows of both augmented views; the outputs are gathered with gradient, so the
InfoNCE / SupCon negatives, the self-distillation and the mean-entropy regulariser see the global batch; BatchNorm
uses the global batch's statistics (GlobalBatchNorm). Sampler and augmentations draw the global batch from the
run's seed on every rank, so even the augmented pixels are the one-process ones. Tolerance: rel 1e-4 on the
per-epoch mean losses and 1e-4 absolute on every parameter after 2 epochs of SGD with momentum (8 steps): the
differences are summation order only (half-batch matmuls, BatchNorm statistics summed over two ranks, the two
partial gradients summed by DDP's all-reduce), float32 round-off of ~1e-7 carried through 8 steps.
"""

import time

import numpy as np
import pytest
import torch

from iclr25_debgcd import GCDLossConfig, TrainConfig, gcd_split, train_gcd
from iclr25_debgcd._distributed import GlobalBatchNorm
from iclr25_shared.testing import RankFailed, run_ranks


def _data(n_per_class: int = 12):
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(4), n_per_class)
    protos = rng.random((4, 1, 8, 8)).astype(np.float32)
    x = np.clip(protos[y] + 0.15 * rng.standard_normal((y.size, 1, 8, 8)), 0, 1).astype(np.float32)
    return x, gcd_split(y, known_classes=[0, 1], labelled_fraction=0.5, seed=0)


def _train(method: str, batch: int, broken_rank: int = -1):
    """Two epochs of ``method`` on 48 random 8x8 images (mlp backbone: BatchNorm1d); returns the per-epoch losses
    and every parameter and BatchNorm buffer. ``broken_rank`` trains on images with a NaN (refused there, while
    the other rank waits in DDP's set-up collective)."""
    import torch.distributed as dist

    x, split = _data()
    if dist.is_initialized() and dist.get_rank() == broken_rank:
        x[0, 0, 0, 0] = np.nan
    loss = GCDLossConfig(threshold=0.5)  # DebGCD: the pseudo-label term is active at this size
    cfg = TrainConfig(
        method=method,
        epochs=2,
        batch_size=batch,
        hidden=32,
        feat_dim=16,
        bottleneck=16,
        ood_layers=2,
        loss=loss,
    )
    res = train_gcd(x, split, cfg, seed=3)
    keys = sorted(k for k in res.history[0] if k not in ("epoch", "seconds"))
    hist = [[row[k] for k in keys] for row in res.history]
    state = {k: v.detach().clone() for k, v in res.model.state_dict().items()}
    return hist, state, res.predictions


@pytest.mark.slow
@pytest.mark.parametrize("method", ["debgcd", "simgcd"])
def test_two_ranks_equal_one_process_on_the_concatenated_batch(method):
    # a global batch of 11 (6 + 5 rows per view on the two ranks): uneven blocks are gathered too
    want_hist, want_state, want_pred = _train(method, 11)
    (h0, s0, p0), (h1, s1, p1) = run_ranks(_train, method, 11, world_size=2, timeout_s=300)
    assert h0 == h1 and np.array_equal(p0, p1)  # every rank computes the same global loss
    assert all(torch.equal(s0[k], s1[k]) for k in s0)  # replicas (and BatchNorm running stats) bit-identical
    np.testing.assert_allclose(h0, want_hist, rtol=1e-4)
    for k, want in want_state.items():
        torch.testing.assert_close(s0[k], want, rtol=0, atol=1e-4, msg=k)
    assert (p0 == want_pred).mean() > 0.95
    # the state compared moved far beyond the tolerance during training (the comparison can fail)
    bn = [k for k in want_state if k.endswith("running_var")]
    assert bn and max((want_state[k] - 1).abs().max() for k in bn) > 1e-2


def test_global_batchnorm_is_batchnorm_in_one_process():
    torch.manual_seed(0)
    ref = torch.nn.BatchNorm2d(3)
    mine = GlobalBatchNorm(3)
    mine.load_state_dict(ref.state_dict())
    x = torch.randn(5, 3, 4, 4, requires_grad=True)
    torch.testing.assert_close(mine(x), ref(x), rtol=0, atol=0)
    torch.testing.assert_close(mine.running_var, ref.running_var, rtol=0, atol=0)


def _bn_rank(x: torch.Tensor):
    import torch.distributed as dist

    torch.manual_seed(0)
    bn = GlobalBatchNorm(3)
    with torch.no_grad():
        bn.weight.uniform_()
        bn.bias.uniform_()
    rows = x[:4] if dist.get_rank() == 0 else x[4:]
    rows = rows.clone().requires_grad_(True)
    y = bn(rows)
    (y * torch.arange(y.numel()).reshape(y.shape)).sum().backward()
    return y.detach(), rows.grad, bn.running_mean.clone(), bn.running_var.clone(), bn.weight.grad


@pytest.mark.slow
def test_global_batchnorm_on_two_ranks_is_batchnorm_of_the_whole_batch():
    torch.manual_seed(1)
    x = torch.randn(7, 3, 2, 2)  # 4 + 3 rows
    (y0, g0, m0, v0, w0), (y1, g1, m1, v1, w1) = run_ranks(_bn_rank, x, world_size=2, timeout_s=120)
    torch.manual_seed(0)
    ref = torch.nn.BatchNorm2d(3)
    with torch.no_grad():
        ref.weight.uniform_()
        ref.bias.uniform_()
    xr = x.clone().requires_grad_(True)
    y = ref(xr)
    weights = torch.cat([torch.arange(48).reshape(4, 3, 2, 2), torch.arange(36).reshape(3, 3, 2, 2)])
    (y * weights).sum().backward()
    torch.testing.assert_close(torch.cat([y0, y1]), y.detach(), rtol=1e-5, atol=1e-6)
    # each rank's loss here is its own rows' term, so the input gradients are the one-process ones
    torch.testing.assert_close(torch.cat([g0, g1]), xr.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(m0, m1, rtol=0, atol=0)
    torch.testing.assert_close(v0, v1, rtol=0, atol=0)
    torch.testing.assert_close(m0, ref.running_mean)
    torch.testing.assert_close(v0, ref.running_var)
    torch.testing.assert_close(w0 + w1, ref.weight.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_a_failure_on_one_rank_stops_every_rank_with_one_error():
    t0 = time.perf_counter()
    with pytest.raises(RankFailed, match=r"rank 1 failed: .*images") as info:
        run_ranks(_train, "simgcd", 11, 1, world_size=2, timeout_s=120)
    assert info.value.rank == 1
    assert time.perf_counter() - t0 < 100  # rank 0, blocked in a collective, was stopped (no timeout wait)
