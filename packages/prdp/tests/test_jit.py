"""Issue 16: jitted solves (jitted == eager, one compilation per shape and K, none per refinement) and implicit
gradients w.r.t. operator parameters of a non-symmetric operator and w.r.t. sparse (BCOO) values, against dense
solves."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import sparse as jsparse

from iclr25_prdp import RefinementController, _solvers, advection_diffusion, as_operator, heat, solve


@pytest.fixture
def trace_counter(monkeypatch):
    """Counts how often the Jacobi iteration is traced (it runs in Python only while JAX traces)."""
    calls = []
    original = _solvers._ITERATIONS["jacobi"]

    def counted(op, r, k, kw):
        calls.append(op.size)
        return original(op, r, k, kw)

    monkeypatch.setitem(_solvers._ITERATIONS, "jacobi", counted)
    return calls


@pytest.mark.parametrize("method", ["jacobi", "conjugate_gradient"])
@pytest.mark.parametrize("diff", ["unrolled", "implicit"])
def test_jitted_solve_equals_the_eager_computation(method, diff):
    op = heat((5, 4), nu=0.02)
    b = jnp.sin(jnp.arange(20.0))
    x0 = 0.1 * jnp.cos(jnp.arange(20.0))
    got = solve(op, b, method=method, iterations=7, x0=x0, diff=diff)
    with jax.disable_jit():
        eager, bad = _solvers._solve_core(op, b, x0, 7, method, diff, 1.0)
    assert not bool(bad)
    np.testing.assert_allclose(np.asarray(got), np.asarray(eager), rtol=1e-12, atol=1e-14)
    # and the K-step iterate is what a plain Python loop gives (Jacobi)
    if method == "jacobi":
        A, x = np.asarray(op.as_matrix()), np.asarray(x0)
        for _ in range(7):
            x = x + (np.asarray(b) - A @ x) / np.diag(A)
        np.testing.assert_allclose(np.asarray(got), x, rtol=1e-12)


def test_implicit_mode_compiles_once_for_every_k(trace_counter):
    op = heat(23, nu=0.01)  # a size no other test uses, so nothing is cached yet
    b = jnp.ones(23)
    for k in (3, 5, 9, 5, 40):
        solve(op, b, method="jacobi", iterations=k, diff="implicit")
    first = len(trace_counter)
    assert first >= 1
    # a new operator object built alike shares the compilation (stencils are pytrees, no closure conversion)
    solve(heat(23, nu=0.02), b, method="jacobi", iterations=11, diff="implicit")
    assert len(trace_counter) == first


def test_unrolled_mode_compiles_once_per_k(trace_counter):
    op = heat(29, nu=0.01)
    b = jnp.ones(29)
    for k in (3, 5, 3, 5, 3):
        solve(op, b, method="jacobi", iterations=k, diff="unrolled")
    assert len(trace_counter) == 2  # K is static in unrolled mode: K = 3 and K = 5, nothing more


def test_refinements_do_not_recompile_the_training_step(trace_counter):
    from iclr25_prdp._problems import PoissonInverse

    per_epoch = []
    controller = RefinementController(
        initial_iterations=5,
        step=5,
        max_iterations=200,
        plateau_threshold=0.92,
        ema_window=1,
        plateau_window=2,
    )
    result = PoissonInverse(n=31).train(
        epochs=40, controller=controller, callback=lambda epoch, log: per_epoch.append(len(trace_counter))
    )
    ks = [k for k in result.log.iterations[1:]]
    assert len(set(ks)) >= 3, ks  # the controller refined at least twice
    assert per_epoch[1] >= 1
    assert per_epoch[-1] == per_epoch[1]  # traced during the first epoch only


def _upwind_dense(n, c, nu, dt=1.0):
    """The same advection-diffusion matrix built entry by entry (Dirichlet, c > 0)."""
    h = 1.0 / (n + 1)
    eye = jnp.eye(n)
    down = jnp.eye(n, k=-1)  # (S x)_i = x_{i-1}
    up = jnp.eye(n, k=1)
    lap = (up - 2 * eye + down) / h**2
    return eye + dt * (c * (eye - down) / h - nu * lap)


@pytest.mark.slow  # fast tier: the A^T adjoint of a non-symmetric operator and the operator-parameter gradient
def test_implicit_gradient_wrt_parameters_of_a_non_symmetric_operator():
    n = 12
    b = jnp.sin(jnp.arange(1.0, n + 1))
    w = jnp.cos(0.7 * jnp.arange(n))
    c0, nu0 = 0.8, 0.002
    np.testing.assert_allclose(
        np.asarray(advection_diffusion(n, velocity=c0, nu=nu0).as_matrix()),
        np.asarray(_upwind_dense(n, c0, nu0)),
        rtol=1e-13,
    )
    assert not np.allclose(np.asarray(_upwind_dense(n, c0, nu0)), np.asarray(_upwind_dense(n, c0, nu0)).T)

    def loss_dense(p):
        return jnp.dot(w, jnp.linalg.solve(_upwind_dense(n, p[0], p[1]), b))

    def loss(p, k):
        op = advection_diffusion(n, velocity=p[0], nu=p[1])
        return jnp.dot(w, solve(op, b, method="jacobi", iterations=k, diff="implicit"))

    p = jnp.array([c0, nu0])
    grad = jax.jit(
        jax.grad(loss), static_argnums=1
    )  # compiled: eager dispatch made this the slowest fast test
    # at convergence: the dense-solve gradient
    np.testing.assert_allclose(np.asarray(grad(p, 400)), np.asarray(jax.grad(loss_dense)(p)), rtol=1e-9)

    # at finite K: dL/dp = -v^T (dA/dp) x_K with x_K = K Jacobi steps on A and v = K Jacobi steps on A^T w
    k = 6
    A = np.asarray(_upwind_dense(n, c0, nu0))
    x, v = np.zeros(n), np.zeros(n)
    for _ in range(k):
        x = x + (np.asarray(b) - A @ x) / np.diag(A)
        v = v + (np.asarray(w) - A.T @ v) / np.diag(A)
    dA = np.asarray(jax.jacfwd(lambda q: _upwind_dense(n, q[0], q[1]))(p))  # (n, n, 2)
    expected = -np.einsum("i,ijp,j->p", v, dA, x)
    np.testing.assert_allclose(np.asarray(grad(p, k)), expected, rtol=1e-10)


@pytest.mark.parametrize("diff", ["implicit", "unrolled"])
def test_gradient_wrt_bcoo_values_matches_the_dense_solve(diff):
    rng = np.random.default_rng(3)
    n = 10
    M = np.where(rng.random((n, n)) < 0.3, rng.standard_normal((n, n)), 0.0) + 6 * np.eye(n)
    assert not np.allclose(M, M.T)
    sparse = jsparse.BCOO.fromdense(jnp.asarray(M))
    indices = sparse.indices
    b = jnp.asarray(rng.standard_normal(n))
    w = jnp.asarray(rng.standard_normal(n))

    def loss(data):
        A = jsparse.BCOO((data, indices), shape=(n, n))
        return jnp.dot(w, solve(A, b, method="jacobi", iterations=200, diff=diff))

    def loss_dense(dense):
        return jnp.dot(w, jnp.linalg.solve(dense, b))

    g_sparse = jax.grad(loss)(sparse.data)
    g_dense = jax.grad(loss_dense)(jnp.asarray(M))
    expected = np.asarray(g_dense)[np.asarray(indices[:, 0]), np.asarray(indices[:, 1])]
    np.testing.assert_allclose(np.asarray(g_sparse), expected, rtol=1e-9, atol=1e-12)
    # the wrapped operator carries the values as traced leaves, not as constants of a closure
    leaves = jax.tree_util.tree_leaves(as_operator(sparse))
    assert any(leaf is sparse.data for leaf in leaves)
