"""QQA penalty and γ schedule invariants (arXiv:2409.02135 §3; endpoint-inclusive schedule as the official `qqa` wheel)."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from iclr25_qqa import AnnealConfig, categorical_penalty, gamma_schedule, penalty


@pytest.mark.parametrize("p", [2, 4, 6])
def test_binary_penalty_zero_on_binary_points_and_n_at_half(p):
    n = 5
    corners = np.array(list(itertools.product([0.0, 1.0], repeat=n)))
    np.testing.assert_array_equal(np.asarray(penalty(corners, p)), np.zeros(len(corners)))
    assert float(penalty(np.full(n, 0.5), p)) == pytest.approx(n)


@pytest.mark.parametrize("p", [2, 4])
def test_binary_penalty_gradient_vanishes_at_half_and_matches_finite_differences(p):
    grad = jax.grad(lambda x: penalty(x, p))
    np.testing.assert_allclose(np.asarray(grad(jnp.full(4, 0.5))), 0.0, atol=1e-7)
    x = np.array([0.1, 0.3, 0.62, 0.9])
    # d/dx [1 - (1-2x)^p] = 2p (1-2x)^(p-1), written out independently of the implementation
    np.testing.assert_allclose(np.asarray(grad(jnp.asarray(x))), 2 * p * (1 - 2 * x) ** (p - 1), rtol=1e-5)


def test_binary_penalty_is_concave_so_negative_gamma_is_convex():
    h = jax.hessian(lambda x: penalty(x, 2))(jnp.asarray([0.2, 0.7, 0.5]))
    np.testing.assert_allclose(np.asarray(h), -8.0 * np.eye(3), atol=1e-5)


@pytest.mark.parametrize(("k", "p"), [(2, 2), (3, 4), (4, 2)])
def test_categorical_penalty_zero_on_one_hot_and_n_at_uniform(k, p):
    n = 3
    one_hot = np.eye(k)[np.array([0, k - 1, 1 % k])]
    assert float(categorical_penalty(one_hot, p)) == pytest.approx(0.0, abs=1e-6)
    assert float(categorical_penalty(np.ones((n, k)), p)) == pytest.approx(n)
    # scale invariance: the penalty sees x / sum_k x
    x = np.random.default_rng(0).uniform(0.1, 1.0, (n, k))
    assert float(categorical_penalty(3.0 * x, p)) == pytest.approx(float(categorical_penalty(x, p)), rel=1e-5)


def test_categorical_penalty_single_class_is_zero():
    assert float(categorical_penalty(np.ones((4, 1)), 4)) == 0.0


@pytest.mark.parametrize("steps", [2, 3, 3000])
def test_schedule_is_linear_and_endpoint_inclusive(steps):
    s = gamma_schedule((-3.0, 0.1), steps)
    assert s.shape == (steps,)
    assert s[0] == -3.0
    assert s[-1] == 0.1  # the research code never reached gamma_max (QQA4CO src/qqa.py)
    np.testing.assert_allclose(np.diff(s), 3.1 / (steps - 1))


def test_schedule_single_step_uses_final_gamma():
    np.testing.assert_array_equal(gamma_schedule((-3.0, 0.1), 1), [0.1])


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"replicas": 0}, "replicas"),
        ({"steps": 0}, "steps"),
        ({"gamma": (0.1, -3.0)}, "gamma"),
        ({"gamma": (1.0, 1.0)}, "gamma"),
        ({"gamma": (float("nan"), 1.0)}, "gamma"),
        ({"p": 3}, "p"),
        ({"p": 0}, "p"),
        ({"lr": 0.0}, "lr"),
        ({"temperature": -1.0}, "temperature"),
        ({"diversity": 1.5}, "diversity"),
        ({"weight_decay": -0.1}, "weight_decay"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(change, field):
    with pytest.raises(ValueError, match=field):
        AnnealConfig(**change)


def test_config_rejects_non_integer_replicas():
    with pytest.raises(TypeError, match="replicas"):
        AnnealConfig(replicas=2.5)
