"""Unrolled vs implicit differentiation: identities, limits, finite differences, the A^T adjoint, regressions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from iclr25_prdp import (
    advection_diffusion,
    conjugate_gradient,
    heat,
    jacobi,
    laplacian,
    solve,
    steepest_descent,
)

N = 30
X = jnp.linspace(0.0, 1.0, N + 2)[1:-1]
SHAPE = -jnp.sin(2 * jnp.pi * X)
POISSON = laplacian(N)
U_REF = jnp.linalg.solve(POISSON.as_matrix(), 2.0 * SHAPE)


def poisson_loss(theta, k, diff, method="jacobi", x0=None):
    u = solve(POISSON, theta * SHAPE, method=method, iterations=k, diff=diff, x0=x0)
    return jnp.sum((u - U_REF) ** 2) / (2 * N)


@pytest.mark.parametrize(
    "k", [1, pytest.param(5, marks=pytest.mark.slow), 25, pytest.param(100, marks=pytest.mark.slow), 600]
)
def test_unrolled_equals_implicit_when_theta_enters_through_b(k):
    # Jacobi from x0 is affine in b, so the K-step tangent solve is the exact derivative of the K-step solve.
    g_unrolled = jax.grad(poisson_loss)(3.0, k, "unrolled")
    g_implicit = jax.grad(poisson_loss)(3.0, k, "implicit")
    assert float(g_implicit) == pytest.approx(float(g_unrolled), rel=1e-10, abs=1e-14)
    x0 = jnp.cos(3 * X)  # also with a warm start
    g_u = jax.grad(poisson_loss)(3.0, k, "unrolled", "jacobi", x0)
    g_i = jax.grad(poisson_loss)(3.0, k, "implicit", "jacobi", x0)
    assert float(g_i) == pytest.approx(float(g_u), rel=1e-10, abs=1e-14)


def test_forward_mode_implicit_equals_unrolled_for_a_whole_field():
    op = heat(N, nu=0.001)
    b = jnp.sin(3 * X)

    def f(b, diff):
        return jacobi(op, b, iterations=4, diff=diff)

    J_u = jax.jacfwd(f)(b, "unrolled")
    J_i = jax.jacfwd(f)(b, "implicit")
    J_r = jax.jacrev(f)(b, "implicit")
    np.testing.assert_allclose(np.asarray(J_i), np.asarray(J_u), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(J_r), np.asarray(J_u), rtol=1e-12, atol=1e-14)


def test_steepest_descent_modes_differ_at_finite_k():
    # alpha depends on b, so SD is not linear in b: implicit != unrolled (a negative control).
    op = heat(N, nu=0.001)
    b0 = jnp.sin(3 * X) + 0.3 * jnp.cos(7 * X)

    def f(s, diff):
        return jnp.sum(steepest_descent(op, s * b0 + jnp.cos(X), iterations=3, diff=diff) ** 2)

    g_u, g_i = jax.grad(f)(1.0, "unrolled"), jax.grad(f)(1.0, "implicit")
    assert abs(g_u - g_i) > 1e-6 * abs(g_u)


def test_both_modes_match_the_direct_gradient_at_convergence():
    A = POISSON.as_matrix()

    def direct(theta):
        u = jnp.linalg.solve(A, theta * SHAPE)
        return jnp.sum((u - U_REF) ** 2) / (2 * N)

    g_direct = jax.grad(direct)(3.0)
    for diff in ("unrolled", "implicit"):
        assert float(jax.grad(poisson_loss)(3.0, 3000, diff)) == pytest.approx(float(g_direct), rel=1e-6)


@pytest.mark.parametrize(
    "method",
    [
        "jacobi",
        "conjugate_gradient",
        pytest.param("steepest_descent", marks=pytest.mark.slow),
        pytest.param("gauss_seidel", marks=pytest.mark.slow),
    ],
)
def test_unrolled_gradient_matches_central_differences(method):
    op = heat(N, nu=0.002)
    b0 = jnp.sin(2 * X)

    def f(nu_scale):
        A = heat(N, nu=0.002 * nu_scale)
        u = solve(A, nu_scale * b0, method=method, iterations=6, diff="unrolled")
        return jnp.sum(u**3)

    eps = 1e-5
    fd = (f(1.0 + eps) - f(1.0 - eps)) / (2 * eps)
    assert float(jax.grad(f)(1.0)) == pytest.approx(float(fd), rel=1e-6)
    del op


def test_implicit_gradient_wrt_operator_parameter_at_convergence():
    # d/dnu of a loss through x = A(nu)^{-1} b: implicit diff gives -v^T (dA/dnu) x; compare with the direct solve.
    b = jnp.sin(2 * X) + 0.5

    def loss(nu, diff):
        x = conjugate_gradient(heat(N, nu=nu), b, iterations=60, diff=diff)
        return jnp.sum(x**2)

    def direct(nu):
        return jnp.sum(jnp.linalg.solve(heat(N, nu=nu).as_matrix(), b) ** 2)

    g = jax.grad(direct)(0.003)
    assert float(jax.grad(loss)(0.003, "implicit")) == pytest.approx(float(g), rel=1e-8)
    assert float(jax.grad(loss)(0.003, "unrolled")) == pytest.approx(float(g), rel=1e-8)


def test_implicit_adjoint_uses_the_transpose_for_non_symmetric_operators():
    op = advection_diffusion(25, velocity=2.0, nu=0.01, dt=0.05)
    M = np.asarray(op.as_matrix())
    assert np.abs(M - M.T).max() > 1.0  # really non-symmetric
    b = jnp.linspace(0.0, 1.0, 25) ** 2
    g = jnp.cos(jnp.arange(25.0))
    _, vjp = jax.vjp(lambda b: jacobi(op, b, iterations=400, diff="implicit"), b)
    (v,) = vjp(g)
    np.testing.assert_allclose(np.asarray(v), np.linalg.solve(M.T, np.asarray(g)), rtol=1e-10)
    assert (
        np.abs(np.asarray(v) - np.linalg.solve(M, np.asarray(g))).max() > 1e-2
    )  # the official A-shortcut is wrong
    # and at finite K, the implicit VJP is exactly K Jacobi steps on A^T
    _, vjp5 = jax.vjp(lambda b: jacobi(op, b, iterations=5, diff="implicit"), b)
    np.testing.assert_allclose(np.asarray(vjp5(g)[0]), np.asarray(jacobi(op.T, g, iterations=5)), rtol=1e-13)


def test_implicit_mode_treats_the_initial_guess_as_constant():
    # lineax #104: differentiating w.r.t. the initial guess must not raise. Implicit: zero; unrolled: M^K for small K.
    op = heat(N, nu=0.001)
    b = jnp.sin(4 * X)
    x0 = jnp.cos(X)
    w = jnp.linspace(1.0, 2.0, N)

    def f(x0, diff, k):
        return jnp.sum(w * jacobi(op, b, iterations=k, x0=x0, diff=diff))

    assert np.all(np.asarray(jax.grad(f)(x0, "implicit", 3)) == 0.0)
    g_unrolled = np.asarray(jax.grad(f)(x0, "unrolled", 3))
    A = np.asarray(op.as_matrix())
    Mj = np.eye(N) - A / np.diag(A)[:, None]  # Jacobi iteration matrix
    np.testing.assert_allclose(g_unrolled, np.linalg.matrix_power(Mj, 3).T @ np.asarray(w), rtol=1e-12)
    assert np.abs(np.asarray(jax.grad(f)(x0, "unrolled", 400))).max() < 1e-12  # forgotten at convergence


@pytest.mark.parametrize("diff", ["implicit", pytest.param("unrolled", marks=pytest.mark.slow)])
def test_tiny_cotangents_in_float32_give_finite_gradients(diff):
    # jax #40254: CG's adjoint solve divided 0/0 for cotangents ~1e-13 in float32.
    op = heat(16, nu=0.01, dtype=jnp.float32)
    b = jnp.sin(jnp.arange(16, dtype=jnp.float32))

    def loss(b, scale, diff):
        return scale * jnp.sum(conjugate_gradient(op, b, iterations=8, diff=diff) ** 2)

    grad = jax.jit(jax.grad(loss), static_argnums=2)
    g = np.asarray(grad(b, jnp.float32(1.0), diff), dtype=np.float64)
    for scale in (1e-13, 1e-30):
        tiny = np.asarray(grad(b, jnp.float32(scale), diff), dtype=np.float64)
        assert np.all(np.isfinite(tiny))
        np.testing.assert_allclose(tiny / scale, g, rtol=1e-3, atol=1e-6 * np.abs(g).max())


def test_jit_of_grad_equals_eager_grad():
    # jax #11213: grad(jit(step)) through a CG solve raised TypeError: Zero(...).
    op = heat(N, nu=0.002)

    def step(theta):
        return jnp.sum(conjugate_gradient(op, theta * SHAPE, iterations=10, diff="implicit") ** 2)

    eager = jax.grad(step)(1.5)
    assert float(jax.grad(jax.jit(step))(1.5)) == pytest.approx(float(eager), rel=1e-12)
    assert float(jax.jit(jax.grad(step))(1.5)) == pytest.approx(float(eager), rel=1e-12)


def test_reverse_mode_with_traced_iterations_works_in_implicit_mode():
    op = heat(N, nu=0.001)

    @jax.jit
    def g(theta, k):
        return jax.grad(lambda t: jnp.sum(jacobi(op, t * SHAPE, iterations=k, diff="implicit") ** 2))(theta)

    ref = jax.grad(lambda t: jnp.sum(jacobi(op, t * SHAPE, iterations=7, diff="unrolled") ** 2))(2.0)
    assert float(g(2.0, jnp.asarray(7))) == pytest.approx(float(ref), rel=1e-12)
