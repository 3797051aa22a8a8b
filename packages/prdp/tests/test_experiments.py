"""The experiments: data generation (fast) and the paper's headline comparisons at small scale (slow)."""

import jax.numpy as jnp
import numpy as np
import pytest

from iclr25_prdp._problems import HeatEmulator, controller_for, make_experiment
from iclr25_prdp._reproduce import iterations_to_reach


def test_heat_data_are_backward_euler_steps():
    problem = HeatEmulator(dim=1, train_samples=4, val_samples=2)
    train, val = problem.data()
    assert train.shape == (4, 3, 30)
    assert val.shape == (2, 3, 30)
    A = np.asarray(problem.operator().as_matrix())
    for traj in np.asarray(train):
        np.testing.assert_allclose(A @ traj[1], traj[0], atol=1e-10)
        np.testing.assert_allclose(A @ traj[2], traj[1], atol=1e-10)
    # training and validation initial conditions come from different seeds
    assert not np.allclose(np.asarray(train[:2, 0]), np.asarray(val[:, 0]))


def test_two_dimensional_initial_conditions_have_the_grid_shape():
    problem = HeatEmulator(dim=2, n=6, train_samples=3, val_samples=1)
    train, _ = problem.data()
    assert train.shape == (3, 3, 36)
    assert bool(jnp.all(jnp.isfinite(train)))


@pytest.mark.slow
def test_poisson_prdp_reaches_the_converged_accuracy_with_fewer_iterations():
    experiment = make_experiment("poisson-inverse")
    converged = experiment.train(epochs=180, iterations=600)
    prdp = experiment.train(epochs=180, controller=controller_for(experiment.spec))
    assert prdp.final_metric < 1e-5  # theta within 1e-5 relative of theta_ref = 2
    assert prdp.log.iterations[-1] == 600  # refined all the way to K_eps
    a, b = iterations_to_reach(prdp, 1e-4), iterations_to_reach(converged, 1e-4)
    assert a is not None
    assert b is not None
    assert a < 0.7 * b
    assert prdp.total_iterations < 0.6 * converged.total_iterations


@pytest.mark.slow
def test_heat_emulator_prdp_matches_the_converged_run_with_far_fewer_iterations():
    experiment = make_experiment("heat-emulator")
    converged = experiment.train(epochs=50, iterations=30)
    prdp = experiment.train(epochs=50, controller=controller_for(experiment.spec))
    coarse = experiment.train(epochs=50, iterations=2)
    assert prdp.final_metric <= 1.05 * converged.final_metric
    assert prdp.total_iterations <= 0.5 * converged.total_iterations
    assert coarse.final_metric > 5 * converged.final_metric  # too few iterations do hurt
