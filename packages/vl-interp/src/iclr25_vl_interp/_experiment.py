"""What the CLI runs: ``lens`` and ``edit`` on a local HF LLaVA-family model (or the tiny random smoke model) and
``bench`` (overhead ratios against a plain forward pass); ``reproduce`` is in :mod:`iclr25_vl_interp._reproduce`."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iclr25_shared.cli import Result, RunContext, UsageError
from iclr25_vl_interp._lens import internal_confidence, localization_map, object_token_ids, vlm_parts

if TYPE_CHECKING:
    from iclr25_vl_interp.cli import BenchConfig, EditConfig, LensConfig

__all__ = ["bench", "edit", "lens", "load_local_vlm"]


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


def _load(cfg: LensConfig, ctx: RunContext) -> tuple[Any, Any, dict[str, Any], str]:
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


def _dtype(model: Any) -> str:
    return str(model.dtype).removeprefix("torch.")


def _words(tok: Any, objects: tuple[str, ...]) -> list[list[int]]:
    from iclr25_shared.inputs import validating

    with validating("--objects"):  # a word the loaded tokenizer does not know is the user's input
        return [object_token_ids(tok, w) for w in objects]


def _rows(objects, token_ids, tok, conf, maps) -> tuple[list[dict[str, Any]], Any]:
    try:
        grid = localization_map(maps)
    except ValueError:
        grid = None
    rows = []
    for o, word in enumerate(objects):
        flat = int(maps[o].argmax())
        layer, pos = divmod(flat, maps.shape[2])
        row = {
            "object": word,
            "tokens": " ".join(tok.convert_ids_to_tokens(token_ids[o])),
            "c_o": round(float(conf[o]), 6),
            "best_layer": layer,
            "best_image_token": pos,
        }
        if grid is not None:
            row["best_cell_rc"] = f"{pos // grid.shape[2]},{pos % grid.shape[2]}"
        rows.append(row)
    return rows, grid


def _save_maps(ctx: RunContext, name: str, objects: tuple[str, ...], maps: Any, grid: Any) -> None:
    ctx.save_array(f"{name}_layer_position", maps.numpy())
    if grid is None:
        return
    ctx.save_array(f"{name}_grid", grid.numpy())
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, len(objects), figsize=(3 * len(objects), 3), squeeze=False)
    for ax, word, m in zip(axes[0], objects, grid.numpy(), strict=True):
        im = ax.imshow(m, cmap="viridis")
        ax.set_title(word)
        ax.set_xticks([])
        ax.set_yticks([])
        fig.colorbar(im, ax=ax, fraction=0.046)
    ctx.save_figure(f"{name}.png", fig)


def lens(cfg: LensConfig, ctx: RunContext) -> Result:
    """Internal confidence of each object word, its best layer and image token, and its map over the grid."""
    model, tok, inputs, label = _load(cfg, ctx)
    token_ids = _words(tok, cfg.objects)
    t0 = time.perf_counter()
    conf, maps = internal_confidence(model, inputs, token_ids, apply_final_norm=cfg.final_norm)
    rows, grid = _rows(cfg.objects, token_ids, tok, conf, maps)
    _save_maps(ctx, "maps", cfg.objects, maps, grid)
    return Result(
        metrics={
            "model": label,
            "dtype": _dtype(model),
            "layers": int(maps.shape[1]),
            "image_tokens": int(maps.shape[2]),
        },
        tables={"internal_confidence": rows},
        timings={"lens": time.perf_counter() - t0},
        notes=[
            "c_o = max over layers and image tokens of the logit-lens probability of the word (arXiv:2410.02762)"
        ],
    )


def _mentions(text: str, word: str) -> int:
    return len(re.findall(r"\b" + re.escape(word.lower()) + r"(?:e?s)?\b", text.lower()))


def edit(cfg: EditConfig, ctx: RunContext) -> Result:
    """ProjectAway on the objects: captions and internal confidence before and after the edit."""
    import torch

    from iclr25_vl_interp._edit import ProjectAway, text_direction

    model, tok, inputs, label = _load(cfg, ctx)
    parts = vlm_parts(model)
    L = parts.num_layers
    if cfg.image_layer > L:
        raise UsageError(f"image_layer must be an integer in [1, {L}] for this model, got {cfg.image_layer}")
    if cfg.text_layer > L:
        raise UsageError(f"text_layer must be an integer in [0, {L}] for this model, got {cfg.text_layer}")
    token_ids = _words(tok, cfg.objects)
    bos = getattr(tok, "bos_token_id", None)
    device = inputs["input_ids"].device
    dirs = []
    for ids in token_ids:
        prompt = ([bos] if bos is not None else []) + list(ids)
        dirs.append(text_direction(model, torch.tensor([prompt], device=device), layer=cfg.text_layer))

    def caption() -> str:
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=cfg.max_new_tokens, do_sample=False)
        return tok.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)

    t0 = time.perf_counter()
    conf0, _ = internal_confidence(model, inputs, token_ids)
    cap0 = caption()
    with ProjectAway(model, dirs, layer=cfg.image_layer, alpha=cfg.alpha) as hook:
        conf1, _ = internal_confidence(model, inputs, token_ids)
        cap1 = caption()
        edited = hook.edited_rows
    rows = [
        {
            "object": w,
            "c_o_before": round(float(conf0[o]), 6),
            "c_o_after": round(float(conf1[o]), 6),
            "mentions_before": _mentions(cap0, w),
            "mentions_after": _mentions(cap1, w),
        }
        for o, w in enumerate(cfg.objects)
    ]
    return Result(
        metrics={
            "model": label,
            "dtype": _dtype(model),
            "caption_before": cap0,
            "caption_after": cap1,
            "edited_image_rows_lens_and_prefill": edited,
        },
        tables={"project_away": rows},
        timings={"edit": time.perf_counter() - t0},
        notes=[
            f"ProjectAway l_I={cfg.image_layer}, l_T={cfg.text_layer}, alpha={cfg.alpha} (arXiv:2410.02762 Sec. 5.1)"
        ],
    )


_BENCH_SPECS = {
    "tiny": {"layers": 3, "hidden": 32, "vocab": 64, "image_size": 16},
    "small": {"layers": 8, "hidden": 256, "vocab": 8192, "image_size": 48},
}


def _bench_size(
    size: str, seed: int, repeats: int, device: Any, progress: Any = None, threads: int | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    import torch

    from iclr25_shared.bench import interleaved
    from iclr25_vl_interp._edit import ProjectAway
    from iclr25_vl_interp._lens import capture_hidden_states, logit_lens
    from iclr25_vl_interp._tiny import IMAGE_TOKEN, tiny_llava

    spec = _BENCH_SPECS[size]
    model = tiny_llava(
        seed=seed,
        layers=spec["layers"],
        hidden=spec["hidden"],
        vocab=spec["vocab"],
        image_size=spec["image_size"],
    ).to(device)
    n_img = (spec["image_size"] // 4) ** 2
    g = torch.Generator().manual_seed(seed)
    ids = torch.cat(
        [
            torch.tensor([1]),
            torch.randint(10, spec["vocab"], (8,), generator=g),
            torch.full((n_img,), IMAGE_TOKEN),
            torch.randint(10, spec["vocab"], (16,), generator=g),
        ]
    ).unsqueeze(0)
    pixels = torch.randn(1, 3, spec["image_size"], spec["image_size"], generator=g)
    x = {
        "input_ids": ids.to(device),
        "pixel_values": pixels.to(device),
        "attention_mask": torch.ones_like(ids).to(device),
    }
    parts = vlm_parts(model)

    def plain() -> None:
        with torch.no_grad():
            model(**x, use_cache=False)

    def capture() -> None:
        with capture_hidden_states(parts):
            plain()

    # The hook stays installed across its arm's call (installed by its setup, removed by every other arm's setup),
    # so the hook arm times a forward with ProjectAway in place, not the install.
    direction = torch.randn(spec["hidden"], generator=g).to(device)
    hook: list[Any] = []

    def install() -> None:
        if not hook:
            hook.append(ProjectAway(model, [direction], layer=2, alpha=1.0))

    def uninstall() -> None:
        while hook:
            hook.pop().remove()

    arms = {
        "plain_forward": plain,
        "project_away_hook": plain,
        "capture_all_layers": capture,
        "internal_confidence_2_words": lambda: internal_confidence(model, x, [[10], [11, 12]]),
        "logit_lens_full_vocab": lambda: logit_lens(model, x),
    }
    setup = {name: (install if name == "project_away_hook" else uninstall) for name in arms}
    run = interleaved(
        arms, repeats=repeats, warmup=2, device=device, setup=setup, progress=progress, threads=threads
    )
    uninstall()
    held = "the same model, weights, prompt and image; one forward pass each (the lens arms add their projections)"
    rows = []
    for row in run.rows("plain_forward", held_equal=held):
        est = run.ratio(row["arm"], "plain_forward")
        rows.append(
            {
                "size": size,
                "layers": spec["layers"],
                "d": spec["hidden"],
                "vocab": spec["vocab"],
                "image_tokens": n_img,
                "what": row["arm"],
                "median_ms": 1e3 * row["median_s"],
                "ratio_to_plain": est.value,
                "ratio_interval": f"[{est.low:.3g}, {est.high:.3g}]",
                "rounds": row["rounds"],
                "held_equal": held,
            }
        )
    return rows, run.as_dict()


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Median time of a plain forward, the forward with the ProjectAway hook, the hidden-state capture, and the full
    logit lens / internal confidence (2 words), as ratios to the plain forward, on random-weight LLaVA models."""
    device = ctx.torch_device()
    rows, raw = [], {}
    for size in cfg.sizes:
        size_rows, raw[size] = _bench_size(
            size, cfg.seed, cfg.repeats, device, ctx.progress, ctx.threads or None
        )
        rows += size_rows
    return Result(
        tables={"overhead": rows},
        metrics={"bench": raw},
        notes=[
            f"iclr25_shared.bench.interleaved: {cfg.repeats} rounds after 2 warm-up calls per arm, arms rotated each "
            f"round; ratio = median of per-round ratios to the plain forward, 95 % bootstrap interval over rounds; "
            f"device {device}, threads {ctx.threads}"
        ],
    )
