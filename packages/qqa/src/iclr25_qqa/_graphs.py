"""Graph inputs: benchmark file formats (Gset/rudy, DIMACS, edge lists) and named generator specs.

Every reader returns an undirected :class:`networkx.Graph` whose edges carry a float ``weight`` attribute.
Malformed files raise :class:`GraphFormatError` (a ``ValueError``) naming the file and the 1-based line number.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

__all__ = [
    "GraphFormatError",
    "GraphSpec",
    "is_graph_file",
    "load_graph",
    "parse_spec",
    "read_dimacs",
    "read_edgelist",
    "read_gset",
]

_SPEC_HELP = (
    "rrg:d=3,n=100,seed=0 | er:n=60,p=0.1,seed=0 | torus:60x50 | myciel:5 | karate | lesmis | petersen | "
    "dodecahedral | icosahedral | cycle:9 | complete:5 | bipartite:3x5"
)


_SPEC_KINDS = {
    "rrg",
    "er",
    "torus",
    "myciel",
    "karate",
    "lesmis",
    "petersen",
    "dodecahedral",
    "icosahedral",
    "cycle",
    "complete",
    "bipartite",
}


class GraphFormatError(ValueError):
    """A graph file could not be parsed; the message names the file and the line."""


def _fail(path: Path, lineno: int, msg: str) -> GraphFormatError:
    return GraphFormatError(f"{path}:{lineno}: {msg}")


def _number(path: Path, lineno: int, token: str, what: str, *, integer: bool) -> float:
    try:
        value = int(token) if integer else float(token)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise _fail(path, lineno, f"{what} must be {kind}, got {token!r}") from None
    if not integer and not math.isfinite(value):
        raise _fail(path, lineno, f"{what} must be finite, got {token!r}")
    return value


def _read_lines(path: str | os.PathLike[str]) -> tuple[Path, list[str]]:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"graph file {str(p)!r} does not exist")
    try:
        return p, p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise GraphFormatError(f"{p}: cannot read graph file ({exc})") from None


def _add_edge(g: nx.Graph, path: Path, lineno: int, u: int, v: int, w: float, n: int | None) -> None:
    if n is not None and not (1 <= u <= n and 1 <= v <= n):
        raise _fail(path, lineno, f"edge ({u}, {v}) names a node outside 1..{n}")
    if g.has_edge(u - 1, v - 1):
        raise _fail(path, lineno, f"duplicate edge ({u}, {v})")
    g.add_edge(u - 1, v - 1, weight=float(w))


def read_gset(path: str | os.PathLike[str]) -> nx.Graph:
    """Read a Gset / rudy file: a header ``n m``, then ``m`` lines ``u v w`` with 1-based nodes.

    Returns:
        Graph on nodes ``0..n-1`` with edge attribute ``weight`` (float).

    Raises:
        FileNotFoundError: the file does not exist.
        GraphFormatError: a malformed header or edge line, a node outside ``1..n``, a duplicate edge, or an edge
            count that differs from the header (message: ``file:line: what``).
    """
    p, lines = _read_lines(path)
    body = [
        (i + 1, ln.split())
        for i, ln in enumerate(lines)
        if ln.strip() and not ln.lstrip().startswith(("#", "%"))
    ]
    if not body:
        raise GraphFormatError(f"{p}: empty file; expected a header 'n m'")
    lineno, head = body[0]
    if len(head) != 2:
        raise _fail(p, lineno, f"header must be 'n m', got {' '.join(head)!r}")
    n = int(_number(p, lineno, head[0], "n", integer=True))
    m = int(_number(p, lineno, head[1], "m", integer=True))
    if n < 1 or m < 0:
        raise _fail(p, lineno, f"header needs n >= 1 and m >= 0, got n={n}, m={m}")
    g = nx.Graph()
    g.add_nodes_from(range(n))
    for lineno, tok in body[1:]:
        if len(tok) not in (2, 3):
            raise _fail(p, lineno, f"edge line must be 'u v w' (or 'u v'), got {' '.join(tok)!r}")
        u = int(_number(p, lineno, tok[0], "u", integer=True))
        v = int(_number(p, lineno, tok[1], "v", integer=True))
        w = _number(p, lineno, tok[2], "w", integer=False) if len(tok) == 3 else 1.0
        _add_edge(g, p, lineno, u, v, w, n)
    if g.number_of_edges() != m:
        raise GraphFormatError(f"{p}: header announces m={m} edges but the file has {g.number_of_edges()}")
    return g


def read_dimacs(path: str | os.PathLike[str]) -> nx.Graph:
    """Read a DIMACS graph (``.col`` / ``.clq``): ``c`` comments, ``p edge n m``, then ``e u v`` (1-based).

    Returns:
        Graph on nodes ``0..n-1``, every edge with ``weight`` 1.0 (a repeated edge is kept once, as in the COLOR
        benchmark files, some of which list edges in both directions).

    Raises:
        FileNotFoundError: the file does not exist.
        GraphFormatError: no ``p`` line, an ``e`` line before it, a malformed line or a node outside ``1..n``.
    """
    p, lines = _read_lines(path)
    g: nx.Graph | None = None
    n = 0
    for i, raw in enumerate(lines):
        lineno, tok = i + 1, raw.split()
        if not tok or tok[0] == "c":
            continue
        if tok[0] == "p":
            if g is not None:
                raise _fail(p, lineno, "a second 'p' line")
            if len(tok) != 4:
                raise _fail(p, lineno, f"problem line must be 'p edge n m', got {raw.strip()!r}")
            n = int(_number(p, lineno, tok[2], "n", integer=True))
            if n < 1:
                raise _fail(p, lineno, f"n must be >= 1, got {n}")
            g = nx.Graph()
            g.add_nodes_from(range(n))
        elif tok[0] == "e":
            if g is None:
                raise _fail(p, lineno, "edge line before the 'p edge n m' line")
            if len(tok) != 3:
                raise _fail(p, lineno, f"edge line must be 'e u v', got {raw.strip()!r}")
            u = int(_number(p, lineno, tok[1], "u", integer=True))
            v = int(_number(p, lineno, tok[2], "v", integer=True))
            if not (1 <= u <= n and 1 <= v <= n):
                raise _fail(p, lineno, f"edge ({u}, {v}) names a node outside 1..{n}")
            g.add_edge(u - 1, v - 1, weight=1.0)
        elif tok[0] == "n":  # node weights (some .clq variants): accepted and ignored
            continue
        else:
            raise _fail(p, lineno, f"unknown line type {tok[0]!r} (expected c, p or e)")
    if g is None:
        raise GraphFormatError(f"{p}: no 'p edge n m' line")
    return g


def read_edgelist(path: str | os.PathLike[str]) -> nx.Graph:
    """Read a plain edge list: one ``u v`` or ``u v w`` per line; ``#`` starts a comment.

    Node labels are kept as written (integers when every label parses as one, else strings).

    Raises:
        FileNotFoundError: the file does not exist.
        GraphFormatError: a line with a number of fields other than 2 or 3, a weight that is not a finite
            number, a duplicate edge, or no edges at all.
    """
    p, lines = _read_lines(path)
    rows: list[tuple[int, str, str, float]] = []
    for i, raw in enumerate(lines):
        text = raw.split("#", 1)[0].strip()
        if not text:
            continue
        tok = text.replace(",", " ").split()
        if len(tok) not in (2, 3):
            raise _fail(p, i + 1, f"expected 'u v' or 'u v w', got {text!r}")
        w = _number(p, i + 1, tok[2], "weight", integer=False) if len(tok) == 3 else 1.0
        rows.append((i + 1, tok[0], tok[1], w))
    if not rows:
        raise GraphFormatError(f"{p}: no edges found")
    as_int = all(a.lstrip("-").isdigit() and b.lstrip("-").isdigit() for _, a, b, _ in rows)
    g = nx.Graph()
    for lineno, a, b, w in rows:
        u, v = (int(a), int(b)) if as_int else (a, b)
        if g.has_edge(u, v):
            raise _fail(p, lineno, f"duplicate edge ({a}, {b})")
        g.add_edge(u, v, weight=float(w))
    return g


@dataclass(frozen=True)
class GraphSpec:
    """A graph with what is known about it.

    Attributes:
        graph: the graph (edge attribute ``weight``).
        name: a short display name, e.g. ``"torus:60x50"``.
        best_known: best-known / optimal values per problem name (``"maxcut"``, ``"mis"``, ``"clique"``,
            ``"chromatic"``), where the spec determines them.
    """

    graph: nx.Graph
    name: str
    best_known: dict[str, float]


def _kv(spec: str, body: str, allowed: dict[str, type], required: set[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in filter(None, body.split(",")):
        if "=" not in part:
            raise ValueError(f"graph spec {spec!r}: expected key=value, got {part!r}; forms: {_SPEC_HELP}")
        key, val = (s.strip() for s in part.split("=", 1))
        if key not in allowed:
            raise ValueError(f"graph spec {spec!r}: unknown key {key!r}; allowed: {', '.join(allowed)}")
        try:
            out[key] = allowed[key](val)
        except ValueError:
            raise ValueError(
                f"graph spec {spec!r}: {key} must be {allowed[key].__name__}, got {val!r}"
            ) from None
    missing = required - set(out)
    if missing:
        raise ValueError(f"graph spec {spec!r}: missing {', '.join(sorted(missing))}; forms: {_SPEC_HELP}")
    return out


def _dims(spec: str, body: str) -> tuple[int, int]:
    try:
        a, b = (int(s) for s in body.lower().split("x"))
    except ValueError:
        raise ValueError(f"graph spec {spec!r}: expected ROWSxCOLS like 60x50") from None
    if a < 1 or b < 1:
        raise ValueError(f"graph spec {spec!r}: sizes must be >= 1")
    return a, b


def _torus_maxcut(rows: int, cols: int) -> float | None:
    """Max-cut of the rows x cols toroidal grid (both >= 3), when at most one side is odd.

    Every column is a cycle of length ``rows`` and every row a cycle of length ``cols``; an odd cycle leaves at
    least one edge uncut and these cycles are edge-disjoint, while the checkerboard colouring leaves exactly one
    uncut edge per odd cycle. Gset G48/G49 (60x50) have 6000 and G50 (25x120) has 5880.
    """
    if rows % 2 and cols % 2:
        return None
    return float(2 * rows * cols - (cols if rows % 2 else 0) - (rows if cols % 2 else 0))


def _weighted(g: nx.Graph) -> nx.Graph:
    g = nx.Graph(g)
    for _, _, d in g.edges(data=True):
        d["weight"] = float(d.get("weight", 1.0))
    return g


def parse_spec(spec: str) -> GraphSpec:
    """Build a graph from a spec string.

    Forms: ``rrg:d=3,n=100,seed=0`` (random regular), ``er:n=60,p=0.1,seed=0`` (Erdős–Rényi),
    ``torus:ROWSxCOLS`` (periodic grid, the Gset toroidal max-cut instances), ``myciel:K`` (the COLOR benchmark
    graph mycielK = ``networkx.mycielski_graph(K + 1)``, chromatic number K + 1), ``karate``, ``lesmis``,
    ``petersen``, ``dodecahedral``, ``icosahedral``, ``cycle:N``, ``complete:N``, ``bipartite:AxB``.

    Raises:
        ValueError: an unknown form or a malformed / out-of-range parameter (message lists the forms).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"graph spec must be a non-empty string; forms: {_SPEC_HELP}")
    spec = spec.strip()
    kind, _, body = spec.partition(":")
    kind = kind.lower()
    known: dict[str, float] = {}
    if kind == "rrg":
        kv = _kv(spec, body, {"d": int, "n": int, "seed": int}, {"d", "n"})
        d, n, seed = int(kv["d"]), int(kv["n"]), int(kv.get("seed", 0))
        if n < 1 or d < 0 or d >= n or (n * d) % 2:
            raise ValueError(f"graph spec {spec!r}: need 0 <= d < n and n*d even, got d={d}, n={n}")
        g = nx.random_regular_graph(d, n, seed=seed)
    elif kind == "er":
        kv = _kv(spec, body, {"n": int, "p": float, "seed": int}, {"n", "p"})
        n, prob, seed = int(kv["n"]), float(kv["p"]), int(kv.get("seed", 0))
        if n < 1 or not 0.0 <= prob <= 1.0:
            raise ValueError(f"graph spec {spec!r}: need n >= 1 and 0 <= p <= 1, got n={n}, p={prob}")
        g = nx.gnp_random_graph(n, prob, seed=seed)
    elif kind == "torus":
        rows, cols = _dims(spec, body)
        if rows < 3 or cols < 3:
            raise ValueError(f"graph spec {spec!r}: a torus needs both sizes >= 3")
        g = nx.convert_node_labels_to_integers(nx.grid_2d_graph(rows, cols, periodic=True), ordering="sorted")
        best = _torus_maxcut(rows, cols)
        if best is not None:
            known["maxcut"] = best
    elif kind == "myciel":
        try:
            k = int(body)
        except ValueError:
            raise ValueError(f"graph spec {spec!r}: expected myciel:K with an integer K >= 2") from None
        if not 2 <= k <= 9:
            raise ValueError(f"graph spec {spec!r}: K must be in [2, 9], got {k}")
        g = nx.mycielski_graph(k + 1)
        known["chromatic"] = float(k + 1)
    elif kind == "karate" and not body:
        g = nx.karate_club_graph()
        g = nx.Graph(g.edges())  # the club graph carries interaction-count weights; we use the structure
    elif kind == "lesmis" and not body:
        g = nx.convert_node_labels_to_integers(
            nx.Graph(nx.les_miserables_graph().edges()), label_attribute="name"
        )
    elif kind == "petersen" and not body:
        g, known = nx.petersen_graph(), {"mis": 4.0}
    elif kind == "dodecahedral" and not body:
        g, known = nx.dodecahedral_graph(), {"mis": 8.0}
    elif kind == "icosahedral" and not body:
        g, known = nx.icosahedral_graph(), {"mis": 3.0}
    elif kind in ("cycle", "complete"):
        try:
            n = int(body)
        except ValueError:
            raise ValueError(f"graph spec {spec!r}: expected {kind}:N with an integer N") from None
        if n < (3 if kind == "cycle" else 1):
            raise ValueError(f"graph spec {spec!r}: N too small")
        if kind == "cycle":
            g = nx.cycle_graph(n)
            known = {"mis": float(n // 2), "maxcut": float(n - n % 2)}
        else:
            g = nx.complete_graph(n)
            known = {"mis": 1.0, "clique": float(n), "chromatic": float(n)}
    elif kind == "bipartite":
        a, b = _dims(spec, body)
        g = nx.complete_bipartite_graph(a, b)
        known = {"mis": float(max(a, b)), "maxcut": float(a * b), "chromatic": 2.0}
    else:
        raise ValueError(f"unknown graph spec {spec!r}; forms: {_SPEC_HELP}, or a file path")
    return GraphSpec(graph=_weighted(g), name=spec, best_known=known)


_READERS = {
    ".col": read_dimacs,
    ".clq": read_dimacs,
    ".dimacs": read_dimacs,
    ".gset": read_gset,
    ".rudy": read_gset,
    ".mc": read_gset,
}


def is_graph_file(text: str) -> bool:
    """Whether :func:`load_graph` (``fmt="auto"``) reads ``text`` as a file rather than a spec or a name: an existing
    file wins over a spec of the same name; otherwise a value with a suffix, a path separator, or that exists."""
    path = Path(text)
    if text.partition(":")[0].strip().lower() in _SPEC_KINDS and not path.is_file():
        return False
    return path.suffix != "" or os.sep in text or path.exists()


def load_graph(source: str | os.PathLike[str] | nx.Graph, *, fmt: str = "auto") -> GraphSpec:
    """Load a graph from a networkx graph, a file path or a spec string (see :func:`parse_spec`).

    Args:
        source: a ``networkx.Graph``, a path to a file, or a spec.
        fmt: ``"auto"`` (by extension: ``.col``/``.clq``/``.dimacs`` → DIMACS, ``.gset``/``.rudy``/``.mc`` → Gset,
            anything else → Gset when the first data line is ``n m`` and the edge count matches, else an edge
            list), ``"gset"``, ``"dimacs"`` or ``"edgelist"``.

    Raises:
        ValueError: unknown ``fmt`` or spec; ``GraphFormatError`` for a malformed file.
        FileNotFoundError: a path-like source that does not exist.
        TypeError: ``source`` is a directed graph or multigraph.
    """
    readers = {"gset": read_gset, "dimacs": read_dimacs, "edgelist": read_edgelist}
    if fmt != "auto" and fmt not in readers:
        raise ValueError(f"fmt must be one of auto, gset, dimacs, edgelist; got {fmt!r}")
    if isinstance(source, nx.Graph):
        if source.is_directed() or source.is_multigraph():
            raise TypeError(
                "graph must be an undirected simple networkx.Graph (got a directed graph or multigraph)"
            )
        return GraphSpec(graph=_weighted(source), name=str(source.name or "graph"), best_known={})
    text = os.fspath(source)
    if not text.strip():
        raise ValueError(f"graph must be a file path or a non-empty spec; forms: {_SPEC_HELP}")
    path = Path(text)
    if fmt == "auto" and not is_graph_file(text):
        return parse_spec(text)
    if fmt != "auto":
        reader = readers[fmt]
    elif path.suffix.lower() in _READERS:
        reader = _READERS[path.suffix.lower()]
    else:
        reader = _sniff(path)
    return GraphSpec(graph=reader(path), name=path.name, best_known={})


def _sniff(path: Path):
    _, lines = _read_lines(path)
    data = [ln.split() for ln in lines if ln.strip() and not ln.lstrip().startswith(("#", "%", "c "))]
    if data and data[0] and data[0][0] == "p":
        return read_dimacs
    if data and len(data[0]) == 2 and all(t.isdigit() for t in data[0]) and len(data) - 1 == int(data[0][1]):
        return read_gset
    return read_edgelist
