"""Forward behaviour of the fixed-iteration solvers: convergence, closed forms, the lineax/jax regressions."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import sparse as jsparse

from iclr25_prdp import (
    METHODS,
    as_operator,
    conjugate_gradient,
    gauss_seidel,
    heat,
    jacobi,
    laplacian,
    solve,
    steepest_descent,
)


def dense_laplacian_1d(m, h, periodic=False):
    T = (np.diag(-2.0 * np.ones(m)) + np.diag(np.ones(m - 1), 1) + np.diag(np.ones(m - 1), -1)) / h**2
    if periodic:
        T[0, -1] = T[-1, 0] = 1.0 / h**2
    return T


@pytest.mark.parametrize(
    ("shape", "boundary"),
    [
        ((7,), "dirichlet"),
        ((5, 4), "dirichlet"),
        pytest.param((3, 4, 5), "dirichlet", marks=pytest.mark.slow),
        ((6, 5), "periodic"),
    ],
)
def test_laplacian_matches_kronecker_construction(shape, boundary):
    periodic = boundary == "periodic"
    hs = [1.0 / (m if periodic else m + 1) for m in shape]
    blocks = [dense_laplacian_1d(m, h, periodic) for m, h in zip(shape, hs)]
    eyes = [np.eye(m) for m in shape]
    expected = np.zeros((math.prod(shape),) * 2)
    for axis in range(len(shape)):
        factors = [blocks[i] if i == axis else eyes[i] for i in range(len(shape))]
        term = factors[0]
        for f in factors[1:]:
            term = np.kron(term, f)
        expected += term
    op = laplacian(shape, boundary=boundary)
    np.testing.assert_allclose(np.asarray(op.as_matrix()), expected, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(np.asarray(op.diagonal()), np.diag(expected), rtol=1e-12)


def test_heat_matrix_is_identity_minus_scaled_laplacian():
    A = np.asarray(heat(30, nu=0.001).as_matrix())
    expected = np.eye(30) - 0.001 * dense_laplacian_1d(30, 1 / 31)
    np.testing.assert_allclose(A, expected, rtol=1e-13)
    assert A[0, 0] == pytest.approx(1 + 0.002 * 31**2)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("shape", [(30,), pytest.param((8, 8), marks=pytest.mark.slow)])
def test_each_solver_converges_to_numpy_solve(method, shape):
    op = heat(shape, nu=0.001)
    rng = np.random.default_rng(0)
    b = rng.standard_normal(op.size)
    expected = np.linalg.solve(np.asarray(op.as_matrix()), b)
    errors = [
        np.linalg.norm(np.asarray(solve(op, b, method=method, iterations=k)) - expected) for k in (1, 10, 200)
    ]
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 1e-10 * np.linalg.norm(expected)


def test_zero_iterations_return_the_initial_guess():
    op = heat(10, nu=0.01)
    x0 = jnp.arange(10.0)
    for method in ("jacobi", "conjugate_gradient"):
        np.testing.assert_array_equal(solve(op, jnp.ones(10), method=method, iterations=0, x0=x0), x0)


@pytest.mark.parametrize(
    ("k", "theta_star"),
    [
        (25, 4.954),
        pytest.param(50, 3.103, marks=pytest.mark.slow),
        (100, 2.289),
        pytest.param(200, 2.0325, marks=pytest.mark.slow),
        (400, 2.00051),
    ],
)
def test_closed_form_poisson_bias(k, theta_star):
    # sin(2 pi x) is an eigenvector of the Jacobi iteration matrix (eigenvalue mu = cos(2 pi h)), so K Jacobi steps
    # from zero shrink u by (1 - mu^K) and the truncated least-squares fit of theta is theta_ref / (1 - mu^K)
    # (values above evaluated by hand for h = 1/31). Fit theta on our solver's output and compare.
    n, theta_ref = 30, 2.0
    op = laplacian(n)
    x = np.linspace(0, 1, n + 2)[1:-1]
    shape = -np.sin(2 * np.pi * x)
    u_ref = np.linalg.solve(np.asarray(op.as_matrix()), theta_ref * shape)
    u_unit = np.asarray(jacobi(op, jnp.asarray(shape), iterations=k))
    theta_fit = float(u_unit @ u_ref / (u_unit @ u_unit))
    assert theta_fit == pytest.approx(theta_star, abs=6e-4 * theta_star)
    assert theta_fit == pytest.approx(theta_ref / (1 - math.cos(2 * math.pi / 31) ** k), rel=1e-9)


def test_jacobi_error_follows_the_spectral_radius():
    # error of Jacobi on the 1-D Dirichlet Laplacian decays like rho^K, rho = cos(pi h) (the slowest mode)
    n = 30
    op = laplacian(n)
    h = 1 / (n + 1)
    x = np.linspace(0, 1, n + 2)[1:-1]
    u_exact = np.sin(np.pi * x)  # slowest mode
    b = np.asarray(op.mv(jnp.asarray(u_exact)))
    e100 = np.linalg.norm(np.asarray(jacobi(op, b, iterations=100)) - u_exact)
    e300 = np.linalg.norm(np.asarray(jacobi(op, b, iterations=300)) - u_exact)
    rate = (e300 / e100) ** (1 / 200)
    assert rate == pytest.approx(math.cos(math.pi * h), rel=1e-9)
    tol = 1e-6
    predicted = math.ceil(math.log(tol) / math.log(math.cos(math.pi * h)))
    errs = [
        np.linalg.norm(np.asarray(jacobi(op, b, iterations=k)) - u_exact) / np.linalg.norm(u_exact)
        for k in (predicted - 1, predicted)
    ]
    assert errs[0] > tol >= errs[1]


def test_fixed_step_cg_with_zero_tolerance_equals_a_manual_loop():
    # lineax #126: a fixed-K solve (no tolerance) must return the K-th iterate silently.
    rng = np.random.default_rng(1)
    Q = rng.standard_normal((12, 12))
    A = Q @ Q.T + 12 * np.eye(12)
    b = rng.standard_normal(12)
    x, r = np.zeros(12), b.copy()
    p = r.copy()
    for _ in range(5):
        Ap = A @ p
        alpha = (r @ r) / (p @ Ap)
        x = x + alpha * p
        r_new = r - alpha * Ap
        p = r_new + (r_new @ r_new) / (r @ r) * p
        r = r_new
    np.testing.assert_allclose(np.asarray(conjugate_gradient(jnp.asarray(A), b, iterations=5)), x, rtol=1e-12)
    # CG on n x n reaches the exact solution in n steps; extra steps are harmless no-ops
    np.testing.assert_allclose(
        np.asarray(conjugate_gradient(jnp.asarray(A), b, iterations=40)), np.linalg.solve(A, b), rtol=1e-9
    )


def test_manual_jacobi_gauss_seidel_and_steepest_descent_loops():
    rng = np.random.default_rng(2)
    A = rng.standard_normal((8, 8)) + 10 * np.eye(8)
    A = A @ A.T
    b = rng.standard_normal(8)
    x0 = rng.standard_normal(8)
    xj, xg, xs = x0.copy(), x0.copy(), x0.copy()
    D, L, U = np.diag(A), np.tril(A), np.triu(A, 1)
    for _ in range(4):
        xj = xj + (b - A @ xj) / D
        xg = np.linalg.solve(L, b - U @ xg)
        r = b - A @ xs
        xs = xs + (r @ r) / (r @ A @ r) * r
    Aj = jnp.asarray(A)
    np.testing.assert_allclose(np.asarray(jacobi(Aj, b, iterations=4, x0=x0)), xj, rtol=1e-11)
    np.testing.assert_allclose(np.asarray(gauss_seidel(Aj, b, iterations=4, x0=x0)), xg, rtol=1e-11)
    np.testing.assert_allclose(np.asarray(steepest_descent(Aj, b, iterations=4, x0=x0)), xs, rtol=1e-11)


def test_batched_operators_under_vmap_match_per_sample_solves():
    # lineax #26: a vmapped fixed-K solve over a batch of operators raises nothing and matches the loop.
    nus = jnp.array([1e-3, 5e-3, 2e-2])
    bs = jnp.stack([jnp.sin(jnp.arange(16.0) * (i + 1)) for i in range(3)])

    def one(nu, b):
        return conjugate_gradient(heat(16, nu=nu), b, iterations=7)

    batched = jax.vmap(one)(nus, bs)
    looped = jnp.stack([one(float(nu), b) for nu, b in zip(nus, bs)])
    np.testing.assert_allclose(np.asarray(batched), np.asarray(looped), rtol=1e-12)


def test_traced_iterations_under_jit_match_static():
    op = heat(20, nu=0.002)
    b = jnp.cos(jnp.arange(20.0))
    f = jax.jit(lambda b, k: jacobi(op, b, iterations=k, diff="implicit"))
    for k in (0, 3, 17):
        np.testing.assert_allclose(
            np.asarray(f(b, jnp.asarray(k))), np.asarray(jacobi(op, b, iterations=k)), rtol=1e-13
        )


def test_sparse_operator_agrees_with_the_stencil():
    op = heat(12, nu=0.003)
    b = jnp.linspace(-1, 1, 12)
    sparse = jsparse.BCOO.fromdense(op.as_matrix())
    np.testing.assert_allclose(
        np.asarray(jacobi(sparse, b, iterations=9)), np.asarray(jacobi(op, b, iterations=9)), rtol=1e-12
    )


@pytest.mark.slow
def test_dense_sparse_and_matvec_operators_agree_with_the_stencil():
    op = heat(12, nu=0.003)
    M = op.as_matrix()
    b = jnp.linspace(-1, 1, 12)
    expected = jacobi(op, b, iterations=9)
    for other in (M, jsparse.BCOO.fromdense(M), jsparse.BCSR.fromdense(M)):
        np.testing.assert_allclose(
            np.asarray(jacobi(other, b, iterations=9)), np.asarray(expected), rtol=1e-12
        )
    wrapped = as_operator(lambda x: M @ x, n=12)
    np.testing.assert_allclose(
        np.asarray(gauss_seidel(wrapped, b, iterations=9)),
        np.asarray(gauss_seidel(op, b, iterations=9)),
        rtol=1e-12,
    )
