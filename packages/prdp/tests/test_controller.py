"""The refinement controller: EMA, the decision rule on hand-made histories, state, resume, bad input."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from iclr25_prdp import Decision, RefinementController, ema, train_with_prdp


def controller(**kw):
    args = dict(initial_iterations=1, step=1, max_iterations=10, ema_window=1, plateau_window=3)
    args.update(kw)
    return RefinementController(**args)


def test_ema_matches_the_recurrence_and_pandas():
    rng = np.random.default_rng(0)
    values = rng.uniform(0.1, 2.0, 40)
    for window in (1, 3, 6, 8):
        alpha = 2 / (window + 1)
        expected = [values[0]]
        for v in values[1:]:
            expected.append(alpha * v + (1 - alpha) * expected[-1])
        np.testing.assert_allclose(ema(values, window), expected, rtol=1e-12)
        np.testing.assert_allclose(
            ema(values, window),
            pd.Series(values).ewm(span=window, adjust=False).mean().to_numpy(),
            rtol=1e-12,
        )


def test_no_decision_while_history_is_not_longer_than_the_window():
    ctl = controller(plateau_window=3)
    for _ in range(3):
        assert ctl.update(1.0) == Decision(1, False, False)
    assert ctl.update(1.0).refined  # 4th value: flat history, checkpoint inf -> refine


def test_steadily_improving_history_never_refines():
    ctl = controller(plateau_threshold=0.98)
    for t in range(60):
        decision = ctl.update(0.95**t)  # 5 % better every epoch: ratio over the window 0.9025 < 0.98
        assert not decision.refined
        assert not decision.stopped
    assert ctl.iterations == 1


def test_flat_history_after_improvement_refines_once_then_stops():
    ctl = controller(plateau_window=2)
    history = [1.0, 1.0, 1.0]  # plateau at 1.0, checkpoint inf -> refine at the 3rd value
    decisions = [ctl.update(v) for v in history]
    assert [d.refined for d in decisions] == [False, False, True]
    assert ctl.checkpoint == 1.0
    assert ctl.iterations == 2
    # improve by 50 % then plateau: refine once more, checkpoint moves to 0.5
    decisions = [ctl.update(v) for v in (0.5, 0.5)]
    assert [d.refined for d in decisions] == [False, True]
    assert ctl.checkpoint == 0.5
    assert ctl.iterations == 3
    # only 5 % better then flat: N_max reached, K stays
    decisions = [ctl.update(v) for v in (0.475, 0.475, 0.475)]
    assert [d.refined for d in decisions] == [False, False, False]
    assert [d.stopped for d in decisions] == [False, True, True]
    assert ctl.iterations == 3
    assert ctl.stopped
    assert ctl.checkpoint == 0.5


def test_diverging_metric_refines():
    ctl = controller(plateau_window=2)
    for v in (1.0, 1.0, 1.0):
        ctl.update(v)
    assert ctl.checkpoint == 1.0
    # a jump up passes the plateau test (ratio 1.5 > 0.98) and is worse than the checkpoint (c = 1.5 > 1): refine
    d = [ctl.update(v) for v in (1.5, 1.5)]
    assert d[0].refined
    assert ctl.checkpoint == 1.5
    assert ctl.iterations == 3
    assert d[1].stopped
    assert not d[1].refined


def test_ema_smoothing_enters_the_decision():
    # hand computation with ema_window=3 (alpha = 0.5), W = 2: history 1, 0.5, 0.5 -> ema 1, 0.75, 0.625
    ctl = controller(ema_window=3, plateau_window=2, plateau_threshold=0.85)
    ctl.update(1.0)
    ctl.update(0.5)
    assert not ctl.update(0.5).refined  # 0.625 / 0.75 = 0.833 < 0.85
    assert ctl.update(0.5).refined  # ema 0.5625: 0.5625 / 0.625 = 0.9 > 0.85
    assert ctl.checkpoint == pytest.approx(0.5625)


def test_iterations_are_monotone_and_capped():
    ctl = controller(step=4, max_iterations=9, plateau_window=1)
    ks = [ctl.update(v).iterations for v in (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)]  # diverging: refine each time
    assert ks == sorted(ks)
    assert max(ks) == 9
    assert ks[-1] == 9


def test_controllers_do_not_share_state_and_reset_restores_the_start():
    a, b = controller(plateau_window=2), controller(plateau_window=2)
    for v in (1.0, 1.0, 1.0):
        a.update(v)
    assert a.checkpoint == 1.0
    assert b.checkpoint == math.inf
    assert b.iterations == 1
    a.reset()
    assert a.history == []
    assert a.checkpoint == math.inf
    assert a.iterations == 1
    assert a.refinements == 0


def test_resume_from_state_dict_gives_the_same_decisions():
    metrics = [1.0, 0.9, 0.8, 0.8, 0.79, 0.5, 0.5, 0.49, 0.49, 0.49, 0.3, 0.3, 0.3]
    full = controller(plateau_window=2, ema_window=2)
    expected = [full.update(m) for m in metrics]
    first = controller(plateau_window=2, ema_window=2)
    got = [first.update(m) for m in metrics[:6]]
    resumed = RefinementController.from_state_dict(json.loads(json.dumps(first.state_dict())))
    got += [resumed.update(m) for m in metrics[6:]]
    assert got == expected
    assert any(d.refined for d in expected)
    assert any(d.stopped for d in expected)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"plateau_threshold": 0.0}, "plateau_threshold"),
        ({"plateau_threshold": 1.2}, "plateau_threshold"),
        ({"stop_threshold": -0.1}, "stop_threshold"),
        ({"stop_threshold": 1.5}, "stop_threshold"),
        ({"initial_iterations": 5, "max_iterations": 3}, "max_iterations"),
        ({"initial_iterations": -1}, "initial_iterations"),
        ({"initial_iterations": 1.5}, "initial_iterations"),
        ({"step": 0}, "step"),
        ({"ema_window": 0}, "ema_window"),
        ({"plateau_window": 0}, "plateau_window"),
    ],
)
def test_bad_controller_arguments_raise_naming_the_field(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):  # TypeError for a non-integer count
        controller(**kwargs)


def test_controller_arguments_are_keyword_only():
    with pytest.raises(TypeError):
        RefinementController(1, 1, 10)  # the official positional call silently shifted arguments


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, 0.0])
def test_bad_metrics_raise(bad):
    ctl = controller()
    with pytest.raises(ValueError, match="metric"):
        ctl.update(bad)
    assert ctl.history == []


def test_train_with_prdp_accounts_cost_and_follows_the_controller():
    calls = []

    def train_epoch(state, k):
        calls.append(k)
        return state + 1, float(k)

    metrics = iter([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    _, log = train_with_prdp(
        train_epoch,
        lambda state: next(metrics),
        0,
        epochs=6,
        controller=controller(plateau_window=2, step=2),
        solves_per_epoch=3,
    )
    assert calls == log.iterations[1:]
    assert log.solver_iterations == [0] + [3 * k for k in calls]
    assert log.cumulative_iterations == list(np.cumsum(log.solver_iterations))
    assert log.total_iterations == 3 * sum(calls)
    # initial metric + 2 epochs -> first plateau refines to 3; then flat relative to checkpoint -> stop
    assert calls == [1, 1, 3, 3, 3, 3]


def test_train_with_prdp_fixed_iterations_and_bad_arguments():
    _, log = train_with_prdp(lambda s, k: (s, None), lambda s: 1.0, 0, epochs=3, iterations=7)
    assert log.iterations == [None, 7, 7, 7]
    assert log.total_iterations == 21
    with pytest.raises(ValueError, match="exactly one"):
        train_with_prdp(lambda s, k: (s, None), lambda s: 1.0, 0, epochs=3)
    with pytest.raises(ValueError, match="epochs"):
        train_with_prdp(lambda s, k: (s, None), lambda s: 1.0, 0, epochs=0, iterations=1)
    with pytest.raises(ValueError, match="metric"):
        train_with_prdp(lambda s, k: (s, None), lambda s: math.nan, 0, epochs=2, controller=controller())


class _FakeClock:
    """A ``time`` stand-in whose clock moves only when a test advances it."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


