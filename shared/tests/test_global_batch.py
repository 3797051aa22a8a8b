"""iclr25_shared.global_batch: 2 gloo ranks computing a batch-coupled loss equal one process on the whole batch.

The loss below couples every row with every other (a softmax over all pairwise similarities, as in InfoNCE) and goes
through BatchNorm, so a rank that saw only its own rows would get a different loss and gradient: the comparison can
fail. Tolerances: float32 summation order only (half-batch matmuls, statistics summed over two ranks).
"""

import pytest
import torch

from iclr25_shared.global_batch import (
    SENT,
    DataParallel,
    GlobalBatchNorm,
    gather_rows,
    global_batchnorm,
    local_rows,
)
from iclr25_shared.testing import run_ranks


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 3))


def _coupled_loss(z: torch.Tensor) -> torch.Tensor:
    """InfoNCE-like: every row's log-softmax over its similarities to all rows (itself masked)."""
    sim = z @ z.T
    sim = sim.masked_fill(torch.eye(len(z), dtype=torch.bool), -1e9)
    return -torch.log_softmax(sim, dim=1).diagonal(offset=1).mean()


def _step(x: torch.Tensor):
    """One SGD step of the global-batch pattern; returns the loss, the parameters after the step and the bytes sent."""
    model = global_batchnorm(_model())
    dp = DataParallel([model])
    rows, sizes = local_rows(len(x))
    SENT["bytes"] = 0
    loss = dp(lambda: _coupled_loss(gather_rows(model(x[rows]), sizes)))
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.5 * p.grad
    return float(loss.detach()), {k: v.detach().clone() for k, v in model.state_dict().items()}, SENT["bytes"]


def test_local_rows_cover_the_batch_in_rank_order_in_one_process():
    rows, sizes = local_rows(7)
    assert rows == slice(0, 7) and sizes == [7]


def test_one_process_is_plain_torch():
    torch.manual_seed(1)
    x = torch.randn(9, 5)
    loss, state, sent = _step(x)
    ref = _model()
    want = _coupled_loss(ref(x))
    want.backward()
    with torch.no_grad():
        for p in ref.parameters():
            p -= 0.5 * p.grad
    assert loss == float(want.detach()) and sent == 0
    for k, v in ref.state_dict().items():
        torch.testing.assert_close(state[k], v, rtol=0, atol=0, msg=k)
    assert isinstance(global_batchnorm(_model())[1], GlobalBatchNorm)


@pytest.mark.slow
def test_two_ranks_equal_one_process_on_the_concatenated_batch():
    torch.manual_seed(1)
    x = torch.randn(9, 5)  # uneven blocks: 5 + 4 rows
    want_loss, want_state, _ = _step(x)
    (l0, s0, b0), (l1, s1, b1) = run_ranks(_step, x, world_size=2, timeout_s=180)
    assert l0 == l1 and all(torch.equal(s0[k], s1[k]) for k in s0)  # replicas stay identical
    assert l0 == pytest.approx(want_loss, rel=1e-5)
    for k, want in want_state.items():
        torch.testing.assert_close(s0[k], want, rtol=1e-5, atol=1e-6, msg=k)
    # the gather (5 rows padded, 3 floats) and the two BatchNorm all-reduces were counted, forward and backward
    assert b0 > 0 and b1 > 0
    # a rank that had used only its own rows would have a visibly different loss
    own = _coupled_loss(_model()(x[:5])).detach()
    assert abs(float(own) - want_loss) > 1e-3
