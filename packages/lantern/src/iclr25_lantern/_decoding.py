"""The speculative decoding loop for any (drafter, target) pair, with LANTERN's relaxed acceptance.

A model is a :class:`CachedDecoder`: ``forward(ids)`` appends new tokens to its cache and returns their logits,
``crop(n)`` keeps the first ``n`` cached positions. :class:`FunctionDecoder` wraps a plain callable
``ids -> logits`` (recomputing the whole prefix; no cache), :class:`HFDecoder` a Hugging Face causal LM (its
``DynamicCache``), and :class:`iclr25_lantern.TokenTransformer` is a small cached transformer of this package.

One decoding round (Leviathan et al. 2023, Alg. 1; LANTERN, arXiv:2410.03355, for the acceptance):

1. the drafter samples ``γ`` tokens ``x_1 .. x_γ`` from ``q_i`` (argmax when greedy);
2. the target scores ``[last, x_1 .. x_γ]`` in one call, giving ``p_1 .. p_{γ+1}``;
3. ``x_i`` is accepted in order with probability ``min(1, p̃_{x_i}(x_i) / q_i(x_i))`` (greedy: iff ``x_i`` is the
   argmax of ``p̃``); the first rejected position is resampled from the residual; if all ``γ`` are accepted a
   bonus token is drawn from the **unmodified** ``p_{γ+1}`` (SafeAILab/EAGLE PR #47);
4. both caches are cropped to the committed prefix.

``p`` and ``q`` always come from the same :class:`LogitsProcessor`, and ``q(x)`` in the ratio is the exact
distribution ``x`` was drawn from (huggingface/transformers#32867 and #47932 were both violations of this).
"""

from __future__ import annotations

import inspect
import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from iclr25_lantern._relaxed import (
    LogitsProcessor,
    Relaxation,
    greedy_accept,
    relaxed_acceptance,
    residual_distribution,
)
from iclr25_shared.checks import check_int

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

__all__ = [
    "CachedDecoder",
    "FunctionDecoder",
    "GenerationOutput",
    "HFDecoder",
    "autoregressive_generate",
    "layer_prefix_drafter",
    "speculative_generate",
]


class CachedDecoder(Protocol):
    """What the loop needs from a model (drafter or target).

    ``forward(ids)``: ``ids`` ``(R, t)`` int64 new tokens (``R`` = 1, or 2 rows for classifier-free guidance)
    appended after the cached ones; returns ``(R, t, V)`` logits for those positions. ``crop(n)`` keeps the first
    ``n`` cached positions; ``reset()`` empties the cache; ``cache_len`` is the number of cached positions.
    """

    cache_len: int

    def reset(self) -> None: ...

    def forward(self, ids: torch.Tensor) -> torch.Tensor: ...

    def crop(self, length: int) -> None: ...


class FunctionDecoder:
    """A callable ``fn(ids (R, T)) -> logits (R, T, V)`` as a :class:`CachedDecoder` (recomputes the prefix).

    Args:
        fn: any function of the full token history returning logits for every position.
    """

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.fn = fn
        self.history: torch.Tensor | None = None

    @property
    def cache_len(self) -> int:
        return 0 if self.history is None else int(self.history.shape[1])

    def reset(self) -> None:
        self.history = None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        import torch

        self.history = ids if self.history is None else torch.cat([self.history, ids], dim=1)
        return self.fn(self.history)[:, -ids.shape[1] :]

    def crop(self, length: int) -> None:
        if self.history is not None:
            self.history = self.history[:, :length]


