"""Rewire a Hugging Face decoder so that every residual addition goes through a hyper-connection (Algorithm 3).

Most decoders in ``transformers`` build each layer from the same parts, differing only in where the norms sit::

    pre-norm (Llama, OLMo, Qwen, Mistral, Gemma, Phi-3, ...):
        h = h + self_attn(input_layernorm(h));          h = h + mlp(post_attention_layernorm(h))
    norm after the branch (OLMo2, OLMo3, FlexOlmo, EXAONE-4):
        h = h + post_attention_layernorm(self_attn(h)); h = h + post_feedforward_layernorm(mlp(h))
    both (Gemma2, Gemma3, GLM-4):
        h = h + post_attention_layernorm(self_attn(input_layernorm(h)))
        h = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)))
    parallel (Cohere, Phi-1/2):
        h = h + self_attn(input_layernorm(h)) + mlp(input_layernorm(h))

Every such addition is ``h + T(h)`` for a branch ``T``; the adapter table :data:`LAYOUTS` names each model type's
parts, and :func:`apply_hyper_connections` replaces each layer by a :class:`HyperConnectedDecoderLayer` that keeps
the original sub-modules (pretrained weights untouched) and routes every branch through a
:class:`HyperConnection` (one per branch; a parallel layer is one branch). The first layer expands the hidden
state to ``n`` streams ``(batch, seq, n, dim)``; the last one sums them, so the model's final norm and LM head see
``(batch, seq, dim)`` as before.

This module imports ``transformers`` (for gradient checkpointing of the rewired layers); the package imports it
lazily.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

import torch
from torch import Tensor, nn

from iclr25_hyper_connections._hyper_connection import (
    HyperConnection,
    NormSpec,
    _check_int,
    expand_streams,
    hyper_connections_of,
    reduce_streams,
)
from iclr25_shared.checks import check_choice

__all__ = [
    "LAYOUTS",
    "SUPPORTED_MODEL_TYPES",
    "HyperConnectedDecoderLayer",
    "LayerLayout",
    "apply_hyper_connections",
    "hyper_connections_of",
    "load_pretrained",
]

try:  # transformers >= 4.52: lets model.gradient_checkpointing_enable() reach the wrapped layers
    from transformers.modeling_layers import GradientCheckpointingLayer as _LayerBase
except ImportError:  # pragma: no cover - older transformers
    _LayerBase = nn.Module  # type: ignore[assignment,misc]


@dataclasses.dataclass(frozen=True)
class LayerLayout:
    """Where a decoder layer keeps the parts of its branches (attribute names on the layer; ``None`` = absent).

    Attributes:
        parallel: attention and FFN read the same normed input and are added together (one branch per layer).
        attn_in, attn_out: norms before / after ``self_attn``; ``mlp_in``, ``mlp_out``: before / after ``mlp``.
        attn_dropout, mlp_dropout: dropout applied to the branch output before the residual addition.
        branch_scale: a float attribute multiplying each branch output (Granite's ``residual_multiplier``).
        attn_proj, mlp_proj: the output projections (``nn.Linear``) inside ``self_attn`` / ``mlp``, rescaled by
            ``output_scale`` in :func:`apply_hyper_connections`.
    """

    parallel: bool = False
    attn_in: str | None = "input_layernorm"
    attn_out: str | None = None
    mlp_in: str | None = "post_attention_layernorm"
    mlp_out: str | None = None
    attn_dropout: str | None = None
    mlp_dropout: str | None = None
    branch_scale: str | None = None
    attn_proj: str = "o_proj"
    mlp_proj: str = "down_proj"

    def parts(self) -> list[str]:
        """The attribute names a layer must have."""
        names = ["self_attn", "mlp", self.attn_in, self.attn_out, self.mlp_in, self.mlp_out]
        names += [self.attn_dropout, self.mlp_dropout]
        return [n for n in names if n is not None]


_PRE = LayerLayout()
_POST = LayerLayout(
    attn_in=None, attn_out="post_attention_layernorm", mlp_in=None, mlp_out="post_feedforward_layernorm"
)
_SANDWICH = LayerLayout(
    attn_out="post_attention_layernorm",
    mlp_in="pre_feedforward_layernorm",
    mlp_out="post_feedforward_layernorm",
)

LAYOUTS: dict[str, LayerLayout] = {
    # pre-norm, Llama-style
    **dict.fromkeys(
        (
            "llama",
            "mistral",
            "ministral",
            "mixtral",
            "qwen2",
            "qwen2_moe",
            "qwen3",
            "qwen3_moe",
            "olmo",
            "olmoe",
            "gemma",
            "smollm3",
            "starcoder2",
            "helium",
            "glm",
            "seed_oss",
            "arcee",
            "hunyuan_v1_dense",
        ),
        _PRE,
    ),
    "apertus": LayerLayout(attn_in="attention_layernorm", mlp_in="feedforward_layernorm"),
    "phi3": LayerLayout(attn_dropout="resid_attn_dropout", mlp_dropout="resid_mlp_dropout"),
    "granite": LayerLayout(branch_scale="residual_multiplier"),
    # norm after the branch (OLMo2 family)
    **dict.fromkeys(("olmo2", "olmo3", "flex_olmo", "exaone4"), _POST),
    # norms before and after
    **dict.fromkeys(("gemma2", "gemma3_text"), _SANDWICH),
    "glm4": LayerLayout(
        attn_out="post_self_attn_layernorm", mlp_in="post_attention_layernorm", mlp_out="post_mlp_layernorm"
    ),
    # parallel attention + FFN
    "cohere": LayerLayout(parallel=True, mlp_in=None),
    "phi": LayerLayout(
        parallel=True, mlp_in=None, attn_dropout="resid_dropout", mlp_dropout="resid_dropout", attn_proj="dense",
        mlp_proj="fc2",
    ),
}  # fmt: skip
"""model_type → layout of its decoder layers; each entry is tested for an exact reduction at initialisation."""

SUPPORTED_MODEL_TYPES = tuple(LAYOUTS)


def _apply(layer: nn.Module, name: str | None, x: Tensor) -> Tensor:
    return x if name is None else getattr(layer, name)(x)


class HyperConnectedDecoderLayer(_LayerBase):  # type: ignore[misc,valid-type]
    """A decoder layer whose residual connections are hyper-connections (paper Algorithm 3).

    Args:
        layer: the original decoder layer (its attention, MLP, norms and dropouts are reused, not copied).
        hcs: one :class:`HyperConnection` per branch: ``(attention, FFN)``, or one for a parallel layer.
        layout: where ``layer`` keeps its parts.
        expand_input: this is the first layer; expand ``(batch, seq, dim)`` to ``n`` streams on entry.
        reduce_output: this is the last layer; sum (or average) the streams to ``(batch, seq, dim)`` on exit.
        reduce: ``"sum"`` (the paper) or ``"mean"``.

    Shapes:
        input/output ``(batch, seq, dim)`` at the ends of the stack, ``(batch, seq, n, dim)`` in between.
    """

    def __init__(
        self,
        layer: nn.Module,
        hcs: list[HyperConnection],
        layout: LayerLayout = _PRE,
        *,
        expand_input: bool,
        reduce_output: bool,
        reduce: str = "sum",
    ) -> None:
        super().__init__()
        if len(hcs) != (1 if layout.parallel else 2):
            raise ValueError(
                f"a {'parallel' if layout.parallel else 'sequential'} layer needs "
                f"{1 if layout.parallel else 2} hyper-connections, got {len(hcs)}"
            )
        self.layer = layer
        self.hcs = nn.ModuleList(hcs)
        self.layout = layout
        self.expand_input = expand_input
        self.reduce_output = reduce_output
        self.reduce = reduce
        if hasattr(layer, "attention_type"):  # read by the decoder loop to pick the mask (transformers 4.56)
            self.attention_type = layer.attention_type

    @property
    def attn_hc(self) -> HyperConnection:
        return self.hcs[0]

    @property
    def mlp_hc(self) -> HyperConnection:
        return self.hcs[-1]

    @property
    def expansion_rate(self) -> int:
        return self.hcs[0].expansion_rate

    def _scale(self, x: Tensor) -> Tensor:
        name = self.layout.branch_scale
        return x if name is None else x * getattr(self.layer, name)

    def _attn(self, h0: Tensor, kwargs: dict[str, Any]) -> Tensor:
        layer, lay = self.layer, self.layout
        out = layer.self_attn(hidden_states=_apply(layer, lay.attn_in, h0), **kwargs)
        out = out[0] if isinstance(out, tuple) else out
        return self._scale(_apply(layer, lay.attn_dropout, _apply(layer, lay.attn_out, out)))

    def _mlp(self, h0: Tensor) -> Tensor:
        layer, lay = self.layer, self.layout
        out = layer.mlp(_apply(layer, lay.mlp_in, h0))
        out = out[0] if isinstance(out, tuple) else out
        return self._scale(_apply(layer, lay.mlp_dropout, _apply(layer, lay.mlp_out, out)))

    def forward(self, hidden_states: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if args:
            raise TypeError(
                "HyperConnectedDecoderLayer takes the hidden states positionally and everything else by keyword "
                f"(got {len(args)} extra positional argument(s))"
            )
        streams = expand_streams(hidden_states, self.expansion_rate) if self.expand_input else hidden_states
        if self.layout.parallel:
            layer, lay = self.layer, self.layout
            h0, residual, beta = self.hcs[0].width_connection(streams)
            x = _apply(layer, lay.attn_in, h0)
            attn = layer.self_attn(hidden_states=x, **kwargs)
            attn = attn[0] if isinstance(attn, tuple) else attn
            branch = _apply(layer, lay.attn_dropout, attn) + _apply(layer, lay.mlp_dropout, layer.mlp(x))
            streams = self.hcs[0].depth_connection(residual, self._scale(branch), beta)
        else:
            h0, residual, beta = self.hcs[0].width_connection(streams)
            streams = self.hcs[0].depth_connection(residual, self._attn(h0, kwargs), beta)
            h0, residual, beta = self.hcs[1].width_connection(streams)
            streams = self.hcs[1].depth_connection(residual, self._mlp(h0), beta)
        if not self.reduce_output:
            return streams
        out = reduce_streams(streams)
        return out / self.expansion_rate if self.reduce == "mean" else out


def _unsupported(what: str) -> ValueError:
    return ValueError(
        f"apply_hyper_connections supports Hugging Face decoders with model_type in {', '.join(SUPPORTED_MODEL_TYPES)} "
        f"(layers made of self_attn, mlp and norms; see LAYOUTS); got {what}"
    )


def _decoder_layers(model: nn.Module) -> nn.ModuleList:
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if config is None or model_type not in LAYOUTS:
        raise _unsupported(
            f"model_type {model_type!r}" if config is not None else f"{type(model).__name__} (no .config)"
        )
    inner = getattr(model, "model", None)  # *ForCausalLM wraps the bare *Model
    base = inner if isinstance(inner, nn.Module) and hasattr(inner, "layers") else model
    layers = getattr(base, "layers", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        raise ValueError(f"{type(model).__name__} has no non-empty `layers` ModuleList to rewire")
    return layers


def _output_projections(layer: nn.Module, layout: LayerLayout, index: int) -> list[nn.Linear]:
    projs = []
    for module_name, attr in (("self_attn", layout.attn_proj), ("mlp", layout.mlp_proj)):
        proj = getattr(getattr(layer, module_name), attr, None)
        if not isinstance(proj, nn.Linear):
            raise ValueError(
                f"output_scale: decoder layer {index} has no nn.Linear {module_name}.{attr} to rescale "
                "(mixture-of-experts FFNs are not supported); use output_scale=None"
            )
        projs.append(proj)
    return projs


def apply_hyper_connections(
    model: nn.Module,
    *,
    expansion_rate: int = 4,
    dynamic: bool = True,
    tanh: bool = True,
    norm: NormSpec = "layernorm",
    trainable: bool = True,
    reduce: str = "sum",
    output_scale: Literal["divide", "multiply"] | None = None,
    fused: bool = False,
) -> nn.Module:
    """Replace every residual connection of a Hugging Face decoder by a hyper-connection, in place.

    Each branch gets a :class:`HyperConnection` (``layer_index`` counts branches in forward order: ``2k`` and
    ``2k + 1`` for layer ``k``'s attention and FFN; ``k`` for a parallel layer), initialised as in eq. 14, so **at
    initialisation the model computes the same function** (exactly with ``reduce="mean"``; with ``"sum"`` up to
    the final norm's ``eps`` acting on ``n·h``, see ``reduce``): a pretrained model can continue training with
    hyper-connections. New modules take the dtype and device of the layer's parameters.

    Args:
        model: a ``transformers`` model (``*ForCausalLM`` or the bare ``*Model``) whose ``config.model_type`` is
            in :data:`SUPPORTED_MODEL_TYPES` (e.g. ``llama`` — SmolLM2 is one —, ``olmo``, ``olmo2``, ``olmoe``,
            ``gemma2``, ``phi3``, ``qwen3``; the adapter table :data:`LAYOUTS` lists them all).
        expansion_rate: ``n >= 1``.
        dynamic, tanh, norm, trainable, fused: see :class:`HyperConnection`.
        reduce: ``"sum"`` (the paper) or ``"mean"`` of the streams before the final norm. The final RMSNorm /
            LayerNorm makes them the same function except for its ``eps`` (``Norm_eps(n·h) = Norm_{eps/n²}(h)``),
            so at init ``"sum"`` scales each token's logits by ``sqrt((σ² + eps) / (σ² + eps/n²))``, a relative
            change of at most ``(1 − 1/n²)·eps/(2σ²)``, where ``σ²`` is the mean square (RMSNorm) or variance
            (LayerNorm) of that token's last-layer output. It is not negligible when ``σ²`` is small, as in a
            freshly initialised model: measured 1.8e-3 (Llama, eps 1e-6) to 1.9e-2 (OLMo, eps 1e-5) on tiny
            random models with transformers' default init (d = 16, ``σ²`` ≈ 2.5e-4), 2.5e-4 on the package's
            bench model at init (d = 256, eps 1e-5); 0.0 on SmolLM2-135M (large ``σ²``). ``"mean"`` gives
            outputs identical to the original model at init, whatever ``σ²``.
        output_scale: the paper's training detail for models trained **from scratch**: the initial weights of
            every output projection (attention ``o_proj`` and FFN ``down_proj``, or the layout's names) are
            divided (``"divide"``) or multiplied (``"multiply"``) by ``√n`` (the paper says "rescaled by √n"
            without the direction). ``None`` (default) keeps them, and with it the exact reduction to the
            original model.

    Returns:
        The same ``model`` object (modified in place).

    Raises:
        ValueError: unsupported architecture (the message names the supported ones), ``expansion_rate < 1``,
            bad ``reduce`` / ``output_scale``, or the model already has hyper-connections. Nothing is changed.
        TypeError: ``expansion_rate`` is not an int.

    Notes:
        Intermediate ``output_hidden_states`` are not recorded for the rewired layers (they are no longer the
        model's decoder-layer class); use forward pre-hooks on the norms to read each branch input ``h_0``.
        The settings are recorded in ``model.config.hyper_connections``, so ``model.save_pretrained(folder)``
        saves them in ``config.json``; load the folder with :func:`load_pretrained` (the same model, bit for bit).
        ``AutoModelForCausalLM.from_pretrained(folder)`` does **not** restore it: it builds the plain decoder,
        whose weights are named without the wrapper's ``.layer``, and drops every hyper-connection weight.

    References:
        arXiv 2409.19606, §2, eq. 14 and Appendix J (Algorithm 3, the transformer with hyper-connections).
    """
    n = _check_int("expansion_rate", expansion_rate, low=1)
    check_choice("reduce", reduce, ("sum", "mean"))
    check_choice("output_scale", output_scale, (None, "divide", "multiply"))
    if hyper_connections_of(model):
        raise ValueError(
            "model already has hyper-connections; apply_hyper_connections must be applied only once"
        )
    if fused and not (dynamic and isinstance(norm, str) and norm == "layernorm"):
        raise ValueError(
            f"fused=True needs dynamic=True and norm='layernorm'; got dynamic={dynamic}, norm={norm!r}"
        )
    layers = _decoder_layers(model)
    layout = LAYOUTS[model.config.model_type]
    projections: list[nn.Linear] = []
    for i, layer in enumerate(layers):
        missing = [p for p in layout.parts() if not isinstance(getattr(layer, p, None), nn.Module)]
        if layout.branch_scale is not None and not isinstance(
            getattr(layer, layout.branch_scale, None), (int, float)
        ):
            missing.append(layout.branch_scale)
        if missing:
            raise ValueError(
                f"decoder layer {i} ({type(layer).__name__}) lacks {', '.join(missing)}; the "
                f"{model.config.model_type!r} layout needs {', '.join(layout.parts())}"
            )
        if output_scale is not None:
            projections += _output_projections(layer, layout, i)
    dim = int(model.config.hidden_size)
    last = len(layers) - 1
    per_layer = 1 if layout.parallel else 2
    for i, layer in enumerate(layers):
        ref = next(layer.parameters(), None)
        dtype = ref.dtype if ref is not None else torch.float32
        device = ref.device if ref is not None else torch.device("cpu")
        hcs = [
            HyperConnection(
                dim,
                expansion_rate=n,
                layer_index=per_layer * i + j,
                dynamic=dynamic,
                tanh=tanh,
                norm=norm,
                trainable=trainable,
                fused=fused,
            ).to(device=device, dtype=dtype)
            for j in range(per_layer)
        ]
        layers[i] = HyperConnectedDecoderLayer(
            layer, hcs, layout, expand_input=i == 0, reduce_output=i == last, reduce=reduce
        )
    if output_scale is not None:
        factor = math.sqrt(n) if output_scale == "multiply" else 1 / math.sqrt(n)
        with torch.no_grad():
            for proj in projections:
                proj.weight.mul_(factor)
    model.config.hyper_connections = {
        "expansion_rate": n,
        "dynamic": bool(dynamic),
        "tanh": bool(tanh),
        "norm": norm if isinstance(norm, str) else _CUSTOM_NORM,
        "trainable": bool(trainable),
        "reduce": reduce,
        "output_scale": output_scale,
        "fused": bool(fused),
    }
    return model


_CUSTOM_NORM = "custom"
_HUB_KWARGS = (
    "cache_dir",
    "force_download",
    "local_files_only",
    "token",
    "revision",
    "subfolder",
    "trust_remote_code",
)


def _align_cpu_tensors(model: nn.Module) -> None:
    """Move CPU parameters and buffers that sit off a 64-byte boundary into fresh (aligned) memory.

    transformers' loader leaves most CPU weights at 8-byte offsets; MKL's small matrix products round differently
    there (one ulp), so a loaded model would differ from the saved one, whose weights the constructor allocated
    64-byte aligned.
    """
    with torch.no_grad():
        seen: set[int] = set()
        for t in [*model.parameters(), *model.buffers()]:
            if id(t) in seen or t.device.type != "cpu" or t.data_ptr() % 64 == 0:
                continue
            seen.add(id(t))
            t.data = t.data.clone()


def load_pretrained(folder: Any, *, norm: NormSpec | None = None, **kwargs: Any) -> nn.Module:
    """Load what ``save_pretrained`` wrote for a model with hyper-connections: the same model, bit for bit.

    The settings :func:`apply_hyper_connections` recorded in ``config.json`` (``hyper_connections``) rebuild the
    rewired model, then transformers' own loader fills every weight (the decoder's and the hyper-connections'; a
    weight missing from the folder is an error, not a random initialisation).

    Args:
        folder: a local folder or Hub id that ``model.save_pretrained`` wrote after :func:`apply_hyper_connections`.
        norm: the norm factory, needed only when the model was converted with a callable ``norm`` (recorded as
            ``"custom"``).
        **kwargs: passed to ``from_pretrained`` of the saved class (``config.architectures``): ``dtype``,
            ``device_map``, ``attn_implementation``, ...

    Returns:
        The model (the saved ``*ForCausalLM`` or bare ``*Model`` class), in eval mode.

    Raises:
        ValueError: the folder's config has no ``hyper_connections`` entry (it was not saved from a model with
            hyper-connections: load it with ``AutoModelForCausalLM.from_pretrained``), or a custom norm and no
            ``norm`` argument; a weight of the rewired model is missing from the folder.
    """
    import transformers
    from transformers import AutoConfig

    config = kwargs.pop("config", None) or AutoConfig.from_pretrained(
        folder, **{k: kwargs[k] for k in _HUB_KWARGS if k in kwargs}
    )
    record = getattr(config, "hyper_connections", None)
    if not isinstance(record, dict):
        raise ValueError(
            f"{folder}: config.json has no 'hyper_connections' entry, so it was not saved from a model with "
            "hyper-connections; load it with AutoModelForCausalLM.from_pretrained (and apply_hyper_connections)"
        )
    settings = dict(record)
    saved_norm = settings.pop("norm", "layernorm")
    if saved_norm == _CUSTOM_NORM and norm is None:
        raise ValueError(
            f"{folder} was converted with a custom norm factory, which config.json cannot hold: pass norm= "
            "(the same callable dim -> nn.Module) to load_pretrained"
        )
    settings["norm"] = norm if norm is not None else saved_norm
    output_scale = settings.pop(
        "output_scale", None
    )  # an initialisation detail: the loaded weights replace it
    names = list(getattr(config, "architectures", None) or [])
    base = getattr(transformers, names[0], None) if names else None
    if base is None:
        from transformers import AutoModelForCausalLM

        base = AutoModelForCausalLM._model_mapping[type(config)]

    def __init__(self: Any, config: Any, *args: Any, **kw: Any) -> None:
        base.__init__(self, config, *args, **kw)
        apply_hyper_connections(self, **settings)

    # transformers reads the class's module source for capabilities: keep the base class's module and name
    rewired = type(
        base.__name__,
        (base,),
        {"__init__": __init__, "__module__": base.__module__, "__qualname__": base.__qualname__},
    )
    model, info = rewired.from_pretrained(folder, config=config, output_loading_info=True, **kwargs)
    model.__class__ = base  # the same class as apply_hyper_connections on a plain model gives
    model.config.hyper_connections["output_scale"] = output_scale
    missing = list(info.get("missing_keys") or [])
    if missing:
        raise ValueError(f"{folder}: weights of the model with hyper-connections are missing: {missing[:5]}")
    _align_cpu_tensors(model)
    return model
