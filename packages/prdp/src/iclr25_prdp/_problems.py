"""The PRDP experiments at small scale: a Poisson inverse problem and neural heat emulators (1-D and 2-D).

Each experiment can be trained with a fixed iteration count ``K`` (the baselines: fully converged ``K_eps`` and a
coarse ``K``), with the PRDP controller, or (heat) with a direct solve. Data are generated from the PDE with
fixed seeds, as in the paper and its official notebooks.

References:
    arXiv:2502.19611, Sec. 4.1 (Poisson inverse problem), Sec. 4.2 (heat emulators); official notebooks
    ``poisson_1_param.ipynb``, ``heat_1d.ipynb``, ``heat_2D.ipynb``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from iclr25_prdp._controller import RefinementController
from iclr25_prdp._operators import heat, laplacian
from iclr25_prdp._solvers import solve
from iclr25_prdp._training import TrainingLog, train_with_prdp
from iclr25_shared.device import jax_enable_x64

__all__ = [
    "EXPERIMENTS",
    "ArmResult",
    "ExperimentSpec",
    "HeatEmulator",
    "PoissonInverse",
    "closed_form_poisson_bias",
    "make_experiment",
]


@dataclasses.dataclass
class ArmResult:
    """One training run: its label, the log, and the headline numbers."""

    label: str
    log: TrainingLog
    final_iterations: int | None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def final_metric(self) -> float:
        return self.log.final_metric

    @property
    def total_iterations(self) -> int:
        return self.log.total_iterations

    @property
    def wall_time(self) -> float:
        return self.log.wall_time[-1]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExperimentSpec:
    """The paper's defaults for one experiment: controller arguments and the baselines."""

    name: str
    metric_name: str
    epochs: int
    converged_iterations: int
    coarse_iterations: int
    controller: dict[str, Any]


# --------------------------------------------------------------------------------------------------------------
# E1: Poisson one-parameter inverse problem


def closed_form_poisson_bias(theta_ref: float, iterations: int, n: int = 30) -> float:
    """Minimiser of the ``K``-truncated Poisson loss: ``theta*_K = theta_ref / (1 - cos(2 pi h)^K)``, ``h = 1/(n+1)``.

    ``sin(2 pi x)`` is an eigenvector of the Jacobi iteration matrix for the 1-D Dirichlet Laplacian with
    eigenvalue ``mu = cos(2 pi h)``, so ``K`` Jacobi steps from zero give ``u_K = (1 - mu^K) u_inf`` and the
    least-squares fit of ``theta`` is biased by ``1 / (1 - mu^K)``.
    """
    mu = math.cos(2 * math.pi / (n + 1))
    return theta_ref / (1 - mu**iterations)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PoissonInverse:
    """Recover ``theta`` in ``Delta u = -theta sin(2 pi x)`` on (0, 1) from the discrete solution at ``theta_ref``.

    Loss ``L_K(theta) = ||P_K(b(theta)) - u_ref||^2 / (2 n)``, ``P_K`` = ``K`` solver steps from zero, gradient
    descent on ``theta``; one "epoch" is one gradient step and the validation metric is ``|theta - theta_ref| /
    theta_ref``. Runs in float64. Defaults are the official notebook's (``n = 30``, ``theta_ref = 2``,
    ``theta_0 = 5``, lr 275, Jacobi).
    """

    n: int = 30
    theta_ref: float = 2.0
    theta_init: float = 5.0
    learning_rate: float = 275.0
    method: str = "jacobi"
    diff: str = "implicit"

    spec = ExperimentSpec(
        name="poisson-inverse",
        metric_name="theta relative error",
        epochs=180,
        converged_iterations=600,
        coarse_iterations=100,
        controller=dict(
            initial_iterations=25,
            step=10,
            max_iterations=600,
            plateau_threshold=0.92,
            stop_threshold=0.9,
            ema_window=1,
            plateau_window=2,
        ),
    )

    def train(
        self,
        *,
        epochs: int,
        iterations: int | None = None,
        controller: RefinementController | None = None,
        key: jax.Array | None = None,
        callback: Callable[[int, TrainingLog], None] | None = None,
    ) -> ArmResult:
        del key  # deterministic
        with jax_enable_x64(True):
            op = laplacian(self.n, dtype=jnp.float64)
            x = jnp.linspace(0.0, 1.0, self.n + 2, dtype=jnp.float64)[1:-1]
            shape = -jnp.sin(2 * jnp.pi * x)
            u_ref = jnp.linalg.solve(op.as_matrix(), self.theta_ref * shape)
            method, diff, lr, n, theta_ref = (
                self.method,
                self.diff,
                self.learning_rate,
                self.n,
                self.theta_ref,
            )

            def loss(theta, k):
                u = solve(op, theta * shape, method=method, iterations=k, diff=diff)
                return jnp.sum((u - u_ref) ** 2) / (2 * n)

            if diff == "implicit":
                grad = jax.jit(jax.grad(loss))
            else:  # reverse mode through the iterations needs a static K
                grad = jax.jit(jax.grad(loss), static_argnums=1)

            def train_epoch(theta, k):
                k = k if diff == "unrolled" else jnp.asarray(k, jnp.int32)
                return theta - lr * grad(theta, k), None

            def validate(theta):
                return abs(float(theta) - theta_ref) / theta_ref

            theta, log = train_with_prdp(
                train_epoch,
                validate,
                jnp.asarray(self.theta_init, jnp.float64),
                epochs=epochs,
                controller=controller,
                iterations=iterations,
                solves_per_epoch=2,
                callback=callback,
            )
        final_k = log.iterations[-1]  # K used in the last epoch
        extra = {"theta": float(theta)}
        if iterations is not None and method == "jacobi" and iterations > 0:
            extra["theta_closed_form"] = closed_form_poisson_bias(theta_ref, iterations, n)
        return ArmResult(label="", log=log, final_iterations=final_k, extra=extra)


