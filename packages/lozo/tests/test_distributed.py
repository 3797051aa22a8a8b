"""Data-parallel LOZO on torch.distributed.

Each rank evaluates the two perturbed losses on its own half of the batch; one all-reduce of two scalars per step
makes every rank apply the same update. Checked against a single-process run on the concatenated batch:

- fast tier: two ranks as two threads of this process, through a stand-in for torch.distributed's collectives
  (the optimizer's side of the protocol: what it all-reduces, how often, and what it does with the result), and a
  real 1-process gloo group (the calls into torch.distributed itself);
- slow tier: the same cases on 2 real gloo processes under torchrun (~40-60 s of process start-up on a loaded
  2-core machine, most of the fast tier's time).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

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


class _TwoThreadRanks:
    """torch.distributed's collectives for 2 ranks that are 2 threads: all_reduce sums (or min/max) the ranks'
    tensors in rank order, like gloo, and records the bytes each rank sent."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2, timeout=60)
        self.slots: list[torch.Tensor | None] = [None, None]
        self.sent: dict[int, list[int]] = {0: [], 1: []}
        self.local = threading.local()

    def all_reduce(self, tensor, op=None, group=None, async_op=False):
        import torch.distributed as dist

        rank = self.local.rank
        self.sent[rank].append(tensor.numel() * tensor.element_size())
        self.slots[rank] = tensor.clone()
        self.barrier.wait()
        a, b = self.slots
        if op is None or op == dist.ReduceOp.SUM:
            result = a + b
        elif op == dist.ReduceOp.MIN:
            result = torch.minimum(a, b)
        elif op == dist.ReduceOp.MAX:
            result = torch.maximum(a, b)
        else:
            raise AssertionError(f"unexpected reduce op {op}")
        self.barrier.wait()  # both ranks have read the slots before either overwrites its own
        tensor.copy_(result)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import torch.distributed as dist

        monkeypatch.setattr(dist, "is_available", lambda: True)
        monkeypatch.setattr(dist, "is_initialized", lambda: True)
        monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
        monkeypatch.setattr(dist, "get_rank", lambda group=None: self.local.rank)
        monkeypatch.setattr(dist, "get_backend", lambda group=None: "gloo")
        monkeypatch.setattr(dist, "all_reduce", self.all_reduce)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3)).double()


