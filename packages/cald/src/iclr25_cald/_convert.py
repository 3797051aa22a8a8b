"""Conversion of a pretrained HF transformer into a linear-time model (CALD, arXiv:2410.06846, Section 3.1).

Every self-attention module is replaced by a linear-time mixer and *every other* pretrained parameter is kept
(embeddings, MLPs, norms, heads; for Linformer also the attention's Q/K/V/O projections). Supported families:

- Llama family (``model_type`` ``llama``): decoder layers' ``self_attn`` (rotary Q/K, grouped K/V heads);
- BERT family (``model_type`` ``bert``, ``roberta``): ``attention.self`` (the output dense + LayerNorm stay).

Mixers: ``"linformer"`` (bidirectional; for classification/encoding) and ``"mamba"`` (causal in the Llama family,
usable for generation through :func:`iclr25_cald.generate`; a forward + backward pair in a BERT-family encoder, as
CALD's BiMamba for speech, Section 4.3; forward only in a BERT-family decoder).

A causal language model (a next-token head such as ``LlamaForCausalLM``, or a BERT-family decoder) is never made
bidirectional silently: the converted model would read future tokens and its next-token loss and perplexity would be
invalid. :func:`convert` refuses a bidirectional mixer on one unless ``allow_bidirectional=True``.
"""

from __future__ import annotations

import copy
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from iclr25_cald._mixers import (
    LinformerProjection,
    MambaConfig,
    MambaMixer,
    key_padding_mask,
    linformer_attention,
)
from iclr25_shared.checks import check_choice, check_int

__all__ = [
    "DEFAULT_MAX_SEQ_LEN",
    "FAMILIES",
    "MIXERS",
    "Conversion",
    "ConversionReport",
    "convert",
    "load_converted",
    "load_teacher_weights",
    "predicts_next_token",
    "save_converted",
]

FAMILIES = {"llama": "llama", "bert": "bert", "roberta": "bert"}
MIXERS = ("linformer", "mamba")
DEFAULT_MAX_SEQ_LEN = 512
"""Linformer's default ``max_seq_len`` (capped at the model's ``max_position_embeddings``): the Linformer paper's and
BERT/RoBERTa's n = 512. ``E, F`` cost ``2 * max_seq_len * k`` parameters per layer, so SmolLM2's 8192 positions would
add 4.2 M per layer at k = 256; pass a larger ``max_seq_len`` when inputs are longer."""
_NO_CACHE = (
    "converted mixers keep no key/value cache; run the model with use_cache=False, and generate with "
    "iclr25_cald.generate (recurrent Mamba state)"
)


def _right_padded(valid: torch.Tensor | None, what: str) -> None:
    if valid is not None and bool((valid[:, 1:] & ~valid[:, :-1]).any()):
        raise ValueError(
            f"the {what} mixer needs right padding (pads after the real tokens); got left padding"
        )


class LlamaLinformerAttention(nn.Module):
    """Llama ``self_attn`` with Linformer keys/values; keeps ``q_proj, k_proj, v_proj, o_proj`` and RoPE.

    ``forward(hidden_states (batch, seq, hidden), position_embeddings=(cos, sin), attention_mask=...)`` returns
    ``(output (batch, seq, hidden), None)``. Bidirectional: every token sees the whole (projected) sequence.
    """

    def __init__(self, attn: nn.Module, proj: LinformerProjection) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (
            attn.q_proj,
            attn.k_proj,
            attn.v_proj,
            attn.o_proj,
        )
        self.head_dim, self.scaling = attn.head_dim, attn.scaling
        self.num_key_value_groups = attn.num_key_value_groups
        self.attention_dropout = getattr(attn, "attention_dropout", 0.0)
        self.layer_idx = getattr(attn, "layer_idx", None)
        self.linformer = proj

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, cache=None, **kwargs):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        if cache is None:
            cache = kwargs.get("past_key_values")
        if cache is not None:
            raise ValueError(_NO_CACHE)
        b, n, _ = hidden_states.shape
        shape = (b, n, -1, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        if position_embeddings is not None:
            q, k = apply_rotary_pos_emb(q, k, *position_embeddings)
        valid = key_padding_mask(attention_mask, b, n)
        k, v = self.linformer.project(k, v, valid)
        if self.num_key_value_groups > 1:  # grouped K/V heads: repeat after projecting (same result, cheaper)
            k = k.repeat_interleave(self.num_key_value_groups, dim=1)
            v = v.repeat_interleave(self.num_key_value_groups, dim=1)
        drop = self.attention_dropout if self.training else 0.0
        out = linformer_attention(q, k, v, self.scaling, drop).reshape(b, n, -1)
        return self.o_proj(out), None


class LlamaMambaMixer(nn.Module):
    """Llama ``self_attn`` replaced by a causal :class:`MambaMixer` (output ``(batch, seq, hidden)``, None)."""

    def __init__(self, hidden: int, config: MambaConfig, generator: torch.Generator | None) -> None:
        super().__init__()
        self.mamba = MambaMixer(hidden, config, generator=generator)

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, cache=None, **kwargs):
        if cache is None:
            cache = kwargs.get("past_key_values")
        if cache is not None:
            raise ValueError(_NO_CACHE)
        b, n, _ = hidden_states.shape
        _right_padded(key_padding_mask(attention_mask, b, n), "Mamba")
        return self.mamba(hidden_states), None


