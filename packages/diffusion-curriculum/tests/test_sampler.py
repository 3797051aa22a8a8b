"""CurriculumSampler: allowed clusters per stage, histograms (diffusers#5094), N=1 ≡ uniform, exact resume."""

import json

import numpy as np
import pytest
import torch
from scipy import stats

from iclr25_diffusion_curriculum import CurriculumSampler, FixedPacer, PatiencePacer, TimestepClusters


def _at_stage(order, T, N, stage):
    """A sampler forced to ``stage`` through a FixedPacer schedule (advance after every update)."""
    pacer = FixedPacer(list(range(1, N)))
    s = CurriculumSampler(TimestepClusters(T, N), pacer, order=order)
    for _ in range(stage - 1):
        s.update(0.0)
    assert s.stage == stage
    return s


@pytest.mark.parametrize("order", ["curriculum", "reverse"])
def test_each_stage_samples_only_its_allowed_clusters(order):
    T, N = 1000, 8
    g = torch.Generator().manual_seed(0)
    for n in range(1, N + 1):
        s = _at_stage(order, T, N, n)
        seen = set(s.clusters.cluster_of(s.sample(20_000, g)).tolist())
        expected = set(range(N - n, N)) if order == "curriculum" else set(range(n))
        assert seen == expected, (n, seen)
    # stage 1 of the curriculum is the highest-t cluster only
    t = _at_stage("curriculum", T, N, 1).sample(5000, g)
    assert int(t.min()) >= 875
    assert int(t.max()) == 999


@pytest.mark.parametrize("stage", [1, 4, 10])
def test_histogram_matches_the_intended_stage_distribution_including_extremes(stage):
    # diffusers#5094: the extreme timesteps were rarely drawn. Here every allowed timestep, 0 and T-1 included,
    # must have probability 1 / |allowed| (χ² over every timestep) and forbidden ones probability 0.
    T, N = 200, 10
    s = _at_stage("curriculum", T, N, stage)
    allowed = s.allowed_clusters()
    lo, hi = int(s.clusters.boundaries[allowed.start]), int(s.clusters.boundaries[allowed.stop])
    draws = 400 * (hi - lo)
    t = s.sample(draws, torch.Generator().manual_seed(stage))
    counts = torch.bincount(t, minlength=T).numpy()
    assert counts[:lo].sum() == 0
    assert counts[hi:].sum() == 0
    assert stats.chisquare(counts[lo:hi]).pvalue > 1e-3
    for extreme in (lo, hi - 1):  # the boundary timesteps (T-1 is always in the allowed set)
        assert abs(counts[extreme] - 400) < 5 * np.sqrt(400)
    assert counts[T - 1] > 0


def test_one_cluster_is_exactly_uniform_training():
    T = 50
    s = CurriculumSampler(TimestepClusters(T, 1), PatiencePacer(patience=3))
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    a = torch.cat([s.sample(64, g1) for _ in range(20)])
    b = torch.cat([torch.randint(0, T, (64,), generator=g2) for _ in range(20)])
    assert torch.equal(a, b)  # the same stream as the baseline's torch.randint
    counts = torch.bincount(s.sample(100_000, torch.Generator().manual_seed(1)), minlength=T).numpy()
    assert stats.chisquare(counts).pvalue > 1e-3


def test_uniform_order_ignores_the_stage_and_matches_randint():
    s = CurriculumSampler(TimestepClusters(1000, 10), order="uniform")
    assert s.stage == 10
    assert s.update(1.0) == 10
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(s.sample(256, g1), torch.randint(0, 1000, (256,), generator=g2))


def test_full_curriculum_reaches_all_clusters_then_stays_uniform():
    s = CurriculumSampler(TimestepClusters(100, 4), PatiencePacer(patience=1, ema=0.0))
    stages = [s.update(1.0) for _ in range(20)]
    assert stages[:6] == [1, 2, 2, 3, 3, 4]
    assert set(stages[6:]) == {4}
    assert s.allowed_clusters() == range(0, 4)
    assert s.stage_schedule() == [(0, 75, 99), (2, 50, 99), (4, 25, 99), (6, 0, 99)]


def test_state_round_trip_gives_an_identical_timestep_stream():
    def make():
        return CurriculumSampler(
            TimestepClusters(1000, 10), PatiencePacer(patience=3, max_steps_per_stage=9, ema=0.5)
        )

    rng = np.random.default_rng(0)
    losses = rng.uniform(0.5, 1.5, 120)
    a, g = make(), torch.Generator().manual_seed(11)
    for x in losses[:37]:
        a.sample(16, g)
        a.update(x)
    state = json.loads(json.dumps(a.state_dict()))
    g_state = g.get_state()

    def stream(s, gen):
        out = []
        for x in losses[37:]:
            out.append(s.sample(16, gen))
            s.update(x)
        return torch.cat(out), s.stage

    b = make()
    b.load_state_dict(state)
    gb = torch.Generator()
    gb.set_state(g_state)
    fresh = make()  # not resumed: must differ, so the comparison can fail
    gf = torch.Generator()
    gf.set_state(g_state)
    ta, sa = stream(a, g)
    tb, sb = stream(b, gb)
    tf, _ = stream(fresh, gf)
    assert torch.equal(ta, tb)
    assert sa == sb
    assert not torch.equal(ta, tf)


def test_load_state_dict_from_another_sampler_fails():
    a = CurriculumSampler(TimestepClusters(1000, 10), PatiencePacer())
    b = CurriculumSampler(TimestepClusters(1000, 8), PatiencePacer())
    c = CurriculumSampler(TimestepClusters(1000, 10), PatiencePacer(), order="reverse")
    with pytest.raises(ValueError, match="num_clusters"):
        b.load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="order"):
        c.load_state_dict(a.state_dict())


def test_bad_sampler_arguments():
    clusters = TimestepClusters(100, 4)
    with pytest.raises(ValueError, match="curriculum, reverse, uniform"):
        CurriculumSampler(clusters, PatiencePacer(), order="hard-first")
    with pytest.raises(ValueError, match="needs a pacer"):
        CurriculumSampler(clusters)
    with pytest.raises(TypeError, match="TimestepClusters"):
        CurriculumSampler([0, 25, 50, 75, 100], PatiencePacer())
    with pytest.raises(TypeError, match="pacer"):
        CurriculumSampler(clusters, pacer="patience")
    s = CurriculumSampler(clusters, PatiencePacer())
    with pytest.raises(ValueError, match="batch_size"):
        s.sample(0)
    with pytest.raises(ValueError, match=r"stage must be an integer in \[1, 4\]"):
        s.allowed_clusters(5)
    with pytest.raises(ValueError, match="bound to num_stages=4"):
        CurriculumSampler(TimestepClusters(100, 5), s.pacer)


def test_snr_quantile_sampler_returns_sigmas_in_the_allowed_clusters():
    s = CurriculumSampler(TimestepClusters(1000, 5, "snr_quantile"), FixedPacer([1, 2, 3, 4]))
    g = torch.Generator().manual_seed(0)
    for n in range(1, 6):
        sigma = s.sample(4000, g)
        assert sigma.dtype == torch.float32
        assert bool(torch.all(sigma > 0))
        assert set(s.clusters.cluster_of(sigma).tolist()) == set(range(5 - n, 5))
        s.update(0.0)


def test_samples_follow_the_requested_device_and_generator():
    s = CurriculumSampler(TimestepClusters(1000, 10), order="uniform")
    t = s(8, torch.Generator().manual_seed(0), device="cpu")
    assert t.shape == (8,)
    assert t.device.type == "cpu"
