"""Retraining strategies, structured pruning and the diffusion game (arXiv:2407.03153 Section 3.2), on tiny models
and random images (fast); the real-data path is exercised by tests/test_cli.py and the reproduction."""

import math

import numpy as np
import pytest
import torch

from iclr25_diffusion_shapley import (
    ContributorData,
    DiffusionGame,
    GradientAscentUnlearn,
    MLPDenoiser,
    Retrain,
    SparsifiedFineTune,
    exact_shapley,
    kernel_shap,
    make_contributors,
    make_scheduler,
    make_unet,
    parameter_count,
    prune_model,
    sample_images,
    train_denoiser,
)

SHAPE = (1, 8, 8)


def tiny_data(n=3, per=12, seed=0):
    rng = np.random.default_rng(seed)
    # contributor j's images are centred on a different constant, so the strategies see different data
    images = np.concatenate(
        [np.clip(rng.normal(-0.6 + 0.6 * j, 0.2, size=(per, *SHAPE)), -1, 1) for j in range(n)]
    )
    owners = np.repeat(np.arange(n), per)
    return ContributorData(images.astype(np.float32), owners, tuple(f"c{j}" for j in range(n)))


def make_mlp(seed):
    torch.manual_seed(seed)
    return MLPDenoiser(SHAPE, hidden=16, depth=2, time_dim=8)


