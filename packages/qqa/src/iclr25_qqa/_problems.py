"""Combinatorial problems on graphs with the QUBO / categorical energies QQA minimises.

Binary problems (MIS, max-clique, max-cut) have one relaxed variable per node, ``x ∈ [0, 1]^N``, and an energy
``E(x) = xᵀQx = Σ_i Q_ii x_i² + 2 Σ_{u<v} Q_uv x_u x_v`` with a symmetric ``Q`` (stored as its diagonal and its
off-diagonal edge list, never densely). Categorical problems (colouring, balanced partition) have ``K`` relaxed
variables per node, ``x ∈ [1e-5, 1]^{N×K}``, normalised over classes to ``x̃ = x / Σ_k x`` inside the energy.

References:
    Y. Ichikawa, Y. Arai. "Optimization by Parallel Quasi-Quantum Annealing with Gradient-Based Sampling",
    ICLR 2025, arXiv:2409.02135, §2 (QUBO formulations) and Appendix (problem definitions).
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Literal

import networkx as nx
import numpy as np
import scipy.sparse as sp

from iclr25_shared.checks import check_choice, check_float, check_int

__all__ = [
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
]


def _check_graph(graph: Any, *, allow_negative: bool, field: str = "graph") -> nx.Graph:
    if not isinstance(graph, nx.Graph):
        raise TypeError(f"{field} must be a networkx.Graph, got {type(graph).__name__}")
    if graph.is_directed() or graph.is_multigraph():
        raise TypeError(f"{field} must be an undirected simple graph (got a directed graph or multigraph)")
    if graph.number_of_nodes() == 0:
        raise ValueError(f"{field} is empty (0 nodes); a problem needs at least one node")
    loops = list(nx.selfloop_edges(graph))
    if loops:
        raise ValueError(f"{field} has {len(loops)} self-loop(s), e.g. at node {loops[0][0]!r}; remove them")
    for u, v, d in graph.edges(data=True):
        w = d.get("weight", 1.0)
        try:
            w = float(w)
        except (TypeError, ValueError):
            raise TypeError(f"{field}: weight of edge ({u!r}, {v!r}) must be a number, got {w!r}") from None
        if not math.isfinite(w):
            raise ValueError(f"{field}: weight of edge ({u!r}, {v!r}) must be finite, got {w}")
        if w < 0 and not allow_negative:
            raise ValueError(
                f"{field}: weight of edge ({u!r}, {v!r}) is {w}; this problem needs weights >= 0"
            )
    return graph


class Problem(ABC):
    """A combinatorial problem on a graph. Nodes are indexed ``0..N-1`` in ``list(graph.nodes)`` order.

    Attributes:
        graph: the input graph (not copied; do not mutate it while the problem is in use).
        nodes: node labels in index order.
        num_nodes: ``N``.
        num_classes: ``K`` for categorical problems, ``1`` for binary ones.
        sense: ``"max"`` when a larger objective is better, ``"min"`` otherwise.
        objective_name: the objective's unit, e.g. ``"set size"``.
    """

    name: ClassVar[str]
    sense: ClassVar[Literal["max", "min"]]
    objective_name: ClassVar[str]
    num_classes: int = 1

    def __init__(self, graph: nx.Graph, *, allow_negative: bool = False) -> None:
        self.graph = _check_graph(graph, allow_negative=allow_negative)
        self.nodes = list(graph.nodes)
        self.num_nodes = len(self.nodes)
        index = {v: i for i, v in enumerate(self.nodes)}
        edges = [(index[u], index[v], float(d.get("weight", 1.0))) for u, v, d in graph.edges(data=True)]
        arr = np.asarray(edges, dtype=np.float64).reshape(-1, 3)
        self.edge_u = arr[:, 0].astype(np.int32)
        self.edge_v = arr[:, 1].astype(np.int32)
        self.edge_w = arr[:, 2]
        n = self.num_nodes
        w = sp.coo_matrix((self.edge_w, (self.edge_u, self.edge_v)), shape=(n, n))
        self.adjacency = (w + w.T).tocsr()
        """Symmetric weighted adjacency, ``scipy.sparse.csr_matrix`` of shape (N, N)."""

    # ---- the energy QQA minimises -------------------------------------------------------------------------
    @property
    @abstractmethod
    def variable_shape(self) -> tuple[int, ...]:
        """Shape of one replica's relaxed variable: ``(N,)`` or ``(N, K)``."""

    energy_fn: ClassVar[Any]
    """Pure function ``energy_fn(arrays, x)``; with ``arrays = self.energy_arrays()`` it is :meth:`energy`.
    Solvers pass the arrays as traced arguments, so instances of equal shape share one compiled program."""

    @abstractmethod
    def energy_arrays(self, dtype: Any = None) -> tuple[Any, ...]:
        """The instance data ``energy_fn`` needs, as a tuple of jax arrays (floats in ``dtype``, default float32;
        indices int32)."""

    def energy(self, x: Any) -> Any:
        """Relaxed energy of ``x`` with shape ``(..., *variable_shape)``; returns a jax array of shape ``(...)``.

        At a decoded point (``encode(solution)``) it is the QUBO / categorical energy of the solution."""
        import jax.numpy as jnp

        x = jnp.asarray(x)
        if not jnp.issubdtype(x.dtype, jnp.floating):
            x = x.astype(jnp.float32)
        return _jitted(type(self).energy_fn)(self.energy_arrays(dtype=x.dtype), x)

    @abstractmethod
    def decode(self, x: Any) -> np.ndarray:
        """Relaxed ``x`` (``(..., *variable_shape)``) → integer solution ``(..., N)`` (round or argmax)."""

    @abstractmethod
    def encode(self, solution: Any) -> np.ndarray:
        """Integer solution ``(..., N)`` → the point of the relaxed domain it corresponds to (float64)."""

    # ---- the problem in its own units -----------------------------------------------------------------------
    @abstractmethod
    def objective(self, solution: Any) -> float:
        """The objective in the problem's own units (set size, cut weight, conflicts...)."""

    @abstractmethod
    def violations(self, solution: Any) -> int:
        """Number of violated constraints (0 means feasible)."""

    def is_feasible(self, solution: Any) -> bool:
        """Whether ``solution`` satisfies every constraint of the problem."""
        return self.violations(solution) == 0

    @abstractmethod
    def local_search(self, solution: Any) -> np.ndarray:
        """Greedy repair, then greedy improvement, of one solution (deterministic). Returns a new array."""

    def check_solution(self, solution: Any) -> np.ndarray:
        """Validate and return ``solution`` as an int64 array of shape ``(N,)``.

        Raises:
            ValueError: wrong shape or a value outside the allowed labels.
        """
        s = np.asarray(solution)
        if s.shape != (self.num_nodes,):
            raise ValueError(f"solution must have shape ({self.num_nodes},), got {s.shape}")
        if s.size and (not np.all(np.isfinite(s)) or np.any(s != np.round(s))):
            raise ValueError("solution must hold integer labels")
        s = s.astype(np.int64)
        hi = max(self.num_classes, 2) - 1
        if s.size and (s.min() < 0 or s.max() > hi):
            raise ValueError(f"solution labels must be in [0, {hi}], got range [{s.min()}, {s.max()}]")
        return s

    def better(self, a: float, b: float) -> bool:
        """Whether objective ``a`` is strictly better than ``b``."""
        return a > b if self.sense == "max" else a < b

    def __repr__(self) -> str:
        extra = f", k={self.num_classes}" if self.num_classes > 1 else ""
        return f"{type(self).__name__}(N={self.num_nodes}, |E|={len(self.edge_u)}{extra})"


