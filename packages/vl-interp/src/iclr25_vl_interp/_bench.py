"""``bench``: per-forward overhead of the logit lens and of the ProjectAway hook, as ratios to a plain forward pass
on random-weight LLaVA models."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from iclr25_shared.cli import Result, RunContext
from iclr25_vl_interp._lens import internal_confidence, vlm_parts

if TYPE_CHECKING:
    from iclr25_vl_interp.cli import BenchConfig

__all__ = ["bench"]

_BENCH_SPECS = {
    "tiny": {"layers": 3, "hidden": 32, "vocab": 64, "image_size": 16},
    "small": {"layers": 8, "hidden": 256, "vocab": 8192, "image_size": 48},
}


def _bench_model(size: str, seed: int, device: Any) -> tuple[Any, dict[str, Any], Any]:
    """The random-weight LLaVA of ``size``, a random prompt around its image tokens and image, and the generator
    (seeded with ``seed``) that drew them."""
    import torch

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
    return model, x, g


def _bench_arms(
    model: Any, x: dict[str, Any], direction: Any
) -> tuple[dict[str, Callable[[], Any]], dict[str, Callable[[], None]], Callable[[], None]]:
    """The timed arms, each arm's setup (installs or removes the ProjectAway hook) and the final uninstall."""
    import torch

    from iclr25_vl_interp._edit import ProjectAway
    from iclr25_vl_interp._lens import capture_hidden_states, logit_lens

    parts = vlm_parts(model)

    def plain() -> None:
        with torch.no_grad():
            model(**x, use_cache=False)

    def capture() -> None:
        with capture_hidden_states(parts):
            plain()

    # The hook stays installed across its arm's call (installed by its setup, removed by every other arm's setup),
    # so the hook arm times a forward with ProjectAway in place, not the install.
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
    return arms, setup, uninstall


def _overhead_rows(run: Any, size: str) -> list[dict[str, Any]]:
    """One row per arm of ``run``: its median time and its ratio (95 % interval) to the plain forward."""
    spec = _BENCH_SPECS[size]
    n_img = (spec["image_size"] // 4) ** 2
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
    return rows


def _bench_size(
    size: str, seed: int, repeats: int, device: Any, progress: Any = None, threads: int | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The overhead rows and the raw interleaved timings of one model size."""
    import torch

    from iclr25_shared.bench import interleaved

    model, x, g = _bench_model(size, seed, device)
    direction = torch.randn(_BENCH_SPECS[size]["hidden"], generator=g).to(device)
    arms, setup, uninstall = _bench_arms(model, x, direction)
    run = interleaved(
        arms, repeats=repeats, warmup=2, device=device, setup=setup, progress=progress, threads=threads
    )
    uninstall()
    return _overhead_rows(run, size), run.as_dict()


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
