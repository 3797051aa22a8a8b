"""What the CLI runs: generation, the (k, δ) sweep on Fashion-MNIST VQ tokens, the SmolLM2 text row, the bench."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_lantern.cli import GENERATE_CODEBOOK
from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_lantern.cli import BenchConfig, GenerateConfig, ReproduceConfig


def _check_k(k: int, vocab: int, where: str = "") -> None:
    """k against the V of models read from the user's --models folder (an InputError: exit 2)."""
    if k > vocab - 1:
        from iclr25_shared.errors import InputError

        raise InputError(f"--k: k must be an integer in [0, V - 1 = {vocab - 1}]{where}, got {k}")


@dataclass(frozen=True)
class Size:
    n_train: int
    vq_steps: int
    target: tuple[int, int, int]  # dim, layers, heads
    target_steps: int
    drafter: tuple[int, int, int]
    drafter_steps: int
    clf_steps: int
    images: int  # per seed and config
    n_real: int  # real test images for the Fréchet distance
    grid: tuple[tuple[int, float, float | None], ...]  # (k, delta, lam)


SIZES = {
    "tiny": Size(2000, 60, (32, 1, 2), 60, (16, 1, 2), 40, 40, 3, 200, ((8, 0.2, None),)),
    # about 1.5 min on one H200 (README, GPU): all 60 000 training images, 5x the quick steps, a 4-layer d = 128
    # target, 3x the images per seed and 5x the real images; never run (no GPU was lent)
    "gpu": Size(
        60000,
        1000,
        (128, 4, 4),
        3000,
        (64, 1, 2),
        1500,
        500,
        48,
        5000,
        ((8, 0.1, None), (8, 0.4, None), (64, 0.1, None), (64, 0.4, None), (8, None, 3.0)),
    ),
    "quick": Size(
        10000,
        200,
        (64, 2, 2),
        600,
        (32, 1, 2),
        300,
        150,
        16,
        1000,
        ((8, 0.1, None), (8, 0.4, None), (64, 0.1, None), (64, 0.4, None), (8, None, 3.0)),
    ),
}


def _images(split: str, data: Any, n: int, seed: int):
    import torch

    from iclr25_lantern._inputs import fashion_images

    x, y = fashion_images(split, data, label="--data")
    idx = np.random.default_rng(seed).permutation(len(x))[:n]
    return torch.from_numpy(x[idx].astype(np.float32) / 255.0), torch.from_numpy(y[idx])


def _device(models: dict[str, Any]) -> Any:
    """The device the models are on (the target's)."""
    return next(models["target"].parameters()).device


def _train_models(
    size: Size, codebook_size: int, data: Any, seed: int, ctx: RunContext, device: Any = None
) -> dict[str, Any]:
    import torch

    from iclr25_lantern._models import TransformerConfig
    from iclr25_lantern._train import train_classifier, train_token_model, train_vqvae

    timings = {}
    x, y = _images("train", data, size.n_train, seed)
    tic = time.perf_counter()
    vq = train_vqvae(x, codebook_size=codebook_size, code_dim=16, steps=size.vq_steps, seed=seed, log=ctx.log,
                     device=device)  # fmt: skip
    timings["train_vqvae"] = time.perf_counter() - tic
    with torch.no_grad():
        tokens = torch.cat([vq.encode(x[i : i + 1000].to(device)) for i in range(0, len(x), 1000)])
    y = y.to(tokens.device)
    used = int(torch.unique(tokens).numel())
    ctx.log.info("VQ-VAE uses %d of %d codes", used, codebook_size)
    d, l_, h = size.target
    tic = time.perf_counter()
    target = train_token_model(
        tokens, y, TransformerConfig(codebook_size, dim=d, layers=l_, heads=h), steps=size.target_steps,
        seed=seed + 1, log=ctx.log, name="target", device=device,
    )  # fmt: skip
    timings["train_target"] = time.perf_counter() - tic
    d, l_, h = size.drafter
    tic = time.perf_counter()
    drafter = train_token_model(
        tokens, y, TransformerConfig(codebook_size, dim=d, layers=l_, heads=h), steps=size.drafter_steps,
        seed=seed + 2, log=ctx.log, name="drafter", device=device,
    )  # fmt: skip
    timings["train_drafter"] = time.perf_counter() - tic
    tic = time.perf_counter()
    clf = train_classifier(x, y, steps=size.clf_steps, seed=seed + 3, device=device)
    timings["train_classifier"] = time.perf_counter() - tic
    return {
        "vq": vq,
        "target": target,
        "drafter": drafter,
        "clf": clf,
        "codes_used": used,
        "timings": timings,
    }


def _cpu_state(module: Any) -> dict[str, Any]:
    return {k: v.detach().cpu() for k, v in module.state_dict().items()}


def _save_models(models: dict[str, Any], ctx: RunContext) -> None:
    import torch

    if not ctx.writes:
        return
    blob = {
        "vq": _cpu_state(models["vq"]),
        "vq_shape": tuple(models["vq"].codebook.shape),
        "target": _cpu_state(models["target"]),
        "target_cfg": models["target"].cfg.__dict__,
        "drafter": _cpu_state(models["drafter"]),
        "drafter_cfg": models["drafter"].cfg.__dict__,
        "clf": _cpu_state(models["clf"]),
    }
    torch.save(blob, ctx.path("models.pt"))


