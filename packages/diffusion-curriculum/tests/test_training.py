"""The training loop and the evaluation paths of the reproduction, against models whose answers are known.

An *oracle* for a data set holding one image ``c`` predicts the noise exactly, ``ε̂ = (x_t − √ᾱ_t c)/√(1 − ᾱ_t)``:
its held-out loss is 0 and deterministic DDIM (η = 0) from any start lands on ``c``. A model that predicts 0 has
held-out loss ``E[ε²] = 1`` in every cluster.
"""

import types

import numpy as np
import pytest
import torch

from iclr25_diffusion_curriculum import CurriculumSampler, PatiencePacer, TimestepClusters
from iclr25_diffusion_curriculum._training import generate, heldout_loss, make_unet, train_diffusion

CPU = torch.device("cpu")


class Oracle(torch.nn.Module):
    """ε-prediction of the exact posterior noise when every training image equals ``image``."""

    def __init__(self, image: torch.Tensor, alphas_cumprod: torch.Tensor, scale: float = 1.0) -> None:
        super().__init__()
        self.image = image
        self.alphas = alphas_cumprod.double()
        self.scale = scale
        self.config = types.SimpleNamespace(sample_size=image.shape[-1])

    def forward(self, x, t):
        a = self.alphas[t.long()].view(-1, 1, 1, 1)
        eps = (x.double() - a.sqrt() * self.image.double()) / (1 - a).sqrt()
        return types.SimpleNamespace(sample=(self.scale * eps).to(x.dtype))


def _scheduler(T=1000):
    from diffusers import DDPMScheduler

    return DDPMScheduler(num_train_timesteps=T)


def _image(size=8):
    g = torch.Generator().manual_seed(3)
    return (torch.rand(1, 1, size, size, generator=g) * 1.6 - 0.8).float()


def test_heldout_loss_of_the_oracle_is_zero_and_of_the_zero_model_is_one():
    sched = _scheduler()
    c = _image()
    images = c.expand(200, 1, 8, 8).contiguous()
    clusters = TimestepClusters(1000, 10)
    oracle = heldout_loss(Oracle(c, sched.alphas_cumprod), sched, images, clusters, seed=0, device=CPU)
    assert oracle.shape == (10,)
    assert np.abs(oracle).max() < 1e-8

    class Zero(torch.nn.Module):
        def forward(self, x, t):
            return types.SimpleNamespace(sample=torch.zeros_like(x))

    zero = heldout_loss(Zero(), sched, images, clusters, seed=0, device=CPU)
    # 200·64 standard-normal squares per cluster: mean 1, sd sqrt(2/12800) ≈ 0.0125
    assert np.all(np.abs(zero - 1.0) < 0.06), zero
    # half the right answer: loss = E[(ε/2)²] = 1/4 on the same inputs, exactly a quarter of the zero model's
    half = heldout_loss(Oracle(c, sched.alphas_cumprod, 0.5), sched, images, clusters, seed=0, device=CPU)
    np.testing.assert_allclose(half, zero / 4, rtol=1e-5)


def test_heldout_loss_scores_every_model_on_the_same_inputs_and_restores_train_mode():
    sched = _scheduler(100)
    torch.manual_seed(0)
    model = make_unet(8, (8, 8)).train()
    images = torch.rand(30, 1, 8, 8) * 2 - 1
    clusters = TimestepClusters(100, 4)
    a = heldout_loss(model, sched, images, clusters, seed=5, device=CPU, batch_size=7)
    b = heldout_loss(model, sched, images, clusters, seed=5, device=CPU)
    c = heldout_loss(model, sched, images, clusters, seed=6, device=CPU)
    np.testing.assert_allclose(a, b, rtol=1e-5)  # batching does not change the inputs
    assert not np.allclose(a, c)  # another seed: other noise
    assert model.training


def test_generate_with_the_oracle_lands_on_the_training_image():
    sched = _scheduler()
    c = _image()
    out = generate(Oracle(c, sched.alphas_cumprod), sched, 5, num_inference_steps=10, seed=0, device=CPU)
    assert out.shape == (5, 1, 8, 8) and out.dtype == torch.float32
    torch.testing.assert_close(out, c.expand(5, 1, 8, 8), atol=1e-4, rtol=0)


def test_generate_is_deterministic_per_seed_and_clamped():
    sched = _scheduler(100)
    torch.manual_seed(0)
    model = make_unet(8, (8, 8))
    a = generate(model, sched, 4, num_inference_steps=3, seed=1, device=CPU)
    b = generate(model, sched, 4, num_inference_steps=3, seed=1, device=CPU)
    c = generate(model, sched, 4, num_inference_steps=3, seed=2, device=CPU)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.min() >= -1 and a.max() <= 1


