"""The shared bench protocol on synthetic timings: interleaving order, ratios and their intervals."""

from __future__ import annotations

import numpy as np
import pytest

from iclr25_shared.bench import BenchRun, interleaved, rotation
from iclr25_shared.device import count_memcpy, no_host_sync, require_cuda


class FakeClock:
    """Each arm's call advances the clock by its own cost; the drift makes later rounds slower for every arm."""

    def __init__(self, cost: dict[str, float], drift: float = 0.0) -> None:
        self.cost, self.drift, self.now, self.calls = cost, drift, 0.0, []

    def arm(self, name: str):
        def call() -> None:
            self.calls.append(name)
            self.now += self.cost[name] * (1 + self.drift * len(self.calls))

        return call

    def __call__(self) -> float:
        return self.now


def test_rounds_rotate_the_order_so_each_arm_leads_equally_often():
    assert rotation(["a", "b"], 0) == ["a", "b"] and rotation(["a", "b"], 1) == ["b", "a"]
    clock = FakeClock({"a": 1.0, "b": 2.0, "c": 3.0})
    run = interleaved({k: clock.arm(k) for k in "abc"}, repeats=6, warmup=2, clock=clock)
    assert clock.calls[:6] == list("abcabc")  # warm-up, untimed
    assert run.order == [list("abc"), list("bca"), list("cab")] * 2
    assert clock.calls[6:] == [name for rnd in run.order for name in rnd]
    firsts = [rnd[0] for rnd in run.order]
    assert {k: firsts.count(k) for k in "abc"} == {"a": 2, "b": 2, "c": 2}
    assert {k: len(v) for k, v in run.times.items()} == {"a": 6, "b": 6, "c": 6}


def test_the_ratio_is_exact_on_constant_costs_and_paired_under_drift():
    clock = FakeClock({"fast": 1.0, "slow": 3.0})
    run = interleaved({"fast": clock.arm("fast"), "slow": clock.arm("slow")}, repeats=5, clock=clock)
    est = run.ratio("fast", "slow")
    assert (
        est.value == pytest.approx(1 / 3)
        and est.low == pytest.approx(1 / 3)
        and est.high == pytest.approx(1 / 3)
    )
    assert run.speedup("fast", "slow").value == pytest.approx(3.0)
    # a machine slowing down 5 % per call: pairing within a round keeps the ratio near 1/3 (the unpaired ratio of
    # medians would too here, but each round's ratio stays within the drift of one call)
    clock = FakeClock({"fast": 1.0, "slow": 3.0}, drift=0.05)
    run = interleaved({"fast": clock.arm("fast"), "slow": clock.arm("slow")}, repeats=9, clock=clock)
    est = run.ratio("fast", "slow")
    assert est.low <= 1 / 3 * 1.06 and est.high >= 1 / 3 * 0.94 and est.low <= est.value <= est.high


def test_the_interval_is_the_bootstrap_of_the_median_over_rounds():
    times = {"a": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], "b": [2.0, 2.2, 1.8, 2.0, 2.6, 2.0, 1.9]}
    run = BenchRun(times, order=[])
    est = run.speedup("a", "b", num_resamples=4000, seed=1)
    assert est.value == pytest.approx(2.0)
    # brute-force reference of the same percentile bootstrap
    rng = np.random.default_rng(1)
    ratios = np.asarray(times["b"])
    boot = np.median(ratios[rng.integers(0, 7, size=(4000, 7))], axis=1)
    assert (est.low, est.high) == pytest.approx((np.quantile(boot, 0.025), np.quantile(boot, 0.975)))
    assert est.n == 7 and est.low <= 2.0 <= est.high and est.high > est.low


def test_rows_report_throughput_speedup_and_what_is_held_equal():
    run = BenchRun({"method": [0.5, 0.5], "baseline": [1.0, 1.0]}, order=[])
    rows = run.rows("baseline", units={"method": 100, "baseline": 100}, unit="tokens", held_equal="tokens")
    assert rows[0] == {
        "arm": "method",
        "median_s": 0.5,
        "tokens_per_s": 200.0,
        "speedup_vs_baseline": 2.0,
        "interval": "[2, 2]",
        "rounds": 2,
        "held_equal": "tokens",
    }
    record = run.as_dict()
    assert record["median_s"] == {"method": 0.5, "baseline": 1.0} and record["times_s"]["method"] == [
        0.5,
        0.5,
    ]


def test_setup_runs_untimed_before_each_call_and_threads_are_restored():
    import torch

    before = torch.get_num_threads()
    clock = FakeClock({"a": 1.0})
    seen = []

    def setup() -> None:
        seen.append(torch.get_num_threads())
        clock.now += 100.0  # setup time must not count

    run = interleaved({"a": clock.arm("a")}, repeats=3, warmup=1, setup={"a": setup}, clock=clock, threads=1)
    assert run.times["a"] == [1.0, 1.0, 1.0] and seen == [1, 1, 1, 1]
    assert torch.get_num_threads() == before
    assert run.env["threads"] == 1 and run.env["repeats"] == 3 and "load_average_1m" in run.env


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="at least one arm"):
        interleaved({})
    with pytest.raises(ValueError, match="repeats >= 1"):
        interleaved({"a": lambda: None}, repeats=0)
    with pytest.raises(ValueError, match="do not exist"):
        interleaved({"a": lambda: None}, setup={"b": lambda: None})
    with pytest.raises(KeyError, match="no arm 'c'"):
        BenchRun({"a": [1.0]}, order=[]).median("c")
    with pytest.raises(ValueError, match="non-positive"):
        interleaved({"a": lambda: None}, clock=lambda: 0.0, repeats=1)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the error without CUDA")
def test_cuda_helpers_refuse_to_run_without_a_gpu():
    for call in (require_cuda, lambda: no_host_sync().__enter__(), lambda: count_memcpy(lambda: None)):
        with pytest.raises(RuntimeError, match="no CUDA device is visible"):
            call()


@pytest.mark.gpu
def test_no_host_sync_catches_an_item_and_count_memcpy_sees_copies():
    import torch

    device = require_cuda()
    x = torch.ones(1000, device=device)
    with no_host_sync():
        y = (x * 2).sum()  # stays on the device
    with pytest.raises(RuntimeError), no_host_sync():
        (x * 2).sum().item()
    assert float(y) == 2000.0
    counts = count_memcpy(lambda: [torch.ones(10).to(device).cpu() for _ in range(3)])
    assert counts["HtoD"] >= 3 and counts["DtoH"] >= 3
    assert count_memcpy(lambda: (x * 2).sum()) == {"HtoD": 0, "DtoH": 0, "DtoD": 0}
