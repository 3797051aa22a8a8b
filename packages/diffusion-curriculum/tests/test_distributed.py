"""Data-parallel use: with torch.distributed (2 CPU processes, gloo) every rank stays in the same stage."""

import socket

import pytest
import torch
import torch.multiprocessing as mp

from iclr25_diffusion_curriculum import CurriculumSampler, PatiencePacer, TimestepClusters


def _losses(rank: int) -> list[float]:
    g = torch.Generator().manual_seed(100 + rank)  # each rank sees different local losses
    return (
        torch.rand(60, generator=g, dtype=torch.float64) + torch.linspace(2, 1, 60, dtype=torch.float64)
    ).tolist()


def _worker(rank: int, world: int, port: int, queue) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        s = CurriculumSampler(
            TimestepClusters(100, 6), PatiencePacer(patience=3, max_steps_per_stage=12, ema=0.5)
        )
        stages = [s.update(torch.tensor(x)) for x in _losses(rank)]
        queue.put((rank, stages))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_ranks_advance_together_on_the_mean_loss():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, 2, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=240) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert results[0] == results[1]
    # and equal to one pacer fed the mean loss (the reference without distributed)
    ref = CurriculumSampler(
        TimestepClusters(100, 6), PatiencePacer(patience=3, max_steps_per_stage=12, ema=0.5)
    )
    mean = [(a + b) / 2 for a, b in zip(_losses(0), _losses(1))]
    assert results[0] == [ref.update(x) for x in mean]
    # without syncing the two ranks would have diverged (so this test can fail)
    local = [
        CurriculumSampler(
            TimestepClusters(100, 6),
            PatiencePacer(patience=3, max_steps_per_stage=12, ema=0.5),
            sync_distributed=False,
        )
        for _ in range(2)
    ]
    assert [local[0].update(x) for x in _losses(0)] != [local[1].update(x) for x in _losses(1)]
