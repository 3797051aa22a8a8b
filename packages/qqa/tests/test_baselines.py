"""Baselines and references: SA on the same QUBO, greedy checks (networkx #2446/#5568), exact MILP, and the
replica-symmetric MIS density (Barbier et al. arXiv:1306.4121; networkx #2446, #5568)."""

from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np
import pytest

from iclr25_qqa import (
    GraphColoring,
    MaxCut,
    MaximumClique,
    MaximumIndependentSet,
    exact_mis,
    greedy,
    rrg_mis_density_rs,
    simulated_annealing,
)


def brute_alpha(g):
    nodes = list(g)
    best = 0
    for bits in itertools.product([0, 1], repeat=len(nodes)):
        chosen = {v for v, b in zip(nodes, bits) if b}
        if len(chosen) > best and nx.is_empty(g.subgraph(chosen)):
            best = len(chosen)
    return best


@pytest.mark.parametrize("seed", [0, 1])
def test_exact_mis_matches_brute_force(seed):
    g = nx.gnp_random_graph(10, 0.3, seed=seed)
    value, bound, optimal = exact_mis(g, time_limit=20)
    assert optimal
    assert value == bound == brute_alpha(g)


def test_simulated_annealing_solves_small_instances():
    g = nx.petersen_graph()
    sa = simulated_annealing(MaximumIndependentSet(g), num_reads=20, num_sweeps=200, seed=0)
    assert sa.objective == 4
    assert sa.feasible
    cut = simulated_annealing(MaxCut(nx.cycle_graph(9)), num_reads=20, num_sweeps=200, seed=0)
    assert cut.objective == 8
    with pytest.raises(TypeError, match="binary"):
        simulated_annealing(GraphColoring(g, 3))
    with pytest.raises(ValueError, match="num_reads"):
        simulated_annealing(MaxCut(g), num_reads=0)


def test_greedy_mis_is_independent_and_maximal_including_networkx_5568_case():
    g = nx.path_graph(3)
    g.add_node("v")  # networkx #5568: P3 plus an isolated node
    r = greedy(MaximumIndependentSet(g), seeds=10)
    chosen = {v for v, b in zip(g, r.solution) if b}
    assert r.feasible
    assert nx.is_empty(g.subgraph(chosen))
    assert all(v in chosen or any(u in chosen for u in g[v]) for v in g)
    assert r.objective == 3  # {0, 2, 'v'}


def test_greedy_other_problems():
    g = nx.karate_club_graph()
    assert greedy(MaximumClique(g), seeds=20).feasible
    cut = greedy(MaxCut(nx.complete_bipartite_graph(2, 3)), seeds=3)
    assert cut.objective == 6
    col = greedy(GraphColoring(nx.cycle_graph(6), 2), seeds=5)
    assert col.objective == 0
    assert col.feasible


def test_rs_density_constants_and_direction():
    """The d=3 value lies between the 1RSB value 0.45537 (Barbier et al. 2013) and 0.46; d=100 follows Frieze's
    asymptotic (not the 0.1360 that silently broke ApR in the official data README)."""
    d3 = rrg_mis_density_rs(3)
    assert 0.4554 < d3 < 0.46
    d100 = rrg_mis_density_rs(100)
    frieze = 2 / 100 * (math.log(100) - math.log(math.log(100)) + 1 - math.log(2))
    assert d100 == pytest.approx(frieze, rel=0.02)
    assert abs(d100 - 0.1360) > 0.05
    values = [rrg_mis_density_rs(d) for d in (3, 5, 10, 20, 100)]
    assert all(a > b for a, b in itertools.pairwise(values))
    # ApR direction: a real independent set of a random 3-regular graph is below the reference (ratio <= 1)
    g = nx.random_regular_graph(3, 100, seed=0)
    value, _, optimal = exact_mis(g, time_limit=20)
    assert optimal
    assert value == 45
    assert value / (d3 * 100) <= 1.0
    with pytest.raises(ValueError, match="d must be"):
        rrg_mis_density_rs(2)


@pytest.mark.parametrize("d", [3, 20])
def test_rs_density_matches_an_independent_grid_scan(d):
    """Scan the fugacity on a grid, solve the RS cavity equation by bisection, and locate the zero of the
    entropy by interpolation: the density there must match the root-finding implementation."""

    def bisect(f, lo, hi):
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
        return 0.5 * (lo + hi)

    prev = None
    for lam in np.logspace(0, 14, 3000):
        q = bisect(lambda q, lam=lam: q - lam * (1 - q) ** (d - 1) / (1 + lam * (1 - q) ** (d - 1)), 0.0, 1.0)
        a = lam * (1 - q) ** d
        rho = a / (1 + a)
        s = math.log1p(a) - d / 2 * math.log1p(-q * q) - rho * math.log(lam)
        if prev is not None and prev[1] > 0 >= s:
            crossing = prev[0] + (rho - prev[0]) * prev[1] / (prev[1] - s)
            break
        prev = (rho, s)
    else:
        pytest.fail("entropy never crossed zero")
    assert rrg_mis_density_rs(d) == pytest.approx(crossing, abs=2e-4)
