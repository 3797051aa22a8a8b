"""Shared fixtures: small real and random graphs; one torch thread (the CI machine is shared)."""

from __future__ import annotations

import pytest
import torch


def pytest_configure(config: pytest.Config) -> None:
    # Emitted by torch when torch_geometric is imported, not by our code.
    config.addinivalue_line("filterwarnings", "ignore:`torch.jit.script` is deprecated:FutureWarning")
    config.addinivalue_line("filterwarnings", "ignore:`torch.jit.script_method` is deprecated:FutureWarning")
    torch.set_num_threads(1)


def random_graph(num_nodes: int, num_edges: int, dim: int, *, seed: int, self_loops: int = 0) -> tuple:
    """Random directed multigraph-free edge list with ``self_loops`` explicit self-loops; features ~ N(0, 1)."""
    gen = torch.Generator().manual_seed(seed)
    pairs = set()
    while len(pairs) < num_edges:
        u, v = torch.randint(num_nodes, (2,), generator=gen).tolist()
        if u != v:
            pairs.add((u, v))
    edges = sorted(pairs)
    loops = [(i, i) for i in range(self_loops)]
    edge_index = torch.tensor(edges + loops, dtype=torch.long).t().contiguous()
    x = torch.randn(num_nodes, dim, generator=gen)
    return x, edge_index


@pytest.fixture
def make_graph():
    """The :func:`random_graph` factory (test modules cannot import conftest under importlib mode)."""
    return random_graph


@pytest.fixture
def graph() -> tuple:
    return random_graph(9, 20, 5, seed=0, self_loops=2)


def _write_tiny_tu(root, name="TINYTU", graphs=24):
    """``graphs`` small graphs (triangles / paths, 2 classes by shape), raw TU text format, 1-based ids."""
    raw = root / name / "raw"
    raw.mkdir(parents=True)
    a, indicator, labels, node_labels, offset = [], [], [], [], 0
    for g in range(graphs):
        cls = g % 2
        edges = [(1, 2), (2, 3), (3, 1)] if cls == 0 else [(1, 2), (2, 3), (3, 4)]
        n = 3 if cls == 0 else 4
        a += [f"{u + offset}, {v + offset}\n{v + offset}, {u + offset}\n" for u, v in edges]
        indicator += [f"{g + 1}\n"] * n
        node_labels += [f"{i % 2}\n" for i in range(n)]
        labels.append(f"{cls}\n")
        offset += n
    (raw / f"{name}_A.txt").write_text("".join(a))
    (raw / f"{name}_graph_indicator.txt").write_text("".join(indicator))
    (raw / f"{name}_graph_labels.txt").write_text("".join(labels))
    (raw / f"{name}_node_labels.txt").write_text("".join(node_labels))


@pytest.fixture
def write_tiny_tu():
    """The :func:`_write_tiny_tu` factory."""
    return _write_tiny_tu
