"""Fixed-iteration linear solvers, differentiable by unrolling or implicitly.

PRDP runs an iterative solver for ``A x = b`` for a *fixed* number of iterations ``K`` (no tolerance) and
differentiates the truncated solve ``x_K = P_K(b)`` in one of two ways (arXiv:2502.19611, Sec. 3):

``diff="unrolled"``
    automatic differentiation through all ``K`` iterations (reverse mode stores the ``K`` iterates).

``diff="implicit"``
    treat ``x_K`` as if it were ``A^{-1} b`` and differentiate the linear system instead: the backward pass solves
    the adjoint system ``A^T v = g`` (forward mode: ``A xdot = bdot - Adot x``) with the **same** solver and the
    same ``K``. Gradients flow to ``b`` and to parameters of ``A`` (``-v x^T`` through the matvec); the initial
    guess ``x0`` is treated as a constant (its gradient is zero). Memory does not grow with ``K``.
    Built on ``jax.lax.custom_linear_solve``. Unlike the official PRDP code, the adjoint solve uses ``A^T``,
    which matters for non-symmetric operators, and the tangent/adjoint solves start from zero.

Every solver runs ``K`` iterations on the residual system ``A d = b - A x0`` from ``d_0 = 0`` and returns
``x0 + d_K``: exactly the ``K``-th iterate started from ``x0`` (all four methods are affine-equivariant).

``iterations`` may be a Python ``int`` or an integer scalar array. :func:`solve` validates its arguments in Python
and then makes one call to a cached compiled function (``equinox.filter_jit``): operator leaves, ``b``, ``x0`` are
traced, so it compiles once per operator structure and shape. In implicit mode ``K`` is always traced (a
``lax.fori_loop``), so one compilation serves every ``K`` and a refinement never recompiles. In unrolled mode a
Python-int ``K`` is static (a ``lax.scan``, reverse-mode differentiable; one compilation per ``K``); a traced ``K``
(inside the caller's ``jit``) gives a ``fori_loop``, which JAX cannot reverse-differentiate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from iclr25_prdp._operators import Operator, as_operator
from iclr25_shared.checks import check_choice, check_float, check_int

__all__ = [
    "DIFF_MODES",
    "METHODS",
    "conjugate_gradient",
    "gauss_seidel",
    "jacobi",
    "solve",
    "steepest_descent",
]

DIFF_MODES = ("unrolled", "implicit")
METHODS = ("jacobi", "gauss_seidel", "conjugate_gradient", "steepest_descent")

# One step maps a carry to the next carry; the first carry element is the iterate d_k.
Step = Callable[[tuple[jax.Array, ...]], tuple[jax.Array, ...]]


# ----------------------------------------------------------------------------------------------------------------
# validation


def _is_traced(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


def _check_iterations(iterations: Any) -> int | jax.Array:
    if isinstance(iterations, (bool, int, np.integer)):
        return check_int("iterations", iterations, low=0)
    if isinstance(iterations, (jax.Array, np.ndarray)):
        if iterations.shape != () or not jnp.issubdtype(iterations.dtype, jnp.integer):
            raise TypeError(
                f"iterations must be an integer scalar, got an array of shape {iterations.shape} "
                f"and dtype {iterations.dtype}"
            )
        if not _is_traced(iterations):
            return check_int("iterations", int(iterations), low=0)
        return iterations
    raise TypeError(
        f"iterations must be a non-negative integer, got {type(iterations).__name__} {iterations!r}"
    )


def _check_system(op: Operator, b: Any, x0: Any, diff: str) -> tuple[jax.Array, jax.Array | None]:
    """Validate shapes and dtypes (no computation: ``x0 = None`` stays ``None``, casts happen in the jit)."""
    check_choice("diff", diff, DIFF_MODES)
    b = b if isinstance(b, (jax.Array, np.ndarray)) else jnp.asarray(b)
    if not jnp.issubdtype(b.dtype, jnp.floating):
        raise TypeError(f"b must have a floating dtype, got {b.dtype}")
    if b.ndim != 1 or b.shape[0] != op.size:
        raise ValueError(
            f"operator and right-hand side shape mismatch: operator acts on vectors of length {op.size}, "
            f"b has shape {tuple(b.shape)} (batch with jax.vmap)"
        )
    if x0 is not None:
        x0 = x0 if isinstance(x0, (jax.Array, np.ndarray)) else jnp.asarray(x0)
        if x0.shape != b.shape:
            raise ValueError(f"x0 must have the shape of b {tuple(b.shape)}, got {tuple(x0.shape)}")
    return b, x0


def _raise_or_flag(bad: jax.Array, message: str, x: jax.Array) -> jax.Array:
    """Raise ``ValueError`` for a concrete ``bad``; under a trace attach a runtime check (``eqx.error_if``)."""
    if _is_traced(bad):
        return eqx.error_if(x, bad, message)
    if bool(bad):
        raise ValueError(message)
    return x


def _probe_symmetry(op: Operator) -> None:
    """Randomised symmetry test ``u^T A v == v^T A u`` (concrete operators only; raises ValueError)."""
    n = op.size
    key_u, key_v = jax.random.split(jax.random.key(20250219))
    u = jax.random.normal(key_u, (n,), op.dtype)
    v = jax.random.normal(key_v, (n,), op.dtype)
    Av, Au = op.mv(v), op.mv(u)
    if _is_traced(Av) or _is_traced(Au):
        return
    lhs, rhs = float(jnp.vdot(u, Av)), float(jnp.vdot(v, Au))
    scale = float(jnp.linalg.norm(u) * jnp.linalg.norm(Av) + jnp.linalg.norm(v) * jnp.linalg.norm(Au))
    tol = 100 * float(jnp.finfo(op.dtype).eps) * max(scale, 1e-300)
    if abs(lhs - rhs) > tol:
        raise ValueError(
            "conjugate_gradient and steepest_descent need a symmetric positive definite operator; this one is "
            f"not symmetric (u^T A v - v^T A u = {lhs - rhs:.3g}); use jacobi or gauss_seidel"
        )


# ----------------------------------------------------------------------------------------------------------------
# iterations from zero on A d = r; each returns (d_K, failure flag)


def _safe_div(num: jax.Array, den: jax.Array) -> jax.Array:
    ok = den != 0
    return jnp.where(ok, num / jnp.where(ok, den, 1), 0)


def _loop(step: Step, carry: tuple[jax.Array, ...], iterations: int | jax.Array) -> tuple[jax.Array, ...]:
    if isinstance(iterations, int):
        carry, _ = jax.lax.scan(lambda c, _: (step(c), None), carry, None, length=iterations)
        return carry
    return jax.lax.fori_loop(0, iterations, lambda _, c: step(c), carry)


def _jacobi_iterations(op: Operator, r: jax.Array, iterations: int | jax.Array, omega: float):
    inv_diag = omega / op.diagonal()

    def step(carry):
        (d,) = carry
        return (d + inv_diag * (r - op.mv(d)),)

    (d,) = _loop(step, (jnp.zeros_like(r),), iterations)
    return d, jnp.asarray(False)


def _gauss_seidel_iterations(op: Operator, r: jax.Array, iterations: int | jax.Array):
    M = op.as_matrix()
    lower = jnp.tril(M)  # D + L
    upper = jnp.triu(M, 1)

    def step(carry):
        (d,) = carry
        return (jax.scipy.linalg.solve_triangular(lower, r - upper @ d, lower=True),)

    (d,) = _loop(step, (jnp.zeros_like(r),), iterations)
    return d, jnp.asarray(False)


def _normalised(krylov: Callable[[jax.Array], tuple[jax.Array, jax.Array]], r: jax.Array):
    """Run a scale-equivariant method on ``r / s`` and rescale (``s = max|r|``, treated as a constant).

    Keeps inner products away from float32 underflow for tiny right-hand sides (tiny cotangents in the adjoint
    solve: jax issue #40254); exact because CG and steepest descent from zero satisfy ``P(c r) = c P(r)``.
    """
    s = jax.lax.stop_gradient(jnp.max(jnp.abs(r)))
    safe = jnp.where(s > 0, s, 1)
    d, bad = krylov(r / safe)
    return d * safe, bad


def _cg_iterations(op: Operator, r: jax.Array, iterations: int | jax.Array):
    def run(rhs):
        def step(carry):
            d, res, p, rr, bad = carry
            Ap = op.mv(p)
            pAp = jnp.vdot(p, Ap)
            bad = bad | ((pAp <= 0) & (rr > 0))
            alpha = _safe_div(rr, pAp)
            d = d + alpha * p
            res = res - alpha * Ap
            rr_new = jnp.vdot(res, res)
            p = res + _safe_div(rr_new, rr) * p
            return d, res, p, rr_new, bad

        zero = jnp.zeros_like(rhs)
        carry = (zero, rhs, rhs, jnp.vdot(rhs, rhs), jnp.asarray(False))
        d, _, _, _, bad = _loop(step, carry, iterations)
        return d, bad

    return _normalised(run, r)


def _sd_iterations(op: Operator, r: jax.Array, iterations: int | jax.Array):
    def run(rhs):
        def step(carry):
            d, res, bad = carry
            Ar = op.mv(res)
            rr, rAr = jnp.vdot(res, res), jnp.vdot(res, Ar)
            bad = bad | ((rAr <= 0) & (rr > 0))
            alpha = _safe_div(rr, rAr)
            return d + alpha * res, res - alpha * Ar, bad

        d, _, bad = _loop(step, (jnp.zeros_like(rhs), rhs, jnp.asarray(False)), iterations)
        return d, bad

    return _normalised(run, r)


_ITERATIONS = {
    "jacobi": lambda op, r, k, kw: _jacobi_iterations(op, r, k, kw.get("omega", 1.0)),
    "gauss_seidel": lambda op, r, k, kw: _gauss_seidel_iterations(op, r, k),
    "conjugate_gradient": lambda op, r, k, kw: _cg_iterations(op, r, k),
    "steepest_descent": lambda op, r, k, kw: _sd_iterations(op, r, k),
}


# ----------------------------------------------------------------------------------------------------------------
# the public entry point


def solve(
    operator: Any,
    b: jax.Array,
    *,
    method: str,
    iterations: int | jax.Array,
    x0: jax.Array | None = None,
    diff: str = "unrolled",
    omega: float = 1.0,
) -> jax.Array:
    """Run ``iterations`` steps of ``method`` on ``A x = b`` from ``x0`` and return the last iterate.

    Args:
        operator: ``A``, anything :func:`~iclr25_prdp.as_operator` accepts (stencil, matrix, sparse matrix,
            lineax operator).
        b: right-hand side, shape ``(n,)``, floating dtype. Batch with ``jax.vmap``.
        method: ``"jacobi"``, ``"gauss_seidel"``, ``"conjugate_gradient"`` or ``"steepest_descent"``.
        iterations: ``K >= 0``; a Python int or an integer scalar (traced values allowed, see module docs).
            ``K = 0`` returns ``x0``.
        x0: initial guess, shape ``(n,)`` (default zeros).
        diff: ``"unrolled"`` or ``"implicit"`` (see module docs).
        omega: Jacobi relaxation weight (1 = plain Jacobi); ignored by the other methods.

    Returns:
        ``x_K``, shape ``(n,)``, dtype of ``b`` promoted with the operator's.

    Raises:
        TypeError: ``iterations`` not an integer; ``b`` not floating; unsupported operator type.
        ValueError: ``iterations < 0``; shape mismatch between operator, ``b`` and ``x0``; unknown ``method`` or
            ``diff``; a zero on the diagonal (Jacobi, Gauss-Seidel); a non-symmetric operator (CG, steepest
            descent, checked with a randomised probe on concrete operators) or non-positive curvature
            ``p^T A p <= 0`` met during CG / steepest descent (the operator is not positive definite). Under
            ``jax.jit`` the data-dependent checks raise at run time through ``equinox.error_if``.

    References:
        arXiv:2502.19611, Sec. 3 (fixed-``K`` physics solver ``P_K``; unrolled vs implicit differentiation).
    """
    check_choice("method", method, METHODS)
    check_float("omega", omega, low=0.0, high=2.0, low_inclusive=False, high_inclusive=False)
    op = as_operator(operator)
    iterations = _check_iterations(iterations)
    b, x0 = _check_system(op, b, x0, diff)

    if method in ("conjugate_gradient", "steepest_descent") and not op.symmetric:
        _probe_symmetry(op)
    if diff == "implicit" and isinstance(iterations, int):
        # implicit mode never differentiates the loop itself, so K can be traced: one compilation for every K
        iterations = np.asarray(iterations, np.int32)
    x, bad = _solve_jit(op, b, x0, iterations, method, diff, float(omega))
    if method in ("jacobi", "gauss_seidel"):
        message = _zero_diagonal_message(method)
    else:
        message = (
            f"{method}: met non-positive curvature p^T A p <= 0; the operator is not symmetric positive "
            "definite (negate a negative definite operator such as the Laplacian, or use jacobi)"
        )
    return _raise_or_flag(bad, message, x)


def _zero_diagonal_message(method: str) -> str:
    return f"{method}: the operator has a zero on its diagonal, so {method} is undefined"


@eqx.filter_jit
def _solve_jit(
    op: Operator,
    b: jax.Array,
    x0: jax.Array | None,
    iterations: int | jax.Array,
    method: str,
    diff: str,
    omega: float,
) -> tuple[jax.Array, jax.Array]:
    """The compiled solve; arrays (operator leaves, ``b``, ``x0``, a traced ``K``) are traced, the rest static.

    Compiles once per (operator structure, shapes, dtypes, method, diff, omega), and per value of ``K`` only when
    ``K`` is a Python int (unrolled mode: reverse-mode differentiation of the loop needs a static length).
    """
    return _solve_core(op, b, x0, iterations, method, diff, omega)


def _solve_core(
    op: Operator,
    b: jax.Array,
    x0: jax.Array | None,
    iterations: int | jax.Array,
    method: str,
    diff: str,
    omega: float,
) -> tuple[jax.Array, jax.Array]:
    """``(x_K, failure flag)``; the flag is a zero diagonal (Jacobi, Gauss-Seidel) or non-positive curvature
    (CG, steepest descent), and the caller turns it into an error."""
    dtype = jnp.result_type(b.dtype, op.dtype, *(() if x0 is None else (x0.dtype,)))
    b = b.astype(dtype)
    x0 = jnp.zeros_like(b) if x0 is None else x0.astype(dtype)
    iterate = _ITERATIONS[method]
    kwargs = {"omega": omega}
    if diff == "unrolled":
        d, bad = iterate(op, b - op.mv(x0), iterations, kwargs)
        x = x0 + d
    else:
        x0c = jax.lax.stop_gradient(x0)
        op_T = op.T

        def forward(_matvec, rhs):
            return iterate(op, rhs, iterations, kwargs)

        def adjoint(_vecmat, rhs):
            return iterate(op_T, rhs, iterations, kwargs)

        d, bad = jax.lax.custom_linear_solve(op.mv, b - op.mv(x0c), forward, adjoint, has_aux=True)
        x = x0c + d
    if method in ("jacobi", "gauss_seidel"):
        bad = jnp.any(op.diagonal() == 0)
    return x, bad


def _named(method: str) -> Callable[..., jax.Array]:
    def fn(
        operator: Any,
        b: jax.Array,
        *,
        iterations: int | jax.Array,
        x0: jax.Array | None = None,
        diff: str = "unrolled",
        **kwargs: Any,
    ) -> jax.Array:
        return solve(operator, b, method=method, iterations=iterations, x0=x0, diff=diff, **kwargs)

    fn.__name__ = fn.__qualname__ = method
    return fn


jacobi = _named("jacobi")
jacobi.__doc__ = """Weighted Jacobi, ``x <- x + omega D^{-1} (b - A x)`` (``omega=1``: plain Jacobi), ``iterations`` times.

The PRDP Poisson and heat experiments use plain Jacobi. Converges for strictly diagonally dominant ``A`` and for
the Laplacian / BTCS heat matrices (spectral radius ``cos(pi h)`` for the 1-D Dirichlet Laplacian).
Signature and errors as :func:`solve` (keyword ``omega`` in (0, 2)).

References:
    arXiv:2502.19611, Sec. 4.1-4.2; official ``linear_solvers_scan.py``.
"""

gauss_seidel = _named("gauss_seidel")
gauss_seidel.__doc__ = """Forward Gauss-Seidel, ``(D + L) x_{k+1} = b - U x_k``, ``iterations`` times.

Uses the dense matrix (a triangular solve per iteration, ``O(n^2)``): meant for the small systems of the paper's
experiments, not for large grids. Signature and errors as :func:`solve`.
"""

conjugate_gradient = _named("conjugate_gradient")
conjugate_gradient.__doc__ = """Conjugate gradients for a symmetric positive definite ``A``, exactly ``iterations`` steps.

No tolerance: a fixed-``K`` solve (the lineax issue #126 case, ``rtol = atol = 0``) returns the ``K``-th iterate
silently; once the residual is exactly zero the remaining steps are no-ops. Non-SPD input is detected, never
silently accepted (see :func:`solve`). Signature and errors as :func:`solve`.
"""

steepest_descent = _named("steepest_descent")
steepest_descent.__doc__ = """Steepest descent with exact line search, ``x <- x + (r^T r / r^T A r) r``, ``iterations`` times.

For symmetric positive definite ``A``. Note that the step length depends on ``b``, so ``x_K`` is not linear in
``b`` and unrolled and implicit gradients differ for finite ``K``. Signature and errors as :func:`solve`.
"""
