"""Works with diffusers schedulers; T mismatch fails loudly; composes with Min-SNR-γ; one real training step."""

import numpy as np
import pytest
import torch

from iclr25_diffusion_curriculum import (
    CurriculumSampler,
    PatiencePacer,
    TimestepClusters,
    min_snr_weights,
    snr_from_alphas_cumprod,
)


def _schedulers(T=1000):
    from diffusers import DDIMScheduler, DDPMScheduler, EulerDiscreteScheduler

    return [
        DDPMScheduler(num_train_timesteps=T),
        DDIMScheduler(num_train_timesteps=T),
        EulerDiscreteScheduler(num_train_timesteps=T),
    ]


@pytest.mark.parametrize("index", [0, 1, 2])
def test_sampled_timesteps_drive_each_scheduler(index):
    scheduler = _schedulers()[index]
    sampler = CurriculumSampler(TimestepClusters(1000, 10), PatiencePacer(patience=2, ema=0.0))
    sampler.check_scheduler(scheduler)
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(32, 1, 4, 4, generator=g)
    for _ in range(25):  # through several stages
        t = sampler.sample(32, g)
        noisy = scheduler.add_noise(x0, torch.randn(x0.shape, generator=g), t)
        assert torch.isfinite(noisy).all()
        sampler.update(1.0)
    assert sampler.stage > 1


@pytest.mark.parametrize("index", [0, 1, 2])
def test_clusters_round_trip_with_the_scheduler_timesteps(index):
    # diffusers#10003: with T inference steps, every scheduler timestep must be a valid index < T
    scheduler = _schedulers()[index]
    scheduler.set_timesteps(1000)
    ts = torch.as_tensor(scheduler.timesteps).round().long()
    clusters = TimestepClusters(1000, 10)
    assert set(ts.tolist()) == set(range(1000))
    assert torch.equal(torch.bincount(clusters.cluster_of(ts), minlength=10), clusters.sizes())


def test_off_by_one_scheduler_timesteps_fail_loudly():
    # the diffusers#10003 configuration (steps_offset=1, 'leading') yields timestep 1000 for T = 1000
    from diffusers import DDIMScheduler

    scheduler = DDIMScheduler(num_train_timesteps=1000, steps_offset=1, timestep_spacing="leading")
    scheduler.set_timesteps(1000)
    assert int(scheduler.timesteps.max()) == 1000
    with pytest.raises(ValueError, match=r"\[0, 1000\)"):
        TimestepClusters(1000, 10).cluster_of(scheduler.timesteps)


def test_scheduler_with_another_T_is_rejected():
    from diffusers import DDPMScheduler

    sampler = CurriculumSampler(TimestepClusters(500, 10), PatiencePacer())
    with pytest.raises(
        ValueError, match="num_train_timesteps=1000 but the clusters were built for num_train_timesteps=500"
    ):
        sampler.check_scheduler(DDPMScheduler(num_train_timesteps=1000))
    with pytest.raises(TypeError, match="num_train_timesteps"):
        sampler.check_scheduler(object())


def test_min_snr_weights_against_the_formula():
    from diffusers import DDPMScheduler

    a = DDPMScheduler(num_train_timesteps=1000).alphas_cumprod
    t = torch.tensor([0, 10, 100, 400, 999])
    snr = snr_from_alphas_cumprod(a, t)
    gamma = 5.0
    for i, ti in enumerate(t.tolist()):
        ab = float(a[ti])
        s = ab / (1 - ab)
        assert float(snr[i]) == pytest.approx(s, rel=1e-5)
        assert float(min_snr_weights(snr, gamma, "epsilon")[i]) == pytest.approx(min(s, gamma) / s, rel=1e-5)
        assert float(min_snr_weights(snr, gamma, "v_prediction")[i]) == pytest.approx(
            min(s, gamma) / (s + 1), rel=1e-5
        )
        assert float(min_snr_weights(snr, gamma, "sample")[i]) == pytest.approx(min(s, gamma), rel=1e-5)
    w = min_snr_weights(snr, gamma)
    assert float(w[-1]) == pytest.approx(1.0)  # SNR < γ at high t: ε-loss unchanged
    assert float(w[0]) < 0.01  # SNR ≫ γ at t = 0: down-weighted


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((torch.tensor([1.0]), 0.0), "gamma"),
        ((torch.tensor([1.0]), 5.0, "score"), "prediction_type"),
        ((torch.tensor([0.0, 1.0]), 5.0), "positive"),
        ((torch.tensor([float("nan")]), 5.0), "positive"),
    ],
)
def test_min_snr_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        min_snr_weights(*args)


def test_snr_rejects_timestep_T():
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        snr_from_alphas_cumprod(torch.linspace(0.99, 0.1, 10), torch.tensor([10]))


@pytest.mark.parametrize("snr_gamma", [None, 5.0])
def test_training_steps_with_a_tiny_unet_update_the_sampler(snr_gamma):
    from diffusers import DDPMScheduler

    from iclr25_diffusion_curriculum._training import make_unet, train_diffusion

    torch.manual_seed(0)
    model = make_unet(8, (8, 8))
    before = [p.detach().clone() for p in model.parameters()]
    images = torch.rand(20, 1, 8, 8) * 2 - 1
    sampler = CurriculumSampler(
        TimestepClusters(100, 4), PatiencePacer(patience=1, max_steps_per_stage=1, ema=0.0)
    )
    log = train_diffusion(
        model,
        DDPMScheduler(num_train_timesteps=100),
        images,
        sampler,
        steps=3,
        batch_size=4,
        generator=torch.Generator().manual_seed(0),
        device=torch.device("cpu"),
        snr_gamma=snr_gamma,
    )
    assert log.stages.tolist() == [1, 2, 3]
    assert sampler.stage == 4
    assert np.isfinite(log.losses).all()
    # stage 1 drew only from the highest-t cluster (t ≥ 75), stage 2 from t ≥ 50
    assert log.sample_timesteps[:4].min() >= 75
    assert log.sample_timesteps[4:8].min() >= 50
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    with pytest.raises(ValueError, match="num_train_timesteps"):
        train_diffusion(
            model,
            DDPMScheduler(num_train_timesteps=1000),
            images,
            sampler,
            steps=1,
            batch_size=2,
            generator=torch.Generator(),
            device=torch.device("cpu"),
        )


@pytest.mark.gpu
def test_sampler_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    s = CurriculumSampler(TimestepClusters(1000, 10), PatiencePacer(patience=2))
    g = torch.Generator(device="cuda").manual_seed(0)
    t = s.sample(128, g)
    assert t.device.type == "cuda"
    assert int(t.min()) >= 900
