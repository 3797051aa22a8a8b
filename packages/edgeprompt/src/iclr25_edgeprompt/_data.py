"""Downstream data: datasets as lists of PyG graphs, k-hop node subgraphs, and the few-shot split.

Protocols (stated because peers' results differ by protocol, e.g.
https://github.com/Starlien95/GraphPrompt/issues/5 and https://github.com/Starlien95/GraphPrompt/issues/15):

- **Node classification** is done on subgraphs: every target node becomes its ``num_hops``-hop *induced* subgraph
  (relabelled, target index kept in ``center``), labelled with the node's label; the classifier sees the mean-pooled
  subgraph embedding. Baselines use exactly the same subgraphs.
- **Few-shot split**: for each class, ``shots`` samples drawn uniformly without replacement (a
  ``torch.Generator`` seeded with ``seed``) form the training set; the test set is a random ``test_fraction`` of
  all remaining samples. Same seed, same split.

References:
    arXiv:2503.00750 §5.1 (5-shot node / 50-shot graph classification, 2-hop subgraphs for node tasks).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from iclr25_shared.checks import check_float, check_int
from iclr25_shared.errors import DatasetUnavailable

__all__ = [
    "BUILTIN_DATASETS",
    "DATA_ENV",
    "TaskData",
    "default_tu_root",
    "digit_grid_graphs",
    "few_shot_split",
    "from_pyg",
    "load_dataset",
    "node_subgraphs",
    "read_tu",
    "superpixel_graph",
    "superpixel_graphs",
]

BUILTIN_DATASETS = ("karate", "fashion-superpixels", "digits-grid")
_PLANETOID = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
_TU = {
    name.lower(): name
    for name in (
        "ENZYMES",
        "DD",
        "NCI1",
        "NCI109",
        "Mutagenicity",
        "MUTAG",
        "PROTEINS",
        "COX2",
        "BZR",
        "IMDB-BINARY",
    )
}


@dataclass
class TaskData:
    """A downstream task: the graphs the classifier sees, one label each.

    Attributes:
        name: dataset name.
        task: "node" (graphs are the targets' k-hop subgraphs) or "graph".
        graphs: list of ``Data`` with ``x [n, d]`` float32, ``edge_index [2, e]`` long and ``y [1]`` long.
        num_classes: number of classes.
        source: for node tasks, the full graph (used by edge-prediction pre-training); None for graph tasks.
    """

    name: str
    task: str
    graphs: list[Data]
    num_classes: int
    source: Data | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def labels(self) -> Tensor:
        return torch.cat([g.y.view(-1) for g in self.graphs])

    @property
    def in_channels(self) -> int:
        return int(self.graphs[0].x.size(-1))


# ------------------------------------------------------------------------------------------------------------------
# Few-shot split and subgraphs
# ------------------------------------------------------------------------------------------------------------------


def few_shot_split(
    labels: Tensor | np.ndarray | Sequence[int],
    shots: int,
    *,
    test_fraction: float = 1.0,
    seed: int = 0,
    allow_fewer: bool = False,
) -> tuple[Tensor, Tensor]:
    """``shots`` training samples per class and a random test set from the rest.

    Args:
        labels: ``[n]`` integer class labels (>= 0).
        shots: training samples per class (>= 1).
        test_fraction: fraction of the remaining samples used for testing, in (0, 1].
        seed: seeds the ``torch.Generator`` of the draw.
        allow_fewer: take *all* samples of a class that has no more than ``shots`` (the official code's behaviour,
            which leaves that class without test samples). By default such a class is an error.

    Returns:
        ``(train_idx, test_idx)`` long tensors, sorted, disjoint.

    Raises:
        ValueError: ``shots < 1``; ``test_fraction`` outside (0, 1]; labels not 1-D non-negative ints; a class with
            ``<= shots`` samples while ``allow_fewer`` is False; an empty test set.
    """
    y = (
        torch.as_tensor(np.asarray(labels)).view(-1)
        if not isinstance(labels, Tensor)
        else labels.view(-1).cpu()
    )
    if y.dtype.is_floating_point or y.dtype == torch.bool or y.numel() == 0 or int(y.min()) < 0:
        raise ValueError("labels must be a non-empty 1-D array of non-negative integer class ids")
    check_int("shots", shots, low=1)
    check_float("test_fraction", test_fraction, low=0.0, high=1.0, low_inclusive=False)
    gen = torch.Generator().manual_seed(seed)
    train: list[Tensor] = []
    for c in torch.unique(y).tolist():
        members = torch.nonzero(y == c).view(-1)
        if members.numel() <= shots and not allow_fewer:
            raise ValueError(
                f"shots={shots} but class {c} has only {members.numel()} samples (it needs more than shots, so that "
                f"some are left for testing); lower shots (at most {members.numel() - 1} here) or set allow_fewer (--allow-fewer)"
            )
        pick = members[torch.randperm(members.numel(), generator=gen)[:shots]]
        train.append(pick)
    train_idx = torch.sort(torch.cat(train)).values
    rest = torch.ones(y.numel(), dtype=torch.bool)
    rest[train_idx] = False
    rest_idx = torch.nonzero(rest).view(-1)
    n_test = round(test_fraction * rest_idx.numel())
    if n_test < 1:
        raise ValueError(
            f"no samples left for testing (n={y.numel()}, shots={shots}, test_fraction={test_fraction})"
        )
    test_idx = torch.sort(rest_idx[torch.randperm(rest_idx.numel(), generator=gen)[:n_test]]).values
    return train_idx, test_idx


def node_subgraphs(
    data: Data,
    num_hops: int = 2,
    nodes: Sequence[int] | Tensor | None = None,
    *,
    chunk_size: int = 4096,
) -> list[Data]:
    """Each target node's ``num_hops``-hop induced subgraph, relabelled, with the node's label.

    The same subgraphs as PyG's ``k_hop_subgraph(node, num_hops, edge_index, relabel_nodes=True)`` (flow
    source→target: the nodes from which the target is reached in at most ``num_hops`` steps; nodes in increasing
    id order; the induced edges in their input order), computed for all targets at once: the reachable sets are
    rows of the sparse product ``R_{k+1} = R_k + R_k A`` (``A[i, j] = 1`` for an edge ``j → i``; scipy CSR, in
    chunks of ``chunk_size`` targets), and each target's induced edges are gathered from a CSR index of in-edges,
    so the cost is the size of the subgraphs, not nodes × edges.

    Every returned graph has ``x`` (float32), ``edge_index``, ``y`` (``[1]``) and ``center`` (``[1]``, the
    target's index in the subgraph). An isolated node's subgraph is the node alone, with no edges.

    Raises:
        ValueError: ``data`` has no ``y`` (no labels for a node task), no ``x``, no edges at all, an
            ``edge_index`` entry outside ``[0, num_nodes)``, a target outside it, or ``num_hops < 1``.
    """
    import scipy.sparse as sp

    if getattr(data, "y", None) is None:
        raise ValueError("node classification needs node labels: the graph has no 'y'")
    if getattr(data, "x", None) is None:
        raise ValueError("the graph has no node features 'x'")
    if data.y.dim() != 1 or data.y.numel() != data.num_nodes:
        raise ValueError(f"node classification needs one label per node: y has shape {tuple(data.y.shape)}")
    if data.edge_index is None or data.edge_index.numel() == 0:
        raise ValueError("the graph has no edges; edge prompts (and message passing) need at least one edge")
    check_int("num_hops", num_hops, low=1)
    check_int("chunk_size", chunk_size, low=1)
    if data.x.is_floating_point() and not bool(torch.isfinite(data.x).all()):
        raise ValueError("the graph has non-finite node features (NaN/inf) in 'x'")
    n = int(data.num_nodes)
    ei = data.edge_index.cpu().numpy().astype(np.int64)
    if ei.min() < 0 or ei.max() >= n:
        raise ValueError(
            f"edge_index entries must be node ids in [0, {n - 1}], got min {ei.min()}, max {ei.max()}"
        )
    src, dst = ei
    targets = np.arange(n) if nodes is None else np.asarray([int(v) for v in nodes], dtype=np.int64)
    if targets.size and (targets.min() < 0 or targets.max() >= n):
        raise ValueError(f"nodes must be ids in [0, {n - 1}], got min {targets.min()}, max {targets.max()}")
    # In-edges of each node, in input order: in_edges[in_ptr[i]:in_ptr[i + 1]] are the ids of the edges j -> i.
    in_edges = np.argsort(dst, kind="stable")
    in_ptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))])
    adj = sp.csr_matrix((np.ones(src.size, dtype=np.float32), (dst, src)), shape=(n, n))
    adj.data[:] = 1.0  # duplicate edges sum; only reachability matters
    x, y = data.x, data.y
    mask = np.zeros(n, dtype=bool)
    pos = np.zeros(n, dtype=np.int64)
    out: list[Data] = []
    for lo in range(0, targets.size, chunk_size):
        chunk = targets[lo : lo + chunk_size]
        reach = sp.csr_matrix(
            (np.ones(chunk.size, dtype=np.float32), (np.arange(chunk.size), chunk)), shape=(chunk.size, n)
        )
        for _ in range(num_hops):
            reach = reach + reach @ adj
            reach.data[:] = 1.0
        reach.sort_indices()
        for b, node in enumerate(chunk.tolist()):
            subset = reach.indices[reach.indptr[b] : reach.indptr[b + 1]].astype(np.int64)
            mask[subset] = True
            pos[subset] = np.arange(subset.size)
            starts, counts = in_ptr[subset], in_ptr[subset + 1] - in_ptr[subset]
            offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
            cand = in_edges[np.arange(counts.sum()) + offsets]
            keep = np.sort(cand[mask[src[cand]]])
            mask[subset] = False
            sub = torch.from_numpy(subset)
            out.append(
                Data(
                    x=x[sub].float(),
                    edge_index=torch.from_numpy(np.stack([pos[src[keep]], pos[dst[keep]]])),
                    y=y[node].view(1).long(),
                    center=torch.tensor([int(pos[node])]),
                )
            )
    return out


# ------------------------------------------------------------------------------------------------------------------
# Images as graphs
# ------------------------------------------------------------------------------------------------------------------


def superpixel_graph(image: np.ndarray, *, n_segments: int = 75, compactness: float = 0.25) -> Data:
    """One greyscale image → a region-adjacency graph of its SLIC superpixels.

    Nodes are superpixels with features ``[mean intensity, max intensity, centroid row, centroid col]`` (all in
    [0, 1]); edges join superpixels that touch (4-neighbourhood), in both directions. Segmentation is scikit-image's
    SLIC, as for PyG's MNISTSuperpixels (Monti et al. 2017), which uses 75 superpixels.

    Args:
        image: ``[H, W]`` uint8 (0..255) or float in [0, 1].
        n_segments: approximate number of superpixels.
        compactness: SLIC compactness (small: follow intensity edges).

    Raises:
        ValueError: the image is not 2-D.
    """
    from skimage.segmentation import slic

    img = np.asarray(image)
    if img.ndim != 2:
        raise ValueError(f"image must be 2-D [H, W], got shape {img.shape}")
    img = img.astype(np.float64) / 255.0 if img.dtype == np.uint8 else img.astype(np.float64)
    seg = slic(img, n_segments=n_segments, compactness=compactness, channel_axis=None, start_label=0)
    _, seg = np.unique(seg, return_inverse=True)
    seg = seg.reshape(img.shape)
    n = int(seg.max()) + 1
    flat = seg.ravel()
    count = np.bincount(flat, minlength=n).astype(np.float64)
    mean = np.bincount(flat, weights=img.ravel(), minlength=n) / count
    peak = np.zeros(n)
    np.maximum.at(peak, flat, img.ravel())
    rows, cols = np.indices(img.shape)
    cy = np.bincount(flat, weights=rows.ravel(), minlength=n) / count / max(img.shape[0] - 1, 1)
    cx = np.bincount(flat, weights=cols.ravel(), minlength=n) / count / max(img.shape[1] - 1, 1)
    pairs = np.concatenate(
        [
            np.stack([seg[:, :-1].ravel(), seg[:, 1:].ravel()]),
            np.stack([seg[:-1, :].ravel(), seg[1:, :].ravel()]),
        ],
        axis=1,
    )
    pairs = np.unique(pairs[:, pairs[0] != pairs[1]], axis=1)
    edge_index = to_undirected(torch.from_numpy(pairs).long(), num_nodes=n)
    x = torch.from_numpy(np.stack([mean, peak, cy, cx], axis=1)).float()
    return Data(x=x, edge_index=edge_index)


def superpixel_graphs(
    images: np.ndarray, labels: np.ndarray | None = None, *, n_segments: int = 75, compactness: float = 0.25
) -> list[Data]:
    """:func:`superpixel_graph` for every image ``[n, H, W]``; ``y [1]`` set from ``labels`` when given."""
    graphs = []
    for i, img in enumerate(images):
        g = superpixel_graph(img, n_segments=n_segments, compactness=compactness)
        if labels is not None:
            g.y = torch.tensor([int(labels[i])])
        graphs.append(g)
    return graphs


def digit_grid_graphs(images: np.ndarray, labels: np.ndarray | None = None) -> list[Data]:
    """Each ``[H, W]`` image → an ``H*W``-node 4-neighbour grid graph with features ``[intensity, row, col]``.

    Coordinates are scaled to [0, 1]; intensities are taken as given (sklearn digits: [0, 1]).
    """
    imgs = np.asarray(images, dtype=np.float32)
    if imgs.ndim != 3:
        raise ValueError(f"images must be [n, H, W], got shape {imgs.shape}")
    _, h, w = imgs.shape
    idx = np.arange(h * w).reshape(h, w)
    pairs = np.concatenate(
        [
            np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()]),
            np.stack([idx[:-1, :].ravel(), idx[1:, :].ravel()]),
        ],
        axis=1,
    )
    edge_index = to_undirected(torch.from_numpy(pairs).long(), num_nodes=h * w)
    rows, cols = np.indices((h, w))
    coords = np.stack([rows.ravel() / max(h - 1, 1), cols.ravel() / max(w - 1, 1)], axis=1).astype(np.float32)
    graphs = []
    for i, img in enumerate(imgs):
        x = torch.from_numpy(np.concatenate([img.reshape(-1, 1), coords], axis=1))
        g = Data(x=x, edge_index=edge_index.clone())
        if labels is not None:
            g.y = torch.tensor([int(labels[i])])
        graphs.append(g)
    return graphs


# ------------------------------------------------------------------------------------------------------------------
# Loading by name
# ------------------------------------------------------------------------------------------------------------------


def from_pyg(dataset: object, *, task: str, name: str = "custom", num_hops: int = 2) -> TaskData:
    """Wrap any PyG ``Dataset``, a list of ``Data`` or a single ``Data`` as a :class:`TaskData`.

    Args:
        dataset: for ``task="node"`` a single graph (``Data``, or a dataset of one graph) with per-node ``y``; for
            ``task="graph"`` an iterable of graphs, each with a graph label ``y``.
        task: "node" or "graph".
        name: shown in results.
        num_hops: subgraph radius for node tasks.

    Raises:
        ValueError: unknown task; missing labels for the task; graphs without features; no edges at all.
    """
    if task not in ("node", "graph"):
        raise ValueError(f"task must be 'node' or 'graph', got {task!r}")
    if task == "node":
        data = dataset if isinstance(dataset, Data) else dataset[0]  # type: ignore[index]
        graphs = node_subgraphs(data, num_hops)
        num_classes = int(data.y.max()) + 1
        return TaskData(name=name, task="node", graphs=graphs, num_classes=num_classes, source=data)
    graphs = []
    for i, g in enumerate(dataset):  # type: ignore[attr-defined]
        if getattr(g, "y", None) is None or g.y.numel() != 1:
            raise ValueError(
                f"graph classification needs one label per graph: graph {i} has y={getattr(g, 'y', None)}"
            )
        if getattr(g, "x", None) is None or g.x.dim() != 2 or g.x.size(-1) == 0:
            raise ValueError(
                f"graph {i} has no node features 'x' (add some, e.g. a degree one-hot, before tuning)"
            )
        if not bool(torch.isfinite(g.x).all()):
            raise ValueError(f"graph {i} has non-finite node features (NaN/inf) in 'x'")
        if g.edge_index.numel() and (int(g.edge_index.min()) < 0 or int(g.edge_index.max()) >= g.x.size(0)):
            raise ValueError(
                f"graph {i}: edge_index entries must be node ids in [0, {g.x.size(0) - 1}], got min "
                f"{int(g.edge_index.min())}, max {int(g.edge_index.max())}"
            )
        graphs.append(Data(x=g.x.float(), edge_index=g.edge_index, y=g.y.view(1).long()))
    if not graphs:
        raise ValueError("the dataset is empty")
    if all(g.edge_index.numel() == 0 for g in graphs):
        raise ValueError("no graph in the dataset has an edge; edge prompts need edges")
    num_classes = int(max(int(g.y) for g in graphs)) + 1
    return TaskData(name=name, task="graph", graphs=graphs, num_classes=num_classes)


def _cached_superpixel_graphs(images: np.ndarray, labels: np.ndarray, *, use_cache: bool) -> list[Data]:
    """:func:`superpixel_graphs` with default settings, memoised on disk by the images' content."""
    import hashlib
    import io

    if not use_cache:
        return superpixel_graphs(images, labels)
    from iclr25_shared import cache_dir
    from iclr25_shared.results import atomic_write_bytes

    digest = hashlib.sha256()
    for part in (b"slic-v1|n_segments=75|compactness=0.25|", images.tobytes(), np.asarray(labels).tobytes()):
        digest.update(part)
    path = cache_dir("edgeprompt-superpixels") / f"{digest.hexdigest()[:32]}.pt"
    if path.is_file():
        try:
            stored = torch.load(path, weights_only=True)
            return [Data(x=x, edge_index=e, y=y) for x, e, y in zip(*stored, strict=True)]
        except Exception:  # a damaged cache file is recomputed (and rewritten) below
            pass
    graphs = superpixel_graphs(images, labels)
    buffer = io.BytesIO()
    torch.save(([g.x for g in graphs], [g.edge_index for g in graphs], [g.y for g in graphs]), buffer)
    atomic_write_bytes(path, buffer.getvalue())
    return graphs


def _balanced_subset(labels: np.ndarray, n: int, seed: int) -> np.ndarray:
    """``n`` indices, about ``n / C`` per class, drawn with ``seed``; sorted."""
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    per = -(-n // len(classes))
    picks = np.concatenate([rng.permutation(np.flatnonzero(labels == c))[:per] for c in classes])
    return np.sort(rng.permutation(picks)[:n])


def load_dataset(
    name: str,
    *,
    root: str | Path | None = None,
    download: bool = False,
    num_graphs: int = 2000,
    split: str = "test",
    seed: int = 0,
    num_hops: int = 2,
    cache: bool = True,
) -> TaskData:
    """Load a downstream dataset by name.

    Built in (offline): ``karate`` (PyG KarateClub, node task, 34 nodes, 4 classes), ``fashion-superpixels``
    (Fashion-MNIST images from ``split`` as SLIC superpixel graphs, graph task, 10 classes; ``num_graphs`` of them,
    class-balanced, chosen with ``seed``), ``digits-grid`` (sklearn's 1 797 8×8 digits as grid graphs).
    PyG datasets, from ``root``: Planetoid ``Cora``/``CiteSeer``/``PubMed`` (node task) and TUDataset names such
    as ``ENZYMES``, ``MUTAG``, ``PROTEINS`` (graph task), or any TUDataset name as ``tu:<name>``. They are read from ``root`` when already there; otherwise
    ``download=True`` lets PyG fetch them. With ``cache`` the superpixel graphs are kept in the iclr25 user cache
    (``$ICLR25_CACHE`` or the platform cache folder), keyed by the images' bytes and the SLIC settings, so the
    segmentation (about 30 s per 1 500 images) runs once.

    Raises:
        ValueError: unknown name (the message lists the choices); a PyG dataset without ``root``.
        DatasetUnavailable: a PyG dataset is not in ``root`` and ``download`` is False, or the download failed
            (the message says what would be downloaded from where).
    """
    key = name.lower()
    if key == "karate":
        from torch_geometric.datasets import KarateClub

        return from_pyg(KarateClub()[0], task="node", name="karate", num_hops=num_hops)
    if key in ("fashion-superpixels", "fashion-mnist-superpixels"):
        from iclr25_shared.data import fashion_mnist

        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        images, labels = fashion_mnist(split)
        if not 1 <= num_graphs <= len(images):
            raise ValueError(f"num_graphs must be in [1, {len(images)}], got {num_graphs}")
        idx = _balanced_subset(labels, num_graphs, seed)
        return TaskData(
            name="fashion-superpixels",
            task="graph",
            graphs=_cached_superpixel_graphs(images[idx], labels[idx], use_cache=cache),
            num_classes=10,
        )
    if key == "digits-grid":
        from iclr25_shared.data import digits

        images, labels = digits()
        return TaskData(
            name="digits-grid", task="graph", graphs=digit_grid_graphs(images, labels), num_classes=10
        )
    if key in _PLANETOID or key in _TU:
        return _load_pyg(_PLANETOID.get(key) or _TU[key], root=root, download=download, num_hops=num_hops)
    if key.startswith("tu:") and len(name) > 3:
        return _load_pyg(name[3:], root=root, download=download, num_hops=num_hops)
    known = [*BUILTIN_DATASETS, *_PLANETOID.values(), *_TU.values(), "tu:<any TUDataset name>"]
    raise ValueError(f"dataset must be one of {', '.join(known)}; got {name!r}")


DATA_ENV = "ICLR25_DATA"
"""Environment variable naming the folder of the kit's offline data (its ``tu/`` holds the TU datasets)."""


def default_tu_root() -> Path | None:
    """The kit's folder of raw TU datasets, used when none is given: ``$ICLR25_DATA/tu`` when that variable is set,
    else ``shared/data/tu`` in the nearest folder above this package that has one (a checkout of the project beside
    its offline data); ``None`` when there is none (an installed wheel)."""
    env = os.environ.get(DATA_ENV, "").strip()
    if env:
        return Path(env).expanduser() / "tu"
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "data" / "tu"
        if candidate.is_dir():
            return candidate
    return None


def read_tu(name: str, root: str | Path | None = None, *, node_attributes: bool | None = None) -> TaskData:
    """A TU graph-classification dataset from its raw text files, ``root/<name>/raw/<name>_*.txt``; writes nothing.

    The files are parsed by PyG's own reader (``torch_geometric.io.read_tu_data``, what ``TUDataset`` runs), and the
    node features are chosen as ``TUDataset(root, name, use_node_attr=node_attributes)`` chooses them: the
    one-hot node labels, preceded by the continuous node attributes when ``node_attributes``. With ``None``
    (default) the node labels alone are used, as in the official EdgePrompt code, or the attributes when the
    dataset has no node labels. Graph labels are renumbered ``0..C-1`` in sorted order (MUTAG's -1/1 become 0/1).

    Args:
        name: the dataset's name as in its file names (``ENZYMES``, ``MUTAG``, ...).
        root: the folder holding ``<name>/raw/``; ``None``: :func:`default_tu_root`.
        node_attributes: True: attributes and labels; False: labels only; None: labels, else attributes.

    Returns:
        A graph task: ``x [n_i, d]`` float32, ``edge_index [2, e_i]`` long (local ids), ``y [1]`` long per graph.

    Raises:
        FileNotFoundError: ``root/<name>/raw`` or its ``<name>_A.txt`` is missing.
        DatasetUnavailable: no ``root`` given and no kit data found.
        ValueError: the files give no node features (neither node labels nor attributes), or they are malformed.
    """
    from torch_geometric.io import read_tu_data

    if root is None:
        root = default_tu_root()
        if root is None:
            raise DatasetUnavailable(
                f"TU dataset {name!r}: no TU folder given and none found; pass --tu-root FOLDER (holding "
                f"{name}/raw/{name}_*.txt, from www.chrsmrrs.com/graphkerneldatasets/{name}.zip) or set {DATA_ENV} "
                "to a folder holding tu/"
            )
    raw = Path(root) / name / "raw"
    if not (raw / f"{name}_A.txt").is_file():
        raise FileNotFoundError(f"TU dataset {name!r}: {str(raw / (name + '_A.txt'))!r} does not exist")
    try:
        data, slices, sizes = read_tu_data(str(raw), name)
    except (RuntimeError, ValueError, IndexError) as exc:
        raise ValueError(f"TU dataset {name!r} in {str(raw)!r} could not be parsed: {exc}") from None
    x = data.x
    use_attributes = node_attributes
    if use_attributes is None:
        use_attributes = sizes["num_node_labels"] == 0
    if x is not None and not use_attributes:
        x = x[:, sizes["num_node_attributes"] :]
    if x is None or x.size(-1) == 0:
        raise ValueError(
            f"TU dataset {name!r} has no node labels{'' if use_attributes else ' (try node_attributes=True)'}; "
            "edge prompts need node features"
        )
    ns, es = slices["x"].tolist(), slices["edge_index"].tolist()
    graphs = [
        Data(
            x=x[ns[i] : ns[i + 1]].float(),
            edge_index=data.edge_index[:, es[i] : es[i + 1]],
            y=data.y[i].view(1).long(),
        )
        for i in range(len(ns) - 1)
    ]
    return from_pyg(graphs, task="graph", name=name)


def _load_pyg(real: str, *, root: str | Path | None, download: bool, num_hops: int) -> TaskData:
    planetoid = real in _PLANETOID.values()
    url = (
        "https://github.com/kimiyoung/planetoid/raw/master/data"
        if planetoid
        else f"https://www.chrsmrrs.com/graphkerneldatasets/{real}.zip"
    )
    if root is None:
        raise ValueError(
            f"dataset {real!r} is a PyG dataset: pass root=<folder> (--root) where it is or should go"
        )
    root = Path(root)
    folder = root / real
    if not planetoid and not (folder / "processed").is_dir() and (folder / "raw" / f"{real}_A.txt").is_file():
        return read_tu(real, root)  # raw TU files: read in place, nothing written (root may be read-only)
    present = (folder / "processed").is_dir() or (folder / "raw").is_dir()
    if not present and not download:
        raise DatasetUnavailable(
            f"dataset {real!r} is not in {str(root)!r}; with download enabled (--download) PyG would fetch it from "
            f"{url} into {str(folder)!r}"
        )
    try:
        if planetoid:
            from torch_geometric.datasets import Planetoid

            ds = Planetoid(str(root), real)
        else:
            from torch_geometric.datasets import TUDataset

            ds = TUDataset(str(root), real)  # node labels only, as read_tu and the official code
    except OSError as exc:  # URLError is an OSError
        raise DatasetUnavailable(
            f"could not load or download {real!r} from {url} into {str(folder)!r}: {exc}"
        ) from exc
    if planetoid:
        return from_pyg(ds[0], task="node", name=real, num_hops=num_hops)
    return from_pyg(ds, task="graph", name=real)