def _rank_run(kind: str, rank: int, world: int, model: nn.Module) -> dict:
    """The worker's case on one rank (shard = this rank's slice of the 16 rows)."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(16, 6, generator=gen, dtype=torch.float64)
    y = torch.randn(16, 3, generator=gen, dtype=torch.float64)
    shard = slice(rank * 16 // world, (rank + 1) * 16 // world)
    if kind == "mezo":
        from iclr25_lozo import MeZO

        opt = MeZO(model, lr=0.05, eps=1e-3, seed=5, data_parallel=True)
    else:
        seed = 5 + (rank if kind == "bad-seed" else 0)
        opt = LOZO(model, lr=0.05, eps=1e-3, rank=2, interval=3, momentum=0.9, seed=seed, data_parallel=True)
    losses = []
    for step in range(STEPS):

        def closure(step: int = step) -> object:
            if step == SKIP_STEP and rank == 1:
                return float("inf")
            return ((model(x[shard]) - y[shard]) ** 2).mean()

        losses.append(float(opt.step(closure)))
    return {"state": model.state_dict(), "skipped": opt.skipped_steps, "losses": losses}


def _two_thread_ranks(kind: str, monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict | BaseException], dict]:
    comm = _TwoThreadRanks()
    comm.install(monkeypatch)
    results: list[dict | BaseException] = [{}, {}]
    models = [_model(), _model()]  # built here: torch's global RNG is shared by the threads

    def run(rank: int) -> None:
        comm.local.rank = rank
        torch.set_num_threads(1)
        try:
            results[rank] = _rank_run(kind, rank, 2, models[rank])
        except BaseException as exc:
            results[rank] = exc
            comm.barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return results, comm.sent


@pytest.mark.parametrize("kind", ["lozo", "mezo"])
def test_two_thread_ranks_all_reduce_16_bytes_a_step_and_equal_the_single_process_run(kind, monkeypatch):
    """Fast-tier stand-in for the torchrun test below: the same 7 steps (a skipped one included) on two ranks."""
    results, sent = _two_thread_ranks(kind, monkeypatch)
    r0, r1 = results
    assert isinstance(r0, dict) and isinstance(r1, dict), results
    reference, skipped = _single_process(kind)
    assert r0["skipped"] == r1["skipped"] == skipped == 1
    for name, ref in reference.items():
        assert torch.equal(r0["state"][name], r1["state"][name]), f"replicas diverged in {name}"
        torch.testing.assert_close(r0["state"][name], ref, rtol=1e-12, atol=1e-13)
    assert r0["losses"] == r1["losses"]
    # the replica check at construction (min and max of 4 float64), then one all-reduce of 2 float64 per step
    assert sent == {0: [32, 32] + [16] * STEPS, 1: [32, 32] + [16] * STEPS}


def test_two_thread_ranks_with_different_seeds_refuse_to_start(monkeypatch):
    import threading

    results, _ = _two_thread_ranks("bad-seed", monkeypatch)
    # every rank stops; at least one says why (the other may instead see the stand-in barrier broken by the first
    # rank's exit, depending on which thread reaches the check first)
    assert all(isinstance(r, ValueError | threading.BrokenBarrierError) for r in results), results
    assert any(isinstance(r, ValueError) and "ranks disagree on seed" in str(r) for r in results), results


def test_a_real_one_process_gloo_group_runs_the_data_parallel_path(tmp_path):
    """The calls into torch.distributed itself (backend, all-reduce, world size) on a real gloo group of 1."""
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("gloo", init_method=(tmp_path / "store").as_uri(), rank=0, world_size=1)
    try:
        sent: list[int] = []
        real = dist.all_reduce

        def counting(tensor, *a, **k):
            sent.append(tensor.numel() * tensor.element_size())
            return real(tensor, *a, **k)

        dist.all_reduce = counting
        try:
            parallel = _rank_run("lozo", 0, 1, _model())
        finally:
            dist.all_reduce = real
    finally:
        dist.destroy_process_group()
    reference, skipped = _single_process("lozo", skip=False)
    assert parallel["skipped"] == skipped == 0
    for name, ref in reference.items():
        assert torch.equal(parallel["state"][name], ref), name  # dividing a sum by 1 is exact
    assert (
        sent == [32, 32] + [16] * STEPS
    )  # the replica check (min and max of 4 float64), then 16 bytes a step


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


def _single_process(kind: str, skip: bool = True) -> tuple[dict, int]:
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
            if skip and step == SKIP_STEP:
                return float("inf")
            return ((model(x) - y) ** 2).mean()

        opt.step(closure)
    return model.state_dict(), opt.skipped_steps


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["lozo", "mezo"])
def test_each_step_all_reduces_two_float64_losses_and_nothing_else(ranks: list[dict], kind: str) -> None:
    for rank in ranks:
        assert (
            rank[kind]["sent"] == [16] * STEPS
        )  # one all-reduce of 2 x 8 bytes per step, skipped step included


@pytest.mark.slow
def test_ranks_with_different_seeds_refuse_to_start(ranks: list[dict]) -> None:
    for rank in ranks:
        assert "ranks disagree on seed" in rank["bad-seed"]["error"]


def test_data_parallel_without_an_initialised_process_group_fails_loudly() -> None:
    model = nn.Linear(3, 2)
    with pytest.raises(RuntimeError, match="torch.distributed initialised"):
        LOZO(model, lr=0.1, data_parallel=True)
    with pytest.raises(TypeError, match="data_parallel must be True or False"):
        LOZO(model, lr=0.1, data_parallel="yes")  # type: ignore[arg-type]
