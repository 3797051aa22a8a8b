"""Logit lens over image-token hidden states, internal confidence and localisation maps (arXiv:2410.02762, Sec. 3-4).

Notation (paper, Sec. 3): a decoder-only VLM with ``L`` layers writes hidden states ``h_{l,i}`` for layer index
``l in [0, L]`` (``l = 0``: the input embeddings; ``l >= 1``: the output of decoder layer ``l - 1``, the same
indexing as Hugging Face ``output_hidden_states``) and position ``i``. The logit lens projects a hidden state onto
the vocabulary with the unembedding ``W_U``: ``p_{l,i} = softmax(W_U norm(h_{l,i}))``. The internal confidence of
an object ``o`` is ``c_o = max_{l, i in image} max_{tok in tokens(o)} p_{l,i}[tok]``.

The model-specific parts (decoder layers, final norm, unembedding, the image placeholder id) are found by
:func:`vlm_parts` on Hugging Face LLaVA-family classes; hidden states are captured with forward hooks in one forward
pass, so nothing depends on ``generate`` returning image states (huggingface/transformers#33329).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from iclr25_shared.checks import check_int

if TYPE_CHECKING:
    import torch

__all__ = [
    "VLMParts",
    "capture_hidden_states",
    "image_token_mask",
    "internal_confidence",
    "lens_logits",
    "localization_map",
    "logit_lens",
    "object_token_ids",
    "vlm_parts",
]


@dataclass(frozen=True)
class VLMParts:
    """The pieces of a VLM that the lens and the edit need (found by :func:`vlm_parts`)."""

    layers: Any
    """``torch.nn.ModuleList`` of the language model's decoder layers (``L`` of them)."""
    norm: Any
    """The language model's final norm (applied before the unembedding)."""
    lm_head: Any
    """The unembedding ``W_U``: ``(d,) -> (V,)``."""
    image_token_id: int
    """Token id of the image placeholder in ``input_ids`` (one per image feature after the processor expands it)."""

    @property
    def num_layers(self) -> int:
        """``L``; hidden-state indices run over ``[0, L]``."""
        return len(self.layers)


def _language_model(model: Any) -> Any:
    candidates = []
    inner = getattr(model, "model", None)
    if inner is not None:
        candidates.append(getattr(inner, "language_model", None))
    candidates.append(getattr(model, "language_model", None))
    for cand in candidates:
        if cand is None:
            continue
        # older LLaVA: model.language_model is a *ForCausalLM wrapping .model
        if not hasattr(cand, "layers") and hasattr(getattr(cand, "model", None), "layers"):
            cand = cand.model
        if hasattr(cand, "layers") and hasattr(cand, "norm"):
            return cand
    return None


def vlm_parts(model: Any) -> VLMParts:
    """Find the decoder layers, final norm, unembedding and image-token id of a LLaVA-family model.

    Works on Hugging Face ``LlavaForConditionalGeneration``, ``LlavaNextForConditionalGeneration`` and other
    classes laid out as ``model.model.language_model.{layers, norm}`` + ``model.lm_head`` with
    ``config.image_token_id`` (or the older ``image_token_index``), e.g. ``Qwen2VLForConditionalGeneration``.

    Raises:
        TypeError: the model has no image tokens (no ``image_token_id`` / ``image_token_index`` in its config, e.g.
            a text-only ``LlamaForCausalLM``), or no language model with ``layers`` and ``norm``, or no
            output embeddings.
    """
    config = getattr(model, "config", None)
    token_id = None
    for name in ("image_token_id", "image_token_index"):
        token_id = getattr(config, name, None)
        if token_id is not None:
            break
    cls = type(model).__name__
    if token_id is None:
        raise TypeError(
            f"model class {cls} has no image tokens (its config sets neither image_token_id nor "
            "image_token_index); use a vision-language model such as LlavaForConditionalGeneration"
        )
    lm = _language_model(model)
    if lm is None:
        raise TypeError(
            f"model class {cls}: found no language model with decoder `layers` and a final `norm` at "
            "model.model.language_model or model.language_model; supported: HF LLaVA / LLaVA-NeXT / Qwen2-VL layouts"
        )
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        raise TypeError(
            f"model class {cls} has no output embeddings (lm_head) to project onto the vocabulary"
        )
    return VLMParts(layers=lm.layers, norm=lm.norm, lm_head=head, image_token_id=int(token_id))


def image_token_mask(input_ids: torch.Tensor, image_token_id: int) -> torch.Tensor:
    """Boolean mask of the image-token positions.

    Args:
        input_ids: ``(batch, seq)`` int64, *after* the processor expanded each ``<image>`` to one placeholder per
            image feature (transformers >= 4.48 processors do this).
        image_token_id: the placeholder id (:attr:`VLMParts.image_token_id`; take it from the model config, never
            a constant: huggingface/transformers#29836).

    Returns:
        ``(batch, seq)`` bool.

    Raises:
        ValueError: ``input_ids`` is not 2-D, or holds no image token (the message says how many and which id).
    """
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids must have shape (batch, seq), got {tuple(input_ids.shape)}")
    mask = input_ids == image_token_id
    if not bool(mask.any()):
        raise ValueError(
            f"input_ids hold no image token (image_token_id={image_token_id}); pass the processor's output "
            "for a prompt with an image"
        )
    return mask


