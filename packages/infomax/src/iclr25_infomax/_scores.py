"""Per-sample importance ``I(z)``: EL2N, margin, forgetting, and self-supervised prototypes (SSP).

Convention: every score here is *larger = harder / more informative* (``direction="hard_first"``);
``direction="easy_first"`` negates it, so that :func:`select` and :func:`topk_select` keep the easy samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from iclr25_infomax._validate import as_features
from iclr25_shared.checks import check_choice, check_float, check_int

__all__ = [
    "ScoringRun",
    "el2n_scores",
    "forgetting_scores",
    "importance_scores",
    "margin_scores",
    "ssp_scores",
    "train_scoring_model",
]

METHODS = ("el2n", "margin", "forgetting", "ssp")
DIRECTIONS = ("hard_first", "easy_first")


def _logits_labels(logits: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    lg = np.asarray(logits, dtype=np.float64)
    if lg.ndim == 2:
        lg = lg[None]
    if lg.ndim != 3 or lg.shape[1] == 0 or lg.shape[2] < 2:
        raise ValueError(
            f"logits must be (N, C) or (R, N, C) with C >= 2 classes, got shape {np.shape(logits)}"
        )
    if not np.isfinite(lg).all():
        raise ValueError("logits must be finite (NaN/Inf found)")
    y = np.asarray(labels)
    if y.dtype == bool or not np.issubdtype(y.dtype, np.integer):
        raise TypeError(f"labels must be integer class ids, got dtype {y.dtype}")
    if y.shape != (lg.shape[1],):
        raise ValueError(f"labels must have shape ({lg.shape[1]},) to match logits, got {y.shape}")
    if y.min() < 0 or y.max() >= lg.shape[2]:
        raise ValueError(
            f"labels must be in [0, {lg.shape[2]}) (the logits' classes), got [{y.min()}, {y.max()}]"
        )
    return lg, y.astype(np.int64)


def el2n_scores(logits: Any, labels: Any) -> np.ndarray:
    """EL2N: ``‖softmax(logits) − onehot(y)‖₂``, averaged over runs/epochs when ``logits`` is ``(R, N, C)``.

    Args:
        logits: ``(N, C)`` or ``(R, N, C)`` float logits.
        labels: ``(N,)`` int class ids in ``[0, C)``.

    Returns:
        ``(N,)`` float64 in ``[0, √2]``; larger = harder.

    Raises:
        ValueError / TypeError: shapes disagree, labels out of range or not integer, non-finite logits.

    References:
        Paul, Ganguli & Dziugaite, "Deep Learning on a Data Diet", NeurIPS 2021, arXiv:2107.07075, §2.
    """
    lg, y = _logits_labels(logits, labels)
    z = lg - lg.max(axis=2, keepdims=True)
    prob = np.exp(z)
    prob /= prob.sum(axis=2, keepdims=True)
    prob[:, np.arange(y.size), y] -= 1.0
    return np.linalg.norm(prob, axis=2).mean(axis=0)


def margin_scores(logits: Any, labels: Any) -> np.ndarray:
    """Negative margin: ``max_{c≠y} logit_c − logit_y`` (averaged over runs/epochs); larger = harder.

    Returns:
        ``(N,)`` float64; positive where the sample is misclassified.

    References:
        The margin / "area under the margin" family; Pleiss et al., "Identifying Mislabeled Data using the Area
        Under the Margin Ranking", NeurIPS 2020 (AUM averages this margin over epochs; we report its negation).
    """
    lg, y = _logits_labels(logits, labels)
    idx = np.arange(y.size)
    true = lg[:, idx, y]
    other = lg.copy()
    other[:, idx, y] = -np.inf
    return (other.max(axis=2) - true).mean(axis=0)


def forgetting_scores(correct_history: Any) -> np.ndarray:
    """Forgetting events: how often a sample goes from correctly to incorrectly classified between epochs.

    Samples never classified correctly get ``E`` (the number of epochs), above any possible event count
    (at most ``E // 2``), following Toneva et al.'s "never learned = forgotten infinitely often".

    Args:
        correct_history: ``(E, N)`` bool, ``True`` where sample ``n`` was classified correctly after epoch ``e``
            (``E >= 2``).

    Returns:
        ``(N,)`` float64 counts; larger = harder.

    References:
        Toneva et al., "An Empirical Study of Example Forgetting during Deep Neural Network Learning", ICLR 2019,
        arXiv:1812.05159, §3.
    """
    c = np.asarray(correct_history)
    if c.ndim != 2 or c.shape[0] < 2:
        raise ValueError(f"correct_history must be (E, N) with E >= 2 epochs, got shape {c.shape}")
    if c.dtype != bool:
        if not np.isin(c, (0, 1)).all():
            raise ValueError("correct_history must be boolean (or 0/1)")
        c = c.astype(bool)
    events = (c[:-1] & ~c[1:]).sum(axis=0).astype(np.float64)
    events[~c.any(axis=0)] = float(c.shape[0])
    return events


def ssp_scores(features: Any, *, num_prototypes: int = 100, seed: int = 0) -> np.ndarray:
    """Self-supervised prototype score: cosine distance of each (L2-normalised) embedding to its nearest k-means
    centroid; far from every prototype = atypical = hard. No labels needed.

    Args:
        features: ``(N, d)`` embeddings (e.g. from a self-supervised encoder).
        num_prototypes: number of k-means clusters, ``1 <= num_prototypes <= N``.
        seed: k-means initialisation.

    Returns:
        ``(N,)`` float64 in ``[0, 2]``; larger = harder.

    References:
        Sorscher et al., "Beyond neural scaling laws: beating power law scaling via data pruning", NeurIPS 2022,
        arXiv:2206.14486, §5 (self-supervised prototype metric).
    """
    from sklearn.cluster import KMeans, MiniBatchKMeans

    x = as_features(features).astype(np.float64)
    n = x.shape[0]
    num_prototypes = check_int("num_prototypes", num_prototypes, low=1, high=n)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    x = x / np.where(norms == 0, 1.0, norms)
    if n > 20_000:
        km: Any = MiniBatchKMeans(
            n_clusters=int(num_prototypes), random_state=seed, n_init=3, batch_size=4096
        )
    else:
        km = KMeans(n_clusters=int(num_prototypes), random_state=seed, n_init=1)
    km.fit(x)
    centres = km.cluster_centers_ / np.maximum(
        np.linalg.norm(km.cluster_centers_, axis=1, keepdims=True), 1e-12
    )
    sim = x @ centres.T
    return 1.0 - sim.max(axis=1)


@dataclass
class ScoringRun:
    """What :func:`train_scoring_model` returns.

    Attributes:
        logits: ``(E, N, C)`` float32 training-set logits after each epoch.
        correct: ``(E, N)`` bool, prediction == label after each epoch.
        features: ``(N, h)`` float32 last-hidden-layer embeddings after the final epoch.
        model: the trained ``torch.nn.Module`` (on CPU, eval mode).
    """

    logits: np.ndarray
    correct: np.ndarray
    features: np.ndarray
    model: Any


def _mlp(d_in: int, hidden: tuple[int, ...], num_classes: int) -> Any:
    import torch

    layers: list[Any] = []
    prev = d_in
    for h in hidden:
        layers += [torch.nn.Linear(prev, h), torch.nn.ReLU()]
        prev = h
    layers.append(torch.nn.Linear(prev, num_classes))
    return torch.nn.Sequential(*layers)


def train_scoring_model(
    inputs: Any,
    labels: Any,
    *,
    epochs: int = 4,
    hidden: tuple[int, ...] = (256, 64),
    batch_size: int = 256,
    lr: float = 1e-3,
    seed: int = 0,
    device: str = "auto",
    quiet: bool = True,
) -> ScoringRun:
    """Train a small MLP classifier on ``(inputs, labels)`` and record what the scores need after every epoch.

    Args:
        inputs: ``(N, D)`` float inputs (flatten images first).
        labels: ``(N,)`` int class ids ``0..C-1``.
        epochs: passes over the data (>= 1; forgetting needs >= 2).
        hidden: widths of the hidden layers (the last one is the embedding).
        batch_size, lr: Adam mini-batch training.
        seed: torch generator for initialisation and shuffling.
        device: ``auto``, ``cpu``, ``cuda[:i]``.
        quiet: no progress bar.

    Returns:
        A :class:`ScoringRun`.

    Raises:
        ValueError / TypeError: bad shapes, non-integer or negative labels, fewer than 2 classes, bad options.
    """
    import torch

    from iclr25_shared.cli import progress
    from iclr25_shared.device import resolve_device

    x = as_features(inputs, name="inputs")
    y = np.asarray(labels)
    if y.dtype == bool or not np.issubdtype(y.dtype, np.integer):
        raise TypeError(f"labels must be integer class ids, got dtype {y.dtype}")
    if y.shape != (x.shape[0],):
        raise ValueError(f"labels must have shape ({x.shape[0]},) to match inputs, got {y.shape}")
    if y.min() < 0:
        raise ValueError(f"labels must be >= 0, got min {y.min()}")
    num_classes = int(y.max()) + 1
    if num_classes < 2:
        raise ValueError("labels must hold at least 2 classes")
    epochs = check_int("epochs", epochs, low=1)
    batch_size = check_int("batch_size", batch_size, low=1)
    lr = check_float("lr", lr, low=0.0, low_inclusive=False)
    dev = resolve_device(device)
    gen = torch.Generator().manual_seed(int(seed))
    torch.manual_seed(int(seed))
    model = _mlp(x.shape[1], tuple(hidden), num_classes).to(dev)
    with torch.no_grad():  # deterministic init from our generator
        for mod in model:
            if isinstance(mod, torch.nn.Linear):
                bound = 1.0 / np.sqrt(mod.in_features)
                mod.weight.copy_(torch.empty(mod.weight.shape).uniform_(-bound, bound, generator=gen))
                mod.bias.copy_(torch.empty(mod.bias.shape).uniform_(-bound, bound, generator=gen))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    X = torch.from_numpy(x).to(dev)
    Y = torch.from_numpy(y.astype(np.int64)).to(dev)
    n = X.shape[0]
    logits_hist = np.zeros((epochs, n, num_classes), dtype=np.float32)
    correct_hist = np.zeros((epochs, n), dtype=bool)
    for e in progress(range(epochs), total=epochs, desc="scoring model", quiet=quiet):
        model.train()
        perm = torch.randperm(n, generator=gen).to(dev)
        for start in range(0, n, batch_size):
            b = perm[start : start + batch_size]
            loss = torch.nn.functional.cross_entropy(model(X[b]), Y[b])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            out = torch.cat([model(X[s : s + 8192]) for s in range(0, n, 8192)])
        logits_hist[e] = out.cpu().numpy()
        correct_hist[e] = (out.argmax(1) == Y).cpu().numpy()
    with torch.no_grad():
        body = model[:-1]
        feats = torch.cat([body(X[s : s + 8192]) for s in range(0, n, 8192)]).cpu().numpy()
    return ScoringRun(logits_hist, correct_hist, feats.astype(np.float32), model.cpu().eval())


def importance_scores(
    method: str = "el2n",
    *,
    labels: Any = None,
    logits: Any = None,
    correct_history: Any = None,
    features: Any = None,
    inputs: Any = None,
    direction: str = "hard_first",
    num_prototypes: int = 100,
    epochs: int = 4,
    seed: int = 0,
    device: str = "auto",
) -> np.ndarray:
    """Importance ``I(z)`` for InfoMax, from what you have: logits, a correctness history, features, or raw inputs.

    - ``el2n`` / ``margin``: from ``logits`` (+ ``labels``); without logits, a small MLP is trained on
      ``inputs`` (or ``features``) and its per-epoch logits are used.
    - ``forgetting``: from ``correct_history`` ``(E, N)``; without it, from the same trained MLP.
    - ``ssp``: from ``features`` (or ``inputs``) alone, no labels.

    Args:
        method: ``el2n``, ``margin``, ``forgetting`` or ``ssp``.
        direction: ``hard_first`` (larger = harder, the usual InfoMax ``I``) or ``easy_first`` (negated).
        num_prototypes: k-means clusters for ``ssp``.
        epochs: epochs of the scoring MLP when one is trained.
        seed, device: for the scoring MLP / k-means.

    Returns:
        ``(N,)`` float64 scores, finite.

    Raises:
        ValueError: unknown method or direction; the inputs the method needs are missing.
    """
    check_choice("method", method, METHODS)
    check_choice("direction", direction, DIRECTIONS)
    if method == "ssp":
        source = features if features is not None else inputs
        if source is None:
            raise ValueError("method 'ssp' needs features (or inputs)")
        scores = ssp_scores(source, num_prototypes=num_prototypes, seed=seed)
    else:
        need_training = logits is None if method != "forgetting" else correct_history is None
        if need_training:
            source = inputs if inputs is not None else features
            if source is None or labels is None:
                what = "logits" if method != "forgetting" else "correct_history"
                raise ValueError(
                    f"method {method!r} needs {what} (and labels), or inputs/features and labels"
                )
            run = train_scoring_model(source, labels, epochs=max(2, epochs), seed=seed, device=device)
            logits, correct_history = run.logits, run.correct
        if method == "el2n":
            scores = el2n_scores(logits, labels)
        elif method == "margin":
            scores = margin_scores(logits, labels)
        else:
            scores = forgetting_scores(correct_history)
    return -scores if direction == "easy_first" else scores