LAYOUTS = ("auto", "edges", "dense")
"""How a binary problem hands its QUBO to the solver: ``edges`` (an edge list: ``Qx`` costs O(|E|) per replica, a
gather and a sorted segment sum), ``dense`` (an (N, N) matrix: O(N²) per replica, one matmul) or ``auto``."""

DENSE_FILL = 0.03
"""``auto`` picks ``dense`` when the off-diagonal non-zeros of ``Q`` fill at least this fraction of the N² entries
(and N <= :data:`DENSE_MAX_NODES`). Measured on one CPU thread with 100 replicas (README, *Bench*): the edge list
wins on G11 (0.5 %), G15 (1.5 %) and G43 (2 %), the matmul on G1 (6 %)."""

DENSE_MAX_NODES = 8192
"""Largest N for which ``auto`` may choose the dense layout (N² float32 = 256 MiB)."""


class BinaryProblem(Problem):
    """A QUBO ``E(x) = xᵀQx`` with ``Q`` given by ``diag`` (N,) and off-diagonal entries ``(qu, qv, qw)``.

    ``energy`` is differentiable; its derivative ``2Qx`` is supplied analytically, so a value and its gradient
    cost one product ``Qx``: O(|E|) per replica with ``layout="edges"``, O(N²) with ``"dense"``.

    Attributes:
        layout: ``"auto"`` (default), ``"edges"`` or ``"dense"``; see :data:`LAYOUTS`. Assign to change it.
    """

    energy_fn = staticmethod(lambda arrays, x: qubo_energy(arrays, x))

    diag: np.ndarray
    qu: np.ndarray
    qv: np.ndarray
    qw: np.ndarray
    layout: str = "auto"

    @property
    def variable_shape(self) -> tuple[int, ...]:
        return (self.num_nodes,)

    def resolved_layout(self) -> str:
        """``"edges"`` or ``"dense"``: :attr:`layout`, with ``auto`` decided by the fill of ``Q``.

        Raises:
            ValueError: :attr:`layout` is not one of :data:`LAYOUTS`.
        """
        check_choice("layout", self.layout, LAYOUTS)
        if self.layout != "auto":
            return self.layout
        n = self.num_nodes
        fill = 2 * len(self.qu) / float(n * n)
        return "dense" if n <= DENSE_MAX_NODES and fill >= DENSE_FILL else "edges"

    def energy_arrays(self, dtype: Any = None) -> tuple[Any, ...]:
        """``(diag (N,), Q_off (N, N))`` for the dense layout, ``(diag (N,), src (2|E|,), dst (2|E|,),
        w (2|E|,))`` for the edge list (both directions, sorted by ``dst``); float arrays in ``dtype``
        (default float32), indices int32."""
        import jax.numpy as jnp

        dtype = jnp.float32 if dtype is None else dtype
        diag = jnp.asarray(self.diag, dtype)
        if self.resolved_layout() == "dense":
            n = self.num_nodes
            q = np.zeros((n, n))
            np.add.at(q, (self.qu, self.qv), self.qw)
            np.add.at(q, (self.qv, self.qu), self.qw)
            return (diag, jnp.asarray(q, dtype))
        src = np.concatenate([self.qu, self.qv])
        dst = np.concatenate([self.qv, self.qu])
        w = np.concatenate([self.qw, self.qw])
        order = np.argsort(dst, kind="stable")
        return (
            diag,
            jnp.asarray(src[order], jnp.int32),
            jnp.asarray(dst[order], jnp.int32),
            jnp.asarray(w[order], dtype),
        )

    def qubo_matrix(self) -> sp.csr_matrix:
        """The symmetric QUBO matrix ``Q`` (N, N), sparse; ``energy(x) == x @ Q @ x``."""
        n = self.num_nodes
        off = sp.coo_matrix((self.qw, (self.qu, self.qv)), shape=(n, n))
        return (off + off.T + sp.diags(self.diag)).tocsr()

    def decode(self, x: Any) -> np.ndarray:
        return (np.asarray(x) > 0.5).astype(np.int64)

    def encode(self, solution: Any) -> np.ndarray:
        return np.asarray(solution, dtype=np.float64)