def _train(**kw):
    torch.manual_seed(0)
    model = make_unet(8, (8, 8))
    images = torch.rand(20, 1, 8, 8, generator=torch.Generator().manual_seed(1)) * 2 - 1
    sampler = kw.pop("sampler", None) or CurriculumSampler(TimestepClusters(100, 4), order="uniform")
    log = train_diffusion(
        model,
        _scheduler(100),
        images,
        sampler,
        steps=kw.pop("steps", 4),
        batch_size=4,
        generator=torch.Generator().manual_seed(0),
        device=CPU,
        **kw,
    )
    return model, log


def test_weight_ema_follows_the_diffusers_recursion_of_the_raw_weights():
    snapshots = []
    _, _ = _train(on_step=lambda k, m: snapshots.append([p.detach().clone() for p in m.parameters()]))
    decay = 0.9
    model, log = _train(ema_decay=decay)
    # the raw trajectory is unchanged by keeping an EMA
    for p, q in zip(model.parameters(), snapshots[-1], strict=True):
        torch.testing.assert_close(p.detach(), q, rtol=0, atol=0)
    ema = [p.clone() for p in snapshots[0]]  # optimiser step 1: decay 0, the EMA is the weights
    for k, params in enumerate(snapshots[1:], start=2):
        d = min(decay, k / (9 + k))  # diffusers EMAModel: min(decay, (1 + s)/(10 + s)), s = k − 1
        ema = [d * e + (1 - d) * p for e, p in zip(ema, params, strict=True)]
    for p, q in zip(log.ema_model.parameters(), ema, strict=True):
        torch.testing.assert_close(p.detach(), q, rtol=1e-5, atol=1e-6)
    assert not any(p.requires_grad for p in log.ema_model.parameters())


def test_on_step_sees_the_ema_weights_when_ema_is_on():
    seen = []
    model, log = _train(ema_decay=0.5, on_step=lambda k, m: seen.append(m))
    assert all(m is log.ema_model for m in seen) and log.ema_model is not model


def test_sync_every_does_not_change_uniform_training():
    m1, a = _train(steps=5)
    m3, b = _train(steps=5, sync_every=3)
    np.testing.assert_array_equal(a.losses, b.losses)
    np.testing.assert_array_equal(a.sample_timesteps, b.sample_timesteps)
    np.testing.assert_array_equal(a.sample_losses, b.sample_losses)
    for p, q in zip(m1.parameters(), m3.parameters(), strict=True):
        assert torch.equal(p, q)


def test_sync_every_delays_stage_changes_by_less_than_k_steps():
    def sampler():
        return CurriculumSampler(
            TimestepClusters(100, 4), PatiencePacer(patience=1, max_steps_per_stage=2, ema=0.0)
        )

    _, a = _train(steps=8, sampler=sampler())
    _, b = _train(steps=8, sampler=sampler(), sync_every=3)
    assert a.stages.tolist() == [1, 1, 2, 2, 3, 3, 4, 4]  # the cap: two steps per stage
    # read after step 3: losses 1, 2 advance to stage 2; loss 3 (a stage-1 step) is stale and not fed; after
    # step 6 losses 4, 5 advance to stage 3: each stage is judged on its own losses, no stage is skipped
    assert b.stages.tolist() == [1, 1, 1, 2, 2, 2, 3, 3]


def test_non_finite_loss_skips_the_step_or_raises_when_not_read_every_step():
    def poisoned():
        torch.manual_seed(0)
        m = make_unet(8, (8, 8))
        with torch.no_grad():
            next(m.parameters()).fill_(float("nan"))
        return m

    images = torch.rand(20, 1, 8, 8) * 2 - 1
    kw = dict(batch_size=4, generator=torch.Generator().manual_seed(0), device=CPU)
    model = poisoned()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.warns(RuntimeWarning, match="non-finite"):
        log = train_diffusion(
            model,
            _scheduler(100),
            images,
            CurriculumSampler(TimestepClusters(100, 4), PatiencePacer(patience=2)),
            steps=3,
            **kw,
        )
    assert log.skipped == 3
    for p, q in zip(model.parameters(), before, strict=True):
        torch.testing.assert_close(p.detach(), q, equal_nan=True, rtol=0, atol=0)  # no optimiser step taken
    with pytest.raises(FloatingPointError, match="step 1"):
        train_diffusion(
            poisoned(),
            _scheduler(100),
            images,
            CurriculumSampler(TimestepClusters(100, 4), order="uniform"),
            steps=2,
            sync_every=2,
            **kw,
        )


@pytest.mark.parametrize(
    ("kw", "match"),
    [(dict(sync_every=0), "sync_every"), (dict(ema_decay=1.0), "ema_decay"), (dict(steps=0), "steps")],
)
def test_bad_training_arguments_name_the_field(kw, match):
    with pytest.raises(ValueError, match=match):
        _train(**kw)
