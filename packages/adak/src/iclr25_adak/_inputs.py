"""The user's files: a Hugging Face MoE folder (``--model``), an allocators.pt (``--allocators``) and a text file
(``--text``). Each problem raises :class:`~iclr25_shared.errors.InputError` naming the option and the file (exit 2
in the CLI), never a transformers / torch traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from iclr25_shared.errors import InputError
from iclr25_shared.inputs import check_file, check_hf_model_folder, read_torch

ALLOCATORS = "allocators.pt written by `train --out`"


def _where(path: Any, label: str | None) -> str:
    return f"{label}: {str(path)!r}" if label else repr(str(path))


def _brief(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def read_allocators(path: str | Path, *, label: str | None = "--allocators") -> dict[str, Any]:
    """The allocator weights ``train --out`` saved (``AdaKPatch.allocator_state_dict``), read with
    ``weights_only=True``; every tensor finite.

    Raises:
        InputError: missing, empty, not a checkpoint, needs unsafe unpickling, NaN/inf entries, or not a dict of
            ``<block>.allocator.<param>`` tensors.
    """
    import torch

    state = read_torch(path, label=label, expected=f"an {ALLOCATORS}")
    if not (
        isinstance(state, dict)
        and state
        and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items())
    ):
        raise InputError(
            f"{_where(path, label)} holds a {type(state).__name__}; expected a dict of allocator tensors "
            f"(the {ALLOCATORS})"
        )
    if not any(".allocator." in k for k in state):
        shown = ", ".join(list(state)[:3])
        raise InputError(
            f"{_where(path, label)} holds no allocator tensors (keys {shown}); expected the {ALLOCATORS}"
        )
    return state


def load_allocators(
    patch: Any, state: dict[str, Any], path: Any, *, label: str | None = "--allocators"
) -> None:
    """``patch.load_allocator_state_dict(state)``; allocators of another model raise :class:`InputError`."""
    try:
        patch.load_allocator_state_dict(state)
    except (RuntimeError, KeyError, ValueError) as exc:
        raise InputError(
            f"{_where(path, label)}: the allocators do not fit this model ({_brief(exc)})"
        ) from None


def read_text(path: str | Path, *, label: str | None = "--text") -> list[str]:
    """Documents of a UTF-8 text file, separated by blank lines (at least 2).

    Raises:
        InputError: missing, empty, not UTF-8, or fewer than 2 documents.
    """
    p = check_file(path, label=label, expected="a UTF-8 text file of documents separated by blank lines")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{_where(path, label)} is not UTF-8 text") from None
    docs = [d.strip() for d in text.split("\n\n") if d.strip()]
    if len(docs) < 2:
        raise InputError(
            f"{_where(path, label)} must hold at least 2 documents separated by blank lines, got {len(docs)}"
        )
    return docs


def check_finite(model: Any, path: Any, *, label: str | None = "--model") -> None:
    """Refuse a model whose weights hold NaN or inf (it would only fail later, deep in sampling or PPO).

    Raises:
        InputError: names the folder, the first non-finite tensor and its count.
    """
    import torch

    for name, tensor in model.named_parameters():
        if tensor.is_floating_point():
            bad = int((~torch.isfinite(tensor)).sum())
            if bad:
                raise InputError(
                    f"{_where(path, label)} holds non-finite weights: {bad} of {tensor.numel()} entries of "
                    f"{name!r} are NaN or inf"
                )


def load_model_folder(
    path: str | Path, *, device: Any = "cpu", label: str | None = "--model"
) -> tuple[Any, Any]:
    """A local Hugging Face MoE folder as ``(model, tokenizer)``: float32, eval mode, on ``device``.

    The folder is checked (config.json and weights), the architecture is built on the meta device (no weights) to
    find its MoE blocks, then the weights are loaded and checked finite.

    Raises:
        InputError: the folder is missing, config-only, holds a config transformers cannot build, no MoE block,
            weights that do not load (truncated, foreign) or are non-finite, or no tokenizer.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from iclr25_adak._routing import find_moe_blocks

    root = check_hf_model_folder(path, label=label)
    where = _where(path, label)
    try:
        config = AutoConfig.from_pretrained(root)
        with torch.device("meta"):  # the architecture check costs no weights
            skeleton = AutoModelForCausalLM.from_config(config)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(
            f"{where} has a config.json transformers cannot build a causal LM from ({_brief(exc)})"
        ) from None
    try:
        find_moe_blocks(skeleton)
    except ValueError as exc:
        raise InputError(f"{where}: {exc}") from None
    try:
        model = AutoModelForCausalLM.from_pretrained(root, dtype=torch.float32)
    except MemoryError:
        raise
    except Exception as exc:  # safetensors, pickle, zip and OS errors of a corrupt or foreign weights file
        raise InputError(
            f"{where} holds weights that do not load ({type(exc).__name__}: {_brief(exc)})"
        ) from None
    check_finite(model, path, label=label)
    try:
        tokenizer = AutoTokenizer.from_pretrained(root)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{where} has no tokenizer transformers can load ({_brief(exc)})") from None
    return model.to(device).eval(), tokenizer