class _SetProblem(BinaryProblem):
    """MIS-type QUBO on a conflict graph: ``Q_ii = -1``, ``Q_uv = penalty`` on conflict edges."""

    sense = "max"
    objective_name = "set size"

    def _setup_conflicts(self, cu: np.ndarray, cv: np.ndarray, penalty: float) -> None:
        # any penalty > 1/2 makes every minimiser independent
        self.penalty = check_float("penalty", penalty, low=0.5, low_inclusive=False)
        n = self.num_nodes
        self.diag = -np.ones(n)
        self.qu, self.qv = cu.astype(np.int32), cv.astype(np.int32)
        self.qw = np.full(len(cu), self.penalty)
        c = sp.coo_matrix((np.ones(len(cu)), (cu, cv)), shape=(n, n))
        self.conflicts = (c + c.T).tocsr()
        """0/1 conflict matrix (N, N): two chosen nodes may not share a conflict edge."""

    def objective(self, solution: Any) -> float:
        return float(self.check_solution(solution).sum())

    def violations(self, solution: Any) -> int:
        s = self.check_solution(solution)
        return int(np.sum(s[self.qu] * s[self.qv]))

    def local_search(self, solution: Any) -> np.ndarray:
        """Drop the node with most chosen conflicting neighbours until feasible, then add free nodes
        (fewest free neighbours first) until maximal. Ties go to the lowest index.

        O((N + |conflict edges|)·log N): both phases keep lazy heaps of (key, node) entries, re-pushed whenever a
        key changes and skipped when stale.
        """
        import heapq

        s = self.check_solution(solution).copy()
        a = self.conflicts
        ptr, nbrs = a.indptr, a.indices
        load = np.asarray(a @ s).astype(np.int64)  # chosen conflicting neighbours of every node
        heap = [(-int(load[i]), int(i)) for i in np.flatnonzero((s == 1) & (load > 0))]
        heapq.heapify(heap)
        while heap:
            neg, i = heapq.heappop(heap)
            if s[i] != 1 or load[i] != -neg or load[i] == 0:
                continue  # stale entry
            s[i] = 0
            for j in nbrs[ptr[i] : ptr[i + 1]]:
                load[j] -= 1
                if s[j] == 1 and load[j] > 0:
                    heapq.heappush(heap, (-int(load[j]), int(j)))
        free = (s == 0) & (load == 0)
        free_deg = np.asarray(a @ free.astype(np.int64)).astype(np.int64)  # free neighbours of every node
        heap = [(int(free_deg[i]), int(i)) for i in np.flatnonzero(free)]
        heapq.heapify(heap)

        def leave(j: int) -> None:  # j stops being free: its neighbours lose a free neighbour
            free[j] = False
            for m in nbrs[ptr[j] : ptr[j + 1]]:
                free_deg[m] -= 1
                if free[m]:
                    heapq.heappush(heap, (int(free_deg[m]), int(m)))

        while heap:
            d, i = heapq.heappop(heap)
            if not free[i] or free_deg[i] != d:
                continue
            s[i] = 1
            leave(i)
            for j in nbrs[ptr[i] : ptr[i + 1]]:
                if free[j]:
                    leave(int(j))
        return s