def inputs(b=4, shape=SHAPE, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn((b, *shape), generator=g), torch.randint(0, 1000, (b,), generator=g)


# ---- pruning --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["mlp", "unet"])
def test_pruning_keeps_the_function_at_ratio_zero(kind):
    model = (
        make_mlp(0) if kind == "mlp" else (torch.manual_seed(0), make_unet(8, channels=(8, 16), groups=4))[1]
    )
    shape = SHAPE
    x, t = inputs(shape=shape)
    pruned = prune_model(model, 0.0)
    assert parameter_count(pruned) == parameter_count(model)
    with torch.no_grad():
        a, b = model(x, t), pruned(x, t)
    a, b = (a.sample, b.sample) if kind == "unet" else (a, b)
    assert torch.equal(a, b)


def test_pruning_removes_hidden_units_and_keeps_output_shape():
    model = make_mlp(0)
    pruned = prune_model(model, 0.5)
    x, t = inputs()
    assert pruned(x, t).shape == x.shape
    # a hidden-to-hidden Linear keeps (1 - r)^2 of its weights: 16x16 -> 8x8
    assert pruned.blocks[0].weight.shape == (8, 8)
    assert pruned.head.out_features == model.head.out_features  # the output layer is never pruned
    assert model.blocks[0].weight.shape == (16, 16)  # the original is untouched


def test_pruning_keeps_the_largest_magnitude_units():
    model = make_mlp(0)
    with torch.no_grad():  # make the input layer's units 0..7 clearly the largest (by L2 norm of their group)
        for layer in [model.inp, model.time_mlp[0], *model.blocks, *model.time_proj]:
            layer.weight[8:] *= 1e-3
            layer.bias[8:] *= 1e-3
        for layer in [*model.blocks, *model.time_proj, model.head]:
            layer.weight[:, 8:] *= 1e-3
    pruned = prune_model(model, 0.5)
    np.testing.assert_allclose(pruned.inp.weight.detach().numpy(), model.inp.weight[:8].detach().numpy())


def test_pruned_diffusers_unet_runs():
    # regression: diffusers' Downsample2D/Upsample2D assert a stored channel count that pruning leaves stale
    torch.manual_seed(0)
    unet = make_unet(8, channels=(8, 16), groups=4)
    pruned = prune_model(unet, 0.5)
    x, t = inputs()
    assert pruned(x, t).sample.shape == x.shape
    assert parameter_count(pruned) < 0.5 * parameter_count(unet)


@pytest.mark.parametrize("ratio", [1.0, -0.1, 1.5, math.nan])
def test_pruning_ratio_outside_unit_interval_is_refused(ratio):
    with pytest.raises(ValueError, match="pruning_ratio"):
        prune_model(make_mlp(0), ratio)
    with pytest.raises(ValueError, match="pruning_ratio"):
        SparsifiedFineTune(data=tiny_data(), make_model=make_mlp, full_model=make_mlp(0), pruning_ratio=ratio)


# ---- data -----------------------------------------------------------------------------------------------------


def test_fewer_than_two_contributors_is_refused():
    with pytest.raises(ValueError, match="at least 2"):
        ContributorData(np.zeros((3, *SHAPE), np.float32), np.zeros(3, np.int64), ("only",))
    with pytest.raises(ValueError, match="at least 2"):
        make_contributors(np.zeros((3, *SHAPE), np.float32), np.zeros(3), [(0,)])


def test_contributor_with_no_data_is_refused_by_name():
    with pytest.raises(ValueError, match="contributor 1 \\('b'\\) has no data"):
        ContributorData(np.zeros((3, *SHAPE), np.float32), np.array([0, 0, 2]), ("a", "b", "c"))
    labels = np.array([0, 1, 2, 3])
    with pytest.raises(ValueError, match="no data"):
        make_contributors(np.zeros((4, *SHAPE), np.float32), labels, [(0, 1), (7,)])


def test_make_contributors_groups_by_class_and_refuses_overlap():
    labels = np.array([0, 1, 2, 3, 2])
    data = make_contributors(np.zeros((5, *SHAPE), np.float32), labels, [(0, 2), (3,)])
    np.testing.assert_array_equal(data.counts(), [3, 1])
    with pytest.raises(ValueError, match="overlap"):
        make_contributors(np.zeros((5, *SHAPE), np.float32), labels, [(0, 2), (2, 3)])


def test_select_of_empty_coalition_is_refused():
    with pytest.raises(ValueError, match="empty coalition"):
        tiny_data().select(np.zeros(3, bool))


# ---- training and sampling ------------------------------------------------------------------------------------


def ddpm_loss(model, images, scheduler, seed=0):
    g = torch.Generator().manual_seed(seed)
    x0 = torch.as_tensor(images)
    noise = torch.randn(x0.shape, generator=g)
    t = torch.randint(0, 1000, (len(x0),), generator=g)
    a = scheduler.alphas_cumprod[t].float().view(-1, 1, 1, 1)
    with torch.no_grad():
        return float(((model(a.sqrt() * x0 + (1 - a).sqrt() * noise, t) - noise) ** 2).mean())


def test_training_lowers_and_gradient_ascent_raises_the_ddpm_loss():
    data = tiny_data()
    sch = make_scheduler(prediction_type="epsilon")  # ddpm_loss is the ε-prediction loss
    model = make_mlp(0)
    before = ddpm_loss(model, data.images, sch)
    train_denoiser(model, data.images, steps=60, batch_size=16, lr=3e-3, scheduler=sch)
    after = ddpm_loss(model, data.images, sch)
    assert after < 0.8 * before
    train_denoiser(model, data.images, steps=20, batch_size=16, lr=1e-3, scheduler=sch, ascent=True)
    assert ddpm_loss(model, data.images, sch) > after


def test_non_finite_training_loss_is_reported_with_the_step():
    images = np.full((4, *SHAPE), np.nan, np.float32)
    with pytest.raises(FloatingPointError, match="step 0"):
        train_denoiser(make_mlp(0), images, steps=3, batch_size=2)


def test_sampling_is_deterministic_and_in_range():
    model = make_mlp(0)
    a = sample_images(model, 5, image_shape=SHAPE, steps=4, seed=3)
    b = sample_images(model, 5, image_shape=SHAPE, steps=4, seed=3, batch_size=2)
    assert a.shape == (5, *SHAPE) and a.dtype == np.float32
    assert np.abs(a).max() <= 1.0
    np.testing.assert_allclose(a, b, atol=1e-5)  # batching does not change the samples (float32 round-off)


# ---- strategies and the game ----------------------------------------------------------------------------------


def mean_pixel(images):
    return float(images.mean())


def test_unlearning_the_grand_coalition_returns_the_full_model():
    data = tiny_data()
    full = train_denoiser(make_mlp(0), data.images, steps=5, batch_size=8)
    ga = GradientAscentUnlearn(data=data, make_model=make_mlp, full_model=full, steps=3)
    x, t = inputs()
    with torch.no_grad():
        assert torch.equal(ga.fit(np.ones(3, bool))(x, t), full(x, t))
        assert not torch.equal(ga.fit(np.array([1, 0, 0], bool))(x, t), full(x, t))


def test_sparse_ft_with_zero_steps_gives_the_closed_form_of_a_symmetric_game():
    # with no per-coalition fine-tuning every non-empty coalition gets the same model, so v(S) = c for S != empty;
    # by symmetry and efficiency every contributor gets (c - v(empty)) / n
    data = tiny_data()
    full = train_denoiser(make_mlp(0), data.images, steps=5, batch_size=8)
    sft = SparsifiedFineTune(
        data=data, make_model=make_mlp, full_model=full, pruning_ratio=0.5, prune_steps=3, steps=0
    )
    game = DiffusionGame(sft, mean_pixel, SHAPE, num_samples=8, sampling_steps=3)
    phi = exact_shapley(game, 3)
    c, v0 = game(np.ones(3, bool)), game(np.zeros(3, bool))
    assert c != v0
    np.testing.assert_allclose(phi, (c - v0) / 3, atol=1e-6)


def test_retrain_game_is_deterministic_and_efficient():
    data = tiny_data()
    rt = Retrain(data=data, make_model=make_mlp, steps=8, batch_size=8)
    game = DiffusionGame(rt, mean_pixel, SHAPE, num_samples=8, sampling_steps=3)
    m = np.array([1, 0, 1], bool)
    assert game(m) == game(m)  # same initialisation, minibatches and sampling noise
    res = kernel_shap(game, 3, 6, seed=0)
    assert res.values.sum() == pytest.approx(res.full_value - res.empty_value, abs=1e-9)
    assert {r["coalition"] for r in game.records} >= {(0, 2), (), (0, 1, 2)}
    assert all(r["train_seconds"] >= 0 for r in game.records)


def test_empty_coalition_uses_the_untrained_model():
    data = tiny_data()
    rt = Retrain(data=data, make_model=make_mlp, steps=3, batch_size=8)
    game = DiffusionGame(rt, mean_pixel, SHAPE, num_samples=6, sampling_steps=3)
    expect = mean_pixel(sample_images(make_mlp(0), 6, image_shape=SHAPE, steps=3, seed=game.sample_seed))
    assert game(np.zeros(3, bool)) == pytest.approx(expect, abs=1e-6)


def test_non_finite_property_is_refused_by_the_game():
    rt = Retrain(data=tiny_data(), make_model=make_mlp, steps=2, batch_size=4)
    game = DiffusionGame(rt, lambda images: math.nan, SHAPE, num_samples=4, sampling_steps=2)
    with pytest.raises(ValueError, match="finite"):
        game(np.array([1, 0, 0], bool))


@pytest.mark.gpu
def test_strategies_run_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    data = tiny_data()

    def make_cuda(seed):
        return make_mlp(seed).cuda()

    rt = Retrain(data=data, make_model=make_cuda, steps=3, batch_size=4, device="cuda")
    full = rt.fit(np.ones(3, bool))
    sft = SparsifiedFineTune(
        data=data, make_model=make_cuda, full_model=full, prune_steps=2, steps=2, device="cuda"
    )
    game = DiffusionGame(sft, mean_pixel, SHAPE, num_samples=4, sampling_steps=2)
    assert math.isfinite(game(np.array([1, 1, 0], bool)))


def test_sample_prediction_trains_towards_the_clean_image():
    data = tiny_data()
    sch = make_scheduler(prediction_type="sample")
    model = make_mlp(0)

    def x0_loss():
        g = torch.Generator().manual_seed(0)
        x0 = torch.as_tensor(data.images)
        t = torch.randint(0, 1000, (len(x0),), generator=g)
        a = sch.alphas_cumprod[t].float().view(-1, 1, 1, 1)
        xt = a.sqrt() * x0 + (1 - a).sqrt() * torch.randn(x0.shape, generator=g)
        with torch.no_grad():
            return float(((model(xt, t) - x0) ** 2).mean())

    before = x0_loss()
    train_denoiser(model, data.images, steps=60, batch_size=16, lr=3e-3, scheduler=sch)
    assert x0_loss() < 0.5 * before

    # a model that outputs x0 = c exactly makes deterministic DDIM return c (clipped) from any noise
    class Constant(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.zeros(()))

        def forward(self, x, t):
            return torch.full_like(x, 0.25) + 0 * self.p

    out = sample_images(Constant(), 3, image_shape=SHAPE, steps=5, scheduler=sch)
    np.testing.assert_allclose(out, 0.25, atol=1e-5)
    with pytest.raises(ValueError, match="prediction_type"):
        make_scheduler(prediction_type="v")


# ---- library defaults = the CLI's (issue 42) --------------------------------------------------------------------


def test_library_defaults_are_the_cli_defaults():
    # The README's library snippet ran the library defaults (ε-prediction, lr 1e-3), the setting the same README
    # calls "mostly noise", while the CLI defaults to x0-prediction and lr 2e-3. Every shared knob must agree.
    import dataclasses
    import inspect

    from iclr25_diffusion_shapley import fashion_mnist_contributors
    from iclr25_diffusion_shapley.cli import AttributeConfig

    cli = AttributeConfig()
    assert make_scheduler().config.prediction_type == cli.prediction_type == "sample"
    assert inspect.signature(train_denoiser).parameters["lr"].default == cli.lr == 2e-3
    assert inspect.signature(train_denoiser).parameters["batch_size"].default == cli.batch_size
    assert inspect.signature(fashion_mnist_contributors).parameters["per_class"].default == cli.per_class
    mlp = inspect.signature(MLPDenoiser).parameters
    assert (mlp["hidden"].default, mlp["depth"].default) == (cli.hidden, 3)
    defaults = {
        cls: {f.name: f.default for f in dataclasses.fields(cls)}
        for cls in (Retrain, SparsifiedFineTune, GradientAscentUnlearn, DiffusionGame)
    }
    assert defaults[Retrain]["lr"] == defaults[SparsifiedFineTune]["lr"] == cli.lr
    assert defaults[GradientAscentUnlearn]["lr"] == cli.unlearn_lr
    assert all(defaults[c]["batch_size"] == cli.batch_size for c in (Retrain, SparsifiedFineTune))
    assert defaults[Retrain]["steps"] == cli.retrain_steps
    assert defaults[SparsifiedFineTune]["prune_steps"] == cli.prune_steps
    assert defaults[SparsifiedFineTune]["steps"] == cli.ft_steps
    assert defaults[SparsifiedFineTune]["pruning_ratio"] == cli.pruning_ratio
    assert defaults[GradientAscentUnlearn]["steps"] == cli.unlearn_steps
    assert defaults[DiffusionGame]["num_samples"] == cli.num_samples
    assert defaults[DiffusionGame]["sampling_steps"] == cli.sampling_steps


def test_a_strategy_built_with_defaults_trains_and_samples_x0_prediction():
    rt = Retrain(data=tiny_data(), make_model=make_mlp, steps=1, batch_size=4)
    assert rt.scheduler.config.prediction_type == "sample" and rt.lr == 2e-3
    ga = GradientAscentUnlearn(data=tiny_data(), make_model=make_mlp, full_model=make_mlp(0))
    assert ga.scheduler.config.prediction_type == "sample" and ga.lr == 1e-4