def _load_models(folder: Any, device: Any = None) -> dict[str, Any]:
    from iclr25_lantern._inputs import load_models

    models = load_models(folder, label="--models")
    if device is not None:
        models = {k: v.to(device) if hasattr(v, "parameters") else v for k, v in models.items()}
    return models


def _decode_images(models, labels, seed, *, method, relax=None, gamma=4, processor=None):
    """Decode one image per label; returns (tokens (n, 49), stats)."""
    import torch

    from iclr25_lantern._decoding import autoregressive_generate, speculative_generate

    target, drafter = models["target"], models["drafter"]
    dev = _device(models)
    gen = torch.Generator(device=dev).manual_seed(seed)
    toks, calls, drafted, accepted, seconds, cpu = [], 0, 0, 0, 0.0, 0.0
    for c in labels.tolist():
        prefix = torch.tensor([[target.class_token(c)]], device=dev)
        if processor is not None and processor.rows == 2:
            prefix = torch.tensor([[target.class_token(c)], [target.null_token()]], device=dev)
        if method == "ar":
            out = autoregressive_generate(
                target, prefix, max_new_tokens=49, processor=processor, generator=gen
            )
        else:
            out = speculative_generate(
                target, drafter, prefix, max_new_tokens=49, gamma=gamma, relax=relax, processor=processor,
                generator=gen,
            )  # fmt: skip
        toks.append(out.tokens)
        calls += out.target_calls
        drafted += out.drafted
        accepted += out.accepted
        seconds += out.seconds
        cpu += out.cpu_seconds
    n_tok = 49 * len(labels)
    return torch.stack(toks), {
        "tau": n_tok / calls,
        "acceptance": accepted / drafted if drafted else float("nan"),
        "tokens_per_s": n_tok / seconds,
        "tokens_per_cpu_s": n_tok / cpu,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "target_calls": calls,
    }


def _quality(models, tokens, labels):
    """Classifier confidence in the prompted class (mean) and 64-d features of the decoded images."""
    import torch

    dev = _device(models)
    with torch.no_grad():
        imgs = models["vq"].decode(tokens.to(dev))
        feats = models["clf"].features(imgs)
        prob = torch.softmax(models["clf"].out(feats), -1)
    conf = prob[torch.arange(len(labels)), labels.to(dev)].cpu().numpy()
    return imgs.cpu(), conf, feats.cpu().numpy().astype(np.float64)


FD_DIM = 16


def _fd(feats: np.ndarray, real: dict[str, np.ndarray]) -> float:
    """Fréchet distance in the top-``FD_DIM`` principal components of the real images' classifier features (so
    that a few dozen generated images give a full-rank covariance)."""
    import warnings

    from iclr25_shared.metrics import frechet_distance

    z = (feats - real["center"]) @ real["basis"]
    with warnings.catch_warnings():
        if len(z) <= FD_DIM:  # too few images for a full-rank covariance (tiny smoke runs only)
            warnings.simplefilter("ignore")
        return frechet_distance(z.mean(0), np.cov(z, rowvar=False), real["mu"], real["cov"])


def _real_stats(real_feats: np.ndarray) -> dict[str, np.ndarray]:
    center = real_feats.mean(0)
    _, _, vt = np.linalg.svd(real_feats - center, full_matrices=False)
    basis = vt[:FD_DIM].T
    z = (real_feats - center) @ basis
    return {"center": center, "basis": basis, "mu": z.mean(0), "cov": np.cov(z, rowvar=False)}


def _relax_label(k: int, delta: float | None, lam: float | None) -> str:
    return f"LANTERN k={k} lambda={lam:g}" if lam is not None else f"LANTERN k={k} delta={delta:g}"


def _ambiguity(models, tokens, labels) -> dict[str, float]:
    """Diagnostic for token selection ambiguity: mean top-1 probability and entropy of the target on real grids."""
    import torch

    target = models["target"]
    seq = torch.cat([(target.cfg.vocab_size + labels)[:, None], tokens], dim=1).to(_device(models))
    with torch.no_grad():
        p = torch.softmax(target.logits(seq[:, :-1]).double(), -1)
    ent = -(p * p.clamp_min(1e-300).log()).sum(-1)
    return {"target_top1_prob": float(p.max(-1).values.mean()), "target_entropy_nats": float(ent.mean())}


