"""The Navier-Stokes projection step: exact discrete identities, mass conservation up to the solver's residual,
the pressure solvers against each other, derivatives through the step, and the emulator's cost accounting."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from iclr25_prdp import RefinementController, laplacian, solve
from iclr25_prdp._navier_stokes import KolmogorovFlow, NavierStokesEmulator, restrict

FLOW = KolmogorovFlow(n=12)


def _state(flow=FLOW, seed=0):
    return flow.random_state(jax.random.key(seed))


def test_divergence_of_gradient_is_the_periodic_five_point_laplacian():
    p = jax.random.normal(jax.random.key(1), (FLOW.n, FLOW.n))
    lap = laplacian((FLOW.n, FLOW.n), boundary="periodic", length=FLOW.length)
    np.testing.assert_allclose(
        np.asarray(FLOW.divergence(*FLOW.gradient(p))).reshape(-1),
        np.asarray(lap.mv(p.reshape(-1))),
        rtol=1e-12,
        atol=1e-12,
    )


def test_random_states_and_restriction_are_divergence_free():
    u, v = _state()
    assert float(jnp.max(jnp.abs(FLOW.divergence(u, v)))) < 1e-12
    fine = dataclasses.replace(FLOW, n=2 * FLOW.n)
    uf, vf = _state(fine, seed=3)
    assert float(jnp.max(jnp.abs(fine.divergence(uf, vf)))) < 1e-12
    uc, vc = restrict(uf, vf)
    assert uc.shape == (FLOW.n, FLOW.n)
    assert float(jnp.max(jnp.abs(FLOW.divergence(uc, vc)))) < 1e-12


@pytest.mark.parametrize("method", ["conjugate_gradient", "jacobi"])
def test_divergence_after_projection_is_dt_times_the_solver_residual(method):
    # D(u*) - dt Delta_h p = -dt (r_K + c mean(p)) exactly, for any K; the divergence vanishes as the solve converges
    u, v = _state()
    du, dv = FLOW.tendency(u, v)
    u_star, v_star = u + FLOW.dt * du, v + FLOW.dt * dv
    rhs = FLOW.pressure_rhs(u_star, v_star)
    assert abs(float(jnp.mean(rhs))) < 1e-12 * float(jnp.max(jnp.abs(rhs)))
    op = FLOW.pressure_operator()
    previous = math.inf
    for k in (2, 10, 40):
        un, vn = FLOW.step(u, v, iterations=k, method=method)
        p = solve(op, rhs, method=method, iterations=k, diff="implicit")
        residual = rhs - op.mv(p)
        expected = -FLOW.dt * (residual + FLOW.pin * jnp.mean(p)).reshape(FLOW.n, FLOW.n)
        np.testing.assert_allclose(np.asarray(FLOW.divergence(un, vn)), np.asarray(expected), atol=1e-10)
        size = float(jnp.linalg.norm(FLOW.divergence(un, vn)))
        assert size < previous
        previous = size
    converged = FLOW.step(u, v, iterations=200, method="conjugate_gradient")
    assert float(jnp.max(jnp.abs(FLOW.divergence(*converged)))) < 1e-9
    exact = FLOW.exact_step(u, v)
    assert float(jnp.max(jnp.abs(FLOW.divergence(*exact)))) < 1e-9
    for a, b in zip(converged, exact, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-9)


def test_fft_pressure_solves_the_pinned_system():
    rhs = jax.random.normal(jax.random.key(2), (FLOW.n * FLOW.n,))
    rhs = rhs - jnp.mean(rhs)
    p = FLOW.exact_pressure(rhs)
    op = FLOW.pressure_operator()
    assert abs(float(jnp.mean(p))) < 1e-12
    np.testing.assert_allclose(np.asarray(op.mv(p)), np.asarray(rhs), atol=1e-9)
    dense = np.asarray(op.as_matrix())
    np.testing.assert_allclose(dense, dense.T, atol=1e-12)
    assert np.linalg.eigvalsh(dense).min() > 0  # the pin makes the operator positive definite


def test_float32_cg_stays_converged_far_past_convergence():
    # regression: without the mean pin, round-off in the constant mode made float32 CG blow up after ~100 steps
    flow = KolmogorovFlow(n=32)
    u, v = (a.astype(jnp.float32) for a in flow.random_state(jax.random.key(0)))
    du, dv = flow.tendency(u, v)
    rhs = flow.pressure_rhs(u + flow.dt * du, v + flow.dt * dv)
    op = flow.pressure_operator(jnp.float32)
    for k in (80, 400):
        p = solve(op, rhs, method="conjugate_gradient", iterations=k, diff="implicit")
        rel = float(jnp.linalg.norm(rhs - op.mv(p)) / jnp.linalg.norm(rhs))
        assert rel < 1e-4, (k, rel)


@pytest.mark.slow  # the fast tier keeps the implicit solve's finite-difference check (test_gradients.py)
def test_implicit_derivative_of_the_step_matches_finite_differences_at_convergence():
    flow = KolmogorovFlow(n=8)
    u, v = flow.random_state(jax.random.key(4))
    du, dv = flow.random_state(jax.random.key(5))

    def f(s):
        un, vn = flow.step(
            u + s * du, v + s * dv, iterations=100, method="conjugate_gradient", diff="implicit"
        )
        return jnp.sum(un * jnp.cos(un)) + jnp.sum(vn**2)

    eps = 1e-5
    f_jit = jax.jit(f)  # compiled: the eager step dispatched hundreds of small ops (24 s of the fast tier)
    fd = (f_jit(eps) - f_jit(-eps)) / (2 * eps)
    assert float(jax.jit(jax.grad(f))(0.0)) == pytest.approx(float(fd), rel=1e-6)


def test_bad_flow_parameters_raise_naming_the_field():
    with pytest.raises(ValueError, match="nu"):
        KolmogorovFlow(nu=0.0)
    with pytest.raises(ValueError, match="n must be"):
        KolmogorovFlow(n=2)
    with pytest.raises(ValueError, match="method"):
        NavierStokesEmulator(method="steepest_descent")
    with pytest.raises(ValueError, match="batch_size"):
        NavierStokesEmulator(train_samples=10, batch_size=4)


@pytest.mark.slow
def test_emulator_trains_and_accounts_for_every_pressure_solve():
    emulator = NavierStokesEmulator(
        flow=KolmogorovFlow(n=8), train_samples=4, val_samples=2, batch_size=2, rollout=2, spinup=0.2
    )
    data = emulator.data()
    assert data[0].shape == (4, 3, 2, 8, 8)
    for frame in np.asarray(data[0]).reshape(-1, 2, 8, 8):
        assert np.abs(np.asarray(emulator.flow.divergence(frame[0], frame[1]))).max() < 1e-9
    controller = RefinementController(
        initial_iterations=1, step=1, max_iterations=5, plateau_window=1, ema_window=1
    )
    result = emulator.train(epochs=4, controller=controller, data=data)
    ks = result.log.iterations[1:]
    # per epoch: 2 batches x 2 rollout steps x (forward + adjoint) solves of K iterations each
    assert result.log.solver_iterations[1:] == [8 * k for k in ks]
    assert all(np.isfinite(result.log.metric))


@pytest.mark.slow
def test_interleaved_arms_equal_separate_runs_and_the_timing_diagnostic_runs():
    from iclr25_prdp._reproduce import equal_accuracy, interleave, solve_share

    emulator = NavierStokesEmulator(
        flow=KolmogorovFlow(n=8), train_samples=4, val_samples=2, batch_size=2, rollout=2, spinup=0.2
    )
    data = emulator.data()

    def prdp():
        return RefinementController(
            initial_iterations=1, step=2, max_iterations=7, plateau_window=1, ema_window=1
        )

    plan = [("converged", {"iterations": 7}), ("PRDP", {"controller": prdp()})]
    pair = interleave(emulator, plan, epochs=4, key=jax.random.key(3), data=data)
    alone = {
        "converged": emulator.train(epochs=4, iterations=7, key=jax.random.key(3), data=data),
        "PRDP": emulator.train(epochs=4, controller=prdp(), key=jax.random.key(3), data=data),
    }
    for label in ("converged", "PRDP"):
        # interleaving changes only the clock: the same compiled functions on the same inputs
        assert pair[label].log.metric == alone[label].log.metric
        assert pair[label].log.iterations == alone[label].log.iterations
        assert pair[label].extra == alone[label].extra
        wall = pair[label].log.wall_time
        assert len(wall) == 5
        assert wall == sorted(wall)
    row = equal_accuracy(pair["converged"], pair["PRDP"])
    assert row["target metric"] == max(pair["converged"].final_metric, pair["PRDP"].final_metric)
    timing = solve_share(emulator, data, 7, repeats=1)
    assert timing["epoch s at K=0"] > 0
    assert timing["epoch s at K_eps"] > 0
    assert timing["solve share"] == 1 - timing["epoch s at K=0"] / timing["epoch s at K_eps"]
    with pytest.raises(ValueError, match="iterations"):
        emulator.epoch_seconds(data, -1)


def test_converged_iterations_follow_the_solvers_convergence_rates_across_grids():
    # measured at n = 32 (relative residual 1e-3: CG 40, Jacobi 300); elsewhere CG ~ n, Jacobi ~ n^2
    def spec(n, method):
        return NavierStokesEmulator(flow=KolmogorovFlow(n=n), method=method).spec

    assert spec(32, "conjugate_gradient").converged_iterations == 40
    assert spec(32, "jacobi").converged_iterations == 300
    assert spec(64, "conjugate_gradient").converged_iterations == 80
    assert spec(64, "jacobi").converged_iterations == 1200
    assert spec(64, "jacobi").controller["step"] == 200
    small = spec(8, "jacobi")
    assert 1 <= small.controller["initial_iterations"] <= small.converged_iterations


def test_converged_iterations_reach_the_residual_target_at_32():
    # the K_eps claim behind the spec, on a state of the Kolmogorov flow (float32, as trained)
    flow = KolmogorovFlow(n=32)
    u, v = (a.astype(jnp.float32) for a in flow.random_state(jax.random.key(7)))
    for _ in range(5):
        u, v = flow.exact_step(u, v)
    du, dv = flow.tendency(u, v)
    rhs = flow.pressure_rhs(u + flow.dt * du, v + flow.dt * dv)
    op = flow.pressure_operator(jnp.float32)
    for method in ("conjugate_gradient", "jacobi"):
        k = NavierStokesEmulator(flow=flow, method=method).spec.converged_iterations
        p = solve(op, rhs, method=method, iterations=k, diff="implicit")
        rel = float(jnp.linalg.norm(rhs - op.mv(p)) / jnp.linalg.norm(rhs))
        assert rel < 2e-3, (method, rel)
        p_half = solve(op, rhs, method=method, iterations=k // 2, diff="implicit")
        rel_half = float(jnp.linalg.norm(rhs - op.mv(p_half)) / jnp.linalg.norm(rhs))
        assert rel_half > 2 * rel, (method, rel_half, rel)  # K_eps is not far past convergence


@pytest.mark.slow
def test_navier_stokes_prdp_saves_iterations_at_equal_accuracy_over_three_seeds():
    # a 16x16 version of the README's Jacobi row (K_eps = 75, K0 = dK = 12 by the n^2 extrapolation), arms
    # interleaved as in `reproduce`; iterations only (wall time is not asserted in tests)
    from iclr25_prdp._problems import controller_for
    from iclr25_prdp._reproduce import equal_accuracy, interleave
    from iclr25_shared.stats import paired_difference

    emulator = NavierStokesEmulator(
        flow=KolmogorovFlow(n=16), method="jacobi", train_samples=32, val_samples=8
    )
    spec = emulator.spec
    data = emulator.data()
    rows = []
    for seed in (1, 2, 3):
        plan = [
            ("converged", {"iterations": spec.converged_iterations}),
            ("PRDP", {"controller": controller_for(spec)}),
        ]
        pair = interleave(emulator, plan, epochs=30, key=jax.random.key(seed), data=data)
        row = equal_accuracy(pair["converged"], pair["PRDP"])
        assert pair["PRDP"].final_metric < 1.2 * pair["converged"].final_metric
        assert pair["PRDP"].log.iterations[1] == spec.controller["initial_iterations"]
        assert pair["PRDP"].final_iterations > spec.controller["initial_iterations"]  # it did refine
        rows.append(row)
    ratio = [r["PRDP: iterations"] / r["converged: iterations"] for r in rows]
    estimate, _ = paired_difference(
        ratio, [1.0] * len(ratio)
    )  # PRDP / converged - 1, as `reproduce` reports it
    assert all(r["iterations saved"] > 0.3 for r in rows), rows
    assert estimate.high < -0.3, estimate
