"""Linear-time inference for a Llama-family model converted to Mamba: the recurrent form, token by token.

Each decoder layer keeps a constant-size :class:`~iclr25_cald._mixers.MambaState` instead of a key/value cache
that grows with the sequence, so every new token costs the same whatever the context length (Gu & Dao 2023,
Section 3.4 "recurrent mode"; CALD, arXiv:2410.06846, Section 1: linear-complexity inference).
"""

from __future__ import annotations

from typing import Any

import torch

from iclr25_cald._convert import LlamaMambaMixer
from iclr25_cald._mixers import MambaState
from iclr25_shared.checks import check_int

__all__ = ["RecurrentDecoder", "generate"]


class RecurrentDecoder:
    """Run a converted ``LlamaForCausalLM`` (Mamba mixers) one token at a time with O(1) state per layer.

    ``step((batch,) int64 token ids) -> (batch, vocab)`` logits of the next token; the same logits as the full
    parallel forward at that position.

    Raises:
        ValueError: the model is not a Llama-family causal LM whose every ``self_attn`` is a Mamba mixer.
    """

    def __init__(self, model: Any, batch: int = 1) -> None:
        inner = getattr(model, "model", None)
        layers = getattr(inner, "layers", None)
        if layers is None or not hasattr(model, "lm_head"):
            raise ValueError(
                f"{type(model).__name__} is not a Llama-family causal LM (model.model.layers, lm_head)"
            )
        if not all(isinstance(layer.self_attn, LlamaMambaMixer) for layer in layers):
            raise ValueError("every layer must be converted with mixer='mamba' for recurrent generation")
        check_int("batch", batch, low=1)
        self.model, self.inner, self.layers = model, inner, list(layers)
        p = next(model.parameters())
        self.states: list[MambaState] = [
            layer.self_attn.mamba.empty_state(batch, device=p.device, dtype=p.dtype) for layer in self.layers
        ]

    @torch.no_grad()
    def step(self, token: torch.Tensor) -> torch.Tensor:
        """Feed ``(batch,)`` token ids; return ``(batch, vocab)`` next-token logits."""
        h = self.inner.embed_tokens(token)
        for i, layer in enumerate(self.layers):
            y, self.states[i] = layer.self_attn.mamba.step(layer.input_layernorm(h), self.states[i])
            h = h + y
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.model.lm_head(self.inner.norm(h))


@torch.no_grad()
def generate(
    model: Any, input_ids: torch.Tensor, max_new_tokens: int, *, eos_token_id: int | None = None
) -> Any:
    """Greedy decoding with the recurrent Mamba state: time per token independent of the context length.

    Args:
        model: a ``LlamaForCausalLM`` converted with ``mixer="mamba"``.
        input_ids: ``(batch, prompt)`` int64 prompt (no padding), ``prompt >= 1``.
        max_new_tokens: tokens to append (>= 0).
        eos_token_id: stop a sequence after it emits this id (it keeps emitting it).

    Returns:
        ``(batch, prompt + max_new_tokens)`` int64 ids.
    """
    check_int("max_new_tokens", max_new_tokens, low=0)
    if input_ids.dim() != 2 or input_ids.shape[1] < 1:
        raise ValueError(
            f"input_ids must have shape (batch, prompt) with prompt >= 1, got {tuple(input_ids.shape)}"
        )
    dec = RecurrentDecoder(model, batch=input_ids.shape[0])
    logits = None
    for t in range(input_ids.shape[1]):
        logits = dec.step(input_ids[:, t])
    out = [input_ids]
    done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
    for _ in range(max_new_tokens):
        nxt = logits.argmax(-1)
        if eos_token_id is not None:
            nxt = torch.where(done, torch.full_like(nxt, eos_token_id), nxt)
            done |= nxt == eos_token_id
        out.append(nxt[:, None])
        logits = dec.step(nxt)
    return torch.cat(out, dim=1)