# --------------------------------------------------------------------------------------------------------------
# E2/E3: neural heat emulators


def fourier_initial_conditions(key: jax.Array, count: int, n: int, dim: int, modes: int = 5) -> jax.Array:
    """Random truncated Fourier series on the interior grid ``x_i = i / (n + 1)``, amplitudes ``U(-1, 1)``.

    1-D: ``sum_k a_k sin(2 pi k x) + c_k cos(2 pi k x)``, ``k = 1..modes``. 2-D: the same with the four products
    ``sin sin, cos cos, sin cos, cos sin`` of mode ``k`` in both axes. Returns shape ``(count, n**dim)``.
    """
    grid = jnp.linspace(0.0, 1.0, n + 2)[1:-1]
    k = jnp.arange(1, modes + 1)
    amps = jax.random.uniform(key, (count, 4 if dim == 2 else 2, modes), minval=-1.0, maxval=1.0)
    s = jnp.sin(2 * jnp.pi * k[:, None] * grid[None, :])  # (modes, n)
    c = jnp.cos(2 * jnp.pi * k[:, None] * grid[None, :])
    if dim == 1:
        return jnp.einsum("bm,mn->bn", amps[:, 0], s) + jnp.einsum("bm,mn->bn", amps[:, 1], c)
    fields = (
        jnp.einsum("bm,mx,my->bxy", amps[:, 0], s, s)
        + jnp.einsum("bm,mx,my->bxy", amps[:, 1], c, c)
        + jnp.einsum("bm,mx,my->bxy", amps[:, 2], s, c)
        + jnp.einsum("bm,mx,my->bxy", amps[:, 3], c, s)
    )
    return fields.reshape(count, n * n)


