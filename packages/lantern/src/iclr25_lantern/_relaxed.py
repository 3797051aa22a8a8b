"""LANTERN's relaxed acceptance, written from the paper (Jang et al., ICLR 2025, arXiv:2410.03355, the method).

Notation (the paper's method): ``p`` is the target model's next-token distribution and ``q`` the drafter's, both
after the same logits processors (temperature, top-k, top-p, classifier-free guidance). For a drafted token ``x``:

* ``A_k(x)``: the ``k`` tokens other than ``x`` whose codebook embeddings are nearest to ``x``'s (Euclidean),
  in order of distance: row ``x`` of :func:`latent_proximity`.
* ``B_{k,δ}(x)``: the longest prefix of ``A_k(x)`` whose target mass ``Σ_{y∈B} p(y)`` is at most ``δ``.
* ``p̃_x``: ``p`` with the mass of ``B`` moved onto ``x``; ``TVD(p, p̃_x) = Σ_{y∈B} p(y) ≤ δ``.
* accept ``x`` with probability ``min(1, p̃_x(x) / q(x))``.

With ``δ = 0`` (or ``k = 0``) the set ``B`` is empty and this is standard speculative sampling (Leviathan et al.
2023; Chen et al. 2023), whose output law equals ``p`` exactly. LANTERN++ (Park et al., arXiv:2502.06352) bounds
the moved mass relative to ``p(x)`` instead: ``Σ_{y∈B} p(y) ≤ (λ − 1) p(x)``, i.e. ``p̃_x(x) ≤ λ p(x)`` (the
"λ mode"; ``λ = 1`` is exact).

The δ bound is per drafted token. It is **not** a bound on the distance between the output law of a decoding
step and ``p``: every drafted token aggregates its own neighbourhood, so the output law can move further than δ
(see :func:`one_step_law`, which computes that law exactly).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from iclr25_shared.checks import check_choice, check_float, check_int

if TYPE_CHECKING:
    import torch

__all__ = [
    "LogitsProcessor",
    "Relaxation",
    "acceptance_probability",
    "greedy_accept",
    "latent_proximity",
    "one_step_law",
    "relaxed_acceptance",
    "relaxed_target_mass",
    "residual_distribution",
]

ResidualRule = Literal["lantern", "standard"]


def _torch():
    import torch

    return torch


def proximity_dtype(vocab_size: int):
    """Smallest signed torch integer dtype that holds token ids ``0 .. vocab_size - 1`` (int16 or int32)."""
    torch = _torch()
    return torch.int16 if vocab_size <= 2**15 else torch.int32


def latent_proximity(codebook, k: int | None = None, *, chunk_size: int = 256, precision: str = "float64"):
    """Latent proximity table: for every token, the ``k`` other tokens nearest in embedding space (the paper's latent proximity).

    Row ``x`` lists ``A_k(x)``: the ids ``y != x`` sorted by non-decreasing Euclidean distance
    ``‖e_x − e_y‖₂``; equal distances are ordered by id when ``k = V − 1`` (full sort) and arbitrarily at the
    boundary otherwise (top-k). Distances are computed in float64, ``chunk_size`` rows at a time, so a
    ``V = 16 384`` codebook needs ``chunk_size × V`` doubles of workspace, not ``V²``.

    Args:
        codebook: ``(V, d)`` float tensor or array, the VQ codebook embeddings ``e_1 .. e_V`` (any float dtype).
        k: neighbours per token, an integer in ``[0, V − 1]``; ``None`` means ``V − 1`` (the full order).
        chunk_size: rows processed at a time (>= 1).
        precision: ``"float64"`` (default) or ``"float32"`` distances; float32 is ~4× faster for large text
            vocabularies (V ≈ 50 000) and may order near-ties differently.

    Returns:
        ``(V, k)`` tensor of dtype int16 (``V <= 32 768``) or int32, on the codebook's device.

    Raises:
        ValueError: codebook not 2-D, empty, or with NaN/inf entries; ``k`` outside ``[0, V − 1]``.
        TypeError: ``k`` or ``chunk_size`` not an integer.

    References:
        Jang et al., "LANTERN", ICLR 2025, arXiv:2410.03355, method (latent proximity ``A_k``).
    """
    torch = _torch()
    e = torch.as_tensor(codebook)
    if e.ndim != 2 or e.shape[0] < 1 or e.shape[1] < 1:
        raise ValueError(f"codebook must be a non-empty 2-D (V, d) array, got shape {tuple(e.shape)}")
    if not e.is_floating_point():
        raise TypeError(f"codebook must hold floats, got dtype {e.dtype}")
    bad = (~torch.isfinite(e)).sum().item()
    if bad:
        raise ValueError(f"codebook holds {bad} NaN/inf entries")
    vocab = int(e.shape[0])
    k = vocab - 1 if k is None else check_int("k", k, low=0, high=vocab - 1)
    chunk_size = check_int("chunk_size", chunk_size, low=1)
    check_choice("precision", precision, ("float64", "float32"))
    e = e.to(torch.float64 if precision == "float64" else torch.float32)
    sq = (e * e).sum(1)
    out = torch.empty((vocab, k), dtype=proximity_dtype(vocab), device=e.device)
    if k == 0:
        return out
    for start in range(0, vocab, chunk_size):
        rows = torch.arange(start, min(start + chunk_size, vocab), device=e.device)
        dist = sq[rows, None] + sq[None, :] - 2.0 * (e[rows] @ e.T)
        dist.clamp_(min=0.0)
        dist[torch.arange(len(rows)), rows] = -math.inf  # x itself comes first and is dropped
        if k == vocab - 1:
            idx = torch.sort(dist, dim=1, stable=True).indices[:, 1:]
        else:
            _, idx = torch.topk(dist, k + 1, dim=1, largest=False, sorted=True)
            idx = idx[:, 1:]
        out[rows] = idx.to(out.dtype)
    return out


def delta_above_one(delta: float, how: str | None = None) -> str:
    """The message that refuses ``δ > 1``; ``how`` says how to ask for the λ mode (default: ``lam=<delta>``)."""
    how = how if how is not None else f"pass lam={delta:g} instead of delta"
    return (
        f"delta must be in [0, 1] (a total-variation budget; 1 already lets a draft collect all its neighbours' "
        f"mass), got {delta:g}; the official LANTERN code reads delta > 1 as LANTERN++'s lambda mode: {how}"
    )


@dataclass(frozen=True, eq=False)
class Relaxation:
    """How much target mass a drafted token may collect from its latent neighbours.

    Attributes:
        neighbours: ``(V, k)`` integer proximity table from :func:`latent_proximity`, or ``None`` (no relaxation,
            ``k = 0``).
        delta: total-variation budget ``δ`` in ``[0, 1]`` (the paper's TVD bound): ``Σ_{y∈B} p(y) ≤ δ``. ``δ > 1``
            is refused: it would act as ``δ = 1`` here, while the official code reads ``δ > 1`` as the λ mode.
        lam: LANTERN++ relative budget ``λ >= 1`` instead of ``δ``: ``Σ_{y∈B} p(y) ≤ (λ − 1) p(x)``; ``None``
            uses ``delta``.
        residual: after a rejection, ``"lantern"`` resamples from ``max(0, p − q)`` with the rejected token and its
            aggregated set ``B`` zeroed (renormalised); ``"standard"`` from ``max(0, p − q)`` only. Both equal
            the standard rule when ``B`` is empty.

    Raises:
        ValueError: ``delta`` outside ``[0, 1]`` or non-finite (``delta > 1``: the message points at ``lam``);
            ``lam < 1``; ``residual`` not one of the two names; a ``neighbours`` table that is not 2-D integer.
    """

    neighbours: torch.Tensor | None = None
    delta: float = 0.0
    lam: float | None = None
    residual: ResidualRule = "lantern"

    def __post_init__(self) -> None:
        check_float("delta", self.delta, low=0.0)
        if self.delta > 1.0:
            raise ValueError(delta_above_one(self.delta))
        if self.lam is not None:
            check_float("lam", self.lam, low=1.0)
        check_choice("residual", self.residual, ("lantern", "standard"))
        if self.neighbours is not None:
            nb = self.neighbours
            if getattr(nb, "ndim", None) != 2 or nb.is_floating_point() or nb.is_complex():
                raise ValueError(
                    f"neighbours must be a 2-D integer (V, k) table from latent_proximity, got "
                    f"{getattr(nb, 'dtype', type(nb))} of shape {tuple(getattr(nb, 'shape', ()))}"
                )
            vocab, k = nb.shape
            if k > max(vocab - 1, 0):
                raise ValueError(f"k must be an integer in [0, V - 1 = {vocab - 1}], got {k}")
        object.__setattr__(self, "_index", {})

    def index(self, device) -> torch.Tensor:
        """The table as an int64 ``(V, k)`` index on ``device``, converted once per device and kept (the
        per-step gathers read it; converting the table in every step cost as much as the gathers themselves)."""
        key = str(device)
        table = self._index.get(key)
        if table is None:
            table = self.neighbours.to(device=device, dtype=_torch().int64)
            self._index[key] = table
        return table

    @property
    def k(self) -> int:
        """Neighbours per token in the table (0 without one)."""
        return 0 if self.neighbours is None else int(self.neighbours.shape[1])

    @property
    def vocab_size(self) -> int | None:
        """V of the table, or ``None`` without one."""
        return None if self.neighbours is None else int(self.neighbours.shape[0])

    @property
    def exact(self) -> bool:
        """Whether this is standard (lossless) speculative sampling: no table, ``k = 0``, ``δ = 0`` or ``λ = 1``."""
        if self.k == 0:
            return True
        return self.lam == 1.0 if self.lam is not None else self.delta == 0.0

    def check_vocab(self, vocab_size: int, who: str = "the models") -> None:
        """Raise ``ValueError`` unless the table's V equals ``vocab_size`` (the models' vocabulary)."""
        if self.neighbours is not None and self.vocab_size != vocab_size:
            raise ValueError(
                f"codebook/vocabulary size mismatch: the proximity table has V = {self.vocab_size} rows but "
                f"{who} have V = {vocab_size}; build the table from the codebook of the tokenizer these models use"
            )


def relaxed_target_mass(p, x, relax: Relaxation):
    """``p̃_x(x)`` and the aggregated set ``B_{k,δ}(x)`` for drafted tokens ``x`` (the paper's relaxed acceptance).

    ``B`` is the longest prefix of ``A_k(x)`` (row ``x`` of the table) whose cumulative target mass is at most
    ``δ`` (or ``(λ − 1) p(x)`` in λ mode); because ``p >= 0`` the cumulative sums never decrease, so ``B`` is
    always a prefix and the moved mass ``Σ_{y∈B} p(y)`` is at most the budget, to the last floating-point bit.

    Args:
        p: ``(..., V)`` float tensor of target probabilities (after the logits processors).
        x: ``(...)`` int64 tensor of drafted token ids in ``[0, V)``.
        relax: the :class:`Relaxation`.

    Returns:
        ``(p_tilde_x, moved, size)``: ``(...)`` tensors with ``p̃_x(x) = p(x) + moved``, the moved mass
        ``TVD(p, p̃_x)`` (same dtype as ``p``) and ``|B|`` (int64).

    Raises:
        ValueError: the table's V differs from ``p``'s last axis.
    """
    torch = _torch()
    px = p.gather(-1, x.unsqueeze(-1)).squeeze(-1)
    pt, moved, in_b = _relaxed_mass(p, px, x, relax)
    return pt, moved, torch.zeros_like(x) if in_b is None else in_b.sum(-1)


def _relaxed_mass(p, px, x, relax: Relaxation):
    """``(p̃_x(x), moved, in_b)`` given ``px = p(x)``: one gather of the neighbours' mass and one cumsum.

    ``in_b`` is the ``(..., k)`` bool mask of ``B`` along row ``x`` of the table (``None`` when ``k = 0``). The
    cumulative sums of non-negative masses never decrease (also in floating point), so the mask is a prefix
    (``|B| = in_b.sum(-1)``) and the moved mass ``cums[|B| - 1]`` is the largest masked cumulative sum.
    """
    torch = _torch()
    if relax.k == 0:
        return px, torch.zeros_like(px), None
    relax.check_vocab(p.shape[-1], "the target's logits")
    cums = torch.cumsum(p.gather(-1, relax.index(p.device)[x]), dim=-1)  # (..., k)
    if relax.lam is not None:
        in_b = cums <= ((relax.lam - 1.0) * px).unsqueeze(-1)
    else:
        in_b = cums <= relax.delta
    moved = (cums * in_b).amax(-1)
    return px + moved, moved, in_b


def relaxed_acceptance(p, q, x, relax: Relaxation):
    """Everything one verification step needs, from one pass over the neighbour table (the decoding loop's path).

    Batched over leading axes (all drafted positions of a round at once). Equals
    ``acceptance_probability(p, q, x, relax)`` and ``relaxed_target_mass(p, x, relax)`` bit for bit.

    Args:
        p, q: ``(..., V)`` target and drafter probabilities; x: ``(...)`` int64 drafted ids.

    Returns:
        ``(alpha, qx, moved, in_b)``: acceptance probability ``min(1, p̃_x(x)/q(x))``, ``q(x)`` and the moved
        mass, each ``(...)``, and the ``(..., k)`` bool mask of ``B`` along row ``x`` of the table (``None``
        without a table), which :func:`residual_distribution` takes as ``in_b``.
    """
    torch = _torch()
    xi = x.unsqueeze(-1)
    px = p.gather(-1, xi).squeeze(-1)
    qx = q.gather(-1, xi).squeeze(-1)
    pt, moved, in_b = _relaxed_mass(p, px, x, relax)
    ratio = torch.where(qx > 0, pt / torch.where(qx > 0, qx, 1.0), (pt > 0).to(pt.dtype))
    return ratio.clamp(max=1.0), qx, moved, in_b


def acceptance_probability(p, q, x, relax: Relaxation):
    """LANTERN's acceptance probability ``min(1, p̃_x(x) / q(x))`` (the paper's relaxed acceptance).

    Args:
        p: ``(..., V)`` target probabilities; q: ``(..., V)`` drafter probabilities (both after the same
            processors); x: ``(...)`` int64 drafted ids.
        relax: the :class:`Relaxation`; ``δ = 0`` gives standard speculative sampling's ``min(1, p(x)/q(x))``.

    Returns:
        ``(...)`` float tensor in ``[0, 1]``. Where ``q(x) = 0`` (``x`` could not have been drafted) it is 1 if
        ``p̃_x(x) > 0`` else 0.
    """
    return relaxed_acceptance(p, q, x, relax)[0]


def residual_distribution(p, q, x, relax: Relaxation, in_b=None):
    """The distribution a rejected position is resampled from (Leviathan et al. 2023, Alg. 1, with LANTERN's aggregated set removed).

    ``r ∝ max(0, p − q)``; with ``relax.residual == "lantern"`` the rejected token and its aggregated set ``B``
    get zero mass too (they were "used" by the relaxed acceptance). A rejection is only possible when
    ``p̃_x(x) < q(x)``, so ``p`` has mass outside ``{x} ∪ B``; if ``max(0, p − q)`` vanishes there (ties,
    rounding), ``r`` falls back to ``p`` restricted to the complement of ``{x} ∪ B``, then to ``p``.

    Args:
        p, q: ``(..., V)`` probabilities; x: ``(...)`` int64 rejected ids; relax: the :class:`Relaxation`.
        in_b: the ``(..., k)`` mask of ``B`` when already known (from :func:`relaxed_acceptance`); computed
            otherwise.

    Returns:
        ``(..., V)`` non-negative tensor whose last axis sums to 1 (dtype of ``p``).
    """
    torch = _torch()
    r = (p - q).clamp(min=0.0)
    keep = torch.ones_like(p, dtype=torch.bool)
    lantern = relax.residual == "lantern" and relax.k > 0
    if lantern:
        if in_b is None:
            px = p.gather(-1, x.unsqueeze(-1)).squeeze(-1)
            in_b = _relaxed_mass(p, px, x, relax)[2]
        keep.scatter_(-1, relax.index(p.device)[x], ~in_b)  # B zeroed (x is never in its own row; set below)
    keep.scatter_(-1, x.unsqueeze(-1), False)
    if lantern:
        r = r * keep
    total = r.sum(-1, keepdim=True)
    fallback = p * keep
    ftotal = fallback.sum(-1, keepdim=True)
    out = torch.where(
        total > 0,
        r / torch.where(total > 0, total, 1.0),
        torch.where(ftotal > 0, fallback / torch.where(ftotal > 0, ftotal, 1.0), p / p.sum(-1, keepdim=True)),
    )
    return out


def greedy_accept(p, x, relax: Relaxation):
    """Greedy-mode LANTERN: accept ``x`` iff it is the argmax of ``p̃_x`` (the paper's greedy decoding mode).

    ``p̃_x`` is ``p`` with the mass of ``B_{k,δ}(x)`` moved onto ``x``. With ``δ = 0`` this is plain greedy
    verification (``x == argmax p``). Ties: ``x`` is accepted when ``p̃_x(x)`` equals the maximum.

    Args:
        p: ``(..., V)`` target probabilities at temperature 1 (after top-k / CFG); x: ``(...)`` int64 ids.

    Returns:
        ``(...)`` bool tensor.
    """
    torch = _torch()
    px = p.gather(-1, x.unsqueeze(-1)).squeeze(-1)
    pt, _, in_b = _relaxed_mass(p, px, x, relax)
    mod = p.clone()
    if in_b is not None:
        nb = relax.index(p.device)[x]
        mod.scatter_(-1, nb, torch.where(in_b, 0.0, mod.gather(-1, nb)))
    mod.scatter_(-1, x.unsqueeze(-1), pt.unsqueeze(-1))
    return pt >= mod.max(-1).values


def one_step_law(p, q, relax: Relaxation):
    """Exact law of one verified position: draft ``x ~ q``, accept w.p. ``α(x)``, else resample from ``r_x``.

    ``law(y) = q(y) α(y) + Σ_x q(x) (1 − α(x)) r_x(y)``. With ``δ = 0`` it equals ``p`` (the losslessness of
    speculative sampling). For ``δ > 0`` its distance to ``p`` is **not** bounded by ``δ``; this function lets
    you measure it.

    Args:
        p, q: ``(V,)`` float64 probability vectors (after the same processors); relax: the :class:`Relaxation`.

    Returns:
        ``(V,)`` float64 probability vector.
    """
    torch = _torch()
    vocab = p.shape[-1]
    xs = torch.arange(vocab, device=p.device)
    pp, qq = p.expand(vocab, vocab), q.expand(vocab, vocab)
    alpha = acceptance_probability(pp, qq, xs, relax)
    res = residual_distribution(pp, qq, xs, relax)
    return q * alpha + ((q * (1 - alpha)).unsqueeze(-1) * res).sum(0)


@dataclass(frozen=True)
class LogitsProcessor:
    """Turns a model's logits into the distribution tokens are drawn from; applied identically to drafter and target.

    Order: classifier-free guidance ``l = l_u + s (l_c − l_u)`` (rows 0 = conditional, 1 = unconditional) →
    temperature → top-k → top-p (nucleus). Temperature 0 means greedy decoding: :meth:`__call__` then returns the
    temperature-1 distribution (after top-k/top-p) and the decoding loop takes argmaxes.

    Attributes:
        temperature: ``>= 0``.
        top_k: keep the ``top_k`` largest logits (0 = all).
        top_p: keep the smallest set whose mass reaches ``top_p`` (1 = all), in ``(0, 1]``.
        cfg_scale: guidance scale ``s`` (1 = no guidance; then the logits must have one row).

    Raises:
        ValueError: a field outside its range (message names the field and value).
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    cfg_scale: float = 1.0

    def __post_init__(self) -> None:
        check_float("temperature", self.temperature, low=0.0)
        check_int("top_k", self.top_k, low=0)
        check_float("top_p", self.top_p, low=0.0, high=1.0, low_inclusive=False)
        check_float("cfg_scale", self.cfg_scale)

    @property
    def rows(self) -> int:
        """Rows the models must run: 2 (conditional, unconditional) with guidance, else 1."""
        return 1 if self.cfg_scale == 1.0 else 2

    @property
    def greedy(self) -> bool:
        """Whether the loop decodes greedily (temperature 0)."""
        return self.temperature == 0.0

    def __call__(self, logits):
        """Probabilities from logits.

        Args:
            logits: ``(rows, ..., V)`` float tensor, ``rows`` = :attr:`rows` (any float dtype; computed in float64).

        Returns:
            ``(..., V)`` float64 probabilities.

        Raises:
            ValueError: ``logits`` has the wrong number of rows.
        """
        torch = _torch()
        if logits.shape[0] != self.rows:
            raise ValueError(
                f"logits must have {self.rows} row(s) (cfg_scale={self.cfg_scale}), got shape {tuple(logits.shape)}"
            )
        z = logits.to(torch.float64)
        z = z[0] if self.rows == 1 else z[1] + self.cfg_scale * (z[0] - z[1])
        if not self.greedy:
            z = z / self.temperature
        vocab = z.shape[-1]
        if 0 < self.top_k < vocab:
            kth = torch.topk(z, self.top_k, dim=-1).values[..., -1:]
            z = z.masked_fill(z < kth, -math.inf)
        probs = torch.softmax(z, dim=-1)
        if self.top_p < 1.0:
            sp, si = torch.sort(probs, dim=-1, descending=True)
            before = torch.cumsum(sp, dim=-1) - sp  # mass strictly before each sorted entry
            drop_sorted = before >= self.top_p
            drop = torch.zeros_like(drop_sorted).scatter(-1, si, drop_sorted)
            probs = probs.masked_fill(drop, 0.0)
            probs = probs / probs.sum(-1, keepdim=True)
        return probs
