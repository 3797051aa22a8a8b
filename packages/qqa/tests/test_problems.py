"""Problem energies against independent references: networkx cut sizes, brute-force counts, the QUBO matrix,
finite differences; and bad inputs."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import pytest

from iclr25_qqa import (
    BalancedPartition,
    GraphColoring,
    MaxCut,
    MaximumClique,
    MaximumIndependentSet,
    chromatic_lower_bound,
    make_problem,
    penalty,
)
from iclr25_shared.device import jax_enable_x64

RNG = np.random.default_rng(0)


def weighted_er(n=12, p=0.4, seed=1, negative=False):
    g = nx.gnp_random_graph(n, p, seed=seed)
    rng = np.random.default_rng(seed)
    for u, v in g.edges():
        g[u][v]["weight"] = float(rng.uniform(-1, 2) if negative else rng.uniform(0.5, 2))
    return g


def test_mis_energy_is_minus_size_plus_two_p_violations():
    g = nx.gnp_random_graph(15, 0.3, seed=2)
    prob = MaximumIndependentSet(g, penalty=3.0)
    for _ in range(20):
        s = RNG.integers(0, 2, 15)
        chosen = {i for i in range(15) if s[i]}
        inside = g.subgraph(chosen).number_of_edges()
        assert float(prob.energy(s)) == pytest.approx(-len(chosen) + 2 * 3.0 * inside)
        assert prob.violations(s) == inside
        assert prob.is_feasible(s) == nx.is_empty(g.subgraph(chosen))
        assert prob.objective(s) == len(chosen)


@pytest.mark.parametrize("negative", [False, True])
def test_maxcut_energy_is_minus_networkx_cut_size(negative):
    g = weighted_er(negative=negative)
    prob = MaxCut(g)
    for _ in range(20):
        s = RNG.integers(0, 2, g.number_of_nodes())
        side = {i for i in g if s[i]}
        cut = nx.cut_size(g, side, weight="weight")
        assert float(prob.energy(s)) == pytest.approx(-cut, rel=1e-5, abs=1e-5)
        assert prob.objective(s) == pytest.approx(cut)


def test_clique_qubo_equals_mis_qubo_on_the_complement():
    g = nx.gnp_random_graph(10, 0.5, seed=3)
    clique, mis = MaximumClique(g), MaximumIndependentSet(nx.complement(g))
    np.testing.assert_allclose(clique.qubo_matrix().toarray(), mis.qubo_matrix().toarray())
    x = RNG.uniform(size=(6, 10))
    np.testing.assert_allclose(np.asarray(clique.energy(x)), np.asarray(mis.energy(x)), rtol=1e-5)
    s = np.zeros(10, int)
    s[list(max(nx.find_cliques(g), key=len))] = 1
    assert clique.is_feasible(s)


def test_qubo_energy_matches_matrix_gradient_and_hessian():
    g = weighted_er(negative=True)
    prob = MaxCut(g)
    q = prob.qubo_matrix().toarray()
    x = RNG.uniform(size=g.number_of_nodes())
    assert float(prob.energy(x)) == pytest.approx(x @ q @ x, rel=1e-5)
    np.testing.assert_allclose(
        np.asarray(jax.grad(prob.energy)(jnp.asarray(x))), 2 * q @ x, rtol=1e-4, atol=1e-5
    )
    # batched energy equals the per-row energies
    xb = RNG.uniform(size=(4, g.number_of_nodes()))
    np.testing.assert_allclose(np.asarray(prob.energy(xb)), [r @ q @ r for r in xb], rtol=1e-5)


@pytest.mark.parametrize("make", [lambda g: GraphColoring(g, 3), lambda g: BalancedPartition(g, 3)])
def test_categorical_energy_gradient_matches_finite_differences(make):
    g = nx.gnp_random_graph(8, 0.5, seed=4)
    prob = make(g)
    x = RNG.uniform(0.2, 1.0, size=(8, 3))
    with jax_enable_x64():
        xj = jnp.asarray(x, jnp.float64)
        grad = np.asarray(jax.grad(prob.energy)(xj))
        eps = 1e-6
        for i, k in [(0, 0), (3, 2), (7, 1)]:
            d = np.zeros_like(x)
            d[i, k] = eps
            fd = (float(prob.energy(xj + d)) - float(prob.energy(xj - d))) / (2 * eps)
            assert grad[i, k] == pytest.approx(fd, rel=1e-5, abs=1e-7)


def test_convex_regime_hessian_is_2q_plus_8_abs_gamma():
    """For p=2 (arXiv:2409.02135 §3) the Hessian of E + γΦ is 2Q + 8|γ|I, convex once |γ| >= -λ_min(Q)/4."""
    prob = MaximumIndependentSet(nx.petersen_graph())
    q = prob.qubo_matrix().toarray()
    lam_min = np.linalg.eigvalsh(q).min()
    gamma = lam_min / 4 - 0.01  # negative, just past the threshold
    f = lambda x: prob.energy(x) + gamma * penalty(x, 2)  # noqa: E731
    h = np.asarray(jax.jit(jax.hessian(f))(jnp.full(10, 0.3)))
    np.testing.assert_allclose(h, 2 * q + 8 * abs(gamma) * np.eye(10), atol=1e-4)
    assert np.linalg.eigvalsh(h).min() > 0


def test_coloring_energy_counts_conflicts_and_lower_bound():
    g = nx.gnp_random_graph(12, 0.4, seed=5)
    prob = GraphColoring(g, 3)
    for _ in range(10):
        s = RNG.integers(0, 3, 12)
        conflicts = sum(s[u] == s[v] for u, v in g.edges())
        assert float(prob.energy(prob.encode(s))) == pytest.approx(conflicts)
        assert prob.objective(s) == conflicts
    assert chromatic_lower_bound(nx.complete_graph(5))[0] == 5
    assert chromatic_lower_bound(nx.cycle_graph(7))[0] == 3
    assert chromatic_lower_bound(nx.path_graph(4))[0] == 2
    assert GraphColoring(nx.complete_graph(5), 4).below_lower_bound
    assert not GraphColoring(nx.complete_graph(5), 5).below_lower_bound


def test_partition_energy_and_feasibility():
    g = nx.gnp_random_graph(10, 0.5, seed=6)
    prob = BalancedPartition(g, 2, balance=0.1, imbalance=0.0)
    s = np.array([0, 1] * 5)
    cut = sum(s[u] != s[v] for u, v in g.edges())
    assert float(prob.energy(prob.encode(s))) == pytest.approx(cut)  # balanced: no size term
    s2 = np.array([0] * 7 + [1] * 3)
    cut2 = sum(s2[u] != s2[v] for u, v in g.edges())
    assert float(prob.energy(prob.encode(s2))) == pytest.approx(cut2 + 0.1 * (2 * 2**2), rel=1e-5)
    assert prob.is_feasible(s)
    assert not prob.is_feasible(s2)
    assert prob.is_feasible(prob.local_search(s2))


def test_local_search_repairs_and_improves():
    g = nx.random_regular_graph(3, 40, seed=0)
    mis = MaximumIndependentSet(g)
    s = mis.local_search(np.ones(40, int))
    # index i is node mis.nodes[i] (list(graph.nodes) order; networkx < 3.4 does not list these graphs' nodes sorted)
    chosen = {mis.nodes[i] for i in range(40) if s[i]}
    assert nx.is_empty(g.subgraph(chosen))
    assert all(v in chosen or any(u in chosen for u in g[v]) for v in g)  # maximal
    cut = MaxCut(g)
    s0 = np.zeros(40, int)
    s1 = cut.local_search(s0)
    assert cut.objective(s1) > cut.objective(s0)
    gains = [cut.objective(np.where(np.arange(40) == i, 1 - s1, s1)) - cut.objective(s1) for i in range(40)]
    assert max(gains) <= 0  # a 1-flip local optimum
    col = GraphColoring(nx.cycle_graph(6), 2)
    assert col.objective(col.local_search(np.zeros(6, int))) < col.objective(np.zeros(6, int))


@pytest.mark.parametrize("cls", [MaximumIndependentSet, MaximumClique, MaxCut])
def test_empty_graph_rejected(cls):
    with pytest.raises(ValueError, match="empty"):
        cls(nx.Graph())


def test_self_loops_rejected():
    g = nx.path_graph(3)
    g.add_edge(1, 1)
    with pytest.raises(ValueError, match="self-loop"):
        MaximumIndependentSet(g)


@pytest.mark.parametrize("w", [-1.0, math.nan, math.inf])
def test_bad_weights_rejected_where_forbidden(w):
    g = nx.path_graph(3)
    g[0][1]["weight"] = w
    with pytest.raises(ValueError, match="weight"):
        MaximumIndependentSet(g)
    with pytest.raises(ValueError, match="weight"):
        BalancedPartition(g, 2)
    if w == -1.0:
        assert MaxCut(g).objective(np.array([0, 1, 0])) == pytest.approx(0.0)  # negative allowed for max-cut
    else:
        with pytest.raises(ValueError, match="weight"):
            MaxCut(g)


@pytest.mark.parametrize("k", [0, -1, 5])
def test_k_out_of_range_rejected(k):
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 4\]"):
        GraphColoring(nx.path_graph(4), k)
    with pytest.raises(ValueError, match="k must be"):
        BalancedPartition(nx.path_graph(4), k)


def test_other_bad_inputs():
    with pytest.raises(TypeError, match="k must be an integer"):
        GraphColoring(nx.path_graph(4), 2.0)
    with pytest.raises(ValueError, match="penalty"):
        MaximumIndependentSet(nx.path_graph(4), penalty=0.5)
    with pytest.raises(TypeError, match=r"networkx\.Graph"):
        MaxCut([(0, 1)])
    with pytest.raises(TypeError, match="undirected"):
        MaxCut(nx.DiGraph([(0, 1)]))
    with pytest.raises(ValueError, match="coloring needs k"):
        make_problem("coloring", nx.path_graph(3))
    with pytest.raises(ValueError, match="problem must be one of"):
        make_problem("tsp", nx.path_graph(3))
    with pytest.raises(ValueError, match="shape"):
        MaxCut(nx.path_graph(3)).objective([0, 1])
    with pytest.raises(ValueError, match="labels"):
        MaxCut(nx.path_graph(3)).objective([0, 1, 2])