class MaximumIndependentSet(_SetProblem):
    """Maximum independent set: choose the most nodes with no edge between two chosen ones.

    QUBO (paper §2 / official code): ``Q_ii = -1``, ``Q_uv = Q_vu = penalty`` for every edge, so on binary ``x``
    ``E(x) = -|S| + 2·penalty·#(edges inside S)``. Any ``penalty > 1/2`` makes every minimiser independent.

    Args:
        graph: undirected simple graph, no self-loops; edge weights are not used (must be finite and >= 0).
        penalty: ``P`` above. Default 2.0: any ``P > 1/2`` makes minimisers independent, and the README's MIS
            numbers were measured at 2. The official research code's class default is 3 (``src/instance.py``;
            its SAT loader uses 1); pass ``penalty=3`` to match it.
        layout: ``"auto"``, ``"edges"`` or ``"dense"``: how ``Q`` reaches the solver (:data:`LAYOUTS`).

    Raises:
        ValueError: empty graph, self-loops, negative/NaN weights, ``penalty <= 1/2``.
        TypeError: not a networkx.Graph, directed, or multigraph.
    """

    name = "mis"

    def __init__(self, graph: nx.Graph, *, penalty: float = 2.0, layout: str = "auto") -> None:
        super().__init__(graph)
        self.layout = check_choice("layout", layout, LAYOUTS)
        self._setup_conflicts(self.edge_u, self.edge_v, penalty)


class MaximumClique(_SetProblem):
    """Maximum clique: the MIS QUBO on the complement graph (``Q_uv = penalty`` on non-edges, ``Q_ii = -1``).

    ``E(x) = -|S| + 2·penalty·#(non-adjacent pairs inside S)``. The complement's edges are stored explicitly
    (N(N-1)/2 - |E| pairs), so this is meant for graphs up to a few thousand nodes.

    Raises:
        ValueError / TypeError: as :class:`MaximumIndependentSet`.
    """

    name = "clique"

    def __init__(self, graph: nx.Graph, *, penalty: float = 2.0, layout: str = "auto") -> None:
        super().__init__(graph)
        self.layout = check_choice("layout", layout, LAYOUTS)
        n = self.num_nodes
        adj = self.adjacency.toarray() != 0
        iu, iv = np.triu_indices(n, k=1)
        keep = ~adj[iu, iv]
        self._setup_conflicts(iu[keep], iv[keep], penalty)


