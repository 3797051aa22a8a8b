"""TimestepClusters: exact partition (arXiv:2403.10348 §4.1), no t == T (diffusers#10003), equal-mass SNR quantiles."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from iclr25_diffusion_curriculum import TimestepClusters


@pytest.mark.parametrize(
    ("T", "N", "rng"),
    [
        (1000, 10, None),
        (1000, 7, None),
        (1000, 1, None),
        (1000, 1000, None),
        (10, 3, None),
        (997, 20, None),
        (1000, 6, (100, 901)),
        (50, 4, (0, 5)),
        (1, 1, None),
    ],
)
def test_uniform_clusters_partition_the_range_exactly(T, N, rng):
    c = TimestepClusters(T, N, "uniform", timestep_range=rng)
    begin, end = rng or (0, T)
    parts = [c.members(i) for i in range(N)]
    # non-empty, ascending and contiguous, and together exactly begin..end-1 with no repeats
    assert all(p.numel() > 0 for p in parts)
    assert torch.equal(torch.cat(parts), torch.arange(begin, end))
    sizes = c.sizes()
    assert int(sizes.sum()) == end - begin
    assert int(sizes.max() - sizes.min()) <= 1  # N not dividing the range is handled by integer boundaries
    assert c.boundaries.dtype == torch.int64
    # cluster_of agrees with membership (brute force over every timestep)
    for i, p in enumerate(parts):
        assert torch.all(c.cluster_of(p) == i)
    assert math.isclose(float(c.mass().sum()), 1.0)


def test_cluster_order_is_low_t_first():
    c = TimestepClusters(1000, 10)
    assert c.members(0)[0] == 0
    assert c.members(0)[-1] == 99
    assert c.members(9)[0] == 900
    assert c.members(9)[-1] == 999


def test_paper_boundaries_when_n_divides_t():
    # C_i = [(i-1)T/N, iT/N)
    c = TimestepClusters(1000, 20)
    assert c.boundaries.tolist() == [i * 50 for i in range(21)]


def test_samples_never_reach_T():
    # diffusers#10003: an index equal to T is out of range for alphas_cumprod
    c = TimestepClusters(1000, 7)
    g = torch.Generator().manual_seed(0)
    t = c.sample(0, 7, 200_000, generator=g)
    assert t.dtype == torch.int64
    assert int(t.max()) == 999
    assert int(t.min()) == 0


def test_cluster_of_rejects_T_and_outside_values():
    c = TimestepClusters(1000, 10)
    with pytest.raises(ValueError, match=r"\[0, 1000\)"):
        c.cluster_of(torch.tensor([0, 1000]))
    with pytest.raises(ValueError, match="timesteps must lie"):
        c.cluster_of(torch.tensor([-1]))
    with pytest.raises(ValueError, match="integers"):
        c.cluster_of(torch.tensor([1.5]))
    r = TimestepClusters(1000, 4, timestep_range=(200, 400))
    with pytest.raises(ValueError, match=r"\[200, 400\)"):
        r.cluster_of(torch.tensor([199]))


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        (dict(num_train_timesteps=1000, num_clusters=0), ValueError, "num_clusters"),
        (dict(num_train_timesteps=1000, num_clusters=-3), ValueError, "num_clusters"),
        (
            dict(num_train_timesteps=1000, num_clusters=1001),
            ValueError,
            r"num_clusters must be an integer in \[1, 1000\]",
        ),
        (dict(num_train_timesteps=100, num_clusters=11, timestep_range=(0, 10)), ValueError, r"\[1, 10\]"),
        (dict(num_train_timesteps=0, num_clusters=1), ValueError, "num_train_timesteps"),
        (dict(num_train_timesteps=1000, num_clusters=2.0), TypeError, "num_clusters must be an int"),
        (dict(num_train_timesteps=1000, num_clusters=True), TypeError, "num_clusters"),
        (
            dict(num_train_timesteps=1000, num_clusters=4, scheme="cosine"),
            ValueError,
            "uniform, snr_quantile",
        ),
        (
            dict(num_train_timesteps=1000, num_clusters=4, timestep_range=(500, 500)),
            ValueError,
            "empty or inverted",
        ),
        (
            dict(num_train_timesteps=1000, num_clusters=4, timestep_range=(600, 500)),
            ValueError,
            "empty or inverted",
        ),
        (dict(num_train_timesteps=1000, num_clusters=4, timestep_range=(0, 1001)), ValueError, "end"),
        (dict(num_train_timesteps=1000, num_clusters=4, timestep_range=(-1, 10)), ValueError, "begin"),
        (dict(num_train_timesteps=1000, num_clusters=4, timestep_range=(1,)), ValueError, "pair"),
        (
            dict(num_train_timesteps=1000, num_clusters=4, scheme="snr_quantile", p_std=0.0),
            ValueError,
            "p_std",
        ),
        (
            dict(num_train_timesteps=1000, num_clusters=4, scheme="snr_quantile", p_mean=math.nan),
            ValueError,
            "p_mean",
        ),
        (
            dict(num_train_timesteps=1000, num_clusters=4, scheme="snr_quantile", timestep_range=(0, 9)),
            ValueError,
            "timestep_range",
        ),
    ],
)
def test_bad_cluster_arguments_raise_with_the_field_name(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        TimestepClusters(**kwargs)


def test_sample_rejects_empty_spans_and_batches():
    c = TimestepClusters(100, 5)
    with pytest.raises(ValueError, match="stop"):
        c.sample(3, 3, 4)
    with pytest.raises(ValueError, match="first"):
        c.sample(5, 6, 4)
    with pytest.raises(ValueError, match="batch_size"):
        c.sample(0, 5, 0)


# ---------------------------------------------------------------------------------------------------------------
# snr_quantile (continuous σ, EDM log-normal)
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("N", "p_mean", "p_std"), [(10, -1.2, 1.2), (7, 0.3, 0.5)])
def test_snr_quantile_boundaries_match_scipy_lognormal_quantiles(N, p_mean, p_std):
    c = TimestepClusters(1000, N, "snr_quantile", p_mean=p_mean, p_std=p_std)
    expected = stats.lognorm(s=p_std, scale=math.exp(p_mean)).ppf(np.arange(N + 1) / N)
    np.testing.assert_allclose(c.boundaries.numpy()[1:-1], expected[1:-1], rtol=1e-9)
    assert c.boundaries[0] == 0
    assert math.isinf(float(c.boundaries[-1]))


def test_snr_quantile_clusters_have_equal_mass_under_the_training_distribution():
    N = 10
    c = TimestepClusters(1000, N, "snr_quantile")
    g = torch.Generator().manual_seed(3)
    sigma = torch.exp(
        -1.2 + 1.2 * torch.randn(200_000, generator=g, dtype=torch.float64)
    )  # EDM's p(σ), drawn directly
    counts = torch.bincount(c.cluster_of(sigma), minlength=N).numpy()
    assert stats.chisquare(counts).pvalue > 1e-3
    np.testing.assert_allclose(counts / counts.sum(), 1 / N, atol=0.005)


def test_snr_quantile_sampling_is_the_conditional_lognormal():
    c = TimestepClusters(1000, 5, "snr_quantile")
    g = torch.Generator().manual_seed(0)
    s = c.sample(3, 5, 50_000, generator=g).double().numpy()  # the two highest-σ (easiest) clusters
    lo = float(c.boundaries[3])
    assert s.min() >= lo * (1 - 1e-6)
    assert np.isfinite(s).all()
    dist = stats.lognorm(s=1.2, scale=math.exp(-1.2))
    cdf = lambda x: (dist.cdf(x) - 0.6) / 0.4  # noqa: E731  conditional CDF on [σ_3, ∞)
    assert stats.kstest(s, cdf).pvalue > 1e-3


def test_members_and_sizes_need_discrete_clusters():
    c = TimestepClusters(1000, 4, "snr_quantile")
    with pytest.raises(ValueError, match="scheme='uniform'"):
        c.members(0)
    with pytest.raises(ValueError, match="positive and finite"):
        c.cluster_of(torch.tensor([0.0]))