class HFDecoder:
    """A Hugging Face causal LM (``transformers.PreTrainedModel``) as a :class:`CachedDecoder`.

    Uses a ``DynamicCache`` and crops it after rejections. Rows must share one length (no padding).

    Args:
        model: a causal LM in eval mode.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self.cache: Any = None
        # transformers >= 5.2x names the cache argument `cache`; earlier releases `past_key_values`
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"

    @property
    def cache_len(self) -> int:
        return 0 if self.cache is None else int(self.cache.get_seq_length())

    def reset(self) -> None:
        self.cache = None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        import torch
        from transformers import DynamicCache

        if self.cache is None:
            self.cache = DynamicCache()
        name = self._cache_arg
        with torch.no_grad():
            out = self.model(input_ids=ids.to(self.model.device), use_cache=True, **{name: self.cache})
        self.cache = out.get(name, self.cache)
        return out.logits

    def crop(self, length: int) -> None:
        if self.cache is None or length >= self.cache_len:
            return
        # a negative argument removes that many tokens in every transformers release (crop(max_length) before 5,
        # crop(tokens_to_remove) since)
        self.cache.crop(length - self.cache_len)


def layer_prefix_drafter(model: Any, num_layers: int) -> Any:
    """A drafter made of the first ``num_layers`` decoder layers of a Hugging Face causal LM plus its final norm
    and LM head (weights copied; the tokenizer, hence the vocabulary, is the same).

    Args:
        model: a ``transformers`` causal LM whose config has ``num_hidden_layers``.
        num_layers: an integer in ``[1, num_hidden_layers]``.

    Returns:
        a new causal LM of the same class in eval mode, on the model's device and dtype.

    Raises:
        ValueError: ``num_layers`` outside ``[1, num_hidden_layers]``.
    """
    import copy

    from transformers import AutoModelForCausalLM

    total = int(model.config.num_hidden_layers)
    num_layers = check_int("num_layers", num_layers, low=1, high=total)
    cfg = copy.deepcopy(model.config)
    cfg.num_hidden_layers = num_layers
    for key in ("layer_types",):
        if getattr(cfg, key, None) is not None:
            setattr(cfg, key, list(getattr(cfg, key))[:num_layers])
    cfg.__dict__.pop("quantization_config", None)
    small = AutoModelForCausalLM.from_config(cfg)
    state = model.state_dict()
    keep = {}
    for name, value in state.items():
        parts = name.split(".")
        if "layers" in parts:
            i = parts.index("layers")
            if i + 1 < len(parts) and parts[i + 1].isdigit() and int(parts[i + 1]) >= num_layers:
                continue
        keep[name] = value
    missing, unexpected = small.load_state_dict(keep, strict=False)
    missing = [m for m in missing if not m.endswith("lm_head.weight")]  # tied embeddings
    if missing or unexpected:
        raise ValueError(
            f"layer_prefix_drafter: weights did not map (missing {missing}, unexpected {unexpected})"
        )
    return small.to(device=model.device, dtype=model.dtype).eval()


@dataclass
class GenerationOutput:
    """What a decoding run returns.

    Attributes:
        tokens: ``(n_new,)`` int64 generated tokens (prefix excluded), on the CPU.
        target_calls: target forward calls (the expensive, sequential steps).
        drafter_calls: drafter forward calls.
        drafted: drafted tokens verified.
        accepted: of those, accepted.
        accepted_per_round: accepted drafts in each round.
        draft_tokens: each verified draft token (for checks).
        draft_q: ``q(x)`` used in each acceptance ratio (for checks).
        draft_moved: moved mass ``TVD(p, p̃_x)`` of each verified draft (for checks).
        seconds: wall time of the loop.
        cpu_seconds: CPU time of this process during the loop (robust to other processes on a shared machine).
    """

    tokens: torch.Tensor
    target_calls: int = 0
    drafter_calls: int = 0
    drafted: int = 0
    accepted: int = 0
    accepted_per_round: list[int] = field(default_factory=list)
    draft_tokens: list[int] = field(default_factory=list)
    draft_q: list[float] = field(default_factory=list)
    draft_moved: list[float] = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted (NaN without drafts)."""
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def mean_accepted_length(self) -> float:
        """Tokens committed per target call, τ (accepted drafts + the resampled or bonus token)."""
        return len(self.tokens) / self.target_calls if self.target_calls else float("nan")


