"""Parallel Quasi-Quantum Annealing: the solver loop (the method itself).

One step, for ``S`` replicas ``x ∈ [0,1]^{S×N}`` (binary) or ``[1e-5,1]^{S×N×K}`` (categorical):

1. loss ``L = (1-λ)·(mean_s E(x_s) + γ_t·mean_s Φ(x_s)) - λ·D(x)`` with the QQA penalty ``Φ`` (eq. below), the
   diversity ("parallel-run communication") term ``D(x) = Σ_i std_s(x_{s,i})`` and ``γ_t`` on a linear,
   endpoint-inclusive schedule from ``gamma[0]`` (< 0: convex, minimum at x = ½) to ``gamma[1]`` (> 0: every
   binary point a minimum);
2. an optax AdamW update of ``x`` with ``∇L``;
3. Langevin noise ``x += √(2·lr·T)·ξ``, ``ξ ~ N(0, I)``, exactly once; clip to the domain;
4. round every replica (``x > ½`` or argmax), evaluate its energy, keep the best rounded point seen so far.

Penalty: binary ``Φ(x) = Σ_i [1 - (1 - 2x_i)^p]``; categorical, with ``x̃ = x / Σ_k x``,
``Φ(x) = Σ_i [1 - Σ_k (K x̃_ik - 1)^p / ((K-1)^p + K - 1)]``. Both vanish exactly at binary / one-hot points and
equal ``N`` at the centre. ``p`` is even.

The replica axis is sharded over the given devices with ``jax.sharding``; the diversity term and the best-replica
selection reduce over all replicas, so devices communicate inside every step.

References:
    Y. Ichikawa, Y. Arai. "Optimization by Parallel Quasi-Quantum Annealing with Gradient-Based Sampling",
    ICLR 2025, arXiv:2409.02135, §3 (QQA penalty, eq. for r̂(x; γ)), §3.2 (parallel run communication),
    §3.3 (gradient-based sampling with Langevin noise); official code ``Yuma-Ichikawa/QQA4CO`` (``src/qqa.py``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from iclr25_qqa._problems import BinaryProblem, CategoricalProblem, GraphColoring, Problem
from iclr25_shared.checks import check_float, check_int, check_probability

__all__ = [
    "AnnealConfig",
    "Result",
    "anneal",
    "categorical_penalty",
    "gamma_schedule",
    "penalty",
]

_CAT_FLOOR = 1e-5


@dataclass(frozen=True, kw_only=True)
class AnnealConfig:
    """Hyper-parameters of :func:`anneal` (defaults: the official README / notebook configuration)."""

    replicas: int = 100
    """Parallel replicas S (paper: ``sol_size``)."""
    steps: int = 3000
    """Gradient steps T (paper: ``num_epochs``)."""
    lr: float = 1.0
    """AdamW learning rate; also sets the Langevin noise scale √(2·lr·temperature)."""
    temperature: float = 1e-3
    """Langevin temperature T ≥ 0 (0 turns the noise off)."""
    gamma: tuple[float, float] = (-3.0, 0.1)
    """(start, end) of the linear, endpoint-inclusive γ schedule; start < end."""
    p: int = 4
    """Even exponent of the QQA penalty (paper: ``curve_rate``, α)."""
    diversity: float = 0.2
    """Weight λ ∈ [0, 1] of the replica-diversity term (paper: ``div_param``)."""
    weight_decay: float = 0.0
    """AdamW weight decay (the research code silently used PyTorch's default 0.01)."""
    local_search: bool = False
    """Also polish the best solution with the problem's greedy repair/improvement (reported separately)."""
    normalize_loss: bool = True
    """Diversity term on the same per-replica scale as the objective (True). False reproduces the official
    single-instance code, which multiplies it by S while averaging the objective over replicas (``batch_annealing`` in ``Yuma-Ichikawa/QQA4CO`` ``src/qqa.py``; README, Deviations)."""
    chunk: int = 100
    """Steps per compiled chunk: progress and the quality-vs-time trace are recorded at chunk ends."""

    def __post_init__(self) -> None:
        check_int("replicas", self.replicas, low=1)
        check_int("steps", self.steps, low=1)
        check_int("chunk", self.chunk, low=1)
        check_int("p", self.p, low=2)
        if self.p % 2:
            raise ValueError(
                f"p must be an even integer >= 2 (odd p makes the penalty unbounded below), got {self.p}"
            )
        check_float("lr", self.lr, low=0.0, low_inclusive=False)
        check_float("temperature", self.temperature, low=0.0)
        check_probability("diversity", self.diversity)
        check_float("weight_decay", self.weight_decay, low=0.0)
        g = self.gamma
        if not isinstance(g, (tuple, list)) or len(g) != 2:
            raise ValueError(f"gamma must be a pair (start, end), got {g!r}")
        for i, v in enumerate(g):
            check_float(f"gamma[{i}]", v)
        if not g[0] < g[1]:
            raise ValueError(f"gamma must be increasing (start < end), got start={g[0]}, end={g[1]}")
        object.__setattr__(self, "gamma", (float(g[0]), float(g[1])))


def gamma_schedule(gamma: tuple[float, float], steps: int) -> np.ndarray:
    """Linear γ schedule, endpoint-inclusive: ``γ_t = γ_0 + (γ_1 - γ_0)·t/(T-1)``, ``t = 0..T-1``.

    Returns:
        float64 array of shape (steps,); first entry exactly ``gamma[0]``, last exactly ``gamma[1]`` (T ≥ 2).
        With ``steps == 1`` it is ``[gamma[1]]``: the single step is taken at the final, binary-favouring γ.
    """
    if steps == 1:
        return np.array([float(gamma[1])])
    return np.linspace(float(gamma[0]), float(gamma[1]), int(steps))


def penalty(x: Any, p: int) -> Any:
    """Binary QQA penalty ``Φ(x) = Σ_i [1 - (1 - 2 x_i)^p]`` over the last axis.

    Args:
        x: array (..., N), entries in [0, 1].
        p: even exponent ≥ 2.

    Returns:
        jax array (...): 0 at every binary point, N at x = ½·1; concave in x.
    """
    import jax.numpy as jnp

    x = jnp.asarray(x)
    return jnp.sum(1.0 - (1.0 - 2.0 * x) ** p, axis=-1)


def categorical_penalty(x: Any, p: int) -> Any:
    """Categorical QQA penalty ``Σ_i [1 - Σ_k (K x̃_ik - 1)^p / ((K-1)^p + K - 1)]``, ``x̃ = x / Σ_k x``.

    Args:
        x: array (..., N, K), positive entries.
        p: even exponent ≥ 2.

    Returns:
        jax array (...): 0 at one-hot rows, N at uniform rows. With K = 1 it is identically 0.
    """
    import jax.numpy as jnp

    x = jnp.asarray(x)
    k = x.shape[-1]
    if k == 1:
        return jnp.zeros(x.shape[:-2], x.dtype)
    xt = x / jnp.sum(x, axis=-1, keepdims=True)
    norm = (k - 1) ** p + k - 1
    return jnp.sum(1.0 - jnp.sum((k * xt - 1.0) ** p, axis=-1) / norm, axis=(-1))


@dataclass
class Result:
    """What :func:`anneal` returns.

    Attributes:
        problem: the problem solved.
        config: the hyper-parameters used.
        best_solution: int64 (N,), the best rounded replica over all steps (lowest energy).
        best_energy: ``problem.energy(problem.encode(best_solution))``.
        best_objective: the objective of ``best_solution`` in the problem's units.
        feasible: whether ``best_solution`` satisfies all constraints; ``violations`` counts the broken ones.
        history: per-step arrays of length ``steps``: ``gamma``, ``loss`` (the optimised loss),
            ``mean_energy`` (mean rounded energy over replicas), ``step_best_energy``, ``best_energy``
            (best so far), ``penalty`` (mean relaxed Φ).
        trace: quality vs time at chunk ends: dicts with ``step``, ``seconds`` (since the first step, compile
            excluded), ``best_objective`` and ``feasible`` of the lowest-energy rounded replica so far.
        final_x: float32 (S, N) or (S, N, K), the relaxed replicas after the last step.
        wall_time: seconds for the steps (compilation excluded); ``compile_time``: seconds to compile.
        num_devices: devices the replica axis was sharded over.
        polished_solution, polished_objective, polished_feasible: the greedy polish of ``best_solution``
            (only with ``local_search=True``; ``None`` otherwise).
    """

    problem: Problem
    config: AnnealConfig
    best_solution: np.ndarray
    best_energy: float
    best_objective: float
    feasible: bool
    violations: int
    history: dict[str, np.ndarray]
    trace: list[dict[str, float]]
    final_x: np.ndarray
    wall_time: float
    compile_time: float
    num_devices: int
    polished_solution: np.ndarray | None = None
    polished_objective: float | None = None
    polished_feasible: bool | None = None
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line: objective, feasibility and time."""
        pr = self.problem
        s = (
            f"{pr.name}: {pr.objective_name} {self.best_objective:g} "
            f"({'feasible' if self.feasible else f'infeasible, {self.violations} violation(s)'}) "
            f"in {self.wall_time:.2f}s (+{self.compile_time:.2f}s compile) on {self.num_devices} device(s)"
        )
        if self.polished_objective is not None:
            s += f"; after local search {self.polished_objective:g}"
            s += "" if self.polished_feasible else " (infeasible)"
        return s


@dataclass(frozen=True)
class _Static:
    """Everything the compiled step closes over (hashable): the cache key of compiled chunk programs."""

    energy_fn: Any
    categorical: bool
    num_classes: int
    replicas: int
    p: int
    diversity: float
    div_scale: float
    sigma: float
    lr: float
    weight_decay: float
    devices: tuple[Any, ...]


_COMPILED: dict[Any, Any] = {}


def _compiled_chunk(static: _Static, *args: Any) -> Any:
    """The compiled programs ``(chunk, finish)`` that run one chunk of QQA steps and round the final iterate,
    cached by ``static`` and argument shapes."""
    import jax

    sig = jax.tree_util.tree_map(lambda a: (np.shape(a), str(getattr(a, "dtype", type(a)))), args)
    cache_key = (static, jax.tree_util.tree_structure(args), str(sig))
    if cache_key not in _COMPILED:
        if len(_COMPILED) >= 32:
            _COMPILED.clear()
        fn = _chunk_fn(static)
        chunk = jax.jit(fn, donate_argnums=(0,)).lower(*args).compile()
        finish = jax.jit(fn.finish)  # type: ignore[attr-defined]  # traced on first use, with the carry's shardings
        _COMPILED[cache_key] = (chunk, finish)
    return _COMPILED[cache_key]


def _chunk_fn(st: _Static) -> Callable[..., Any]:
    """``run_chunk(carry, ts, gammas, active, arrays, k_noise) -> (carry, per-step outputs)``: a ``lax.scan``
    of QQA steps; ``carry = (x, opt_state, best_x, best_energy)``. Padding steps (``active`` False) leave ``x``
    unchanged. Step ``t`` first rounds its input ``x_t`` (the result of step ``t-1``) and updates the best, so the
    per-step rounded outputs lag one step; ``run_chunk.finish(carry, arrays)`` rounds the last iterate."""
    import jax
    import jax.numpy as jnp
    import optax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(st.devices), ("replicas",))
    ndim = 3 if st.categorical else 2
    x_sharding = NamedSharding(mesh, P("replicas", *([None] * (ndim - 1))))
    low = _CAT_FLOOR if st.categorical else 0.0
    lam = st.diversity
    use_div = lam > 0.0 and st.replicas > 1
    optimizer = optax.adamw(st.lr, weight_decay=st.weight_decay)

    def pen(x: Any) -> Any:
        return categorical_penalty(x, st.p) if st.categorical else penalty(x, st.p)

    def loss_fn(x: Any, g: Any, arrays: Any) -> Any:
        f = st.energy_fn(arrays, x)
        phi = pen(x)
        loss = (1.0 - lam) * (jnp.mean(f) + g * jnp.mean(phi))
        if use_div:
            xs = CategoricalProblem.normalise(x) if st.categorical else x
            var = jnp.sum((xs - jnp.mean(xs, axis=0)) ** 2, axis=0) / (st.replicas - 1)
            std = jnp.sqrt(var + 1e-12)  # unbiased std over replicas (as torch.std), guarded at zero spread
            d = jnp.sum(std) / (st.num_classes if st.categorical else 1)
            loss = loss - lam * st.div_scale * d
        return loss, phi

    def rounded(x: Any) -> Any:
        if st.categorical:
            return jax.nn.one_hot(jnp.argmax(x, axis=-1), st.num_classes, dtype=x.dtype)
        return (x > 0.5).astype(x.dtype)

    def track(x: Any, best_x: Any, best_e: Any, valid: Any, arrays: Any) -> Any:
        """Energies of the rounded replicas of ``x``; the best rounded point so far (only when ``valid``)."""
        xr = rounded(x)
        e = st.energy_fn(arrays, xr)
        i = jnp.argmin(e)
        better = valid & (e[i] < best_e)
        return jnp.where(better, xr[i], best_x), jnp.where(better, e[i], best_e), e, i

    def run_chunk(carry: Any, ts: Any, gs: Any, active: Any, arrays: Any, k_noise: Any) -> Any:
        def step(carry: Any, inp: Any) -> Any:
            x, opt_state, best_x, best_e = carry
            t, g, on = inp
            # Round the current iterate (the previous step's result, t >= 1). It is loop state, so XLA cannot fuse
            # the previous step's noise sampling into the energy's edge gather (which recomputed erf_inv once
            # per gathered element and made a step 10x slower).
            best_x, best_e, e, i = track(x, best_x, best_e, t > 0, arrays)
            (loss, phi), grad = jax.value_and_grad(loss_fn, has_aux=True)(x, g, arrays)
            updates, new_opt = optimizer.update(grad, opt_state, x)
            new_x = optax.apply_updates(x, updates)
            if st.sigma > 0.0:  # Langevin noise: exactly once per step
                new_x = new_x + st.sigma * jax.random.normal(jax.random.fold_in(k_noise, t), x.shape, x.dtype)
            new_x = jax.lax.with_sharding_constraint(jnp.clip(new_x, low, 1.0), x_sharding)

            def keep(new: Any, old: Any) -> Any:
                return jnp.where(on, new, old)

            carry = (keep(new_x, x), jax.tree_util.tree_map(keep, new_opt, opt_state), best_x, best_e)
            return carry, (loss, jnp.mean(phi), jnp.mean(e), e[i], best_e)

        return jax.lax.scan(step, carry, (ts, gs, active))

    def finish(carry: Any, arrays: Any) -> Any:
        """Round the final iterate (no later step does it) and update the best."""
        x, opt_state, best_x, best_e = carry
        best_x, best_e, e, i = track(x, best_x, best_e, jnp.asarray(True), arrays)
        return (x, opt_state, best_x, best_e), (jnp.mean(e), e[i], best_e)

    run_chunk.finish = finish  # type: ignore[attr-defined]
    return run_chunk


def _as_key(key: Any) -> Any:
    import jax

    if isinstance(key, bool):
        raise TypeError("key must be a jax PRNG key or a non-negative int seed, got a bool")
    if isinstance(key, (int, np.integer)):
        if key < 0:
            raise ValueError(f"key must be a non-negative int seed or a jax PRNG key, got {key}")
        return jax.random.key(int(key))
    if hasattr(key, "dtype") and (jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) or key.shape == (2,)):
        return key
    raise TypeError(
        f"key must be a jax PRNG key (jax.random.key(seed)) or an int seed, got {type(key).__name__}"
    )


def _mesh_devices(devices: Sequence[Any] | None, replicas: int) -> list[Any]:
    import jax

    devs = list(jax.devices() if devices is None else devices)
    if not devs:
        raise ValueError("devices must name at least one device")
    count = max(d for d in range(1, len(devs) + 1) if replicas % d == 0)
    return devs[:count]


@dataclass
class _Prepared:
    """A run ready to step: the compiled programs, the initial carry and the per-chunk device inputs."""

    static: _Static
    carry: Any
    arrays: Any
    k_noise: Any
    chunk_inputs: list[Any]
    compiled: Any
    finish: Any
    compile_time: float
    chunk: int
    schedule: np.ndarray
    devices: list[Any]


def _prepare(
    problem: Problem, cfg: AnnealConfig, key: Any, init: Any, devices: Sequence[Any] | None
) -> _Prepared:
    """Validate ``init``, place the replicas and the problem's arrays on ``devices`` and compile the chunk program
    (cached by shapes and :class:`_Static`)."""
    import jax
    import jax.numpy as jnp
    import optax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    key = _as_key(key)
    categorical = isinstance(problem, CategoricalProblem)
    if not categorical and not isinstance(problem, BinaryProblem):
        raise TypeError(f"unsupported problem type {type(problem).__name__}")
    shape = (cfg.replicas, *problem.variable_shape)
    low = _CAT_FLOOR if categorical else 0.0
    devs = _mesh_devices(devices, cfg.replicas)
    mesh = Mesh(np.array(devs), ("replicas",))
    x_sharding = NamedSharding(mesh, P("replicas", *([None] * (len(shape) - 1))))
    replicated = NamedSharding(mesh, P())

    k_init, k_noise = jax.random.split(key)
    if init is None:
        x0 = jnp.clip(jax.random.uniform(k_init, shape, jnp.float32), low, 1.0)
    else:
        x0 = jnp.asarray(init, jnp.float32)
        if x0.shape == tuple(problem.variable_shape):
            x0 = jnp.broadcast_to(x0, shape)
        if x0.shape != shape:
            raise ValueError(
                f"init must have shape {shape} or {tuple(problem.variable_shape)}, got {x0.shape}"
            )
        if not bool(jnp.all(jnp.isfinite(x0))) or float(x0.min()) < low or float(x0.max()) > 1.0:
            raise ValueError(f"init entries must be finite and in [{low}, 1]")
    x0 = jax.device_put(x0, x_sharding)

    schedule = gamma_schedule(cfg.gamma, cfg.steps)
    c = min(cfg.chunk, cfg.steps)
    n_chunks = -(-cfg.steps // c)
    total = n_chunks * c
    ts_all = np.arange(total, dtype=np.int32)
    gs_all = np.concatenate([schedule, np.full(total - cfg.steps, schedule[-1])]).astype(np.float32)
    active_all = ts_all < cfg.steps

    static = _Static(
        energy_fn=type(problem).energy_fn,
        categorical=categorical,
        num_classes=problem.num_classes,
        replicas=cfg.replicas,
        p=cfg.p,
        diversity=cfg.diversity,
        div_scale=1.0 if cfg.normalize_loss else float(cfg.replicas),
        sigma=math.sqrt(2.0 * cfg.lr * cfg.temperature),
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
        devices=tuple(devs),
    )
    optimizer = optax.adamw(cfg.lr, weight_decay=cfg.weight_decay)
    opt_state = jax.jit(optimizer.init)(x0)
    best_x0 = jax.device_put(jnp.zeros(problem.variable_shape, jnp.float32), replicated)
    arrays = jax.device_put(problem.energy_arrays(), replicated)
    carry = (x0, opt_state, best_x0, jax.device_put(jnp.asarray(jnp.inf, jnp.float32), replicated))
    # Every chunk's step indices, γ values and padding mask go to the device once, before the clock starts: the
    # loop below makes no implicit host-device transfer (numpy arguments to the compiled chunk were three
    # host-to-device copies per chunk; a test counts them with jax.transfer_guard("log")).
    chunk_inputs = [
        jax.device_put((ts_all[j * c : (j + 1) * c], gs_all[j * c : (j + 1) * c], active_all[j * c : (j + 1) * c]),
                       replicated)
        for j in range(n_chunks)
    ]  # fmt: skip
    t0 = time.perf_counter()
    compiled, finish = _compiled_chunk(static, carry, *chunk_inputs[0], arrays, k_noise)
    compile_time = time.perf_counter() - t0
    return _Prepared(
        static, carry, arrays, k_noise, chunk_inputs, compiled, finish, compile_time, c, schedule, devs
    )


def chunk_runner(
    problem: Problem, *, key: Any = 0, devices: Sequence[Any] | None = None, **hyper: Any
) -> Any:
    """A callable that runs one compiled chunk of ``hyper["chunk"]`` QQA steps (default 100) in place and waits
    for it: the unit a step-time bench repeats (the γ values of the first chunk each time; compilation happens
    here, not in the calls).

    Args:
        problem: the problem.
        key: PRNG key or int seed.
        devices: as :func:`anneal`.
        hyper: :class:`AnnealConfig` fields (``replicas``, ``lr``, ``gamma``, ``chunk``...).
    """
    import jax

    cfg = AnnealConfig(**hyper)
    prep = _prepare(problem, cfg, key, None, devices)
    state = {"carry": prep.carry}
    inputs = prep.chunk_inputs[0]

    def run() -> None:
        state["carry"], _ = prep.compiled(state["carry"], *inputs, prep.arrays, prep.k_noise)
        jax.block_until_ready(state["carry"])

    return run


def anneal(
    problem: Problem,
    *,
    key: Any,
    replicas: int = 100,
    steps: int = 3000,
    lr: float = 1.0,
    temperature: float = 1e-3,
    gamma: tuple[float, float] = (-3.0, 0.1),
    p: int = 4,
    diversity: float = 0.2,
    weight_decay: float = 0.0,
    local_search: bool = False,
    normalize_loss: bool = True,
    chunk: int = 100,
    init: Any = None,
    devices: Sequence[Any] | None = None,
    callback: Callable[[int, int], None] | None = None,
) -> Result:
    """Solve ``problem`` with Parallel Quasi-Quantum Annealing (see the module docstring for the step).

    Args:
        problem: a :class:`Problem` (binary or categorical).
        key: a ``jax.random.key`` (or an int seed); the run is a deterministic function of it.
        replicas, steps, lr, temperature, gamma, p, diversity, weight_decay, local_search, normalize_loss, chunk:
            see :class:`AnnealConfig`.
        init: optional starting point, shape ``(replicas, *problem.variable_shape)`` (or one replica's shape,
            broadcast); default ``U(0, 1)`` drawn from ``key``.
        devices: devices to shard the replica axis over (default ``jax.devices()``); the largest prefix whose
            size divides ``replicas`` is used.
        callback: called as ``callback(steps_done, steps)`` after every chunk (progress bars).

    Returns:
        :class:`Result`.

    Raises:
        ValueError: a hyper-parameter out of range (named), ``gamma`` not increasing, ``init`` of the wrong shape
            or outside the domain.
        TypeError: ``problem`` is not a :class:`Problem`; ``key`` is not a key or int.

    References:
        arXiv:2409.02135 §3, Algorithm 1.
    """
    import jax

    if not isinstance(problem, Problem):
        raise TypeError(f"problem must be an iclr25_qqa Problem, got {type(problem).__name__}")
    cfg = AnnealConfig(
        replicas=replicas,
        steps=steps,
        lr=lr,
        temperature=temperature,
        gamma=tuple(gamma),  # type: ignore[arg-type]
        p=p,
        diversity=diversity,
        weight_decay=weight_decay,
        local_search=local_search,
        normalize_loss=normalize_loss,
        chunk=chunk,
    )
    prep = _prepare(problem, cfg, key, init, devices)
    carry, arrays, k_noise = prep.carry, prep.arrays, prep.k_noise
    compiled, finish, compile_time, chunk_inputs = (
        prep.compiled,
        prep.finish,
        prep.compile_time,
        prep.chunk_inputs,
    )
    n_chunks, c, schedule, devs = len(chunk_inputs), prep.chunk, prep.schedule, prep.devices
    outs = []
    trace: list[dict[str, float]] = []
    t0 = time.perf_counter()
    for j in range(n_chunks):
        carry, out = compiled(carry, *chunk_inputs[j], arrays, k_noise)
        jax.block_until_ready(carry)
        elapsed = time.perf_counter() - t0
        out, best_host = jax.device_get((out, carry[2]))  # explicit: the per-chunk trace, not per step
        outs.append(out)
        done = min((j + 1) * c, cfg.steps)
        best_now = problem.decode(best_host)
        trace.append(
            {
                "step": done,
                "seconds": elapsed,
                "best_objective": problem.objective(best_now),
                "feasible": problem.is_feasible(best_now),
            }
        )
        if callback is not None:
            callback(done, cfg.steps)
    wall = time.perf_counter() - t0
    # the last iterate's rounding (one energy evaluation, compiled on first use): not timed
    carry, last = finish(carry, arrays)
    jax.block_until_ready(carry)
    best_now = problem.decode(np.asarray(carry[2]))
    trace[-1].update(
        seconds=wall, best_objective=problem.objective(best_now), feasible=problem.is_feasible(best_now)
    )

    def series(i: int) -> np.ndarray:
        return np.concatenate([np.asarray(o[i]) for o in outs])

    history = {"loss": series(0)[: cfg.steps], "penalty": series(1)[: cfg.steps]}
    for i, name in enumerate(("mean_energy", "step_best_energy", "best_energy")):
        # entry t of the scan rounds x_t, the result of step t-1: shift by one and append the final rounding
        history[name] = np.append(series(2 + i)[1 : cfg.steps], np.asarray(last[i]))
    history["gamma"] = schedule
    best_solution = problem.decode(np.asarray(carry[2]))
    best_energy = float(problem.energy(problem.encode(best_solution)))
    result = Result(
        problem=problem,
        config=cfg,
        best_solution=best_solution,
        best_energy=best_energy,
        best_objective=problem.objective(best_solution),
        feasible=problem.is_feasible(best_solution),
        violations=problem.violations(best_solution),
        history=history,
        trace=trace,
        final_x=np.asarray(carry[0]),
        wall_time=wall,
        compile_time=compile_time,
        num_devices=len(devs),
    )
    if isinstance(problem, GraphColoring) and problem.below_lower_bound:
        result.notes.append(
            f"k={problem.num_classes} is below the lower bound {problem.lower_bound} on the chromatic number "
            f"({problem.lower_bound_reason}): no conflict-free colouring exists; this is the best found"
        )
    if cfg.local_search:
        polished = problem.local_search(best_solution)
        result.polished_solution = polished
        result.polished_objective = problem.objective(polished)
        result.polished_feasible = problem.is_feasible(polished)
    return result
