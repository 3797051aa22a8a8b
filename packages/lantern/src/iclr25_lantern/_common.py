"""Shared by the commands: the models of the Fashion-MNIST setting, decoding one image per prompt, the quality
proxies (classifier confidence, FD in classifier-feature PCA space, target NLL) and the SmolLM2 text rows."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_shared.cli import RunContext

if TYPE_CHECKING:
    pass


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
        32,
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
