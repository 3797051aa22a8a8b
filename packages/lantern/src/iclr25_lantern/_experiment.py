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


def _train_models(size: Size, codebook_size: int, data: Any, seed: int, ctx: RunContext) -> dict[str, Any]:
    import torch

    from iclr25_lantern._models import TransformerConfig
    from iclr25_lantern._train import train_classifier, train_token_model, train_vqvae

    timings = {}
    x, y = _images("train", data, size.n_train, seed)
    tic = time.perf_counter()
    vq = train_vqvae(x, codebook_size=codebook_size, code_dim=16, steps=size.vq_steps, seed=seed, log=ctx.log)
    timings["train_vqvae"] = time.perf_counter() - tic
    with torch.no_grad():
        tokens = torch.cat([vq.encode(x[i : i + 1000]) for i in range(0, len(x), 1000)])
    used = int(torch.unique(tokens).numel())
    ctx.log.info("VQ-VAE uses %d of %d codes", used, codebook_size)
    d, l_, h = size.target
    tic = time.perf_counter()
    target = train_token_model(
        tokens, y, TransformerConfig(codebook_size, dim=d, layers=l_, heads=h), steps=size.target_steps,
        seed=seed + 1, log=ctx.log, name="target",
    )  # fmt: skip
    timings["train_target"] = time.perf_counter() - tic
    d, l_, h = size.drafter
    tic = time.perf_counter()
    drafter = train_token_model(
        tokens, y, TransformerConfig(codebook_size, dim=d, layers=l_, heads=h), steps=size.drafter_steps,
        seed=seed + 2, log=ctx.log, name="drafter",
    )  # fmt: skip
    timings["train_drafter"] = time.perf_counter() - tic
    tic = time.perf_counter()
    clf = train_classifier(x, y, steps=size.clf_steps, seed=seed + 3)
    timings["train_classifier"] = time.perf_counter() - tic
    return {
        "vq": vq,
        "target": target,
        "drafter": drafter,
        "clf": clf,
        "codes_used": used,
        "timings": timings,
    }


def _save_models(models: dict[str, Any], ctx: RunContext) -> None:
    import torch

    if not ctx.writes:
        return
    blob = {
        "vq": models["vq"].state_dict(),
        "vq_shape": tuple(models["vq"].codebook.shape),
        "target": models["target"].state_dict(),
        "target_cfg": models["target"].cfg.__dict__,
        "drafter": models["drafter"].state_dict(),
        "drafter_cfg": models["drafter"].cfg.__dict__,
        "clf": models["clf"].state_dict(),
    }
    torch.save(blob, ctx.path("models.pt"))


def _load_models(folder: Any) -> dict[str, Any]:
    from iclr25_lantern._inputs import load_models

    return load_models(folder, label="--models")


def _decode_images(models, labels, seed, *, method, relax=None, gamma=4, processor=None):
    """Decode one image per label; returns (tokens (n, 49), stats)."""
    import torch

    from iclr25_lantern._decoding import autoregressive_generate, speculative_generate

    target, drafter = models["target"], models["drafter"]
    gen = torch.Generator().manual_seed(seed)
    toks, calls, drafted, accepted, seconds, cpu = [], 0, 0, 0, 0.0, 0.0
    for c in labels.tolist():
        prefix = torch.tensor([[target.class_token(c)]])
        if processor is not None and processor.rows == 2:
            prefix = torch.tensor([[target.class_token(c)], [target.null_token()]])
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

    with torch.no_grad():
        imgs = models["vq"].decode(tokens)
        feats = models["clf"].features(imgs)
        prob = torch.softmax(models["clf"].out(feats), -1)
    conf = prob[torch.arange(len(labels)), labels].numpy()
    return imgs, conf, feats.numpy().astype(np.float64)


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
    seq = torch.cat([(target.cfg.vocab_size + labels)[:, None], tokens], dim=1)
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
        m.forward(torch.tensor([[m.class_token(0)]]))
        ids = torch.tensor([[1]])
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
    ctx.torch_device()
    torch.manual_seed(cfg.seed)
    tic0 = time.perf_counter()
    models = _train_models(size, cfg.codebook_size, cfg.data, cfg.seed, ctx)
    _save_models(models, ctx)
    timings = dict(models["timings"])
    xt, yt = _images("test", cfg.data, size.n_real, cfg.seed)
    with torch.no_grad():
        real_tokens = models["vq"].encode(xt)
        real_feats = models["clf"].features(xt).numpy().astype(np.float64)
        recon_feats = models["clf"].features(models["vq"].decode(real_tokens)).numpy().astype(np.float64)
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
            row.setdefault("nll", []).append(token_nll(models["target"], toks, labels))
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
    ctx.torch_device()
    torch.manual_seed(cfg.seed)
    if cfg.models is not None:
        models = _load_models(cfg.models)
    else:
        ctx.log.info("training tiny Fashion-MNIST models (pass --models DIR from `reproduce --out` to skip)")
        size = Size(3000, 150, (64, 2, 2), 250, (32, 1, 2), 150, 100, 0, 0, ())
        models = _train_models(size, GENERATE_CODEBOOK, cfg.data, cfg.seed, ctx)
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