class BertLinformerSelfAttention(nn.Module):
    """BERT ``attention.self`` with Linformer keys/values; keeps ``query, key, value``.

    Returns ``(context (batch, seq, hidden), None)``; the layer's ``attention.output`` (dense + LayerNorm) follows.
    """

    def __init__(self, attn: nn.Module, proj: LinformerProjection) -> None:
        super().__init__()
        self.query, self.key, self.value = attn.query, attn.key, attn.value
        self.num_attention_heads, self.attention_head_size = (
            attn.num_attention_heads,
            attn.attention_head_size,
        )
        self.scaling = getattr(attn, "scaling", self.attention_head_size**-0.5)
        self.dropout_p = attn.dropout.p if hasattr(attn, "dropout") else 0.0
        self.linformer = proj

    def forward(self, hidden_states, attention_mask=None, cache=None, **kwargs):
        if cache is None:
            cache = kwargs.get("past_key_values")
        if cache is not None:
            raise ValueError(_NO_CACHE)
        b, n, _ = hidden_states.shape
        shape = (b, n, self.num_attention_heads, self.attention_head_size)
        q = self.query(hidden_states).view(shape).transpose(1, 2)
        k = self.key(hidden_states).view(shape).transpose(1, 2)
        v = self.value(hidden_states).view(shape).transpose(1, 2)
        k, v = self.linformer.project(k, v, key_padding_mask(attention_mask, b, n))
        drop = self.dropout_p if self.training else 0.0
        return linformer_attention(q, k, v, self.scaling, drop).reshape(b, n, -1), None


