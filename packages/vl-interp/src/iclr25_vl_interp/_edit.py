"""ProjectAway: remove an object's text direction from the image-token hidden states (arXiv:2410.02762, Sec. 5.1).

For each image-token hidden state ``h`` at layer ``l_I`` and the text direction ``t`` of an object (the hidden state of
the object word's last token at layer ``l_T``)::

    h' = h - alpha * <h, t> / ||t||^2 * t

Rows of text tokens are never touched. With ``only_positive=True`` (the official implementation's
``subtract_projection``) rows with ``<h, t> <= 0`` are left as they are. Several objects are removed one after the
other, in the order given (the result depends on the order unless the directions are orthogonal).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from iclr25_shared.checks import check_float, check_int
from iclr25_vl_interp._lens import _forward_states, vlm_parts

if TYPE_CHECKING:
    import torch

__all__ = ["ProjectAway", "project_away", "text_direction"]


def project_away(
    hidden: torch.Tensor, direction: torch.Tensor, *, alpha: float = 1.0, only_positive: bool = True
) -> torch.Tensor:
    """``h' = h - alpha <h, t>/||t||^2 t`` for every row (paper Sec. 5.1, ProjectAway).

    Args:
        hidden: ``(..., d)`` float tensor (any float dtype; computed in float32, or float64 for float64 input; returned in ``hidden.dtype``).
        direction: ``(d,)`` nonzero, finite.
        alpha: edit strength (``alpha = 1``: rows become orthogonal to ``t``), finite, ``>= 0``.
        only_positive: leave rows with ``<h, t> <= 0`` unchanged (bit for bit), as the official code does.

    Returns:
        ``(..., d)`` tensor; ``<h', t> = (1 - alpha) <h, t>`` on edited rows, the part orthogonal to ``t`` unchanged.

    Raises:
        ValueError: shape mismatch, zero or non-finite ``direction``, bad ``alpha``.
    """
    import torch

    alpha = check_float("alpha", alpha, low=0.0)
    if direction.ndim != 1 or hidden.shape[-1] != direction.shape[0]:
        raise ValueError(
            f"direction must have shape (d,) with d = hidden.shape[-1] = {hidden.shape[-1]}, "
            f"got {tuple(direction.shape)}"
        )
    work = torch.promote_types(hidden.dtype, torch.float32)
    t = direction.detach().to(device=hidden.device, dtype=work)
    if not bool(torch.isfinite(t).all()):
        raise ValueError("direction holds NaN or inf")
    norm2 = torch.dot(t, t)
    if float(norm2) == 0.0:
        raise ValueError("direction is the zero vector; ProjectAway needs a nonzero text direction")
    h = hidden.to(work)
    coef = (h @ t) / norm2
    edited = (h - alpha * coef.unsqueeze(-1) * t).to(hidden.dtype)
    if only_positive:
        return torch.where((coef > 0).unsqueeze(-1), edited, hidden)
    return edited


def text_direction(model: Any, input_ids: torch.Tensor, *, layer: int) -> torch.Tensor:
    """Text direction ``t``: the hidden state at layer ``layer`` of the last token of a text-only prompt.

    The prompt is the object word with BOS (e.g. ``tokenizer(word, return_tensors="pt").input_ids``), run through the
    model without an image (paper Sec. 5.1; official code: last token of the word, layer ``l_T``).

    Args:
        input_ids: ``(1, seq)`` int64 with no image token.
        layer: hidden-state index in ``[0, L]`` (0 = input embeddings).

    Returns:
        ``(d,)`` tensor in the model's dtype.

    Raises:
        ValueError: ``input_ids`` not ``(1, seq)``, holds an image token, or ``layer`` outside ``[0, L]``.
    """
    parts = vlm_parts(model)
    layer = check_int("layer", layer, low=0, high=parts.num_layers)
    if input_ids.ndim != 2 or input_ids.shape[0] != 1 or input_ids.shape[1] == 0:
        raise ValueError(f"input_ids must have shape (1, seq) with seq >= 1, got {tuple(input_ids.shape)}")
    if bool((input_ids == parts.image_token_id).any()):
        raise ValueError("input_ids for a text direction must not contain the image token")
    states, _ = _forward_states(model, {"input_ids": input_ids}, parts)
    return states[layer, 0, -1].clone()


SAVE_REFUSAL = (
    "ProjectAway is installed on this model, and save_pretrained would save the unedited model (the edit is a "
    "forward hook, not a weight): call remove() (or leave the `with` block) first, save the base model, and apply "
    "ProjectAway again after loading it"
)

_ACTIVE: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
"""model → {"hooks": ids of the ProjectAway hooks installed on it, "previous": its own instance save_pretrained}."""
_NONE = object()


def _refuse_save(*_args: Any, **_kwargs: Any) -> None:
    raise RuntimeError(SAVE_REFUSAL)


def _guard_save(model: Any, hook: ProjectAway) -> None:
    """While a hook is installed, ``model.save_pretrained`` (and ``push_to_hub``, which calls it) raises."""
    if not hasattr(model, "save_pretrained"):
        return
    state = _ACTIVE.get(model)
    if state is None:
        state = {"hooks": set(), "previous": model.__dict__.get("save_pretrained", _NONE)}
        _ACTIVE[model] = state
        model.save_pretrained = _refuse_save
    state["hooks"].add(id(hook))


def _release_save(model: Any, hook: ProjectAway) -> None:
    state = _ACTIVE.get(model)
    if state is None:
        return
    state["hooks"].discard(id(hook))
    if state["hooks"]:
        return
    del _ACTIVE[model]
    if model.__dict__.get("save_pretrained") is _refuse_save:
        if state["previous"] is _NONE:
            del model.__dict__["save_pretrained"]
        else:
            model.__dict__["save_pretrained"] = state["previous"]


class ProjectAway:
    """ProjectAway as a removable forward hook (paper Sec. 5.1).

    Edits the hidden state with index ``layer`` (``1..L``: the output of decoder layer ``layer - 1``, i.e. the input
    of the next layer; the official code hooks decoder layer ``l_I`` = our ``layer = l_I + 1``) on the image-token
    rows of the prompt pass only. Decoding steps carry the edit through the KV cache and are not edited themselves
    (their ``input_ids`` hold no image token). The image rows are read from the ``input_ids`` of each forward call
    through a pre-hook on the model, so the image span may sit anywhere in a long prompt.

    While it is installed, ``model.save_pretrained`` raises ``RuntimeError`` (:data:`SAVE_REFUSAL`): the edit is
    a hook, not a weight, so the saved folder would load as the unedited model. Save the base model after
    :meth:`remove` and apply ProjectAway again after loading.

    Use as a context manager or call :meth:`remove`; removing restores the model's outputs bit for bit (and its
    ``save_pretrained``)::

        with ProjectAway(model, [t_cat], layer=20, alpha=1.5):
            out = model.generate(**inputs)

    Args:
        model: a LLaVA-family model (:func:`vlm_parts`).
        directions: one ``(d,)`` text direction per object to remove, applied in this order.
        layer: hidden-state index in ``[1, L]``.
        alpha: edit strength ``>= 0``.
        only_positive: see :func:`project_away`.

    Raises:
        TypeError: the model has no image tokens.
        ValueError: ``layer`` outside ``[1, L]``; no directions; a direction of the wrong size or zero.
        RuntimeError: (during the forward pass) the model was called with ``inputs_embeds`` instead of ``input_ids``.
    """

    def __init__(
        self,
        model: Any,
        directions: Sequence[torch.Tensor],
        *,
        layer: int,
        alpha: float = 1.0,
        only_positive: bool = True,
    ) -> None:
        import torch

        parts = vlm_parts(model)
        self.layer = check_int("layer", layer, low=1, high=parts.num_layers)
        self.alpha = check_float("alpha", alpha, low=0.0)
        self.only_positive = bool(only_positive)
        if len(directions) == 0:
            raise ValueError("directions must hold at least one (d,) text direction")
        d = parts.lm_head.weight.shape[1]
        dirs = []
        for k, t in enumerate(directions):
            t = torch.as_tensor(t)
            if t.shape != (d,):
                raise ValueError(f"directions[{k}] must have shape ({d},), got {tuple(t.shape)}")
            if not bool(torch.isfinite(t).all()) or float(t.float().norm()) == 0.0:
                raise ValueError(f"directions[{k}] must be finite and nonzero")
            dirs.append(t.detach().clone())
        self.directions = dirs
        self._image_token_id = parts.image_token_id
        self._mask: torch.Tensor | None = None
        self._on: dict[tuple[Any, Any], list[tuple[torch.Tensor, torch.Tensor]]] = {}
        self._edited: Any = 0  # a device tensor once a forward ran: read back only when edited_rows is read
        self._handles = [
            model.register_forward_pre_hook(self._grab_ids, with_kwargs=True),
            parts.layers[self.layer - 1].register_forward_hook(self._edit),
        ]
        self._model = weakref.ref(model)
        _guard_save(model, self)

    def _grab_ids(self, _module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            raise RuntimeError(
                "ProjectAway needs input_ids to find the image rows; the model got inputs_embeds"
            )
        self._mask = ids == self._image_token_id

    @property
    def edited_rows(self) -> int:
        """Image rows this hook changed so far, summed over forward calls (a row the positive-only rule leaves as
        it was is not counted)."""
        return int(self._edited)

    def _directions_on(self, device: Any, dtype: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The directions and their squared norms in the working dtype on ``device``, made once per device: the
        hook then copies nothing from the host and reads nothing back (no synchronisation per forward on CUDA)."""
        import torch

        work = torch.promote_types(dtype, torch.float32)
        key = (device, work)
        if key not in self._on:
            self._on[key] = [
                (t, torch.dot(t, t))
                for t in (d.detach().to(device=device, dtype=work) for d in self.directions)
            ]
        return self._on[key]

    def _edit(self, _module: Any, _args: Any, output: Any) -> Any:
        import torch

        hidden = output[0] if isinstance(output, tuple | list) else output
        mask = self._mask
        if mask is None or mask.shape != hidden.shape[:2]:
            return None  # no ids seen: untouched
        # every row is projected and the image rows are selected with torch.where (no boolean index, no host read of
        # the mask): a decode step (no image token) returns its hidden state bit for bit
        work = torch.promote_types(hidden.dtype, torch.float32)
        rows = hidden
        for t, norm2 in self._directions_on(hidden.device, hidden.dtype):
            h = rows.to(work)
            coef = (h @ t) / norm2
            edited = (h - self.alpha * coef.unsqueeze(-1) * t).to(hidden.dtype)
            rows = torch.where((coef > 0).unsqueeze(-1), edited, rows) if self.only_positive else edited
        new = torch.where(mask.unsqueeze(-1), rows, hidden)
        # rows the positive-only rule (or alpha = 0) leaves as they are are not counted
        self._edited = self._edited + (new != hidden).any(dim=-1).sum()
        if isinstance(output, tuple):
            return (new, *output[1:])
        if isinstance(output, list):
            return [new, *output[1:]]
        return new

    def remove(self) -> None:
        """Remove both hooks and the save guard (idempotent)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        model = self._model()
        if model is not None:
            _release_save(model, self)

    def __enter__(self) -> ProjectAway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()