def _call_costs(models, repeats: int = 200) -> dict[str, float]:
    """CPU seconds per single-token cached forward of target and drafter (for the cost ratio c)."""
    import torch

    out = {}
    for name in ("target", "drafter"):
        m = models[name]
        m.reset()
        dev = next(m.parameters()).device
        m.forward(torch.tensor([[m.class_token(0)]], device=dev))
        ids = torch.tensor([[1]], device=dev)
        tic = time.process_time()
        for i in range(repeats):
            m.forward(ids)
            m.crop(1 + (i % 40))
        out[name] = (time.process_time() - tic) / repeats
    return out


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """The (k, δ) sweep against target-only AR and standard speculative decoding at equal draft length γ."""
    import torch

    from iclr25_lantern._relaxed import LogitsProcessor, Relaxation, latent_proximity
    from iclr25_lantern._train import token_nll
    from iclr25_shared.metrics import paired_t_interval

    size = SIZES[cfg.size]  # the config checked its largest k against --codebook-size
    device = ctx.torch_device()
    torch.manual_seed(cfg.seed)
    tic0 = time.perf_counter()
    models = _train_models(size, cfg.codebook_size, cfg.data, cfg.seed, ctx, device)
    _save_models(models, ctx)
    timings = dict(models["timings"])
    xt, yt = _images("test", cfg.data, size.n_real, cfg.seed)
    xt, yt = xt.to(device), yt.to(device)
    with torch.no_grad():
        real_tokens = models["vq"].encode(xt)
        real_feats = models["clf"].features(xt).cpu().numpy().astype(np.float64)
        recon_feats = (
            models["clf"].features(models["vq"].decode(real_tokens)).cpu().numpy().astype(np.float64)
        )
        clf_acc = float((models["clf"](xt).argmax(-1) == yt).float().mean())
    real = _real_stats(real_feats)
    diag = _ambiguity(models, real_tokens[:500], yt[:500])

    diag["target_test_nll"] = token_nll(models["target"], real_tokens[:500], yt[:500])
    diag["drafter_test_nll"] = token_nll(models["drafter"], real_tokens[:500], yt[:500])
    diag["codes_used"] = models["codes_used"]
    diag["classifier_test_accuracy"] = clf_acc
    diag["fd_vq_reconstructions"] = _fd(recon_feats[: size.images * cfg.seeds], real)
    costs = _call_costs(models)
    diag["cost_ratio_drafter_over_target"] = costs["drafter"] / costs["target"]
    ctx.log.info("diagnostics: %s", diag)

    tic = time.perf_counter()
    table = latent_proximity(models["vq"].codebook.detach(), max(k for k, _, _ in size.grid))
    timings["proximity_table"] = time.perf_counter() - tic
    processor = LogitsProcessor()
    configs: list[tuple[str, str, Any]] = [
        ("target-only AR", "ar", None),
        ("standard SD (delta=0)", "sd", Relaxation()),
    ]
    for k, delta, lam in size.grid:
        relax = Relaxation(neighbours=table[:, :k], delta=delta or 0.0, lam=lam)
        configs.append((_relax_label(k, delta, lam), "sd", relax))

    per: dict[str, dict[str, list[float]]] = {name: {} for name, _, _ in configs}
    feats_all: dict[str, list[np.ndarray]] = {name: [] for name, _, _ in configs}
    grids = {}
    for s in range(cfg.seeds):
        seed = cfg.seed * 1000 + s
        labels = torch.from_numpy(np.random.default_rng(seed).integers(0, 10, size.images))
        for name, method, relax in ctx.progress(configs, desc=f"seed {s}"):
            toks, stats = _decode_images(models, labels, seed, method=method, relax=relax, gamma=cfg.gamma,
                                         processor=processor)  # fmt: skip
            imgs, conf, feats = _quality(models, toks, labels)
            row = per[name]
            for key, val in stats.items():
                row.setdefault(key, []).append(val)
            row.setdefault("confidence", []).append(float(conf.mean()))
            row.setdefault("nll", []).append(token_nll(models["target"], toks.to(device), labels.to(device)))
            feats_all[name].append(feats)
            if s == 0:
                grids[name] = imgs[:10]
    timings["sweep"] = time.perf_counter() - tic

    sd = per["standard SD (delta=0)"]
    ar = per["target-only AR"]
    rows = []
    for name, method, relax in configs:
        r = per[name]
        fd = _fd(np.concatenate(feats_all[name]), real)
        row: dict[str, Any] = {
            "method": name,
            "k": relax.k if relax is not None else "",
            "delta": (relax.delta if relax.lam is None else "") if relax is not None else "",
            "lambda": (relax.lam if relax.lam is not None else "") if relax is not None else "",
            "tau (tokens/target call)": float(np.mean(r["tau"])),
            "acceptance": float(np.nanmean(r["acceptance"])) if method == "sd" else "",
            "speed-up vs AR (CPU time)": float(
                np.mean(np.array(r["tokens_per_cpu_s"]) / np.array(ar["tokens_per_cpu_s"]))
            ),
            "speed-up vs AR (wall)": float(
                np.mean(np.array(r["tokens_per_s"]) / np.array(ar["tokens_per_s"]))
            ),
            "confidence": float(np.mean(r["confidence"])),
            "FD (pooled)": fd,
            "target NLL": float(np.mean(r["nll"])),
        }
        for key in ("tau ratio vs SD [95% CI]", "CPU speed-up vs SD [95% CI]", "confidence - SD [95% CI]"):
            row[key] = ""
        if method == "sd" and name != "standard SD (delta=0)":
            d_tau = np.array(r["tau"]) / np.array(sd["tau"])
            d_speed = np.array(r["tokens_per_cpu_s"]) / np.array(sd["tokens_per_cpu_s"])
            d_conf = np.array(r["confidence"]) - np.array(sd["confidence"])
            row["tau ratio vs SD [95% CI]"] = _ci(paired_t_interval(d_tau) if cfg.seeds > 1 else None, d_tau)
            row["CPU speed-up vs SD [95% CI]"] = _ci(
                paired_t_interval(d_speed) if cfg.seeds > 1 else None, d_speed
            )
            row["confidence - SD [95% CI]"] = _ci(
                paired_t_interval(d_conf) if cfg.seeds > 1 else None, d_conf
            )
        rows.append(row)
    tables: dict[str, Any] = {"sweep": rows}
    if cfg.text:
        tables["text"] = _text_row(cfg, ctx, timings)
    timings["total"] = time.perf_counter() - tic0
    if ctx.writes:
        _plots(rows, grids, models, ctx)
    notes = [
        f"{cfg.seeds} sampling seeds x {size.images} class-conditional images per config; every config decodes the "
        f"same class prompts with the same generator seed (paired); draft length gamma = {cfg.gamma} for every "
        "speculative config (equal draft budget); temperature 1, no top-k, no CFG.",
        "tau = generated tokens / target forward calls (accepted drafts + one resampled or bonus token per call).",
        "Speed-up = tokens per CPU-second of this process over the target-only AR baseline of the same seed (batch "
        "size 1, one thread; CPU time because the machine is shared; wall-clock ratios are reported beside it); "
        f"the drafter/target CPU cost ratio per call is {diag['cost_ratio_drafter_over_target']:.3f}.",
        f"FD: Fréchet distance, in the top {FD_DIM} principal components of the classifier's 64-d features of real "
        "images, of all decoded images of a config (pooled over seeds) "
        f"to {size.n_real} real test images; VQ reconstructions of real images give "
        f"{diag['fd_vq_reconstructions']:.3f} at the same count (the floor).",
        "Models: one training seed (the sampling seeds vary); the intervals cover sampling noise only.",
    ]
    return Result(
        metrics={"diagnostics": diag, "call_seconds": costs, "size": cfg.size},
        tables=tables,
        timings=timings,
        notes=notes,
    )


