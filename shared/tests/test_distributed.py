"""iclr25_shared.distributed and testing.run_ranks: 2 real gloo processes on CPU against the one-process result."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
import torch

from iclr25_shared import distributed
from iclr25_shared.cli import CommonOptions, Result, run
from iclr25_shared.distributed import World, derive_seed, shard
from iclr25_shared.testing import RankFailed, run_ranks, torchrun_argv

# -- one process ------------------------------------------------------------------------------------------------


def test_world_reads_the_launchers_environment(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert distributed.world() == World(0, 1, 0)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    here = distributed.world()
    assert (here.rank, here.world_size, here.local_rank, here.is_main, here.is_distributed) == (
        3,
        4,
        1,
        False,
        True,
    )
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(ValueError, match="RANK=4 and WORLD_SIZE=4"):
        distributed.world()
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ValueError, match="RANK must be an integer"):
        distributed.world()


def test_one_process_is_rank_0_of_1_and_every_collective_is_the_identity(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert distributed.init_process_group() == World(0, 1, 0)
    assert not torch.distributed.is_initialized()
    assert distributed.farm([3, 1, 2], lambda j: j * j) == [9, 1, 4]
    assert distributed.all_reduce_sum({"b": 2, "a": 1.5}) == {"a": 1.5, "b": 2.0}
    assert distributed.gather_objects({"x": 1}) == [{"x": 1}]
    assert distributed.broadcast_object("s") == "s"
    distributed.check_same(7, "seed")


def test_shards_partition_the_jobs_whatever_the_number_of_ranks():
    for n in (0, 1, 5, 12):
        for size in (1, 2, 3, 7):
            parts = [list(shard(n, World(r, size, r))) for r in range(size)]
            assert sorted(i for p in parts for i in p) == list(range(n))
    with pytest.raises(ValueError, match=">= 0"):
        shard(-1)


def test_derived_seeds_are_deterministic_distinct_and_checked():
    seeds = {derive_seed(0, k) for k in range(1000)}
    assert len(seeds) == 1000  # no collisions among 1000 jobs (2^32 space: expected collisions ~1e-4)
    assert derive_seed(5, 1) == derive_seed(5, 1) != derive_seed(6, 1)
    assert derive_seed(5, 1, 2) != derive_seed(5, 2, 1)
    assert all(0 <= s < 2**32 for s in seeds)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="non-negative ints"):
            derive_seed(bad)


def test_the_timeout_comes_from_the_argument_or_the_environment(monkeypatch):
    monkeypatch.setenv("ICLR25_DIST_TIMEOUT", "12")
    assert distributed._timeout(None).total_seconds() == 12
    assert distributed._timeout(3).total_seconds() == 3
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        distributed._timeout(0)


# -- two processes (module-level functions: run_ranks loads this file by path in each rank) ------------------------


def _job(j: int) -> tuple[int, float]:
    gen = torch.Generator().manual_seed(derive_seed(11, j))
    return j, float(torch.randn(3, generator=gen).sum())


def _one_rank_fails() -> None:
    if distributed.world().rank == 1:
        raise ArithmeticError("rank one broke")
    distributed.gather_objects("waits for rank 1 forever")


def test_a_failure_on_one_rank_stops_every_rank_with_its_error_and_no_hang():
    start = time.monotonic()
    with pytest.raises(RankFailed, match="rank 1 failed: ArithmeticError: rank one broke") as info:
        run_ranks(_one_rank_fails, timeout_s=100)
    assert info.value.rank == 1
    assert time.monotonic() - start < 60  # rank 0, blocked in a collective, was stopped, not waited for


def _sleeps() -> None:
    time.sleep(60)


@pytest.mark.slow
def test_ranks_past_the_deadline_are_killed():
    with pytest.raises(TimeoutError, match="did not finish within 3"):
        run_ranks(_sleeps, timeout_s=3)


def _ddp_step() -> dict:
    """One DDP step on this rank's half of a fixed batch; the counter sees the bucket it all-reduced."""
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3, dtype=torch.float64)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    counter = distributed.ByteCounter()
    ddp.register_comm_hook(None, counter.hook)
    x = torch.arange(40, dtype=torch.float64).reshape(8, 5) / 10
    ddp(x[list(shard(8))]).square().mean().backward()
    return {
        "grads": [p.grad.clone() for p in model.parameters()],
        "bytes": counter.bytes,
        "calls": counter.calls,
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Cfg(CommonOptions):
    pass


def _command(cfg: _Cfg, ctx) -> Result:
    assert str(ctx.join_group(seed=cfg.seed)) == "cpu"
    total = distributed.all_reduce_sum({"rank": ctx.world.rank})
    if ctx.writes:
        ctx.save_text("written_by.txt", str(ctx.world.rank))
    return Result(metrics={"ranks_sum": total["rank"], "writes": ctx.writes})


def _on_each_rank(n_jobs: int, out: str) -> dict:
    """Every collective of the module on one pair of ranks (one spawn: each costs seconds of torch import)."""
    here = distributed.world()
    found: dict = {"world": dataclasses.astuple(here)}
    found["farm"] = distributed.farm(list(range(n_jobs)), _job)
    found["sums"] = distributed.all_reduce_sum({"rank": here.rank, "one": 1.0})
    found["means"] = distributed.all_reduce_mean({"rank": here.rank})
    try:
        distributed.check_same(100 + here.rank, "seed")
    except ValueError as exc:
        found["disagree"] = str(exc)
    found["ddp"] = _ddp_step()
    from iclr25_shared.cli import RunContext

    try:
        RunContext("iclr25-toy go", _Cfg(seed=here.rank)).join_group(seed=here.rank)
    except ValueError as exc:
        found["join_disagree"] = str(exc)
    found["cli"] = run("iclr25-toy", {"go": (_Cfg, _command)}, ["go", "--out", out], default="go")
    return found


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> tuple[list[dict], Path]:
    out = tmp_path_factory.mktemp("ranks") / "res"
    return run_ranks(_on_each_rank, 7, str(out)), out


def test_a_job_farm_on_two_ranks_is_bit_identical_to_one_process(two_ranks):
    single = [_job(j) for j in range(7)]
    ranks, _ = two_ranks
    assert [r["world"] for r in ranks] == [(0, 2, 0), (1, 2, 1)]
    for r in ranks:
        assert r["farm"] == single  # every rank has every result, in job order, bit for bit
        assert r["sums"] == {"one": 2.0, "rank": 1.0}
        assert r["means"] == {"rank": 0.5}


def test_ranks_launched_with_different_seeds_refuse_to_start(two_ranks):
    for r in two_ranks[0]:
        assert r["disagree"].startswith("ranks disagree on the seed (rank 0: 100, rank 1: 101)")
        assert r["join_disagree"].startswith("ranks disagree on the --seed (rank 0: 0, rank 1: 1)")


def test_ddp_gradients_on_two_ranks_equal_the_full_batch_and_the_counter_sees_every_byte(two_ranks):
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3, dtype=torch.float64)
    x = torch.arange(40, dtype=torch.float64).reshape(8, 5) / 10
    model(x).square().mean().backward()
    n_params = sum(p.numel() for p in model.parameters())
    for r in two_ranks[0]:
        for got, want in zip(r["ddp"]["grads"], (p.grad for p in model.parameters()), strict=True):
            # the mean of two half-batch means is the full-batch mean; only the summation order differs
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
        assert r["ddp"]["bytes"] == n_params * 8 and r["ddp"]["calls"] == 1


