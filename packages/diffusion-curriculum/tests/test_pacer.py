"""PatiencePacer / FixedPacer: monotone stages, exact patience and cap, resets, NaN handling, exact resume."""

import itertools
import json
import math

import numpy as np
import pytest
import torch

from iclr25_diffusion_curriculum import FixedPacer, PatiencePacer


def _advances(pacer, losses):
    """Update indices (1-based) after which the stage went up."""
    out, stage = [], pacer.stage
    for k, loss in enumerate(losses, start=1):
        new = pacer.update(loss)
        if new != stage:
            out.append(k)
            stage = new
    return out


@pytest.mark.parametrize("patience", [1, 3, 10])
def test_constant_loss_advances_every_patience_plus_one_updates(patience):
    pacer = PatiencePacer(patience=patience, ema=0.0, num_stages=5)
    assert _advances(pacer, [1.0] * 200) == [(patience + 1) * k for k in range(1, 5)]
    assert pacer.stage == 5
    assert pacer.finished


def test_strictly_decreasing_loss_never_advances_without_a_cap():
    pacer = PatiencePacer(patience=3, max_steps_per_stage=None, ema=0.9, num_stages=4)
    assert _advances(pacer, np.linspace(10, 1, 500)) == []
    assert pacer.stage == 1


def test_strictly_decreasing_loss_advances_exactly_at_the_cap():
    pacer = PatiencePacer(patience=3, max_steps_per_stage=7, ema=0.0, num_stages=4)
    assert _advances(pacer, np.linspace(10, 1, 100)) == [7, 14, 21]


def test_hand_computed_sequence():
    # τ = 2, raw loss. u1 5 (best 5), u2 4 (best 4), u3 4 (c=1), u4 4 (c=2 → advance, reset),
    # u5 9 improves on best=inf in the new stage (c=0), u6 9.5 (c=1), u7 8 (improves, c=0), u8 8 (c=1), u9 8 (c=2 → advance)
    pacer = PatiencePacer(patience=2, ema=0.0, num_stages=3)
    stages = [pacer.update(x) for x in [5, 4, 4, 4, 9, 9.5, 8, 8, 8]]
    assert stages == [1, 1, 1, 2, 2, 2, 2, 2, 3]
    assert pacer.history == [(4, 2), (9, 3)]


def test_improvement_resets_the_patience_counter():
    pacer = PatiencePacer(patience=3, ema=0.0, num_stages=3)
    # two non-improving updates, then an improvement, repeated: the counter never reaches 3
    losses = []
    level = 10.0
    for _ in range(20):
        losses += [level, level + 1, level + 1]
        level -= 0.5
    assert _advances(pacer, losses) == []
    assert pacer.counter == 2
    assert pacer.update(100.0) == 2  # the third consecutive non-improving update advances


def test_advance_resets_counter_best_and_smoothing():
    pacer = PatiencePacer(patience=1, ema=0.5, num_stages=3)
    pacer.update(1.0)
    pacer.update(2.0)  # smoothed 1.5 ≥ best 1.0 → counter 1 = patience → advance
    assert pacer.stage == 2
    assert (pacer.counter, pacer.best, pacer.steps_in_stage, pacer.smoothed) == (0, math.inf, 0, None)
    pacer.update(50.0)  # first loss of the new stage is its own smoothed value and the new best
    assert pacer.best == 50.0
    assert pacer.counter == 0


def test_ema_smoothing_values():
    pacer = PatiencePacer(patience=100, ema=0.5, num_stages=2)
    for x in [4.0, 0.0, 0.0]:
        pacer.update(x)
    assert pacer.smoothed == pytest.approx(1.0)  # 4 → 2 → 1


def test_min_delta_counts_tiny_improvements_as_none():
    pacer = PatiencePacer(patience=4, ema=0.0, min_delta=0.1, num_stages=2)
    assert _advances(pacer, [10 - 0.01 * k for k in range(20)]) == [5]


