"""Data-parallel SiMHand pre-training and fine-tuning (issue 39): 2 gloo ranks on CPU equal one process.

Each rank encodes its block of rows of both views; the projections are gathered with gradient, so the NT-Xent
negatives and the pose-distance weights (W-) span the global batch; BatchNorm uses the global batch's statistics
(GlobalBatchNorm). The sampler, the mined partners and the similarity views are drawn for the global batch from
the run's seed on every rank, so the pixels each rank sees are the one-process ones. Tolerance: rel 1e-4 on every
step's loss and 1e-4 absolute on every parameter after 4 Adam steps (+ 3 fine-tuning steps): the differences are
summation order only (half-batch convolutions, BatchNorm statistics summed over two ranks, the two partial
gradients summed by DDP's all-reduce), float32 round-off of ~1e-7 that Adam's normalised steps carry.
"""

import time

import numpy as np
import pytest
import torch

from iclr25_shared.testing import RankFailed, run_ranks
from iclr25_simhand._render import HandBatch
from iclr25_simhand._training import finetune_encoder, pretrain_encoder


def _pool(n: int = 24, size: int = 16) -> HandBatch:
    rng = np.random.default_rng(0)
    kp2 = (rng.random((n, 21, 2)) * (size - 1)).astype(np.float32)
    return HandBatch(
        images=rng.random((n, 3, size, size)).astype(np.float32),
        keypoints2d=kp2,
        keypoints3d=(rng.standard_normal((n, 21, 3)) * 30).astype(np.float32),
        angles=np.zeros((0,), np.float32),
        background=np.full(n, -1),
        focal=20.0,
    )


def _train(method: str, batch: int, broken_rank: int = -1):
    """4 pre-training steps of ``method`` and 3 fine-tuning steps (width-4 SmallConvNet: BatchNorm2d); returns the
    loss curve and the state. ``broken_rank`` asks for a batch larger than the pool there (refused while the other
    rank waits in DDP's set-up collective)."""
    import torch.distributed as dist

    pool = _pool()
    if dist.is_initialized() and dist.get_rank() == broken_rank:
        batch = 100
    model, losses = pretrain_encoder(
        method,
        pool,
        steps=4,
        batch_size=batch,
        lr=1e-3,
        temperature=0.5,
        width=4,
        seed=3,
        device=torch.device("cpu"),
    )
    finetune_encoder(
        model, pool, fraction=1.0, steps=3, batch_size=batch, lr=1e-3, seed=3, device=torch.device("cpu")
    )
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.slow
@pytest.mark.parametrize("method", ["simw", "peclr"])
def test_two_ranks_equal_one_process_on_the_concatenated_batch(method):
    # a global batch of 9 (5 + 4 rows of each view): uneven blocks are gathered too
    want_losses, want_state = _train(method, 9)
    (l0, s0), (l1, s1) = run_ranks(_train, method, 9, world_size=2, timeout_s=300)
    assert l0 == l1  # every rank computes the same global loss
    assert all(torch.equal(s0[k], s1[k]) for k in s0)  # replicas (and BatchNorm running stats) bit-identical
    np.testing.assert_allclose(l0, want_losses, rtol=1e-4)
    for k, want in want_state.items():
        torch.testing.assert_close(s0[k], want, rtol=0, atol=1e-4, msg=k)
    # the state compared moved far beyond the tolerance during training (the comparison can fail)
    var = [k for k in want_state if k.endswith("running_var")]
    assert var and max((want_state[k] - 1).abs().max() for k in var) > 1e-2


@pytest.mark.slow
def test_a_failure_on_one_rank_stops_every_rank_with_one_error():
    t0 = time.perf_counter()
    with pytest.raises(RankFailed, match=r"rank 1 failed: .*batch_size must be <= the pool size 24") as info:
        run_ranks(_train, "simclr", 8, 1, world_size=2, timeout_s=120)
    assert info.value.rank == 1
    assert time.perf_counter() - t0 < 100  # rank 0, blocked in a collective, was stopped (no timeout wait)