def _first(x: Any) -> Any:
    return x[0] if isinstance(x, tuple | list) else x


@contextlib.contextmanager
def capture_hidden_states(parts: VLMParts) -> Iterator[list[torch.Tensor]]:
    """Record ``h_l`` for ``l in [0, L]`` during the next forward pass(es) through forward hooks.

    Yields a list that fills with ``L + 1`` tensors of shape ``(batch, seq, d)`` per forward pass (embeddings,
    then each decoder layer's output). Hooks are removed on exit, also on error.
    """
    store: list[torch.Tensor] = []

    def pre(_module: Any, args: tuple, kwargs: dict) -> None:
        store.append((args[0] if args else kwargs["hidden_states"]).detach())

    def post(_module: Any, _args: Any, output: Any) -> None:
        store.append(_first(output).detach())

    handles = [parts.layers[0].register_forward_pre_hook(pre, with_kwargs=True)]
    handles += [layer.register_forward_hook(post) for layer in parts.layers]
    try:
        yield store
    finally:
        for handle in handles:
            handle.remove()


def lens_logits(parts: VLMParts, hidden: torch.Tensor, *, apply_final_norm: bool = True) -> torch.Tensor:
    """Logit lens: ``W_U norm(h)`` (or ``W_U h`` with ``apply_final_norm=False``).

    Args:
        hidden: ``(..., d)`` hidden states in the model's dtype.

    Returns:
        ``(..., V)`` logits in the model's dtype (the same ops as the model's own head, so at ``l = L`` they equal
        the model's logits).
    """
    x = parts.norm(hidden) if apply_final_norm else hidden
    return parts.lm_head(x)


def _forward_states(model: Any, inputs: Mapping[str, Any], parts: VLMParts) -> tuple[torch.Tensor, Any]:
    import torch

    with torch.no_grad(), capture_hidden_states(parts) as store:
        out = model(**inputs, use_cache=False)
    if len(store) != parts.num_layers + 1:
        raise RuntimeError(f"captured {len(store)} hidden states, expected {parts.num_layers + 1}")
    return torch.stack(store, dim=0), out


def _check_inputs(inputs: Mapping[str, Any], parts: VLMParts) -> torch.Tensor:
    ids = inputs.get("input_ids")
    if ids is None:
        raise ValueError(
            "inputs must contain input_ids (the processor's output), got keys " + str(sorted(inputs))
        )
    mask = image_token_mask(ids, parts.image_token_id)
    if ids.shape[0] != 1:
        raise ValueError(
            f"the logit lens takes one image-prompt pair at a time (batch 1), got batch {ids.shape[0]}"
        )
    return mask[0]


def _check_layers(layers: Sequence[int] | None, num_layers: int) -> list[int]:
    if layers is None:
        return list(range(num_layers + 1))
    out = [check_int("layer", layer, low=0, high=num_layers) for layer in layers]
    if not out:
        raise ValueError(f"layers must name at least one layer index in [0, {num_layers}], got []")
    return out


def logit_lens(
    model: Any,
    inputs: Mapping[str, Any],
    *,
    layers: Sequence[int] | None = None,
    apply_final_norm: bool = True,
) -> torch.Tensor:
    """Vocabulary distributions of the image-token hidden states at every layer (paper Sec. 3.1).

    Args:
        model: a LLaVA-family model (:func:`vlm_parts`), in eval mode.
        inputs: the processor's output for one image and prompt (``input_ids``, ``pixel_values``, ...), batch 1.
        layers: hidden-state indices in ``[0, L]`` (default all ``L + 1``).
        apply_final_norm: apply the LM's final norm before ``W_U`` (default, so that layer ``L`` reproduces the
            model's own next-token distribution); ``False`` applies ``W_U`` to the raw residual stream as the
            official notebooks do.

    Returns:
        ``(layers, n_image, V)`` float32 probabilities. Memory: ``4 * layers * n_image * V`` bytes (LLaVA-1.5-7B,
        all layers: 2.4 GB); use :func:`internal_confidence` for a few words.

    Raises:
        ValueError: no image token in ``input_ids``, batch > 1, a layer outside ``[0, L]``.
        TypeError: the model has no image tokens (:func:`vlm_parts`).
    """
    import torch

    parts = vlm_parts(model)
    mask = _check_inputs(inputs, parts)
    idx = _check_layers(layers, parts.num_layers)
    states, _ = _forward_states(model, inputs, parts)
    with torch.no_grad():
        logits = lens_logits(parts, states[idx][:, 0, mask], apply_final_norm=apply_final_norm)
        return torch.softmax(logits.float(), dim=-1)