def _mlp(n_dof: int, width: int, depth: int, key: jax.Array):
    from flax import nnx

    class MLP(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            sizes = [n_dof, *([width] * depth), n_dof]
            self.layers = nnx.List([nnx.Linear(a, b, rngs=rngs) for a, b in itertools.pairwise(sizes)])

        def __call__(self, u: jax.Array) -> jax.Array:
            for layer in self.layers[:-1]:
                u = jax.nn.relu(layer(u))
            return self.layers[-1](u)

    return MLP(nnx.Rngs(params=key))


@dataclasses.dataclass(frozen=True, kw_only=True)
class HeatEmulator:
    """Learn one backward-Euler heat step with an MLP; the loss runs the second step through the solver.

    Data: ``u0`` random Fourier ICs (train seed 1337, validation seed 1338), ``u1 = A^{-1} u0``,
    ``u2 = A^{-1} u1`` with ``A = I - diffuse_amount * Delta_h`` (direct solve). Loss (the paper's 2-step
    "mixed chain"): ``mean((P_K(net(u0)) - u2)^2)``; validation: 2-step nMSE of the pure network rollout,
    ``mean_i ||net(net(u0_i)) - u2_i||^2 / ||u2_i||^2``. Adam with exponential decay (1e-3, 100 steps, 0.94).
    """

    dim: int = 1
    n: int = 30
    diffuse_amount: float = 0.001
    width: int = 64
    depth: int = 3
    train_samples: int = 200
    val_samples: int = 5
    batch_size: int = 25
    method: str = "jacobi"
    diff: str = "implicit"

    @property
    def spec(self) -> ExperimentSpec:
        if self.dim == 1:
            return ExperimentSpec(
                name="heat-emulator",
                metric_name="2-step val nMSE",
                epochs=50,
                converged_iterations=30,
                coarse_iterations=2,
                controller=dict(
                    initial_iterations=1,
                    step=1,
                    max_iterations=30,
                    plateau_threshold=0.98,
                    stop_threshold=0.9,
                    ema_window=8,
                    plateau_window=3,
                ),
            )
        return ExperimentSpec(
            name="heat2d-emulator",
            metric_name="2-step val nMSE",
            epochs=60,
            converged_iterations=60,
            coarse_iterations=3,
            controller=dict(
                initial_iterations=1,
                step=1,
                max_iterations=60,
                plateau_threshold=0.9,
                stop_threshold=0.9,
                ema_window=6,
                plateau_window=3,
            ),
        )

    def operator(self):
        return heat((self.n,) * self.dim, nu=self.diffuse_amount)

    def data(self) -> tuple[jax.Array, jax.Array]:
        """``(train, val)`` trajectories of shape ``(samples, 3, n**dim)``: ``u0, u1, u2``."""
        A = self.operator().as_matrix()
        lu = jax.scipy.linalg.lu_factor(A)

        def trajectory(u0):
            u1 = jax.scipy.linalg.lu_solve(lu, u0)
            return jnp.stack([u0, u1, jax.scipy.linalg.lu_solve(lu, u1)])

        train = fourier_initial_conditions(jax.random.key(1337), self.train_samples, self.n, self.dim)
        val = fourier_initial_conditions(jax.random.key(1338), self.val_samples, self.n, self.dim)
        return jax.vmap(trajectory)(train), jax.vmap(trajectory)(val)

    def train(
        self,
        *,
        epochs: int,
        iterations: int | None = None,
        controller: RefinementController | None = None,
        direct: bool = False,
        key: jax.Array | None = None,
        callback: Callable[[int, TrainingLog], None] | None = None,
    ) -> ArmResult:
        import optax
        from flax import nnx

        if self.train_samples % self.batch_size:
            raise ValueError(
                f"train_samples ({self.train_samples}) must be a multiple of batch_size ({self.batch_size})"
            )
        key = jax.random.key(0) if key is None else key
        init_key, shuffle_key = jax.random.split(key)
        op = self.operator()
        A = op.as_matrix() if direct else None  # the dense matrix only for the direct-solve arm
        train, val = self.data()
        model = _mlp(self.n**self.dim, self.width, self.depth, init_key)
        graphdef, params = nnx.split(model)
        optimiser = optax.adam(optax.exponential_decay(1e-3, 100, 0.94))
        opt_state = optimiser.init(params)
        n_batches = self.train_samples // self.batch_size
        method, diff, batch_size = self.method, self.diff, self.batch_size

        def physics(u, k):
            if direct:
                return jnp.linalg.solve(A, u)
            return solve(op, u, method=method, iterations=k, diff=diff)

        def loss_fn(params, batch, k):
            net = nnx.merge(graphdef, params)
            pred1 = jax.vmap(net)(batch[:, 0])
            pred2 = jax.vmap(lambda u: physics(u, k))(pred1)
            return jnp.mean((pred2 - batch[:, 2]) ** 2)

        def epoch_fn(params, opt_state, key, k):
            order = jax.random.permutation(key, train.shape[0])
            batches = train[order].reshape(n_batches, batch_size, *train.shape[1:])

            def step(carry, batch):
                params, opt_state = carry
                loss, grads = jax.value_and_grad(loss_fn)(params, batch, k)
                updates, opt_state = optimiser.update(grads, opt_state, params)
                return (optax.apply_updates(params, updates), opt_state), loss

            (params, opt_state), losses = jax.lax.scan(step, (params, opt_state), batches)
            return params, opt_state, jnp.mean(losses)

        traced_k = diff == "implicit" or direct
        epoch_jit = jax.jit(epoch_fn) if traced_k else jax.jit(epoch_fn, static_argnums=3)

        @jax.jit
        def validate_fn(params):
            net = nnx.merge(graphdef, params)
            pred = jax.vmap(lambda u: net(net(u)))(val[:, 0])
            return jnp.mean(jnp.sum((pred - val[:, 2]) ** 2, -1) / jnp.sum(val[:, 2] ** 2, -1))

        if (
            traced_k
        ):  # compile before the clock starts (one executable serves every K), identical for every arm
            jax.block_until_ready(epoch_jit(params, opt_state, shuffle_key, jnp.asarray(0, jnp.int32)))
            jax.block_until_ready(validate_fn(params))

        def train_epoch(state, k):
            params, opt_state, key = state
            key, sub = jax.random.split(key)
            params, opt_state, loss = epoch_jit(
                params, opt_state, sub, jnp.asarray(k, jnp.int32) if traced_k else k
            )
            return (params, opt_state, key), loss

        def validate(state):
            return float(validate_fn(state[0]))

        _, log = train_with_prdp(
            train_epoch,
            validate,
            (params, opt_state, shuffle_key),
            epochs=epochs,
            controller=controller,
            iterations=0 if direct else iterations,
            solves_per_epoch=2 * n_batches,
            callback=callback,
        )
        final_k = None if direct else log.iterations[-1]  # K used in the last epoch
        return ArmResult(label="", log=log, final_iterations=final_k)


EXPERIMENTS = ("poisson-inverse", "heat-emulator", "heat2d-emulator", "navier-stokes")


def make_experiment(
    name: str, *, method: str = "jacobi", diff: str = "implicit", grid: int | None = None
) -> Any:
    """The experiment called ``name`` (one of :data:`EXPERIMENTS`) with the paper's settings.

    ``grid``: cells per axis of the Navier-Stokes coarse grid (default 32); ignored by the other experiments.
    """
    if name == "navier-stokes":
        from iclr25_prdp._navier_stokes import KolmogorovFlow, NavierStokesEmulator

        return NavierStokesEmulator(flow=KolmogorovFlow(n=grid or 32), method=method, diff=diff)
    if name == "poisson-inverse":
        return PoissonInverse(method=method, diff=diff)
    if name == "heat-emulator":
        return HeatEmulator(dim=1, method=method, diff=diff)
    if name == "heat2d-emulator":
        return HeatEmulator(dim=2, n=30, width=512, depth=2, method=method, diff=diff)
    raise ValueError(f"experiment must be one of {', '.join(EXPERIMENTS)}; got {name!r}")


def controller_for(spec: ExperimentSpec, **overrides: Any) -> RefinementController:
    """The experiment's default controller, with ``None``-valued overrides ignored."""
    kwargs = dict(spec.controller)
    kwargs.update({k: v for k, v in overrides.items() if v is not None})
    return RefinementController(**kwargs)


def savings(baseline: ArmResult, other: ArmResult) -> float:
    """Fraction of solver iterations saved: ``1 - other / baseline``."""
    return 1.0 - other.total_iterations / baseline.total_iterations if baseline.total_iterations else math.nan