def test_under_two_ranks_only_rank_0_writes_and_commits(two_ranks):
    ranks, out = two_ranks
    assert [r["cli"] for r in ranks] == [0, 0]
    assert (out / "written_by.txt").read_text() == "0"
    written = json.loads((out / "results.json").read_text())
    assert written["metrics"] == {"ranks_sum": 1.0, "writes": True}
    assert written["device"] == "cpu (rank 0 of 2)" and written["wall_s"] > 0
    assert len(written["git"]["commit"]) == 40 and written["machine"]["cpus"] >= 1
    assert [p.name for p in out.parent.iterdir()] == ["res"]  # no folder of rank 1's


def test_failures_name_their_rank(monkeypatch, capsys):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")

    def boom(cfg, ctx):
        raise RuntimeError("bad step")

    assert run("iclr25-toy", {"go": (_Cfg, boom)}, ["go"], default="go") == 1
    assert "iclr25-toy go [rank 1/2]: failed: RuntimeError: bad step" in capsys.readouterr().err


def test_torchrun_argv_launches_the_module_on_n_local_processes():
    argv = torchrun_argv(2, "iclr25_x.cli", "train", "--steps", "3")
    assert argv[1:] == [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "iclr25_x.cli",
        "train",
        "--steps",
        "3",
    ]
    assert Path(argv[0]).name.startswith("python")