def _text_row(cfg: Any, ctx: RunContext, timings: dict[str, float]) -> list[dict[str, Any]]:
    """SmolLM2-135M target, its first fifth of layers (6 of 30) as drafter, Wikipedia-summary prompts."""
    from iclr25_lantern._relaxed import LogitsProcessor
    from iclr25_shared.data import wiki_summaries
    from iclr25_shared.models import load_causal_lm

    tic = time.perf_counter()
    lm = load_causal_lm(device=ctx.torch_device())
    wiki = wiki_summaries()
    prompts = [" ".join(t.split()[:12]) for t in list(wiki.texts)[: 2 if cfg.size == "tiny" else 4]]
    draft_layers = max(1, int(lm.model.config.num_hidden_layers) // 5)
    out = text_rows(lm, prompts, [(10, 0.1, None), (10, 0.3, None)], processor=LogitsProcessor(), gamma=cfg.gamma,
                    max_new_tokens=8 if cfg.size == "tiny" else 32, draft_layers=draft_layers, samples=1,
                    seed=cfg.seed, log=ctx.log)  # fmt: skip
    timings["text"] = time.perf_counter() - tic
    return out["rows"]


def _ci(est, values) -> str:
    if est is None or not math.isfinite(est.low):
        return f"{float(np.mean(values)):.3f}"
    return f"{est.value:.3f} [{est.low:.3f}, {est.high:.3f}]"


def _plots(rows, grids, models, ctx: RunContext) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for k in sorted({r["k"] for r in rows if isinstance(r["k"], int) and r["k"] > 0 and r["delta"] != ""}):
        pts = [r for r in rows if r["k"] == k and r["delta"] != ""]
        pts = [rows[1], *sorted(pts, key=lambda r: r["delta"])]
        deltas = [0.0] + [r["delta"] for r in pts[1:]]
        axes[0].plot(deltas, [r["tau (tokens/target call)"] for r in pts], "o-", label=f"k={k}")
        axes[1].plot(deltas, [r["speed-up vs AR (CPU time)"] for r in pts], "o-", label=f"k={k}")
    axes[0].set(xlabel="delta", ylabel="tokens per target call (tau)", title="mean accepted length")
    axes[1].axhline(1.0, color="grey", lw=0.8)
    axes[1].set(
        xlabel="delta", ylabel="speed-up over target-only AR (CPU time)", title="speed-up (batch 1, 1 thread)"
    )
    for ax in axes:
        ax.legend()
    ctx.save_figure("speedup.png", fig, dpi=120)
    names = list(grids)
    fig, axes = plt.subplots(len(names), 10, figsize=(10, 1.1 * len(names)))
    for i, name in enumerate(names):
        for j in range(10):
            ax = axes[i, j]
            if j < len(grids[name]):
                ax.imshow(grids[name][j].numpy(), cmap="gray", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
        axes[i, 0].set_ylabel(name.replace("LANTERN ", ""), rotation=0, ha="right", fontsize=7)
    ctx.save_figure("samples.png", fig, dpi=100)


def generate(cfg: GenerateConfig, ctx: RunContext) -> Result:
    """Generate with LANTERN on Fashion-MNIST VQ tokens (default) or SmolLM2 text."""
    relaxed = cfg.k > 0 and (cfg.lam > 1.0 if cfg.lam else cfg.delta > 0.0)
    if cfg.temperature == 0.0 and relaxed:
        ctx.log.warning(
            "temperature 0 (greedy) with LANTERN: greedy decoding degrades AR image quality (jadohu/LANTERN#6); "
            "temperature 1 is recommended"
        )
    if cfg.model == "smollm2":
        return _generate_text(cfg, ctx)
    import torch

    from iclr25_lantern._relaxed import LogitsProcessor, Relaxation, latent_proximity

    processor = LogitsProcessor(temperature=cfg.temperature, top_k=cfg.top_k, cfg_scale=cfg.cfg_scale)
    device = ctx.torch_device()
    torch.manual_seed(cfg.seed)
    if cfg.models is not None:
        models = _load_models(cfg.models, device)
    else:
        ctx.log.info("training tiny Fashion-MNIST models (pass --models DIR from `reproduce --out` to skip)")
        size = Size(3000, 150, (64, 2, 2), 250, (32, 1, 2), 150, 100, 0, 0, ())
        models = _train_models(size, GENERATE_CODEBOOK, cfg.data, cfg.seed, ctx, device)
    _check_k(cfg.k, models["vq"].codebook_size, " of the codebook in --models")
    table = latent_proximity(models["vq"].codebook.detach(), cfg.k) if cfg.k else None
    relax = Relaxation(neighbours=table, delta=cfg.delta, lam=cfg.lam or None)
    labels = torch.arange(cfg.samples) % 10
    toks, stats = _decode_images(models, labels, cfg.seed, method="sd", relax=relax, gamma=cfg.gamma,
                                 processor=processor)  # fmt: skip
    imgs, conf, _ = _quality(models, toks, labels)
    ctx.save_array("tokens", toks.numpy())
    ctx.save_array("images", imgs.numpy())
    if ctx.writes:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        cols = min(10, cfg.samples)
        rows = math.ceil(cfg.samples / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(cols, rows), squeeze=False)
        for i, ax in enumerate(axes.flat):
            if i < cfg.samples:
                ax.imshow(imgs[i].numpy(), cmap="gray", vmin=0, vmax=1)
            ax.axis("off")
        ctx.save_figure("samples.png", fig, dpi=100)
    metrics = {
        "mean_accepted_length": stats["tau"],
        "acceptance_rate": stats["acceptance"],
        "tokens_per_s": stats["tokens_per_s"],
        "classifier_confidence": float(conf.mean()),
    }
    return Result(metrics=metrics, timings={"decode": stats["seconds"]})


def _generate_text(cfg: GenerateConfig, ctx: RunContext) -> Result:
    from iclr25_lantern._relaxed import LogitsProcessor
    from iclr25_shared.models import load_causal_lm

    processor = LogitsProcessor(temperature=cfg.temperature, top_k=cfg.top_k)
    device = ctx.torch_device()
    lm = load_causal_lm(device=device)
    rows = text_rows(lm, [cfg.prompt], [(cfg.k, cfg.delta, cfg.lam or None)], processor=processor,
                     gamma=cfg.gamma, max_new_tokens=cfg.max_new_tokens, draft_layers=cfg.draft_layers,
                     samples=cfg.samples, seed=cfg.seed, log=ctx.log)  # fmt: skip
    return Result(tables={"text": rows["rows"]}, notes=rows["texts"])


def text_rows(lm, prompts, grid, *, processor, gamma, max_new_tokens, draft_layers, samples, seed, log):
    """SmolLM2 target, layer-prefix drafter; tau and tokens/s for AR, SD and each (k, delta, lam) of ``grid``."""
    import torch

    from iclr25_lantern._decoding import (
        HFDecoder,
        autoregressive_generate,
        layer_prefix_drafter,
        speculative_generate,
    )
    from iclr25_lantern._relaxed import Relaxation, latent_proximity

    model, tok = lm.model, lm.tokenizer
    draft = layer_prefix_drafter(model, draft_layers)
    tic = time.perf_counter()
    kmax = max(k for k, _, _ in grid)
    emb = model.get_input_embeddings().weight.detach()
    table = latent_proximity(emb, kmax, precision="float32", chunk_size=512) if kmax else None
    log.info("proximity table for V=%d, k=%d: %.1f s", emb.shape[0], kmax, time.perf_counter() - tic)
    target, drafter = HFDecoder(model), HFDecoder(draft)
    methods = [("target-only AR", None), ("standard SD (delta=0)", Relaxation())]
    for k, delta, lam in grid:
        if k:
            methods.append(
                (_relax_label(k, delta, lam), Relaxation(neighbours=table[:, :k], delta=delta, lam=lam))
            )
    rows, texts = [], []
    for name, relax in methods:
        calls, n_tok, secs, cpu, acc, dr = 0, 0, 0.0, 0.0, 0, 0
        for i, prompt in enumerate(prompts):
            ids = tok(prompt, return_tensors="pt")["input_ids"]
            for s in range(samples):
                gen = torch.Generator(device=model.device).manual_seed(seed * 1000 + 17 * i + s)
                if relax is None:
                    out = autoregressive_generate(target, ids, max_new_tokens=max_new_tokens, processor=processor,
                                                  generator=gen)  # fmt: skip
                else:
                    out = speculative_generate(target, drafter, ids, max_new_tokens=max_new_tokens, gamma=gamma,
                                               relax=relax, processor=processor, generator=gen)  # fmt: skip
                calls += out.target_calls
                n_tok += len(out.tokens)
                secs += out.seconds
                cpu += out.cpu_seconds
                acc += out.accepted
                dr += out.drafted
                if s == 0 and i == 0:
                    texts.append(f"{name}: {prompt}{tok.decode(out.tokens, skip_special_tokens=True)!r}")
        rows.append({"method": name, "tau (tokens/target call)": n_tok / calls,
                     "acceptance": acc / dr if dr else "", "tokens/CPU-s": n_tok / cpu,
                     "tokens/s (wall)": n_tok / secs})  # fmt: skip
    for r in rows:
        r["speed-up vs AR (CPU time)"] = r["tokens/CPU-s"] / rows[0]["tokens/CPU-s"]
        r["speed-up vs AR (wall)"] = r["tokens/s (wall)"] / rows[0]["tokens/s (wall)"]
    return {"rows": rows, "texts": texts}


QUALITY_BAND = (
    "not measurably worse than standard SD at the stated number of images: the 95 % interval of the paired "
    "difference LANTERN - SD includes 0 or favours LANTERN for both classifier confidence (paired t over prompts) "
    "and FD (paired bootstrap over prompts)"
)


def _per_image_nll(model, tokens, labels) -> np.ndarray:
    """Mean per-token NLL (nats) of each ``(49,)`` grid under ``model`` (the batched form of token_nll)."""
    import torch
    from torch.nn import functional as F

    dev = next(model.parameters()).device
    seq = torch.cat([(model.cfg.vocab_size + labels)[:, None], tokens], dim=1).to(dev)
    out = []
    with torch.no_grad():
        for i in range(0, len(seq), 250):
            logits = model.logits(seq[i : i + 250, :-1])
            nll = F.cross_entropy(logits.transpose(1, 2), seq[i : i + 250, 1:], reduction="none").mean(1)
            out.append(nll.double().cpu().numpy())
    return np.concatenate(out)


def _quality_rows(models, arms, labels, seed, gamma, real, ctx):
    """Decode ``labels`` once per arm (same prompts and generator seed); per-image quality and its intervals."""

    from iclr25_shared.metrics import paired_t_interval

    per = {}
    for name, method, relax in ctx.progress(arms, desc="quality"):
        toks, stats = _decode_images(models, labels, seed, method=method, relax=relax, gamma=gamma)
        _, conf, feats = _quality(models, toks, labels)
        nll = _per_image_nll(models["target"], toks, labels)
        per[name] = {"conf": conf.astype(np.float64), "feats": feats, "nll": nll, "tau": stats["tau"]}
    n = len(labels)
    rng = np.random.default_rng(seed)
    boots = rng.integers(0, n, size=(200, n))  # the same resamples for every arm: paired over prompts
    fd_boot = {name: np.array([_fd(r["feats"][i], real) for i in boots]) for name, r in per.items()}
    sd = per["standard SD (delta=0)"]
    rows = []
    for name, method, _ in arms:
        r = per[name]
        fd = _fd(r["feats"], real)
        lo, hi = np.quantile(fd_boot[name], [0.025, 0.975])
        row: dict[str, Any] = {
            "method": name,
            "images": n,
            "tau (tokens/target call)": r["tau"],
            "FD [95% CI]": f"{fd:.2f} [{lo:.2f}, {hi:.2f}]",
            "confidence": float(r["conf"].mean()),
            "target NLL": float(r["nll"].mean()),
        }
        in_band: Any = ""
        if method == "sd" and name != "standard SD (delta=0)":
            dc = paired_t_interval(r["conf"] - sd["conf"])
            dn = paired_t_interval(r["nll"] - sd["nll"])
            dfd = fd_boot[name] - fd_boot["standard SD (delta=0)"]
            dlo, dhi = np.quantile(dfd, [0.025, 0.975])
            row["confidence - SD [95% CI]"] = f"{dc.value:+.4f} [{dc.low:+.4f}, {dc.high:+.4f}]"
            row["FD - SD [95% CI]"] = f"{fd - _fd(sd['feats'], real):+.2f} [{dlo:+.2f}, {dhi:+.2f}]"
            row["NLL - SD [95% CI]"] = f"{dn.value:+.4f} [{dn.low:+.4f}, {dn.high:+.4f}]"
            in_band = bool(dc.high >= 0.0 and dlo <= 0.0)
        row["in quality band"] = in_band
        rows.append(row)
    return rows


def _recorded_rounds(models, labels, gamma, seed, n_rounds):
    """(p, q, x) of ``n_rounds`` verification rounds: the target's and drafter's distributions over ``gamma``
    consecutive positions of decoded grids, drafts sampled from q (inputs for timing the acceptance step alone)."""
    import torch

    from iclr25_lantern._relaxed import LogitsProcessor

    gen = torch.Generator().manual_seed(seed)
    dev = _device(models)
    dgen = torch.Generator(device=dev).manual_seed(seed)
    proc = LogitsProcessor()
    toks, _ = _decode_images(models, labels, seed, method="ar")
    seq = torch.cat([(models["target"].cfg.vocab_size + labels)[:, None], toks], dim=1).to(dev)
    with torch.no_grad():
        p_all = proc(models["target"].logits(seq[:, :-1]).unsqueeze(0))
        q_all = proc(models["drafter"].logits(seq[:, :-1]).unsqueeze(0))
    rounds = []
    while len(rounds) < n_rounds:
        i = int(torch.randint(len(labels), (1,), generator=gen))
        t = int(torch.randint(seq.shape[1] - 1 - gamma, (1,), generator=gen))
        q = q_all[i, t : t + gamma]
        x = torch.multinomial(q, 1, generator=dgen).squeeze(-1)
        rounds.append((p_all[i, t : t + gamma].contiguous(), q.contiguous(), x))
    return rounds


PROFILE_PARTS = (
    "drafter forward",
    "target forward",
    "verification (verify_drafts)",
    "draws (_draw)",
    "logits processor",
    "finite checks",
)


def _round_profile(models, relax, labels, seed, gamma) -> dict[str, float]:
    """CPU microseconds per round (one target call) spent in each part of speculative decoding, measured by
    wrapping the parts with ``time.process_time`` for one decode of ``labels`` (the wrappers are removed after).
    ``draws`` are the drafter's and the bonus draws; the residual draw of a rejection is part of verification."""
    import iclr25_lantern._decoding as dec
    from iclr25_lantern._relaxed import LogitsProcessor

    spent = dict.fromkeys(PROFILE_PARTS, 0.0)
    active: list[
        str
    ] = []  # a part called inside another (the residual draw in verify_drafts) counts for the outer

    def timed(fn, key):
        def inner(*args, **kwargs):
            if active:
                return fn(*args, **kwargs)
            active.append(key)
            tic = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[key] += time.process_time() - tic
                active.pop()

        return inner

    target, drafter = models["target"], models["drafter"]
    saved = {name: getattr(dec, name) for name in ("verify_drafts", "_draw", "_finite")}
    processor = LogitsProcessor()
    call = type(processor).__call__
    target.forward = timed(target.forward, "target forward")
    drafter.forward = timed(drafter.forward, "drafter forward")
    dec.verify_drafts = timed(saved["verify_drafts"], "verification (verify_drafts)")
    dec._draw = timed(saved["_draw"], "draws (_draw)")
    dec._finite = timed(saved["_finite"], "finite checks")
    type(processor).__call__ = timed(call, "logits processor")
    try:
        tic = time.process_time()
        _, stats = _decode_images(
            models, labels, seed, method="sd", relax=relax, gamma=gamma, processor=processor
        )
        total = time.process_time() - tic
    finally:
        del target.forward, drafter.forward
        for name, fn in saved.items():
            setattr(dec, name, fn)
        type(processor).__call__ = call
    rounds = stats["target_calls"]
    out = {key: 1e6 * value / rounds for key, value in spent.items()}
    out["rest of the loop"] = 1e6 * (total - sum(spent.values())) / rounds
    out["round"] = 1e6 * total / rounds
    return out


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Tokens/s of target-only AR, standard SD and LANTERN (shared interleaved protocol) and their quality."""
    import torch

    from iclr25_lantern._decoding import verify_drafts
    from iclr25_lantern._relaxed import Relaxation, latent_proximity
    from iclr25_shared.bench import interleaved

    device = ctx.torch_device()
    if cfg.models is not None:
        models = _load_models(cfg.models, device)
    else:
        models = _train_models(SIZES[cfg.size], GENERATE_CODEBOOK, cfg.data, cfg.seed, ctx, device)
    _check_k(cfg.k, models["vq"].codebook_size, " of the codebook in --models")
    tic = time.perf_counter()
    table = latent_proximity(models["vq"].codebook.detach(), cfg.k)  # once per codebook
    timings = {"proximity_table": time.perf_counter() - tic}
    arms: list[tuple[str, str, Any]] = [
        ("target-only AR", "ar", None),
        ("standard SD (delta=0)", "sd", Relaxation()),
    ]
    for delta in cfg.deltas:
        arms.append((_relax_label(cfg.k, delta, None), "sd", Relaxation(neighbours=table, delta=delta)))
    for lam in cfg.lams:
        arms.append((_relax_label(cfg.k, None, lam), "sd", Relaxation(neighbours=table, lam=lam)))

    # quality: many images, decoded once per arm, with intervals
    tic = time.perf_counter()
    xt, _ = _images("test", cfg.data, 1000, cfg.seed)
    with torch.no_grad():
        real = _real_stats(models["clf"].features(xt.to(device)).cpu().numpy().astype(np.float64))
    q_labels = torch.arange(cfg.quality_images) % 10
    quality = _quality_rows(models, arms, q_labels, cfg.seed + 1, cfg.gamma, real, ctx)
    timings["quality"] = time.perf_counter() - tic

    # speed: each call decodes the same --images prompts with the same generator seed (identical tokens every call)
    labels = torch.from_numpy(np.random.default_rng(cfg.seed).integers(0, 10, cfg.images))
    calls: dict[str, int] = {}

    def arm(name, method, relax):
        def run():
            _, stats = _decode_images(models, labels, cfg.seed, method=method, relax=relax, gamma=cfg.gamma)
            calls[name] = stats["target_calls"]

        return run

    tic = time.perf_counter()
    run = interleaved({name: arm(name, m, r) for name, m, r in arms}, repeats=cfg.repeats, warmup=1,
                      device=device, threads=cfg.threads or None, progress=lambda it: ctx.progress(it, desc="speed"))  # fmt: skip
    timings["speed"] = time.perf_counter() - tic
    n_tok = 49 * cfg.images
    sd_name = "standard SD (delta=0)"
    by_name = {r["method"]: r for r in quality}
    speed = []
    for name, method, _ in arms:
        vs_ar, vs_sd = run.speedup(name, "target-only AR"), run.speedup(name, sd_name)
        row: dict[str, Any] = {
            "method": name,
            "tokens/s": n_tok / run.median(name),
            "target calls": calls[name],
            "tau": n_tok / calls[name],
            "speed-up vs AR [95% CI]": f"{vs_ar.value:.3f} [{vs_ar.low:.3f}, {vs_ar.high:.3f}]",
            "speed-up vs SD [95% CI]": f"{vs_sd.value:.3f} [{vs_sd.low:.3f}, {vs_sd.high:.3f}]",
            "round cost vs SD [95% CI]": "",
            "speed-up vs SD at the quality tau [95% CI]": "",
            "in quality band": by_name[name]["in quality band"],
        }
        if method == "sd":  # seconds per target call (one round: gamma drafter calls, one verification)
            scale = calls[sd_name] / calls[name]
            est = run.ratio(name, sd_name)
            cost = (est.value * scale, est.low * scale, est.high * scale)
            row["round cost vs SD [95% CI]"] = f"{cost[0]:.3f} [{cost[1]:.3f}, {cost[2]:.3f}]"
            # the tau of a few timed prompts is noisy: tokens/s at the tau of the quality images' decode instead
            gain = by_name[name]["tau (tokens/target call)"] / by_name[sd_name]["tau (tokens/target call)"]
            row["speed-up vs SD at the quality tau [95% CI]"] = (
                f"{gain / cost[0]:.3f} [{gain / cost[2]:.3f}, {gain / cost[1]:.3f}]"
            )
        speed.append(row)

    # the acceptance step alone: the same recorded rounds verified with standard SD and with each LANTERN arm
    rounds = _recorded_rounds(models, q_labels[:50], cfg.gamma, cfg.seed + 2, 400)

    def step(relax):
        def run_step():
            gen = torch.Generator(device=device).manual_seed(cfg.seed)
            for p, q, x in rounds:
                verify_drafts(p, q, x, relax, greedy=False, generator=gen)

        return run_step

    step_arms = {name: step(relax) for name, method, relax in arms if method == "sd"}
    step_run = interleaved(
        step_arms, repeats=cfg.repeats, warmup=1, device=device, threads=cfg.threads or None
    )
    steps = []
    for name in step_arms:
        est = step_run.ratio(name, sd_name)
        steps.append({"method": name, "microseconds per verification": 1e6 * step_run.median(name) / len(rounds),
                      "cost vs SD verification [95% CI]": f"{est.value:.3f} [{est.low:.3f}, {est.high:.3f}]"})  # fmt: skip
    profile = []
    for name, method, relax in arms:
        if method == "sd":
            prof = _round_profile(models, relax, labels, cfg.seed, cfg.gamma)
            profile.append({"method": name, **{f"{k} (us/round)": v for k, v in prof.items()}})
    tables: dict[str, Any] = {
        "speed": speed,
        "quality": quality,
        "acceptance_step": steps,
        "profile": profile,
    }
    if cfg.text:
        tables["text"] = _text_row(cfg, ctx, timings)
    costs = _call_costs(models)
    return Result(
        metrics={
            "call_seconds": costs,
            "cost_ratio_drafter_over_target": costs["drafter"] / costs["target"],
            "quality_band": QUALITY_BAND,
            "bench": run.as_dict(),
            "acceptance_step_bench": step_run.as_dict(),
        },
        tables=tables,
        timings=timings,
        notes=[
            f"speed: iclr25_shared.bench.interleaved, {cfg.repeats} rounds, arm order rotated each round; one call of "
            f"an arm decodes the same {cfg.images} class prompts (49 tokens each, batch 1) with the same generator "
            f"seed; held equal: prompts, tokens ({n_tok} per call), target and drafter, gamma = {cfg.gamma}, KV "
            "caches, one batched verification call per round; not held equal: the tokens drawn (LANTERN's law "
            "differs from the target's) and hence the number of target calls. Speed-ups: median of per-round time "
            "ratios, percentile bootstrap over rounds. Round cost = seconds per target call relative to SD. Speed-up at "
            "the quality tau = (tau ratio over the quality images) / round cost; its interval is the round cost's "
            "(the tau ratio's own sampling error, about 2 % at 500 images, is not in it).",
            f"quality: {cfg.quality_images} images per arm (prompts: classes in turn, the same for every arm), "
            "FD in the top 16 principal components of the classifier features of 1000 real test images; quality band: "
            + QUALITY_BAND
            + ".",
            f"acceptance step: {len(rounds)} recorded verification rounds (gamma = {cfg.gamma} positions each) "
            "verified with verify_drafts (acceptance probabilities, draws, residual at the first rejection), "
            "interleaved with the same protocol.",
            f"profile: CPU microseconds per round (target call) in each part, one decode of the {cfg.images} speed "
            "prompts per speculative arm, parts timed with process_time wrappers (removed afterwards).",
        ],
    )