def _reverse_valid(x: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """Reverse each sequence's real tokens in place of (batch, seq, d) ``x``; pads (at the end) stay put."""
    b, n, _ = x.shape
    pos = torch.arange(n, device=x.device).expand(b, n)
    if valid is None:
        idx = n - 1 - pos
    else:
        length = valid.sum(-1, keepdim=True)
        idx = torch.where(pos < length, length - 1 - pos, pos)
    return torch.gather(x, 1, idx[..., None].expand_as(x))


class BertMambaSelfAttention(nn.Module):
    """BERT-family decoder ``attention.self`` replaced by one causal :class:`MambaMixer` (a causal LM stays causal).

    Returns ``(output (batch, seq, hidden), None)``; the layer's ``attention.output`` (dense + LayerNorm) follows.
    """

    def __init__(self, hidden: int, config: MambaConfig, generator: torch.Generator | None) -> None:
        super().__init__()
        self.mamba = MambaMixer(hidden, config, generator=generator)

    def forward(self, hidden_states, attention_mask=None, cache=None, **kwargs):
        if cache is None:
            cache = kwargs.get("past_key_values")
        if cache is not None:
            raise ValueError(_NO_CACHE)
        b, n, _ = hidden_states.shape
        _right_padded(key_padding_mask(attention_mask, b, n), "Mamba")
        return self.mamba(hidden_states), None


class BertBiMambaSelfAttention(nn.Module):
    """BERT ``attention.self`` replaced by a forward and a backward :class:`MambaMixer`, summed (bidirectional).

    The backward mixer reads each sequence's real tokens in reverse order (right padding), so pads never reach a
    real token's output in either direction.
    """

    def __init__(self, hidden: int, config: MambaConfig, generator: torch.Generator | None) -> None:
        super().__init__()
        self.forward_mixer = MambaMixer(hidden, config, generator=generator)
        self.backward_mixer = MambaMixer(hidden, config, generator=generator)

    def forward(self, hidden_states, attention_mask=None, cache=None, **kwargs):
        b, n, _ = hidden_states.shape
        valid = key_padding_mask(attention_mask, b, n)
        _right_padded(valid, "BiMamba")
        back = _reverse_valid(self.backward_mixer(_reverse_valid(hidden_states, valid)), valid)
        return self.forward_mixer(hidden_states) + back, None


@dataclass(frozen=True)
class ConversionReport:
    """What a conversion changed.

    Attributes:
        family: ``"llama"`` or ``"bert"``.
        mixer: ``"linformer"`` or ``"mamba"``.
        layers: number of attention modules replaced.
        new_keys: state-dict keys of the new (mixer) parameters, sorted.
        removed_keys: teacher state-dict keys the student no longer has (Mamba drops Q/K/V/O), sorted.
        settings: the conversion arguments (JSON-able), enough to rebuild the architecture.
    """

    family: str
    mixer: str
    layers: int
    new_keys: list[str]
    removed_keys: list[str]
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass
class Conversion:
    """The converted student and the :class:`ConversionReport`."""

    model: Any
    report: ConversionReport


def _family(model: Any) -> str:
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in FAMILIES:
        raise ValueError(
            f"unsupported architecture: model_type={model_type!r} ({type(model).__name__}); supported model_type "
            f"values are {', '.join(sorted(FAMILIES))} (Llama and BERT families)"
        )
    return FAMILIES[model_type]


def predicts_next_token(model: Any) -> bool:
    """Whether ``model`` is a causal language model: a next-token head (``...ForCausalLM``, ``...LMHeadModel``) or a
    decoder (``config.is_decoder``). Outputs at position t of such a model may depend on tokens <= t only."""
    name = type(model).__name__
    return name.endswith(("ForCausalLM", "LMHeadModel")) or bool(
        getattr(getattr(model, "config", None), "is_decoder", False)
    )


def _targets(model: nn.Module, family: str) -> list[tuple[nn.Module, str, nn.Module]]:
    """(parent, attribute name, attention module) for every self-attention module, in model order."""
    found = []
    for _, module in model.named_modules():
        if family == "llama":
            child = getattr(module, "self_attn", None)
            if isinstance(child, nn.Module) and all(
                hasattr(child, a) for a in ("q_proj", "k_proj", "v_proj")
            ):
                found.append((module, "self_attn", child))
        else:
            child = getattr(module, "self", None) if type(module).__name__.endswith("Attention") else None
            if isinstance(child, nn.Module) and all(hasattr(child, a) for a in ("query", "key", "value")):
                found.append((module, "self", child))
    return found


def _keys(model: nn.Module) -> set[str]:
    return set(model.state_dict().keys())


def convert(
    model: Any,
    mixer: str = "linformer",
    *,
    k: int = 256,
    max_seq_len: int | None = None,
    share: str = "none",
    scale: str = "sqrt_n",
    init: str = "normal",
    mamba: MambaConfig | None = None,
    seed: int = 0,
    inplace: bool = False,
    allow_bidirectional: bool = False,
) -> Conversion:
    """Replace every self-attention module of a HF Llama- or BERT-family model by a linear-time mixer.

    All other parameters are kept bit-identical (they are the same tensors, copied with the model unless
    ``inplace``). The new parameters are initialised from ``seed``: Linformer ``E, F ~ N(0, 1)`` of shape
    ``(max_seq_len, k)`` (or identity), Mamba as in Gu & Dao (2023) (random, not from Q/K/V: CALD Section 4.2).

    A causal language model (:func:`predicts_next_token`: ``LlamaForCausalLM``, ``BertLMHeadModel``, a decoder)
    stays causal: Mamba is causal in it (one forward mixer, also in the BERT family), and the bidirectional
    Linformer is refused unless ``allow_bidirectional=True`` (then the model reads future tokens: fine for
    classification or encoding, never for a next-token loss or a perplexity).

    Args:
        model: a ``transformers`` model (``LlamaForCausalLM``, ``LlamaForSequenceClassification``, ``BertModel``,
            ``RobertaForSequenceClassification``, ...).
        mixer: ``"linformer"`` or ``"mamba"``.
        k: Linformer projected length, ``1 <= k <= max_seq_len``.
        max_seq_len: Linformer's longest input (rows of ``E, F``; default
            ``min(DEFAULT_MAX_SEQ_LEN = 512, config.max_position_embeddings)``).
        share: Linformer ``"none"`` or ``"kv"`` (``F = E``).
        scale: Linformer ``"sqrt_n"`` (divide by sqrt of the real length, as CALD) or ``"none"``.
        init: Linformer ``"normal"`` or ``"identity"``.
        mamba: :class:`MambaConfig` (default sizes when ``None``).
        seed: seed of the new parameters' initialisation.
        inplace: modify ``model`` instead of a deep copy.
        allow_bidirectional: allow a bidirectional mixer (Linformer) on a causal language model.

    Returns:
        :class:`Conversion` (``.model`` with ``config.use_cache = False`` and ``config.cald_conversion`` set,
        ``.report``).

    Raises:
        ValueError: unsupported architecture (names the supported ``model_type`` values), unknown ``mixer``,
            ``k > max_seq_len``, a bidirectional mixer on a causal language model without
            ``allow_bidirectional=True`` (names the mixer), or no attention module found.
    """
    check_choice("mixer", mixer, MIXERS)
    family = _family(model)
    check_int("seed", seed, low=0)
    causal = predicts_next_token(model)
    if mixer == "linformer" and causal and not allow_bidirectional:
        raise ValueError(
            f"mixer 'linformer' is bidirectional (every position reads the whole sequence), but "
            f"{type(model).__name__} is a causal language model: the converted model would see future tokens, "
            "so a next-token loss or perplexity on it would be invalid. Use mixer='mamba' (causal), convert a "
            "classification/encoder model, or pass allow_bidirectional=True if you want a bidirectional model"
        )
    config = model.config
    mamba = mamba if mamba is not None else MambaConfig()
    if mixer == "linformer":
        if max_seq_len is None:
            max_seq_len = min(DEFAULT_MAX_SEQ_LEN, int(config.max_position_embeddings))
        check_int("max_seq_len", max_seq_len, low=1)
        if isinstance(k, int) and not isinstance(k, bool) and k > max_seq_len:
            raise ValueError(
                f"k must be an integer in [1, max_seq_len={max_seq_len}] (Linformer cannot project {max_seq_len} "
                f"tokens onto more than {max_seq_len} rows), got {k}"
            )
        check_int("k", k, low=1, high=max_seq_len)
        check_choice("share", share, ("none", "kv"))
        check_choice("scale", scale, ("sqrt_n", "none"))
        check_choice("init", init, ("normal", "identity"))
    before = _keys(model)
    student = model if inplace else copy.deepcopy(model)
    targets = _targets(student, family)
    if not targets:
        raise ValueError(f"no self-attention module found in {type(model).__name__}; is it a {family} model?")
    gen = torch.Generator().manual_seed(seed)
    ref = next(student.parameters())
    for parent, name, attn in targets:
        if mixer == "linformer":
            proj = LinformerProjection(max_seq_len, k, share=share, scale=scale, init=init, generator=gen)
            new: nn.Module = (
                LlamaLinformerAttention(attn, proj)
                if family == "llama"
                else BertLinformerSelfAttention(attn, proj)
            )
        elif family == "llama":
            new = LlamaMambaMixer(config.hidden_size, mamba, gen)
        elif causal:
            new = BertMambaSelfAttention(config.hidden_size, mamba, gen)
        else:
            new = BertBiMambaSelfAttention(config.hidden_size, mamba, gen)
        new.train(attn.training)  # a fresh module starts in training mode; keep the model's mode
        setattr(parent, name, new.to(device=ref.device, dtype=ref.dtype))
    settings: dict[str, Any] = {"mixer": mixer, "seed": seed}
    if mixer == "linformer":
        settings.update(k=k, max_seq_len=max_seq_len, share=share, scale=scale, init=init)
    else:
        settings["mamba"] = asdict(mamba)
    if allow_bidirectional:
        settings["allow_bidirectional"] = True
    student.config.use_cache = False
    student.config.cald_conversion = settings
    after = _keys(student)
    report = ConversionReport(
        family=family,
        mixer=mixer,
        layers=len(targets),
        new_keys=sorted(after - before),
        removed_keys=sorted(before - after),
        settings=settings,
    )
    return Conversion(student, report)


def load_teacher_weights(
    student: nn.Module, teacher_state: dict[str, torch.Tensor], report: ConversionReport
) -> None:
    """Load a teacher's state dict into a converted student, with exact key accounting.

    The official CALD code loads with ``strict=False`` and silently ignores mismatches; here the missing keys
    must be exactly ``report.new_keys`` and the unexpected keys exactly ``report.removed_keys``.

    Raises:
        ValueError: any other key is missing or unexpected (both lists are named), or a shape differs.
    """
    try:
        result = student.load_state_dict(teacher_state, strict=False)
    except RuntimeError as exc:
        raise ValueError(f"teacher weights do not fit the student: {exc}") from exc
    missing, unexpected = sorted(result.missing_keys), sorted(result.unexpected_keys)
    if missing != report.new_keys or unexpected != report.removed_keys:
        extra_missing = sorted(set(missing) - set(report.new_keys))
        extra_unexpected = sorted(set(unexpected) - set(report.removed_keys))
        raise ValueError(
            "teacher weights do not match the converted architecture: missing keys beyond the new mixer "
            f"parameters {extra_missing[:8]}, unexpected keys beyond the removed attention parameters "
            f"{extra_unexpected[:8]}"
        )


def save_converted(model: Any, path: str | os.PathLike[str]) -> Path:
    """``save_pretrained`` a converted model; its config carries ``cald_conversion`` for :func:`load_converted`."""
    if not hasattr(model.config, "cald_conversion"):
        raise ValueError("model was not converted by iclr25_cald.convert (config.cald_conversion is missing)")
    path = Path(path)
    model.save_pretrained(path)
    return path


def load_converted(path: str | os.PathLike[str], *, dtype: Any = torch.float32) -> Any:
    """Rebuild a converted model from :func:`save_converted` output: architecture from its config, weights strict.

    Raises:
        ValueError: the folder has no ``cald_conversion`` in its config, or the weights do not match exactly.
    """
    import transformers
    from safetensors.torch import load_file

    path = Path(path)
    config = transformers.AutoConfig.from_pretrained(path)
    settings = getattr(config, "cald_conversion", None)
    if not settings:
        raise ValueError(f"{path} holds no converted model (config.cald_conversion is missing)")
    architecture = (config.architectures or [None])[0]
    cls = getattr(transformers, architecture or "", None)
    if cls is None:
        raise ValueError(f"unknown architecture {architecture!r} in {path}/config.json")
    base = cls._from_config(config, dtype=dtype)
    kw = dict(settings)
    if kw.get("mixer") == "mamba":
        kw["mamba"] = MambaConfig(**kw["mamba"])
    conv = convert(base, inplace=True, **kw)
    state: dict[str, torch.Tensor] = {}
    for file in sorted(path.glob("*.safetensors")):
        state.update(load_file(file))
    result = conv.model.load_state_dict(state, strict=False)
    conv.model.tie_weights()
    # save_pretrained drops tied copies (lm_head.weight, BERT's cls.predictions.decoder.*): a missing key is fine
    # only when it shares its storage with a loaded one
    rebuilt = conv.model.state_dict()
    missing = set(result.missing_keys)
    loaded = {rebuilt[k].data_ptr() for k in rebuilt if k not in missing}
    untied = sorted(k for k in missing if rebuilt[k].data_ptr() not in loaded)
    if untied or result.unexpected_keys:
        raise ValueError(
            f"saved weights do not match the rebuilt architecture: missing {untied[:8]}, "
            f"unexpected {sorted(result.unexpected_keys)[:8]}"
        )
    return conv.model.eval()