class MaxCut(BinaryProblem):
    """Weighted max-cut: split the nodes in two sides maximising the weight of edges between them.

    QUBO: ``Q_uv = w_uv``, ``Q_ii = -Σ_v w_iv``, so on binary ``x`` ``E(x) = -cut(x)`` exactly. Negative
    weights (Gset G11–G13, toroidal ±1 instances) are allowed.

    Raises:
        ValueError: empty graph, self-loops, NaN/infinite weights.
        TypeError: not a networkx.Graph, directed, or multigraph.
    """

    name = "maxcut"
    sense = "max"
    objective_name = "cut weight"

    def __init__(self, graph: nx.Graph, *, layout: str = "auto") -> None:
        super().__init__(graph, allow_negative=True)
        self.layout = check_choice("layout", layout, LAYOUTS)
        self.diag = -np.asarray(self.adjacency.sum(axis=1)).ravel()
        self.qu, self.qv, self.qw = self.edge_u, self.edge_v, self.edge_w

    def objective(self, solution: Any) -> float:
        s = self.check_solution(solution)
        return float(np.sum(self.edge_w * (s[self.edge_u] != s[self.edge_v])))

    def violations(self, solution: Any) -> int:
        self.check_solution(solution)
        return 0

    def local_search(self, solution: Any) -> np.ndarray:
        """Flip the node with the largest positive cut gain until none is left (1-flip local optimum); ties go to
        the lowest index. A lazy max-heap of gains makes each flip O(degree·log N)."""
        import heapq

        s = self.check_solution(solution).copy()
        spin = 2.0 * s - 1.0
        a = self.adjacency
        ptr, nbrs, wts = a.indptr, a.indices, a.data
        gain = spin * (a @ spin)  # flipping i changes the cut by spin_i * (W spin)_i
        heap = [(-float(gain[i]), int(i)) for i in np.flatnonzero(gain > 1e-12)]
        heapq.heapify(heap)
        for _ in range(50 * self.num_nodes + 1000):
            while heap and (-heap[0][0] != gain[heap[0][1]] or gain[heap[0][1]] <= 1e-12):
                heapq.heappop(heap)  # stale or no longer improving
            if not heap:
                break
            _, i = heapq.heappop(heap)
            spin[i] = -spin[i]
            gain[i] = -gain[i]
            for j, w in zip(nbrs[ptr[i] : ptr[i + 1]], wts[ptr[i] : ptr[i + 1]]):
                # field_j changes by 2 w spin_i(new); gain_j = spin_j field_j
                gain[j] += 2.0 * w * spin[i] * spin[j]
                if gain[j] > 1e-12:
                    heapq.heappush(heap, (-float(gain[j]), int(j)))
        return ((spin + 1) // 2).astype(np.int64)


class CategoricalProblem(Problem):
    """A problem over ``K`` classes per node; relaxed ``x`` has shape ``(..., N, K)``, normalised over ``K``."""

    def __init__(self, graph: nx.Graph, k: int, *, field: str = "k") -> None:
        super().__init__(graph)
        self.num_classes = check_int(field, k, low=1, high=self.num_nodes)  # at most one class per node

    @property
    def variable_shape(self) -> tuple[int, ...]:
        return (self.num_nodes, self.num_classes)

    @staticmethod
    def normalise(x: Any) -> Any:
        """``x̃ = x / Σ_k x`` over the last axis (jax)."""
        import jax.numpy as jnp

        x = jnp.asarray(x)
        return x / jnp.sum(x, axis=-1, keepdims=True)

    def decode(self, x: Any) -> np.ndarray:
        return np.argmax(np.asarray(x), axis=-1).astype(np.int64)

    def encode(self, solution: Any) -> np.ndarray:
        s = np.asarray(solution, dtype=np.int64)
        return np.eye(self.num_classes)[s]

    def class_counts(self, solution: Any) -> np.ndarray:
        return np.bincount(self.check_solution(solution), minlength=self.num_classes)


def chromatic_lower_bound(graph: nx.Graph) -> tuple[int, str]:
    """A cheap, provable lower bound on the chromatic number and why it holds.

    The largest of: 1 (a node), 2 (an edge), 3 (an odd cycle, i.e. not bipartite), and the size of a clique
    found greedily (every clique needs distinct colours).
    """
    if graph.number_of_edges() == 0:
        return 1, "the graph has no edges"
    best, why = 2, "the graph has an edge"
    if not nx.is_bipartite(graph):
        best, why = 3, "the graph has an odd cycle"
    adj = {v: set(graph[v]) for v in graph}
    for start in sorted(graph, key=lambda v: -len(adj[v]))[:50]:
        clique, cand = [start], set(adj[start])
        while cand:
            v = max(cand, key=lambda u: len(adj[u] & cand))
            clique.append(v)
            cand &= adj[v]
        if len(clique) > best:
            best, why = len(clique), f"it contains a clique of {len(clique)} nodes"
    return best, why


class GraphColoring(CategoricalProblem):
    """Graph colouring with ``k`` colours: minimise the number of monochromatic edges (conflicts).

    Energy (official code): ``E(x) = Σ_k ½ x̃_kᵀ A x̃_k = Σ_{(u,v)∈E} Σ_k x̃_uk x̃_vk`` with ``x̃ = x / Σ_k x``;
    at a one-hot ``x`` it equals the number of conflicts. Feasible means zero conflicts.

    Args:
        graph: undirected simple graph, no self-loops (edge weights unused; must be finite and >= 0).
        k: number of colours, ``1 <= k <= N``.

    Attributes:
        lower_bound, lower_bound_reason: a provable lower bound on the chromatic number
            (:func:`chromatic_lower_bound`); when ``k < lower_bound`` no colouring is feasible and the solver
            returns the best (fewest-conflict) colouring it finds, reported as infeasible.

    Raises:
        ValueError: empty graph, self-loops, negative/NaN weights, ``k`` outside ``[1, N]``.
        TypeError: ``k`` not an integer; graph not an undirected simple networkx.Graph.
    """

    name = "coloring"
    sense = "min"
    objective_name = "conflicts"

    def __init__(self, graph: nx.Graph, k: int) -> None:
        super().__init__(graph, k)
        self.lower_bound, self.lower_bound_reason = chromatic_lower_bound(graph)

    @property
    def below_lower_bound(self) -> bool:
        """True when ``k`` is below a proven lower bound on the chromatic number (no feasible colouring)."""
        return self.num_classes < self.lower_bound

    energy_fn = staticmethod(lambda arrays, x: coloring_energy(arrays, x))

    def energy_arrays(self, dtype: Any = None) -> tuple[Any, ...]:
        import jax.numpy as jnp

        return (jnp.asarray(self.edge_u), jnp.asarray(self.edge_v))

    def objective(self, solution: Any) -> float:
        return float(self.violations(solution))

    def violations(self, solution: Any) -> int:
        s = self.check_solution(solution)
        return int(np.sum(s[self.edge_u] == s[self.edge_v]))

    def local_search(self, solution: Any) -> np.ndarray:
        """Min-conflicts: move a conflicting node to the colour used least by its neighbours while that
        strictly lowers the conflict count."""
        s = self.check_solution(solution).copy()
        a, k = self.adjacency, self.num_classes
        for _ in range(100):
            improved = False
            conflicted = np.unique(
                np.concatenate([self.edge_u, self.edge_v])[np.tile(s[self.edge_u] == s[self.edge_v], 2)]
            )
            for i in conflicted:
                nbr = a.indices[a.indptr[i] : a.indptr[i + 1]]
                counts = np.bincount(s[nbr], minlength=k)
                c = int(np.argmin(counts))
                if counts[c] < counts[s[i]]:
                    s[i] = c
                    improved = True
            if not improved:
                break
        return s


class BalancedPartition(CategoricalProblem):
    """Balanced ``k``-way graph partition: minimise the weight of edges cut while keeping parts equal-sized.

    Energy (official code): ``E(x) = Σ_{(u,v)∈E} w_uv (1 - Σ_k x̃_uk x̃_vk) + balance·Σ_k (N/K - Σ_i x̃_ik)²``.
    The objective is the cut weight; a partition is feasible when every part has at most
    ``ceil((1 + imbalance)·N/K)`` nodes (``imbalance = 0.03`` is the usual METIS/KaHIP tolerance).

    Args:
        graph: undirected simple graph, no self-loops, weights finite and >= 0.
        k: number of parts, ``1 <= k <= N``.
        balance: weight of the squared size-deviation term (default 5e-4, the official code's constant).
        imbalance: allowed relative excess of the largest part, ``>= 0``.

    Raises:
        ValueError: empty graph, self-loops, negative/NaN weights, ``k`` outside ``[1, N]``, ``balance < 0``,
            ``imbalance < 0``.
    """

    name = "partition"
    sense = "min"
    objective_name = "cut weight"

    def __init__(self, graph: nx.Graph, k: int, *, balance: float = 5e-4, imbalance: float = 0.03) -> None:
        super().__init__(graph, k)
        self.balance = check_float("balance", balance, low=0.0)
        self.imbalance = check_float("imbalance", imbalance, low=0.0)
        self.max_part_size = math.ceil((1.0 + self.imbalance) * self.num_nodes / self.num_classes - 1e-9)

    energy_fn = staticmethod(lambda arrays, x: partition_energy(arrays, x))

    def energy_arrays(self, dtype: Any = None) -> tuple[Any, ...]:
        import jax.numpy as jnp

        dtype = jnp.float32 if dtype is None else dtype
        target = self.num_nodes / self.num_classes
        return (
            jnp.asarray(self.edge_u),
            jnp.asarray(self.edge_v),
            jnp.asarray(self.edge_w, dtype),
            jnp.asarray(target, dtype),
            jnp.asarray(self.balance, dtype),
        )

    def objective(self, solution: Any) -> float:
        s = self.check_solution(solution)
        return float(np.sum(self.edge_w * (s[self.edge_u] != s[self.edge_v])))

    def violations(self, solution: Any) -> int:
        """Nodes in excess of ``max_part_size``, summed over parts."""
        counts = self.class_counts(solution)
        return int(np.maximum(counts - self.max_part_size, 0).sum())

    def local_search(self, solution: Any) -> np.ndarray:
        """Move nodes out of over-full parts (cheapest first), then make cut-reducing moves that keep every part
        within ``max_part_size``."""
        s = self.check_solution(solution).copy()
        a, k = self.adjacency, self.num_classes
        counts = np.bincount(s, minlength=k)

        def conn(i: int) -> np.ndarray:
            lo, hi = a.indptr[i], a.indptr[i + 1]
            return np.bincount(s[a.indices[lo:hi]], weights=a.data[lo:hi], minlength=k)

        while counts.max() > self.max_part_size:
            src = int(np.argmax(counts))
            best = None
            for i in np.where(s == src)[0]:
                c = conn(int(i))
                open_parts = np.where(counts < self.max_part_size)[0]
                dst = open_parts[np.argmax(c[open_parts])]
                loss = c[src] - c[dst]
                if best is None or loss < best[0]:
                    best = (loss, int(i), int(dst))
            _, i, dst = best  # type: ignore[misc]
            counts[src] -= 1
            counts[dst] += 1
            s[i] = dst
        for _ in range(20):
            moved = False
            for i in range(self.num_nodes):
                c = conn(i)
                own = c[s[i]]
                if counts[s[i]] <= 1:
                    continue
                c[counts >= self.max_part_size] = -np.inf
                c[s[i]] = -np.inf
                dst = int(np.argmax(c))
                if c[dst] > own + 1e-12:
                    counts[s[i]] -= 1
                    counts[dst] += 1
                    s[i] = dst
                    moved = True
            if not moved:
                break
        return s


@functools.cache
def _jitted(fn: Any) -> Any:
    import jax

    return jax.jit(fn)


# ---- pure energy functions (arrays, x) -> energy; module-level so compiled solvers can be shared ----------------


def qubo_energy(arrays: tuple[Any, ...], x: Any) -> Any:
    """``xᵀQx`` over the last axis of ``x`` (..., N), in ``x``'s dtype.

    ``arrays`` is :meth:`BinaryProblem.energy_arrays`: ``(diag, Q_off)`` (dense) or ``(diag, src, dst, w)`` (edge
    list, both directions, sorted by ``dst``). The value and the derivative ``2Qx`` share one product ``Qx``
    (a custom JVP), which costs O(|E|) per replica with the edge list.
    """
    if len(arrays) == 2:
        diag, q = arrays
        return _quadratic_form(x, diag.astype(x.dtype), None, None, q.astype(x.dtype))
    diag, src, dst, w = arrays
    return _quadratic_form(x, diag.astype(x.dtype), src, dst, w.astype(x.dtype))


def _qx(z: Any, diag: Any, src: Any, dst: Any, w: Any) -> Any:
    """``Qz`` for ``z`` (..., N): dense matmul when ``src`` is None (``w`` is then Q_off), else an edge gather and
    a sorted segment sum with the replicas as the trailing (contiguous) axis."""
    import jax
    import jax.numpy as jnp

    if src is None:
        return diag * z + z @ w
    n = z.shape[-1]
    zt = z.reshape(-1, n).T  # (N, B)
    off = jax.ops.segment_sum(jnp.take(zt, src, axis=0) * w[:, None], dst, n, indices_are_sorted=True)
    return diag * z + off.T.reshape(z.shape)


def _make_quadratic_form() -> Any:
    import jax
    import jax.numpy as jnp
    from jax.custom_derivatives import SymbolicZero

    @jax.custom_jvp
    def quadratic_form(z: Any, diag: Any, src: Any, dst: Any, w: Any) -> Any:
        return jnp.sum(z * _qx(z, diag, src, dst, w), axis=-1)

    def jvp(primals: Any, tangents: Any) -> Any:
        z, diag, src, dst, w = primals
        dz, ddiag, _, _, dw = tangents
        q = _qx(z, diag, src, dst, w)
        out = jnp.sum(z * q, axis=-1)
        t = jnp.zeros_like(out)
        if not isinstance(dz, SymbolicZero):
            t = t + jnp.sum(2.0 * q * dz, axis=-1)
        if not isinstance(ddiag, SymbolicZero):
            t = t + jnp.sum(ddiag * z * z, axis=-1)
        if dw is not None and not isinstance(dw, SymbolicZero):
            t = t + jnp.sum(z * _qx(z, jnp.zeros_like(diag), src, dst, dw), axis=-1)
        return out, t

    quadratic_form.defjvp(jvp, symbolic_zeros=True)
    return quadratic_form


def _quadratic_form(z: Any, diag: Any, src: Any, dst: Any, w: Any) -> Any:
    global _QF
    if _QF is None:
        _QF = _make_quadratic_form()
    return _QF(z, diag, src, dst, w)


_QF: Any = None


def _same_class(eu: Any, ev: Any, x: Any) -> Any:
    """``Σ_k x̃_uk x̃_vk`` for every edge, shape ``(..., |E|)``."""
    import jax.numpy as jnp

    xt = CategoricalProblem.normalise(x)
    return jnp.sum(jnp.take(xt, eu, axis=-2) * jnp.take(xt, ev, axis=-2), axis=-1)


def coloring_energy(arrays: tuple[Any, ...], x: Any) -> Any:
    """``Σ_{(u,v)∈E} Σ_k x̃_uk x̃_vk`` for ``x`` (..., N, K); ``arrays = (edge_u, edge_v)``."""
    import jax.numpy as jnp

    eu, ev = arrays
    return jnp.sum(_same_class(eu, ev, x), axis=-1)


def partition_energy(arrays: tuple[Any, ...], x: Any) -> Any:
    """``Σ_e w_e (1 - Σ_k x̃_uk x̃_vk) + balance·Σ_k (N/K - Σ_i x̃_ik)²``; ``arrays = (eu, ev, w, N/K, balance)``."""
    import jax.numpy as jnp

    eu, ev, w, target, balance = arrays
    cut = jnp.sum(w.astype(x.dtype) * (1.0 - _same_class(eu, ev, x)), axis=-1)
    sizes = jnp.sum(CategoricalProblem.normalise(x), axis=-2)
    return cut + balance * jnp.sum((target - sizes) ** 2, axis=-1)


PROBLEMS: dict[str, type[Problem]] = {
    "mis": MaximumIndependentSet,
    "clique": MaximumClique,
    "maxcut": MaxCut,
    "coloring": GraphColoring,
    "partition": BalancedPartition,
}


def make_problem(
    name: str, graph: nx.Graph, *, k: int | None = None, penalty: float = 2.0, layout: str = "auto"
) -> Problem:
    """Build a problem by name: ``mis``, ``clique``, ``maxcut``, ``coloring`` (needs ``k``), ``partition``
    (``k`` parts, default 2). ``layout`` (binary problems: ``auto``, ``edges``, ``dense``) is :data:`LAYOUTS`.

    Raises:
        ValueError: unknown name; ``k`` missing for colouring; ``k`` given for a binary problem.
    """
    if name not in PROBLEMS:
        raise ValueError(f"problem must be one of {', '.join(PROBLEMS)}; got {name!r}")
    if name in ("mis", "clique"):
        if k is not None:
            raise ValueError(f"k is only used by coloring and partition, not {name}")
        return PROBLEMS[name](graph, penalty=penalty, layout=layout)  # type: ignore[call-arg]
    if name == "maxcut":
        if k is not None:
            raise ValueError("k is only used by coloring and partition, not maxcut")
        return MaxCut(graph, layout=layout)
    if name == "coloring":
        if k is None:
            raise ValueError("coloring needs k (the number of colours), e.g. --k 4")
        return GraphColoring(graph, k)
    return BalancedPartition(graph, 2 if k is None else k)
