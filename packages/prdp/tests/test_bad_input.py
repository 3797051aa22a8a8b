"""Every bad input the issue names raises a clear error naming the field."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from iclr25_prdp import as_operator, conjugate_gradient, heat, jacobi, laplacian, solve, steepest_descent

OP = heat(8, nu=0.01)
B = jnp.ones(8)


@pytest.mark.parametrize("iterations", [-1, -100])
def test_negative_iterations(iterations):
    with pytest.raises(ValueError, match=r"iterations must be an integer in \[0, inf\)"):
        jacobi(OP, B, iterations=iterations)


@pytest.mark.parametrize("iterations", [2.0, 2.5, True, "3", jnp.ones(2, jnp.int32), jnp.asarray(3.0)])
def test_non_integer_iterations(iterations):
    with pytest.raises(TypeError, match="iterations"):
        jacobi(OP, B, iterations=iterations)


def test_shape_mismatch_between_operator_and_rhs():
    with pytest.raises(ValueError, match="shape mismatch"):
        jacobi(OP, jnp.ones(9), iterations=2)
    with pytest.raises(ValueError, match="shape mismatch"):
        jacobi(OP, jnp.ones((2, 8)), iterations=2)
    with pytest.raises(ValueError, match="x0"):
        jacobi(OP, B, iterations=2, x0=jnp.ones(7))


def test_integer_rhs_and_unknown_options():
    with pytest.raises(TypeError, match="floating"):
        jacobi(OP, jnp.ones(8, jnp.int32), iterations=2)
    with pytest.raises(ValueError, match="method"):
        solve(OP, B, method="gmres", iterations=2)
    with pytest.raises(ValueError, match="diff"):
        jacobi(OP, B, iterations=2, diff="adjoint")
    with pytest.raises(ValueError, match="omega"):
        jacobi(OP, B, iterations=2, omega=2.5)


def test_jacobi_and_gauss_seidel_on_a_zero_diagonal():
    A = jnp.array([[0.0, 1.0], [1.0, 2.0]])
    for method in ("jacobi", "gauss_seidel"):
        with pytest.raises(ValueError, match="zero on its diagonal"):
            solve(A, jnp.ones(2), method=method, iterations=3)


def test_zero_diagonal_under_jit_raises_at_run_time():
    A = jnp.array([[0.0, 1.0], [1.0, 2.0]])
    with pytest.raises(Exception, match="zero on its diagonal"):
        jax.jit(lambda A: jacobi(A, jnp.ones(2), iterations=3))(A).block_until_ready()


def test_cg_and_sd_reject_non_spd_operators():
    rng = np.random.default_rng(0)
    nonsym = jnp.asarray(rng.standard_normal((6, 6)) + 6 * np.eye(6))
    for fn in (conjugate_gradient, steepest_descent):
        with pytest.raises(ValueError, match="not symmetric"):
            fn(nonsym, jnp.ones(6), iterations=3)
        with pytest.raises(ValueError, match="not symmetric positive definite"):
            fn(laplacian(6), jnp.ones(6), iterations=3)  # symmetric negative definite
    indefinite = jnp.diag(jnp.array([1.0, 2.0, -3.0, 4.0]))
    with pytest.raises(ValueError, match="non-positive curvature"):
        conjugate_gradient(indefinite, jnp.ones(4), iterations=4, diff="implicit")


def test_operator_construction_errors():
    with pytest.raises(ValueError, match="square"):
        as_operator(jnp.ones((3, 4)))
    with pytest.raises(TypeError, match="operator must be"):
        as_operator("matrix")
    with pytest.raises(ValueError, match="n must be"):
        as_operator(lambda x: x)
    with pytest.raises(ValueError, match="boundary"):
        laplacian(8, boundary="neumann")
    with pytest.raises(ValueError, match="nu"):
        heat(8, nu=-1.0)
    with pytest.raises(ValueError, match="shape"):
        laplacian((2, 2, 2, 2))