def test_stage_never_decreases_and_stops_at_num_stages():
    rng = np.random.default_rng(0)
    pacer = PatiencePacer(patience=5, max_steps_per_stage=40, ema=0.9, num_stages=6)
    stages = [pacer.update(x) for x in np.abs(np.cumsum(rng.normal(size=2000))) + 1]
    assert all(b >= a for a, b in itertools.pairwise(stages))
    assert max(stages) == 6
    assert stages[0] >= 1


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, torch.tensor(float("nan"))])
def test_non_finite_loss_is_skipped_with_a_warning(bad):
    pacer = PatiencePacer(patience=2, ema=0.0, num_stages=3)
    pacer.update(1.0)
    pacer.update(1.0)
    before = pacer.state_dict()
    with pytest.warns(RuntimeWarning, match="non-finite loss"):
        assert pacer.update(bad) == 1
    after = pacer.state_dict()
    assert after.pop("num_skipped") == 1
    before.pop("num_skipped")
    assert after == before
    assert pacer.update(1.0) == 2  # the skipped update did not count toward patience; this one does


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(patience=0), "patience"),
        (dict(patience=-2), "patience"),
        (dict(patience=2.5), "patience"),  # wrong type: TypeError (iclr25_shared.checks)
        (dict(patience=True), "patience"),
        (dict(max_steps_per_stage=0), "max_steps_per_stage"),
        (dict(ema=1.0), "ema"),
        (dict(ema=-0.1), "ema"),
        (dict(min_delta=-1.0), "min_delta"),
        (dict(num_stages=0), "num_stages"),
    ],
)
def test_bad_pacer_arguments(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        PatiencePacer(**kwargs)


def test_update_needs_num_stages_and_a_scalar():
    with pytest.raises(RuntimeError, match="num_stages"):
        PatiencePacer().update(1.0)
    pacer = PatiencePacer(num_stages=2)
    with pytest.raises(TypeError, match="scalar"):
        pacer.update(torch.ones(3))
    with pytest.raises(TypeError, match="real number"):
        pacer.update("1.0")
    with pytest.raises(ValueError, match="bound to num_stages=2"):
        pacer.bind(3)


def test_state_dict_round_trip_through_json_resumes_exactly():
    rng = np.random.default_rng(1)
    losses = np.abs(rng.normal(size=400)) + np.linspace(3, 1, 400)
    a = PatiencePacer(patience=7, max_steps_per_stage=50, ema=0.8, num_stages=8)
    for x in losses[:150]:
        a.update(x)
    state = json.loads(json.dumps(a.state_dict()))
    b = PatiencePacer(patience=7, max_steps_per_stage=50, ema=0.8)
    b.load_state_dict(state)
    assert (b.stage, b.counter, b.best, b.smoothed) == (a.stage, a.counter, a.best, a.smoothed)
    assert [a.update(x) for x in losses[150:]] == [b.update(x) for x in losses[150:]]
    with pytest.raises(ValueError, match="patience"):
        PatiencePacer(patience=8).load_state_dict(state)


def test_fixed_pacer_replays_a_patience_run():
    # sd-scripts#171 style: a user-written schedule reproduces the adaptive run's stages
    rng = np.random.default_rng(2)
    losses = np.abs(rng.normal(size=300)) + 1
    adaptive = PatiencePacer(patience=4, max_steps_per_stage=30, ema=0.5, num_stages=6)
    stages_a = [adaptive.update(x) for x in losses]
    fixed = FixedPacer([k for k, _ in adaptive.history], num_stages=6)
    stages_f = [fixed.update(x) for x in losses]
    assert stages_a == stages_f
    assert fixed.history == adaptive.history


@pytest.mark.parametrize(
    ("starts", "match"),
    [
        ([3, 3], "strictly increasing"),
        ([0, 5], r"stage_starts\[0\] must be an integer in \[1, inf\)"),
        ([5, 2], "increasing"),
    ],
)
def test_fixed_pacer_rejects_bad_schedules(starts, match):
    with pytest.raises(ValueError, match=match):
        FixedPacer(starts)
    with pytest.raises(ValueError, match="advances"):
        FixedPacer([1, 2, 3], num_stages=3)
