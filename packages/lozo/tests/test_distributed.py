"""Data-parallel LOZO on torch.distributed (gloo, 2 CPU processes under torchrun).

Each rank evaluates the two perturbed losses on its own half of the batch; one all-reduce of two scalars per step
makes every rank apply the same update. Checked against a single-process run on the concatenated batch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

from iclr25_lozo import LOZO

STEPS = 7
SKIP_STEP = 3  # rank 1 returns +inf here: the averaged difference is non-finite, so every rank skips

WORKER = (
    textwrap.dedent(
        """
    import sys
    import torch
    import torch.distributed as dist
    from torch import nn
    from iclr25_lozo import LOZO, MeZO

    out = sys.argv[1]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    result = {}
    for kind in ("lozo", "mezo", "bad-seed"):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3)).double()
        gen = torch.Generator().manual_seed(1)
        x = torch.randn(16, 6, generator=gen, dtype=torch.float64)
        y = torch.randn(16, 3, generator=gen, dtype=torch.float64)
        shard = slice(rank * 16 // world, (rank + 1) * 16 // world)
        try:
            if kind == "mezo":
                opt = MeZO(model, lr=0.05, eps=1e-3, seed=5, data_parallel=True)
            else:
                seed = 5 + (rank if kind == "bad-seed" else 0)
                opt = LOZO(model, lr=0.05, eps=1e-3, rank=2, interval=3, momentum=0.9, seed=seed, data_parallel=True)
        except ValueError as exc:
            result[kind] = {"error": str(exc)}
            continue
        losses = []
        sent = []  # bytes of every all_reduce during the steps (not the replica check at construction)
        real_all_reduce = dist.all_reduce
        def counting_all_reduce(tensor, *a, **k):
            sent.append(tensor.numel() * tensor.element_size())
            return real_all_reduce(tensor, *a, **k)
        dist.all_reduce = counting_all_reduce
        for step in range(__STEPS__):
            def closure():
                if step == __SKIP__ and rank == 1:
                    return float("inf")
                return ((model(x[shard]) - y[shard]) ** 2).mean()
            losses.append(float(opt.step(closure)))
        dist.all_reduce = real_all_reduce
        state = {k: v.clone() for k, v in model.state_dict().items()}
        result[kind] = {"state": state, "skipped": opt.skipped_steps, "losses": losses, "sent": sent}
    torch.save(result, f"{out}/rank{rank}.pt")
    dist.barrier()  # every rank has saved before any tears down (torch 2.4's gloo hangs in teardown otherwise)
    dist.destroy_process_group()
    """
    )
    .replace("__STEPS__", str(STEPS))
    .replace("__SKIP__", str(SKIP_STEP))
)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """One torchrun launch (2 gloo processes) runs every case; each rank saves its results."""
    tmp_path = tmp_path_factory.mktemp("torchrun")
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    proc = subprocess.run(
        [*cmd, str(script), str(tmp_path)], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]


def _single_process(kind: str) -> tuple[dict, int]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3)).double()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(16, 6, generator=gen, dtype=torch.float64)
    y = torch.randn(16, 3, generator=gen, dtype=torch.float64)
    if kind == "lozo":
        opt = LOZO(model, lr=0.05, eps=1e-3, rank=2, interval=3, momentum=0.9, seed=5)
    else:
        from iclr25_lozo import MeZO

        opt = MeZO(model, lr=0.05, eps=1e-3, seed=5)
    for step in range(STEPS):

        def closure(step: int = step) -> object:
            if step == SKIP_STEP:
                return float("inf")
            return ((model(x) - y) ** 2).mean()

        opt.step(closure)
    return model.state_dict(), opt.skipped_steps


@pytest.mark.parametrize("kind", ["lozo", "mezo"])
def test_two_ranks_stay_identical_and_equal_the_single_process_run_on_the_concatenated_batch(
    ranks: list[dict], kind: str
) -> None:
    r0, r1 = ranks[0][kind], ranks[1][kind]
    reference, skipped = _single_process(kind)
    assert r0["skipped"] == r1["skipped"] == skipped == 1
    for name, ref in reference.items():
        a, b = r0["state"][name], r1["state"][name]
        assert torch.equal(a, b), f"replicas diverged in {name}"
        # mean of the two half-batch means vs the full-batch mean: equal up to float64 rounding
        torch.testing.assert_close(a, ref, rtol=1e-12, atol=1e-13)
    assert r0["losses"] == r1["losses"]
    assert all(torch.isfinite(torch.tensor(r0["losses"][:SKIP_STEP])))


@pytest.mark.parametrize("kind", ["lozo", "mezo"])
def test_each_step_all_reduces_two_float64_losses_and_nothing_else(ranks: list[dict], kind: str) -> None:
    for rank in ranks:
        assert (
            rank[kind]["sent"] == [16] * STEPS
        )  # one all-reduce of 2 x 8 bytes per step, skipped step included


def test_ranks_with_different_seeds_refuse_to_start(ranks: list[dict]) -> None:
    for rank in ranks:
        assert "ranks disagree on seed" in rank["bad-seed"]["error"]


def test_data_parallel_without_an_initialised_process_group_fails_loudly() -> None:
    model = nn.Linear(3, 2)
    with pytest.raises(RuntimeError, match="torch.distributed initialised"):
        LOZO(model, lr=0.1, data_parallel=True)
    with pytest.raises(TypeError, match="data_parallel must be True or False"):
        LOZO(model, lr=0.1, data_parallel="yes")  # type: ignore[arg-type]
