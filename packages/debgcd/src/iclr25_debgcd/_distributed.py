"""Data-parallel training over ``torch.distributed`` (DDP; torchrun / accelerate launch), issue 39.

The global batch of a step (sampler draw and both augmented views) is drawn exactly as in one process (the same
generator on every rank); rank ``r`` runs the forward pass on its contiguous block of rows of each view; the
outputs are all-gathered *with gradient* (``torch.distributed.nn.functional.all_gather``) and every rank computes
the loss of the whole global batch, so the InfoNCE and SupCon negatives, the self-distillation targets and the
mean-entropy regulariser span every rank's rows; BatchNorm layers normalise with the statistics of the global batch
(:class:`GlobalBatchNorm`, differentiable all-reduces): the 2-rank loss is the one-process loss on the
concatenated batch. Each rank's backward gives ``world ×`` its rows' share of the
gradient (the gather's backward sums the identical losses of all ranks); DDP's mean over ranks then leaves the
one-process gradient. Differences to one process are summation order only (a half-batch matmul, two partial
gradients summed by the all-reduce).

The machinery is the core's :mod:`iclr25_shared.global_batch` (shared with the other global-batch packages).
"""

from iclr25_shared.global_batch import (
    SENT,
    DataParallel,
    GlobalBatchNorm,
    gather_rows,
    global_batchnorm,
    local_rows,
    rank_world,
)

__all__ = [
    "SENT",
    "DataParallel",
    "GlobalBatchNorm",
    "gather_rows",
    "global_batchnorm",
    "local_rows",
    "rank_world",
]