def test_interleaved_runs_count_only_their_own_time_and_match_single_runs(monkeypatch):
    from iclr25_prdp import _training
    from iclr25_prdp._training import PRDPRun

    clock = _FakeClock()
    monkeypatch.setattr(_training, "time", clock)

    def arm(cost):  # each epoch costs `cost` seconds per iteration, validation 1 s; metric falls like 1/epoch
        def train_epoch(state, k):
            clock.now += cost * k
            return state + 1, None

        def validate(state):
            clock.now += 1.0
            return 1.0 / (1 + state)

        return train_epoch, validate

    def make(cost, **kwargs):
        return PRDPRun(*arm(cost), 0, epochs=5, solves_per_epoch=2, **kwargs)

    fixed, prdp = make(10.0, iterations=4), make(1.0, controller=controller(plateau_window=1))
    rounds = 0
    while not (fixed.done and prdp.done):
        for run in (fixed, prdp) if rounds % 2 == 0 else (prdp, fixed):
            run.step()
        rounds += 1
    # own time only: initial validation 1 s, then K * cost + 1 s per epoch; the other run's time never leaks in
    assert fixed.log.wall_time == [1.0, 42.0, 83.0, 124.0, 165.0, 206.0]
    ks = prdp.log.iterations[1:]
    assert prdp.log.wall_time == list(np.cumsum([1.0] + [1.0 * k + 1.0 for k in ks]))
    # the same logs as one uninterrupted train_with_prdp run each
    _, alone = train_with_prdp(
        *arm(1.0), 0, epochs=5, solves_per_epoch=2, controller=controller(plateau_window=1)
    )
    assert alone.iterations == prdp.log.iterations
    assert alone.metric == prdp.log.metric
    assert alone.cumulative_iterations == prdp.log.cumulative_iterations
    with pytest.raises(RuntimeError, match="finished"):
        fixed.step()