def _rows(prefix: torch.Tensor, rows: int) -> torch.Tensor:
    import torch

    prefix = torch.as_tensor(prefix)
    if prefix.ndim == 1:
        prefix = prefix.unsqueeze(0)
    if prefix.ndim != 2 or prefix.shape[0] != rows or prefix.shape[1] < 1:
        raise ValueError(
            f"prefix must be ({rows}, t >= 1) token ids ({'conditional and unconditional rows' if rows == 2 else 'one row'}"
            f" for this processor), got shape {tuple(prefix.shape)}"
        )
    if prefix.is_floating_point():
        raise TypeError(f"prefix must hold integer token ids, got {prefix.dtype}")
    return prefix.long()


def _draw(probs: torch.Tensor, greedy: bool, generator: Any) -> torch.Tensor:
    import torch

    if greedy:
        return probs.argmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def _sync(model: CachedDecoder, seq: torch.Tensor) -> torch.Tensor:
    """Crop ``model``'s cache to at most ``len(seq) - 1`` positions; return the tokens it still has to read."""
    n = seq.shape[1]
    if model.cache_len > n - 1:
        model.crop(n - 1)
    return seq[:, model.cache_len :]


def _check_logits(logits: torch.Tensor, vocab: int | None, who: str) -> int:
    v = int(logits.shape[-1])
    if vocab is not None and v != vocab:
        raise ValueError(
            f"codebook/vocabulary size mismatch: {who} returns V = {v} logits, expected V = {vocab}"
        )
    return v


def _describe(model: Any) -> str:
    inner = getattr(model, "model", None) if isinstance(model, HFDecoder) else None
    name = type(model).__name__
    return f"{name} of {type(inner).__name__}" if inner is not None else name


def _finite(logits: torch.Tensor, probs: torch.Tensor, who: str, model: Any, tokens: str, call: str) -> None:
    """Raise ``FloatingPointError`` when the logits a draw reads hold NaN or +inf, or give no distribution.

    ``-inf`` entries are a mask (probability 0) and allowed as long as each row keeps a finite logit. Without this
    check greedy decoding takes the argmax of NaN (token 0) and returns tokens silently.
    """
    import torch

    if bool(torch.isfinite(probs).all()):  # NaN or +inf in a row's logits always makes its probabilities NaN
        return
    nan = int(torch.isnan(logits).sum())
    posinf = int(torch.isposinf(logits).sum())
    if nan or posinf:
        raise FloatingPointError(
            f"{who} ({_describe(model)}) returned non-finite logits for {tokens} ({call}): {nan} NaN and "
            f"{posinf} +inf of {logits.numel()} entries; check the model's weights and dtype (float16 overflows "
            "above 65504)"
        )
    raise FloatingPointError(
        f"{who} ({_describe(model)}) gave no probability distribution for {tokens} ({call}): every logit of "
        "a row is -inf, or guidance combined -inf logits"
    )


def verify_drafts(ps, qs, x, relax: Relaxation, *, greedy: bool, generator: Any = None):
    """One round's verification of ``g`` drafted tokens, vectorised over the positions.

    Acceptance probabilities of all ``g`` positions come from one :func:`relaxed_acceptance` call and one
    ``torch.rand(g)`` draw; the accepted prefix is the first ``False`` of ``u < alpha`` (one host sync); the first
    rejected position is resampled from its residual (greedy: the argmax of ``p``). Random numbers are consumed in
    the same order as the earlier per-position loop (``rand(g)``, then one draw from the residual), so both give
    the same tokens from the same generator (``tests/test_vectorised_acceptance.py``).

    Args:
        ps: ``(g, V)`` target probabilities at the drafted positions; qs: ``(g, V)`` drafter probabilities the
            drafts were drawn from; x: ``(g,)`` int64 drafted tokens; relax: the :class:`Relaxation`.
        greedy: temperature-0 verification (:func:`greedy_accept`); generator: ``torch.Generator`` or ``None``.

    Returns:
        ``(accepted, new_token, qx, moved)``: number of accepted drafts (int), the resampled token at the first
        rejection (0-d int64 tensor) or ``None`` when every draft was accepted, and ``q(x)`` and the moved mass of
        every position (``(g,)``).
    """
    import torch

    g = int(x.shape[0])
    alpha, qx, moved, in_b = relaxed_acceptance(ps, qs, x, relax)
    if greedy:
        ok = greedy_accept(ps, x, relax)
    else:
        u = torch.rand(g, generator=generator, device=alpha.device, dtype=alpha.dtype)
        ok = u < alpha
    accepted = int(ok.cumprod(0).sum())  # length of the accepted prefix (the one host sync)
    if accepted == g:
        return accepted, None, qx, moved
    i = accepted
    if greedy:
        return accepted, ps[i].argmax(-1), qx, moved
    res = residual_distribution(ps[i], qs[i], x[i], relax, in_b=None if in_b is None else in_b[i])
    return accepted, _draw(res, False, generator), qx, moved


