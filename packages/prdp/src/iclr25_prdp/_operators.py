"""Linear operators for sparse discretised PDEs, built on lineax.

Every operator acts on a flat vector of ``n`` degrees of freedom (a ``d``-dimensional grid of shape ``grid_shape``
is flattened in C order). :class:`Operator` pairs a :class:`lineax.AbstractLinearOperator` (matrix-vector
product, transpose, materialisation) with the operator's diagonal, which the Jacobi and Gauss-Seidel solvers
need and which a matrix-free stencil knows in closed form (a generic matvec would otherwise have to be
materialised to find it).

Grid conventions (length ``L`` per axis):

- ``"dirichlet"``: ``m`` interior points per axis, spacing ``h = L / (m + 1)``, zero boundary values.
- ``"periodic"``: ``m`` points per axis, spacing ``h = L / m``.

References:
    Bhatia, Koehler, Thuerey. "PRDP: Progressively Refined Differentiable Physics", ICLR 2025, arXiv:2502.19611,
    Sec. 4 (Poisson and heat problems; BTCS heat matrix ``I - nu * dt * Laplacian``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
from jax.experimental import sparse as jsparse

from iclr25_shared.checks import check_choice, check_float, check_int

__all__ = [
    "Operator",
    "advection_diffusion",
    "as_operator",
    "heat",
    "laplacian",
]

_BOUNDARIES = ("dirichlet", "periodic")


class Operator(eqx.Module):
    """A square linear operator ``A`` on flat vectors of length ``n``, with its diagonal.

    Attributes:
        linear: the lineax operator providing ``A @ x`` (``mv``), ``A^T`` and materialisation.
        diag: ``diag(A)``, shape ``(n,)``, or ``None`` when unknown (it is then materialised on first use).
        grid_shape: the grid the flat vector reshapes to (``(n,)`` for a plain matrix).

    It is a JAX pytree: it can be passed through ``jax.jit``, ``jax.vmap`` and ``jax.grad`` (gradients flow into
    array-valued parameters such as the diffusivity used to build it).
    """

    linear: lx.AbstractLinearOperator
    diag: jax.Array | None
    grid_shape: tuple[int, ...] = eqx.field(static=True)

    @property
    def size(self) -> int:
        """Number of degrees of freedom ``n``."""
        return self.linear.in_size()

    @property
    def dtype(self) -> Any:
        return self.linear.in_structure().dtype

    def mv(self, x: jax.Array) -> jax.Array:
        """``A @ x`` for ``x`` of shape ``(n,)``."""
        return self.linear.mv(x)

    def __matmul__(self, x: jax.Array) -> jax.Array:
        return self.mv(x)

    @property
    def T(self) -> Operator:
        """The transpose ``A^T`` (lineax transposes a matvec with ``jax.linear_transpose``)."""
        return Operator(self.linear.transpose(), self.diag, self.grid_shape)

    def diagonal(self) -> jax.Array:
        """``diag(A)``, shape ``(n,)``; materialises the operator when it was not given."""
        return self.diag if self.diag is not None else lx.diagonal(self.linear)

    def as_matrix(self) -> jax.Array:
        """The dense ``(n, n)`` matrix (``n`` matvecs for a matrix-free operator)."""
        return self.linear.as_matrix()

    @property
    def symmetric(self) -> bool:
        """Whether ``A`` is tagged symmetric (stencils are tagged; a plain matrix is not)."""
        return lx.is_symmetric(self.linear)


def _stencil_operator(
    matvec: Callable[[jax.Array], jax.Array],
    diag: jax.Array,
    grid_shape: tuple[int, ...],
    dtype: Any,
    tags: Sequence[object],
) -> Operator:
    n = math.prod(grid_shape)
    structure = jax.ShapeDtypeStruct((n,), dtype)
    # The matvecs are equinox modules (arrays as leaves, grid data static), so no closure conversion is needed:
    # two operators built alike have the same pytree structure and share one jax.jit compilation.
    linear = lx.FunctionLinearOperator(matvec, structure, tags=tuple(tags), closure_convert=False)
    return Operator(linear, diag, grid_shape)


def _grid(shape: int | Sequence[int], name: str = "shape") -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, int) and not isinstance(shape, bool) else tuple(shape)
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"{name} must have 1, 2 or 3 axes, got {shape!r}")
    for m in dims:
        check_int(f"{name} (points per axis)", m, low=1)
    return dims


def _check_boundary(boundary: str, dims: tuple[int, ...]) -> None:
    check_choice("boundary", boundary, _BOUNDARIES)
    if boundary == "periodic" and min(dims) < 3:
        raise ValueError(f"a periodic grid needs at least 3 points per axis, got shape {dims}")


def _spacing(m: int, length: float, boundary: str) -> float:
    return length / (m + 1) if boundary == "dirichlet" else length / m


def _shift(u: jax.Array, axis: int, step: int, boundary: str) -> jax.Array:
    """``u`` shifted by ``step`` (+1: neighbour at i+1) along ``axis``, zero outside a Dirichlet grid."""
    if boundary == "periodic":
        return jnp.roll(u, -step, axis=axis)
    pad = [(0, 0)] * u.ndim
    pad[axis] = (0, 1) if step > 0 else (1, 0)
    padded = jnp.pad(u, pad)
    index = [slice(None)] * u.ndim
    index[axis] = slice(1, None) if step > 0 else slice(None, -1)
    return padded[tuple(index)]


def _laplacian_apply(
    x: jax.Array, dims: tuple[int, ...], spacings: tuple[float, ...], boundary: str
) -> jax.Array:
    u = x.reshape(dims)
    out = jnp.zeros_like(u)
    for axis, h in enumerate(spacings):
        out = out + (_shift(u, axis, 1, boundary) - 2 * u + _shift(u, axis, -1, boundary)) / h**2
    return out.reshape(-1)


class _ShiftedLaplacian(eqx.Module):
    """``x -> identity * x + scale * Delta_h x`` (``identity``, ``scale``: scalar arrays, differentiable)."""

    identity: jax.Array
    scale: jax.Array
    dims: tuple[int, ...] = eqx.field(static=True)
    spacings: tuple[float, ...] = eqx.field(static=True)
    boundary: str = eqx.field(static=True)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.identity * x + self.scale * _laplacian_apply(x, self.dims, self.spacings, self.boundary)


class _UpwindAdvectionDiffusion(eqx.Module):
    """``x -> x + dt (c D_up x - nu Delta_h x)`` in 1-D (``c``, ``nu``, ``dt``: scalar arrays)."""

    velocity: jax.Array
    nu: jax.Array
    dt: jax.Array
    h: float = eqx.field(static=True)
    boundary: str = eqx.field(static=True)

    def __call__(self, x: jax.Array) -> jax.Array:
        c, h, boundary = self.velocity, self.h, self.boundary
        back = (x - _shift(x, 0, -1, boundary)) / h
        fwd = (_shift(x, 0, 1, boundary) - x) / h
        adv = jnp.maximum(c, 0) * back + jnp.minimum(c, 0) * fwd
        return x + self.dt * (adv - self.nu * _laplacian_apply(x, (x.shape[0],), (h,), boundary))


class _SparseMatvec(eqx.Module):
    """``x -> A @ x`` for a ``jax.experimental.sparse`` matrix (its values are differentiable leaves)."""

    matrix: Any

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.matrix @ x


def laplacian(
    shape: int | Sequence[int],
    *,
    boundary: str = "dirichlet",
    length: float = 1.0,
    dtype: Any = None,
) -> Operator:
    """The second-order finite-difference Laplacian ``Delta_h`` (3/5/7-point stencil) on a 1/2/3-D grid.

    ``(Delta_h u)_i = sum_axes (u_{i+1} - 2 u_i + u_{i-1}) / h^2``. With Dirichlet boundaries it is symmetric
    negative definite; with periodic boundaries symmetric negative semidefinite (constants are in its null
    space). In 1-D Dirichlet it is the Poisson matrix ``(1/h^2) tridiag(1, -2, 1)`` of the PRDP Poisson problem.

    Args:
        shape: points per axis, an int (1-D) or a tuple of 1 to 3 ints.
        boundary: ``"dirichlet"`` (zero values outside the interior points) or ``"periodic"``.
        length: domain length per axis (same for all axes).
        dtype: floating dtype of the vectors (default: JAX's default float, float64 under ``jax_enable_x64``).

    Returns:
        A matrix-free :class:`Operator` on vectors of length ``prod(shape)``.

    Raises:
        ValueError: bad ``shape``, ``boundary`` or non-positive ``length``.
    """
    dims = _grid(shape)
    _check_boundary(boundary, dims)
    check_float("length", length, low=0.0, low_inclusive=False)
    dtype = jnp.dtype(dtype) if dtype is not None else jnp.zeros(()).dtype
    spacings = tuple(_spacing(m, length, boundary) for m in dims)
    diag = jnp.full(math.prod(dims), -sum(2.0 / h**2 for h in spacings), dtype=dtype)
    tags = [lx.symmetric_tag, lx.negative_semidefinite_tag]
    matvec = _ShiftedLaplacian(jnp.zeros((), dtype), jnp.ones((), dtype), dims, spacings, boundary)
    return _stencil_operator(matvec, diag, dims, dtype, tags)


def heat(
    shape: int | Sequence[int],
    *,
    nu: float | jax.Array,
    dt: float | jax.Array = 1.0,
    boundary: str = "dirichlet",
    length: float = 1.0,
    dtype: Any = None,
) -> Operator:
    """The backward-Euler (BTCS) heat matrix ``A = I - nu * dt * Delta_h``.

    One implicit step of ``u_t = nu * Delta u`` solves ``A u^{n+1} = u^n``. ``A`` is symmetric positive definite
    for ``nu * dt > 0``. The PRDP heat experiments use ``nu * dt = 0.001`` (``diffuse_amount`` in the official
    code) on the unit interval or square with Dirichlet boundaries and 30 interior points per axis.

    Args:
        shape: points per axis (int or tuple of 1-3 ints).
        nu: diffusivity (> 0); a JAX scalar is allowed and differentiable.
        dt: time step (> 0).
        boundary: ``"dirichlet"`` or ``"periodic"``.
        length: domain length per axis.
        dtype: floating dtype of the vectors.

    Returns:
        A matrix-free symmetric positive definite :class:`Operator`.

    Raises:
        ValueError: non-positive concrete ``nu`` or ``dt``, or bad grid arguments.

    References:
        arXiv:2502.19611, Sec. 4.2 (heat emulators), official ``BTCS_Stepper``.
    """
    dims = _grid(shape)
    _check_boundary(boundary, dims)
    for name, value in (("nu", nu), ("dt", dt)):
        if not isinstance(value, jax.core.Tracer):
            check_float(name, float(value), low=0.0, low_inclusive=False)
    check_float("length", length, low=0.0, low_inclusive=False)
    dtype = jnp.dtype(dtype) if dtype is not None else jnp.zeros(()).dtype
    spacings = tuple(_spacing(m, length, boundary) for m in dims)
    coef = jnp.asarray(nu, dtype) * jnp.asarray(dt, dtype)
    matvec = _ShiftedLaplacian(jnp.ones((), dtype), -coef, dims, spacings, boundary)
    diag = 1.0 + coef * sum(2.0 / h**2 for h in spacings) * jnp.ones(math.prod(dims), dtype)
    tags = [lx.symmetric_tag, lx.positive_semidefinite_tag]
    return _stencil_operator(matvec, diag, dims, dtype, tags)


def advection_diffusion(
    n: int,
    *,
    velocity: float | jax.Array,
    nu: float | jax.Array,
    dt: float | jax.Array = 1.0,
    boundary: str = "dirichlet",
    length: float = 1.0,
    dtype: Any = None,
) -> Operator:
    """Backward-Euler 1-D advection-diffusion with first-order upwinding: ``A = I + dt (c D_up - nu Delta_h)``.

    ``D_up`` is the upwind difference ``(u_i - u_{i-1}) / h`` for ``c > 0`` (``(u_{i+1} - u_i) / h`` for
    ``c < 0``). For ``c != 0`` the matrix is **not symmetric**, so the adjoint solve needs ``A^T``: this is the
    operator the package uses to test that the implicit backward pass solves with the transpose (the official
    PRDP code solves with ``A`` and is right only for symmetric ``A``). It is diagonally dominant, so Jacobi and
    Gauss-Seidel converge.

    Args:
        n: number of grid points.
        velocity: advection speed ``c``.
        nu: diffusivity (>= 0).
        dt: time step (> 0).
        boundary: ``"dirichlet"`` or ``"periodic"``.
        length: domain length.
        dtype: floating dtype of the vectors.

    Returns:
        A matrix-free, non-symmetric :class:`Operator`.

    Raises:
        ValueError: negative concrete ``nu``, non-positive ``dt`` or bad grid arguments.
    """
    dims = _grid(n, "n")
    if len(dims) != 1:
        raise ValueError(f"n must be a single integer, got {n!r}")
    _check_boundary(boundary, dims)
    if not isinstance(nu, jax.core.Tracer):
        check_float("nu", float(nu), low=0.0)
    if not isinstance(dt, jax.core.Tracer):
        check_float("dt", float(dt), low=0.0, low_inclusive=False)
    dtype = jnp.dtype(dtype) if dtype is not None else jnp.zeros(()).dtype
    h = _spacing(dims[0], length, boundary)
    c = jnp.asarray(velocity, dtype)
    nu_ = jnp.asarray(nu, dtype)
    dt_ = jnp.asarray(dt, dtype)
    matvec = _UpwindAdvectionDiffusion(c, nu_, dt_, h, boundary)
    diag = (1.0 + dt_ * (jnp.abs(c) / h + 2.0 * nu_ / h**2)) * jnp.ones(dims[0], dtype)
    return _stencil_operator(matvec, diag, dims, dtype, ())


def as_operator(
    A: Any, *, n: int | None = None, dtype: Any = None, diag: jax.Array | None = None
) -> Operator:
    """Wrap a matrix, a sparse matrix, a lineax operator or a matvec as an :class:`Operator`.

    Args:
        A: one of
            - an :class:`Operator` (returned unchanged),
            - a dense square array of shape ``(n, n)``,
            - a ``jax.experimental.sparse.BCOO`` / ``BCSR`` square matrix,
            - a :class:`lineax.AbstractLinearOperator` with vector input and output of equal size,
            - a callable ``matvec(x) -> A @ x`` on shape ``(n,)`` (then ``n`` is required).
        n: vector length, required for a callable.
        dtype: vector dtype for a callable (default: JAX's default float).
        diag: the diagonal, if known (otherwise it is extracted or, for a matvec, materialised when a solver
            that needs it runs: ``n`` matvecs).

    Raises:
        TypeError: ``A`` is none of the above.
        ValueError: ``A`` is not square, or ``n`` is missing or mismatched.
    """
    if isinstance(A, Operator):
        return A
    if isinstance(A, (jsparse.BCOO, jsparse.BCSR)):
        if A.ndim != 2 or A.shape[0] != A.shape[1]:
            raise ValueError(f"operator must be a square matrix, got sparse shape {A.shape}")
        size = A.shape[0]
        if diag is None:
            coo = A.to_bcoo() if isinstance(A, jsparse.BCSR) else A
            rows, cols = coo.indices[:, 0], coo.indices[:, 1]
            diag = jnp.zeros(size, coo.dtype).at[rows].add(jnp.where(rows == cols, coo.data, 0))
        structure = jax.ShapeDtypeStruct((size,), A.dtype)
        linear = lx.FunctionLinearOperator(_SparseMatvec(A), structure, closure_convert=False)
        return Operator(linear, diag, (size,))
    if isinstance(A, lx.AbstractLinearOperator):
        if A.in_size() != A.out_size() or len(jax.tree_util.tree_leaves(A.in_structure())) != 1:
            raise ValueError("operator must map a single vector to a vector of the same size")
        shape = A.in_structure().shape
        if len(shape) != 1:
            raise ValueError(f"operator must act on flat vectors, got input shape {shape}")
        return Operator(A, diag, (shape[0],))
    if callable(A):
        if n is None:
            raise ValueError("n must be given (a positive integer) when the operator is a matvec callable")
        check_int("n", n, low=1)
        dt = jnp.dtype(dtype) if dtype is not None else jnp.zeros(()).dtype
        structure = jax.ShapeDtypeStruct((n,), dt)
        return Operator(lx.FunctionLinearOperator(A, structure), diag, (n,))
    if hasattr(A, "shape") and hasattr(A, "dtype"):
        M = jnp.asarray(A)
        if M.ndim != 2 or M.shape[0] != M.shape[1]:
            raise ValueError(f"operator must be a square matrix, got shape {tuple(M.shape)}")
        if not jnp.issubdtype(M.dtype, jnp.floating):
            raise TypeError(f"operator matrix must have a floating dtype, got {M.dtype}")
        return Operator(lx.MatrixLinearOperator(M), jnp.diag(M) if diag is None else diag, (M.shape[0],))
    raise TypeError(
        "operator must be an Operator, a square array, a jax.experimental.sparse BCOO/BCSR matrix, "
        f"a lineax operator or a matvec callable; got {type(A).__name__}"
    )
