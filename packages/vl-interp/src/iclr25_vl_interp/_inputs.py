"""The user's files: a ``--model`` folder (loaded in ``--dtype`` on the run's device) and a ``--data-root`` folder
of Fashion-MNIST (read by :func:`iclr25_shared.data.fashion_mnist`, checked by the core's
:func:`iclr25_shared.inputs.check_fashion_mnist_folder`).

Problems with the user's files raise :class:`~iclr25_shared.errors.InputError` naming the option and the file
(exit 2 in the CLI); the CLI runs the same checks before the command is imported (``INPUTS`` in cli.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from iclr25_shared.errors import InputError


def _where(path: Any, label: str | None) -> str:
    return f"{label}: {str(path)!r}" if label else repr(str(path))


def _brief(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def fashion_images(split: str, data_root: Any, *, label: str = "--data-root") -> tuple[Any, Any]:
    """``iclr25_shared.data.fashion_mnist(split, root=data_root, label=label)``: with a user's folder only that
    folder is read, and a folder without the split's files, or with truncated or foreign ones, raises
    :class:`InputError` naming ``label`` and the folder."""
    from iclr25_shared.data import fashion_mnist

    if data_root is None:
        return fashion_mnist(split)
    return fashion_mnist(split, root=Path(data_root), label=label)


DTYPES = ("auto", "float32", "bfloat16", "float16")
"""``--dtype`` values: ``auto`` loads the checkpoint's own dtype (its config.json's ``dtype``/``torch_dtype``)."""


def _can_place_while_loading() -> bool:
    """Whether ``from_pretrained`` can put the weights on a device while loading (``device_map`` needs accelerate)."""
    import importlib.util

    return importlib.util.find_spec("accelerate") is not None


def load_hf_folder(
    model_dir: Any, *, label: str | None = "--model", dtype: str = "auto", device: Any = None
) -> tuple[Any, Any]:
    """``(processor, model)`` of a local Hugging Face image-text-to-text folder (``local_files_only``).

    Args:
        model_dir: the folder (config.json, weights, processor files).
        label: the option that named it, for messages.
        dtype: ``"auto"`` (the checkpoint's own dtype, as saved in its config.json; float32 when it names none) or
            ``"float32"``, ``"bfloat16"``, ``"float16"``. Never transformers' release-dependent default (float32 on
            4.x, which doubles the memory of a float16 7B checkpoint to about 28 GB).
        device: where the weights go. They are loaded there directly (``device_map``) when ``accelerate`` is
            installed, else loaded on the CPU and moved. ``None``: the CPU.

    Returns:
        ``(processor, model)``, the model in eval mode.

    Raises:
        InputError: not a folder with config.json and weights, or a processor / model that does not load
            (no processor files, a corrupt weights file, an architecture transformers does not know).
        ValueError: ``dtype`` is not one of :data:`DTYPES`.
    """
    import torch
    import transformers

    from iclr25_shared.checks import check_choice
    from iclr25_shared.inputs import check_hf_model_folder

    check_choice("dtype", dtype, DTYPES)
    root = check_hf_model_folder(model_dir, label=label)
    where = _where(model_dir, label)
    try:
        processor = transformers.AutoProcessor.from_pretrained(str(root), local_files_only=True)
    except MemoryError:
        raise
    except Exception as exc:  # OSError, ValueError, KeyError, TypeError of missing or foreign processor files
        raise InputError(
            f"{where} has no processor transformers can load ({type(exc).__name__}: {_brief(exc)})"
        ) from None
    if not hasattr(processor, "tokenizer") or not hasattr(processor, "image_processor"):
        raise InputError(f"{where} has a {type(processor).__name__}; expected an image-text processor")
    kwargs: dict[str, Any] = {"dtype": dtype if dtype == "auto" else getattr(torch, dtype)}
    direct = device is not None and _can_place_while_loading()
    if direct:
        kwargs["device_map"] = {"": torch.device(device)}
    try:
        model = transformers.AutoModelForImageTextToText.from_pretrained(
            str(root), local_files_only=True, **kwargs
        )
    except MemoryError:
        raise
    except Exception as exc:  # safetensors / pickle / OS errors of a corrupt or foreign weights file
        raise InputError(
            f"{where} holds a model that does not load ({type(exc).__name__}: {_brief(exc)})"
        ) from None
    if device is not None and not direct:
        model = model.to(device)  # without accelerate transformers cannot place weights while loading
    return processor, model.eval()