def speculative_generate(
    target: CachedDecoder,
    drafter: CachedDecoder,
    prefix: Any,
    *,
    max_new_tokens: int,
    gamma: int = 4,
    relax: Relaxation | None = None,
    processor: LogitsProcessor | None = None,
    generator: Any = None,
) -> GenerationOutput:
    """Speculative decoding with LANTERN's relaxed acceptance (``relax``) for one sequence.

    Args:
        target, drafter: :class:`CachedDecoder` s over the same vocabulary of size ``V``.
        prefix: ``(t,)`` or ``(R, t)`` int token ids, ``t >= 1`` (``R = 2`` rows, conditional then unconditional,
            when ``processor.cfg_scale != 1``; generated tokens are appended to every row).
        max_new_tokens: tokens to generate (>= 1).
        gamma: draft length γ per round (>= 1; the last round drafts fewer when fewer tokens remain).
        relax: :class:`Relaxation` (``None`` = standard speculative sampling, lossless).
        processor: :class:`LogitsProcessor` applied to drafter and target alike (default: temperature 1).
        generator: ``torch.Generator`` for reproducible draws (on the models' device).

    Returns:
        :class:`GenerationOutput`.

    Raises:
        ValueError: bad ``prefix``/``max_new_tokens``/``gamma``; the drafter's, the target's and the proximity
            table's vocabulary sizes differ.
        FloatingPointError: the drafter or the target returned NaN or +inf logits (or a row of only ``-inf``) for
            a token it is about to draw or verify, in every mode (greedy and sampling); the message names the
            model and the step. ``-inf`` entries alone are a mask and allowed.

    Warns:
        UserWarning: relaxed acceptance with temperature 0 (greedy decoding degrades visual AR quality;
            jadohu/LANTERN#6).
    """
    import torch

    relax = relax if relax is not None else Relaxation()
    processor = processor if processor is not None else LogitsProcessor()
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, low=1)
    gamma = check_int("gamma", gamma, low=1)
    if processor.greedy and not relax.exact:
        warnings.warn(
            "LANTERN relaxed acceptance with temperature 0 (greedy): greedy decoding is known to degrade visual "
            "AR image quality (jadohu/LANTERN#6); temperature 1 is the recommended setting",
            UserWarning,
            stacklevel=2,
        )
    seq = _rows(prefix, processor.rows)
    start = seq.shape[1]
    out = GenerationOutput(tokens=torch.empty(0, dtype=torch.long))
    tic, cpu = time.perf_counter(), time.process_time()
    target.reset()
    drafter.reset()
    vocab = relax.vocab_size
    trace: list[torch.Tensor] = []  # per round (3, verified): token, q(x), moved mass; read once at the end
    while seq.shape[1] - start < max_new_tokens:
        remaining = max_new_tokens - (seq.shape[1] - start)
        g = min(gamma, remaining - 1)
        # 1. draft
        drafts: list[torch.Tensor] = []
        qs: list[torch.Tensor] = []
        pending = _sync(drafter, seq)
        for i in range(g):
            logits = drafter.forward(pending)
            out.drafter_calls += 1
            vocab = _check_logits(logits, vocab, "the drafter")
            q = processor(logits[:, -1])
            where = f"new token {seq.shape[1] - start + i + 1} of {max_new_tokens}"
            _finite(logits[:, -1], q, "the drafter", drafter, where, f"drafter call {out.drafter_calls}")
            x = _draw(q, processor.greedy, generator)
            drafts.append(x)
            qs.append(q)
            pending = x.view(1, 1).expand(seq.shape[0], 1)
        # 2. verify in one target call
        draft_ids = torch.stack(drafts).view(1, -1).expand(seq.shape[0], -1) if g else seq[:, :0]
        tpending = _sync(target, seq)
        logits = target.forward(torch.cat([tpending, draft_ids], dim=1))
        out.target_calls += 1
        vocab = _check_logits(logits, vocab, "the target")
        ps = processor(logits[:, tpending.shape[1] - 1 :])  # (g + 1, V)
        done = seq.shape[1] - start
        where = (
            f"new tokens {done + 1}-{done + g + 1} of {max_new_tokens}"
            if g
            else f"new token {done + 1} of {max_new_tokens}"
        )
        _finite(
            logits[:, tpending.shape[1] - 1 :],
            ps,
            "the target",
            target,
            where,
            f"target call {out.target_calls}",
        )
        # 3. accept / reject: every drafted position in one batch; the first rejection found with one host sync
        accepted, new_token = 0, None
        if g:
            x_all = torch.stack(drafts)
            accepted, new_token, qx, moved = verify_drafts(ps[:g], torch.stack(qs), x_all, relax,
                                                           greedy=processor.greedy, generator=generator)  # fmt: skip
            verified = accepted + (new_token is not None)
            out.drafted += verified
            trace.append(torch.stack([x_all[:verified].to(qx.dtype), qx[:verified], moved[:verified]]))
        if new_token is None:  # every draft accepted: bonus from the unmodified target distribution
            new_token = _draw(ps[g], processor.greedy, generator)
        out.accepted += accepted
        out.accepted_per_round.append(accepted)
        committed = torch.cat([draft_ids[:, :accepted], new_token.view(1, 1).expand(seq.shape[0], 1)], dim=1)
        seq = torch.cat([seq, committed.to(seq.device)], dim=1)
    out.tokens = seq[0, start:].cpu()
    out.seconds = time.perf_counter() - tic
    out.cpu_seconds = time.process_time() - cpu
    if trace:
        tokens, q_x, moved_all = torch.cat(trace, dim=1).cpu()
        out.draft_tokens = [int(t) for t in tokens.tolist()]
        out.draft_q = q_x.tolist()
        out.draft_moved = moved_all.tolist()
    return out


