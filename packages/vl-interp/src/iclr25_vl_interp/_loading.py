"""What ``lens`` and ``edit`` share: loading a local HF LLaVA-family model folder and its inputs for one image (or the
tiny random smoke model) and the object words' token ids."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from iclr25_shared.cli import RunContext
from iclr25_vl_interp._lens import object_token_ids

if TYPE_CHECKING:
    from iclr25_vl_interp.cli import LensConfig

__all__ = ["dtype_name", "load_local_vlm", "load_model", "word_ids"]


def load_local_vlm(
    model_dir: Path, image: Path, prompt: str, device: Any, dtype: str = "auto"
) -> tuple[Any, Any, dict[str, Any]]:
    """Load a local HF image-text-to-text model and its processor (no hub) and build inputs for one image.

    The weights load in ``dtype`` (``"auto"``: the checkpoint's own) directly onto ``device`` (see
    :func:`iclr25_vl_interp._inputs.load_hf_folder`). Returns ``(model, tokenizer, inputs)``; the inputs' floating
    tensors (``pixel_values``) are in the model's dtype. The prompt goes through the processor's chat template when
    it has one, else ``"<image>\\n" + prompt``.

    Raises:
        InputError: the image is missing or not an image; the folder is not a loadable model and processor (the
            message names ``--image`` / ``--model`` and the path).
    """
    import torch

    from iclr25_shared.inputs import read_image
    from iclr25_vl_interp._inputs import load_hf_folder

    img = read_image(image, label="--image")  # the image first: it is checked before any weights load
    processor, model = load_hf_folder(model_dir, label="--model", dtype=dtype, device=device)
    if getattr(processor, "chat_template", None):
        conv = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        text = processor.apply_chat_template(conv, add_generation_prompt=True)
    else:
        text = f"{getattr(processor, 'image_token', '<image>')}\n{prompt}"
    inputs = processor(images=img, text=text, return_tensors="pt")
    inputs = {
        k: (
            v.to(device, dtype=model.dtype if v.is_floating_point() else v.dtype)
            if isinstance(v, torch.Tensor)
            else v
        )
        for k, v in inputs.items()
    }
    return model, processor.tokenizer, inputs


def load_model(cfg: LensConfig, ctx: RunContext) -> tuple[Any, Any, dict[str, Any], str]:
    """``(model, tokenizer, inputs, label)`` for lens and edit: the ``--model`` folder on ``--image``, or without
    ``--model`` the tiny random-weight LLaVA on a random image (a smoke test)."""
    from iclr25_vl_interp._tiny import tiny_llava, tiny_prompt, tiny_tokenizer

    if cfg.model is None:  # the config refused --image without --model
        import torch

        ctx.log.info("no --model: tiny random-weight LLaVA (smoke test; numbers are meaningless)")
        tok = tiny_tokenizer()
        device = ctx.torch_device()
        dtype = None if cfg.dtype == "auto" else getattr(torch, cfg.dtype)
        model = tiny_llava(seed=cfg.seed, dtype=dtype).to(device)
        inputs = tiny_prompt(tok, cfg.prompt, seed=cfg.seed)
        inputs = {
            k: v.to(device, dtype=model.dtype if v.is_floating_point() else v.dtype)
            for k, v in inputs.items()
        }
        return model, tok, inputs, "tiny random LLaVA"
    model, tok, inputs = load_local_vlm(cfg.model, cfg.image, cfg.prompt, ctx.torch_device(), cfg.dtype)
    return model, tok, inputs, str(cfg.model)


def dtype_name(model: Any) -> str:
    """The model's dtype as results.json reports it (``float32``, ``bfloat16`` ...)."""
    return str(model.dtype).removeprefix("torch.")


def word_ids(tok: Any, objects: tuple[str, ...]) -> list[list[int]]:
    """The token ids of every ``--objects`` word (a word the tokenizer does not know is the user's input error)."""
    from iclr25_shared.inputs import validating

    with validating("--objects"):  # a word the loaded tokenizer does not know is the user's input
        return [object_token_ids(tok, w) for w in objects]
