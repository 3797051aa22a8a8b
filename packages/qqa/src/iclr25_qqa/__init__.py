"""iclr25_qqa: Parallel Quasi-Quantum Annealing (Ichikawa & Arai, ICLR 2025) in JAX.

Gradient descent on a continuous relaxation of a combinatorial problem, with a penalty annealed from convex
(minimum at x = ½) to one minimised only at binary points, many parallel replicas coupled by a diversity term,
and Langevin noise. Quickstart::

    import jax, networkx as nx
    from iclr25_qqa import MaximumIndependentSet, anneal

    problem = MaximumIndependentSet(nx.random_regular_graph(3, 100, seed=0))
    result = anneal(problem, key=jax.random.key(0))
    print(result.best_objective, result.feasible)

Nothing heavy runs at import: the public names load their modules (numpy, networkx, JAX) on first use.

References:
    Y. Ichikawa, Y. Arai. "Optimization by Parallel Quasi-Quantum Annealing with Gradient-Based Sampling",
    ICLR 2025, arXiv:2409.02135.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iclr25_shared import distribution_version, lazy_exports

__version__ = distribution_version("iclr25-qqa")

_LAZY = {
    "_anneal": (
        "AnnealConfig",
        "Result",
        "anneal",
        "categorical_penalty",
        "gamma_schedule",
        "penalty",
    ),
    "_baselines": (
        "BaselineResult",
        "exact_mis",
        "greedy",
        "rrg_mis_density_rs",
        "simulated_annealing",
    ),
    "_graphs": (
        "GraphFormatError",
        "GraphSpec",
        "load_graph",
        "parse_spec",
        "read_dimacs",
        "read_edgelist",
        "read_gset",
    ),
    "_problems": (
        "PROBLEMS",
        "BalancedPartition",
        "BinaryProblem",
        "CategoricalProblem",
        "GraphColoring",
        "MaxCut",
        "MaximumClique",
        "MaximumIndependentSet",
        "Problem",
        "chromatic_lower_bound",
        "make_problem",
    ),
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names}

__all__ = [
    "PROBLEMS",
    "AnnealConfig",
    "BalancedPartition",
    "BaselineResult",
    "BinaryProblem",
    "CategoricalProblem",
    "GraphColoring",
    "GraphFormatError",
    "GraphSpec",
    "MaxCut",
    "MaximumClique",
    "MaximumIndependentSet",
    "Problem",
    "Result",
    "__version__",
    "anneal",
    "categorical_penalty",
    "chromatic_lower_bound",
    "exact_mis",
    "gamma_schedule",
    "greedy",
    "load_graph",
    "make_problem",
    "parse_spec",
    "penalty",
    "read_dimacs",
    "read_edgelist",
    "read_gset",
    "rrg_mis_density_rs",
    "simulated_annealing",
]


if TYPE_CHECKING:
    from iclr25_qqa._anneal import (
        AnnealConfig,
        Result,
        anneal,
        categorical_penalty,
        gamma_schedule,
        penalty,
    )
    from iclr25_qqa._baselines import (
        BaselineResult,
        exact_mis,
        greedy,
        rrg_mis_density_rs,
        simulated_annealing,
    )
    from iclr25_qqa._graphs import (
        GraphFormatError,
        GraphSpec,
        load_graph,
        parse_spec,
        read_dimacs,
        read_edgelist,
        read_gset,
    )
    from iclr25_qqa._problems import (
        PROBLEMS,
        BalancedPartition,
        BinaryProblem,
        CategoricalProblem,
        GraphColoring,
        MaxCut,
        MaximumClique,
        MaximumIndependentSet,
        Problem,
        chromatic_lower_bound,
        make_problem,
    )

__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