def autoregressive_generate(
    target: CachedDecoder,
    prefix: Any,
    *,
    max_new_tokens: int,
    processor: LogitsProcessor | None = None,
    generator: Any = None,
) -> GenerationOutput:
    """Target-only autoregressive decoding (the baseline): one target call per token.

    Args and returns as :func:`speculative_generate` (no drafter, no relaxation).

    Raises:
        FloatingPointError: the target returned NaN or +inf logits (or a row of only ``-inf``); names the step.
    """
    import torch

    processor = processor if processor is not None else LogitsProcessor()
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, low=1)
    seq = _rows(prefix, processor.rows)
    start = seq.shape[1]
    out = GenerationOutput(tokens=torch.empty(0, dtype=torch.long))
    tic, cpu = time.perf_counter(), time.process_time()
    target.reset()
    pending = seq
    for i in range(max_new_tokens):
        logits = target.forward(pending)
        out.target_calls += 1
        p = processor(logits[:, -1])
        _finite(
            logits[:, -1],
            p,
            "the target",
            target,
            f"new token {i + 1} of {max_new_tokens}",
            f"target call {i + 1}",
        )
        x = _draw(p, processor.greedy, generator)
        pending = x.view(1, 1).expand(seq.shape[0], 1).to(seq.device)
        seq = torch.cat([seq, pending], dim=1)
    out.tokens = seq[0, start:].cpu()
    out.seconds = time.perf_counter() - tic
    out.cpu_seconds = time.process_time() - cpu
    return out