def _matched_config(folder: Any) -> tuple[int, float | None, float | None]:
    """(k, delta, lam) of the LANTERN row of a reproduce results.json whose quality is closest to standard SD's:
    the lowest pooled Fréchet distance (ties: the larger tau)."""
    from iclr25_lantern._inputs import read_sweep
    from iclr25_shared.inputs import validating

    rows = read_sweep(folder, label="--models")
    with validating(f"--models: {str(folder)!r}/results.json holds a sweep row that is not numeric"):
        best = min(rows, key=lambda r: (float(r["FD (pooled)"]), -float(r["tau (tokens/target call)"])))
        lam = float(best["lambda"]) if best["lambda"] != "" else None
        delta = float(best["delta"]) if best["delta"] != "" else None
        return int(best["k"]), delta, lam


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Tokens/s of target-only AR, standard SD and LANTERN on the same prompts, as ratios to target-only."""
    import torch

    from iclr25_lantern._relaxed import LogitsProcessor, Relaxation, latent_proximity

    k, delta, lam = cfg.k, cfg.delta, None
    if cfg.match_quality:
        k, delta, lam = _matched_config(cfg.models)
        ctx.log.info("matched quality: k=%d delta=%s lambda=%s", k, delta, lam)
    ctx.torch_device()
    if cfg.models is not None:
        models = _load_models(cfg.models)
    else:
        models = _train_models(SIZES[cfg.size], GENERATE_CODEBOOK, cfg.data, cfg.seed, ctx)
    _check_k(k, models["vq"].codebook_size, " of the codebook in --models")
    table = latent_proximity(models["vq"].codebook.detach(), k)
    labels = torch.from_numpy(np.random.default_rng(cfg.seed).integers(0, 10, cfg.images))
    processor = LogitsProcessor()
    rows = []
    for name, method, relax in (
        ("target-only AR", "ar", None),
        ("standard SD (delta=0)", "sd", Relaxation()),
        (_relax_label(k, delta, lam), "sd", Relaxation(neighbours=table, delta=delta or 0.0, lam=lam)),
    ):
        toks, stats = _decode_images(models, labels, cfg.seed, method=method, relax=relax, gamma=cfg.gamma,
                                     processor=processor)  # fmt: skip
        _, conf, _ = _quality(models, toks, labels)
        rows.append({"method": name, "tokens/CPU-s": stats["tokens_per_cpu_s"], "tokens/s (wall)":
                     stats["tokens_per_s"], "tau": stats["tau"], "confidence": float(conf.mean())})  # fmt: skip
    for r in rows:
        r["CPU ratio vs target-only"] = r["tokens/CPU-s"] / rows[0]["tokens/CPU-s"]
        r["CPU ratio vs SD"] = r["tokens/CPU-s"] / rows[1]["tokens/CPU-s"]
        r["wall ratio vs target-only"] = r["tokens/s (wall)"] / rows[0]["tokens/s (wall)"]
    costs = _call_costs(models)
    tables: dict[str, Any] = {"bench": rows}
    timings: dict[str, float] = {}
    if cfg.text:
        tables["text"] = _text_row(cfg, ctx, timings)
    return Result(
        metrics={"call_seconds": costs, "cost_ratio_drafter_over_target": costs["drafter"] / costs["target"]},
        tables=tables,
        timings=timings,
        notes=[
            f"{cfg.images} images (49 tokens each), batch size 1, gamma = {cfg.gamma}, one thread, same prompts"
        ],
    )