def object_token_ids(tokenizer: Any, word: str) -> list[int]:
    """Token ids of an object word, without BOS/EOS (paper Sec. 3.1: ``tokens(o)``).

    A word split into several tokens keeps all of them; :func:`internal_confidence` takes the max over them.

    Raises:
        ValueError: the word is empty, or tokenises to nothing or to the unknown token (message lists the pieces).
    """
    if not isinstance(word, str) or not word.strip():
        raise ValueError(f"object word must be a non-empty string, got {word!r}")
    ids = list(tokenizer(word, add_special_tokens=False)["input_ids"])
    pieces = tokenizer.convert_ids_to_tokens(ids) if ids else []
    unk = getattr(tokenizer, "unk_token_id", None)
    if not ids or (unk is not None and unk in ids):
        raise ValueError(
            f"object word {word!r} is not in the vocabulary: it tokenises to {pieces} (ids {ids}); "
            "use a word the tokenizer knows"
        )
    return ids


def internal_confidence(
    model: Any,
    inputs: Mapping[str, Any],
    token_ids: Sequence[Sequence[int]],
    *,
    layers: Sequence[int] | None = None,
    apply_final_norm: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Internal confidence ``c_o`` of each object and its (layer, image position) map (paper Sec. 3.1).

    ``map[o, l, i] = max_{tok in tokens(o)} softmax(W_U norm(h_{l,i}))[tok]`` and ``c_o = max_{l, i} map[o, l, i]``.
    The softmax runs over the full vocabulary one layer at a time, so memory is ``O(n_image * V)``.

    Args:
        token_ids: per object, its token ids (:func:`object_token_ids`), each in ``[0, V)``.

    Returns:
        ``(c, maps)``: ``c`` ``(objects,)`` float32 in ``[0, 1]``; ``maps`` ``(objects, layers, n_image)`` float32.

    Raises:
        ValueError: an empty object list / token list, a token id outside ``[0, V)``, a bad layer, no image token.
    """
    import torch

    parts = vlm_parts(model)
    mask = _check_inputs(inputs, parts)
    idx = _check_layers(layers, parts.num_layers)
    if len(token_ids) == 0:
        raise ValueError("token_ids must list at least one object")
    vocab = parts.lm_head.weight.shape[0]
    for o, toks in enumerate(token_ids):
        if len(toks) == 0:
            raise ValueError(f"token_ids[{o}] is empty; every object needs at least one token id")
        for t in toks:
            check_int(f"token_ids[{o}]", t, low=0, high=vocab - 1)
    states, _ = _forward_states(model, inputs, parts)
    # the maps stay on the model's device until the end: one device-to-host copy, not one per (layer, object)
    # and the image rows are found once (a boolean index per layer would read the mask back each time)
    rows = mask.nonzero().squeeze(-1).to(states.device)
    maps = torch.empty(len(token_ids), len(idx), rows.numel(), dtype=torch.float32, device=states.device)
    tok_idx = [torch.as_tensor(list(toks), device=states.device) for toks in token_ids]
    with torch.no_grad():
        for j, layer in enumerate(idx):
            probs = torch.softmax(
                lens_logits(parts, states[layer, 0, rows], apply_final_norm=apply_final_norm).float(), -1
            )
            for o, toks in enumerate(tok_idx):
                maps[o, j] = probs[:, toks].amax(dim=-1)
    maps = maps.cpu()
    conf = maps.flatten(1).amax(dim=1)
    return conf, maps


def localization_map(maps: torch.Tensor, grid: tuple[int, int] | None = None) -> torch.Tensor:
    """Spatial map of each object over the image-token grid (paper Sec. 4.2, zero-shot localisation).

    Args:
        maps: ``(objects, layers, n_image)`` from :func:`internal_confidence`.
        grid: ``(rows, cols)`` of the image-token grid in raster order, ``rows * cols = n_image`` (default: square).

    Returns:
        ``(objects, rows, cols)``: the max over layers, reshaped in row-major (raster) order.

    Raises:
        ValueError: ``maps`` not 3-D; ``n_image`` not a square with no ``grid``; ``rows * cols != n_image``.
    """
    if maps.ndim != 3:
        raise ValueError(f"maps must have shape (objects, layers, n_image), got {tuple(maps.shape)}")
    n = maps.shape[2]
    if grid is None:
        side = math.isqrt(n)
        if side * side != n:
            raise ValueError(f"n_image={n} is not a square; pass grid=(rows, cols) with rows * cols = {n}")
        grid = (side, side)
    rows, cols = (check_int("grid rows", grid[0], low=1), check_int("grid cols", grid[1], low=1))
    if rows * cols != n:
        raise ValueError(f"grid {grid} has {rows * cols} cells but maps have n_image={n}")
    return maps.amax(dim=1).reshape(maps.shape[0], rows, cols)
