"""Baselines and references: simulated annealing (dwave-samplers), networkx greedy heuristics, exact solvers,
and the replica-symmetric MIS density of random regular graphs.

Greedy baselines follow the lessons of networkx #2446 / #5568: every returned set is checked for independence
(or being a clique) and maximality, and the best of several seeds is taken by size, not lexicographically.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np

from iclr25_qqa._problems import (
    BalancedPartition,
    BinaryProblem,
    GraphColoring,
    MaxCut,
    MaximumClique,
    MaximumIndependentSet,
    Problem,
)
from iclr25_shared.checks import check_int

__all__ = [
    "BaselineResult",
    "exact_mis",
    "greedy",
    "rrg_mis_density_rs",
    "simulated_annealing",
]


@dataclass(frozen=True)
class BaselineResult:
    """A baseline's answer: solution (N,), objective in the problem's units, feasibility, wall seconds (the solve
    only; building the model is excluded)."""

    method: str
    solution: np.ndarray
    objective: float
    feasible: bool
    seconds: float
    per_read: np.ndarray | None = None
    """Simulated annealing only: the objective of every read, in the order the reads ran (float64 (reads,))."""


def _result(method: str, problem: Problem, solution: np.ndarray, seconds: float) -> BaselineResult:
    s = problem.check_solution(solution)
    return BaselineResult(method, s, problem.objective(s), problem.is_feasible(s), seconds)


def simulated_annealing(
    problem: BinaryProblem, *, num_reads: int = 100, num_sweeps: int = 1000, seed: int = 0
) -> BaselineResult:
    """Simulated annealing (dwave-samplers' ``SimulatedAnnealingSampler``) on the same QUBO as QQA.

    The QUBO ``xᵀQx`` becomes a BQM with linear ``Q_ii`` and quadratic ``2 Q_uv`` (identical energies on binary
    points); the lowest-energy read is returned. Only binary problems (MIS, clique, max-cut).

    Raises:
        TypeError: a categorical problem.
        ValueError: ``num_reads`` or ``num_sweeps`` < 1.
    """
    import dimod
    from dwave.samplers import SimulatedAnnealingSampler

    if not isinstance(problem, BinaryProblem):
        raise TypeError(f"simulated_annealing needs a binary problem, got {type(problem).__name__}")
    check_int("num_reads", num_reads, low=1)
    check_int("num_sweeps", num_sweeps, low=1)
    linear = {i: float(q) for i, q in enumerate(problem.diag)}
    quadratic: dict[tuple[int, int], float] = {}
    for u, v, w in zip(problem.qu.tolist(), problem.qv.tolist(), problem.qw.tolist()):
        quadratic[(u, v)] = quadratic.get((u, v), 0.0) + 2.0 * w
    bqm = dimod.BinaryQuadraticModel(linear, quadratic, 0.0, dimod.BINARY)
    t0 = time.perf_counter()
    sampleset = SimulatedAnnealingSampler().sample(bqm, num_reads=num_reads, num_sweeps=num_sweeps, seed=seed)
    seconds = time.perf_counter() - t0
    best = sampleset.first.sample
    solution = np.array([best[i] for i in range(problem.num_nodes)], dtype=np.int64)
    order = list(sampleset.variables)
    samples = np.asarray(sampleset.record.sample)[:, np.argsort(order)]  # rows in read order, columns 0..N-1
    per_read = np.array([problem.objective(row) for row in samples.astype(np.int64)])
    res = _result(f"SA ({num_reads} reads x {num_sweeps} sweeps)", problem, solution, seconds)
    return dataclasses.replace(res, per_read=per_read)


def _independent_and_maximal(graph: nx.Graph, chosen: set[Any]) -> bool:
    if any(graph.has_edge(u, v) for u in chosen for v in graph[u] if v in chosen):
        return False
    return all(v in chosen or any(u in chosen for u in graph[v]) for v in graph)


def _greedy_mis(graph: nx.Graph, seeds: int, seed: int) -> tuple[set[Any], str]:
    best: set[Any] = set()
    for s in range(seed, seed + seeds):
        cand = set(nx.maximal_independent_set(graph, seed=s))
        if not _independent_and_maximal(graph, cand):  # networkx #5568
            raise RuntimeError(
                "networkx maximal_independent_set returned a set that is not maximal independent"
            )
        if len(cand) > len(best):
            best = cand
    how = f"best of {seeds} networkx maximal_independent_set"
    if graph.number_of_nodes() <= 300:  # the approximation recurses (networkx PR #8159): guard by size
        approx = set(nx.algorithms.approximation.maximum_independent_set(graph))
        if _independent_and_maximal(graph, approx) and len(approx) > len(best):  # compare by size (#2446)
            best, how = approx, "networkx approximation.maximum_independent_set"
    return best, how


def greedy(problem: Problem, *, seeds: int = 100, seed: int = 0) -> BaselineResult:
    """The networkx greedy baseline for ``problem`` (best of ``seeds`` randomised runs where randomised).

    - MIS: best of ``seeds`` ``maximal_independent_set`` runs (each checked independent and maximal) and, on
      graphs up to 300 nodes, ``approximation.maximum_independent_set``, compared by size.
    - Max-clique: the same on the complement graph.
    - Max-cut: best of ``min(seeds, 5)`` steepest 1-flip local searches from random cuts (the rule of
      networkx's ``approximation.one_exchange``, run incrementally: networkx's version is O(N·|E|) per move).
    - Colouring: best of ``greedy_color`` strategies (largest_first, smallest_last, DSATUR, and randomised
      orders); colours beyond ``k`` are folded onto the least-conflicting of the first ``k``.
    - Balanced partition: Kernighan–Lin bisection (``k = 2`` only).

    Raises:
        ValueError: ``seeds < 1``; a balanced partition with ``k != 2``.
    """
    check_int("seeds", seeds, low=1)
    g = nx.relabel_nodes(problem.graph, {v: i for i, v in enumerate(problem.nodes)})
    n = problem.num_nodes
    t0 = time.perf_counter()
    if isinstance(problem, MaximumClique):
        chosen, how = _greedy_mis(nx.complement(g), seeds, seed)
        sol = np.zeros(n, np.int64)
        sol[list(chosen)] = 1
        how = how + " on the complement"
    elif isinstance(problem, MaximumIndependentSet):
        chosen, how = _greedy_mis(g, seeds, seed)
        sol = np.zeros(n, np.int64)
        sol[list(chosen)] = 1
    elif isinstance(problem, MaxCut):
        # networkx's approximation.one_exchange recomputes the whole cut for every candidate flip, O(N·|E|) per
        # move (hours on a 3000-node torus); the same steepest 1-flip rule runs incrementally in
        # MaxCut.local_search, from random starts.
        rng = np.random.default_rng(seed)
        runs = min(seeds, 5)
        sol = max((problem.local_search(rng.integers(0, 2, n)) for _ in range(runs)), key=problem.objective)
        how = f"best of {runs} steepest 1-flip local searches from random cuts (networkx one_exchange's rule)"
    elif isinstance(problem, GraphColoring):
        strategies: list[Any] = ["largest_first", "smallest_last", "DSATUR"]
        rng = np.random.default_rng(seed)
        strategies += [
            (lambda order: lambda graph, colors: list(order))(rng.permutation(n).tolist())
            for _ in range(max(0, seeds - 3))
        ]
        best_sol, best_conf = None, math.inf
        for strat in strategies:
            col = nx.greedy_color(g, strategy=strat)
            sol = _fold_colours(problem, np.array([col[i] for i in range(n)], np.int64))
            conf = problem.violations(sol)
            if conf < best_conf:
                best_sol, best_conf = sol, conf
        sol = best_sol  # type: ignore[assignment]
        how = f"best of {len(strategies)} networkx greedy_color orders"
    elif isinstance(problem, BalancedPartition):
        if problem.num_classes != 2:
            raise ValueError(
                f"the greedy partition baseline (Kernighan–Lin) needs k = 2, got k={problem.num_classes}"
            )
        a, _ = nx.algorithms.community.kernighan_lin_bisection(g, weight="weight", seed=seed)
        sol = np.zeros(n, np.int64)
        sol[list(a)] = 1
        how = "networkx kernighan_lin_bisection"
    else:  # pragma: no cover - every shipped problem is handled
        raise TypeError(f"no greedy baseline for {type(problem).__name__}")
    return _result(f"greedy ({how})", problem, sol, time.perf_counter() - t0)


def _fold_colours(problem: GraphColoring, colours: np.ndarray) -> np.ndarray:
    """Map colours >= k onto the colour among 0..k-1 with the fewest conflicts with already-placed nodes."""
    k, a = problem.num_classes, problem.adjacency
    s = colours.copy()
    for i in np.where(s >= k)[0]:
        nbr = a.indices[a.indptr[i] : a.indptr[i + 1]]
        placed = s[nbr][s[nbr] < k]
        s[i] = int(np.argmin(np.bincount(placed, minlength=k)[:k]))
    return s


def exact_mis(graph: nx.Graph, *, time_limit: float = 60.0) -> tuple[float, float, bool]:
    """Maximum independent set size by HiGHS MILP (``scipy.optimize.milp``): max Σx s.t. x_u + x_v ≤ 1.

    Returns:
        (best found, proven upper bound, proven optimal).
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    nodes = list(graph.nodes)
    index = {v: i for i, v in enumerate(nodes)}
    n, edges = len(nodes), [(index[u], index[v]) for u, v in graph.edges()]
    if not edges:
        return float(n), float(n), True
    rows = np.repeat(np.arange(len(edges)), 2)
    cols = np.asarray(edges).ravel()
    a = coo_matrix((np.ones(2 * len(edges)), (rows, cols)), shape=(len(edges), n)).tocsr()
    res = milp(
        c=-np.ones(n),
        constraints=LinearConstraint(a, -np.inf, 1.0),
        integrality=np.ones(n),
        bounds=Bounds(0, 1),
        options={"time_limit": float(time_limit), "disp": False},
    )
    if res.x is None:
        return math.nan, math.inf, False
    value = float(np.round(-res.fun))
    bound = float(-getattr(res, "mip_dual_bound", res.fun))
    return value, math.floor(bound + 1e-6), res.status == 0


def rrg_mis_density_rs(d: int) -> float:
    """Replica-symmetric (Bethe) estimate of the maximum independent set density of random d-regular graphs.

    The RS cavity solution of the hard-core model at fugacity ``λ``: the cavity occupation ``q`` solves
    ``q = λ(1-q)^{d-1} / (1 + λ(1-q)^{d-1})``, the density is ``ρ = λ(1-q)^d / (1 + λ(1-q)^d)`` and the free
    entropy ``φ = ln(1 + λ(1-q)^d) - (d/2)·ln(1 - q²)``. The RS estimate of the maximum density is ``ρ`` where
    the entropy ``s = φ - ρ ln λ`` reaches 0. It upper-bounds the one-step RSB value (e.g. d = 3: 0.4591 vs
    0.4554) and follows Frieze's ``(2/d)(ln d - ln ln d + 1 - ln 2)`` at large d.

    Raises:
        ValueError: ``d < 3``.

    References:
        J. Barbier, F. Krzakala, L. Zdeborová, P. Zhang, "The hard-core model on random graphs revisited",
        J. Phys. Conf. Ser. 473 (2013), arXiv:1306.4121.
    """
    from scipy.optimize import brentq

    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 3:
        raise ValueError(f"d must be an integer >= 3, got {d!r}")

    def state(log_lam: float) -> tuple[float, float]:
        lam = math.exp(log_lam)
        q = brentq(
            lambda q: q - lam * (1 - q) ** (d - 1) / (1 + lam * (1 - q) ** (d - 1)), 0.0, 1.0, xtol=1e-15
        )
        a = lam * (1 - q) ** d
        rho = a / (1 + a)
        phi = math.log1p(a) - 0.5 * d * math.log1p(-q * q)
        return rho, phi - rho * log_lam

    log_lam = brentq(lambda ll: state(ll)[1], 1e-6, 200.0, xtol=1e-13)
    return state(log_lam)[0]
