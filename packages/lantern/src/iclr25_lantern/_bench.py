"""`bench`: tokens/s of target-only AR, standard SD and LANTERN (shared interleaved protocol), quality with
intervals, the acceptance step alone and a per-round profile."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_lantern.cli import GENERATE_CODEBOOK
from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_lantern.cli import BenchConfig
from iclr25_lantern._common import (
    SIZES,
    _call_costs,
    _check_k,
    _decode_images,
    _device,
    _fd,
    _images,
    _load_models,
    _quality,
    _real_stats,
    _relax_label,
    _text_row,
    _train_models,
)

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


SD_NAME = "standard SD (delta=0)"


def _bench_models(cfg: BenchConfig, ctx: RunContext, device: Any) -> dict[str, Any]:
    """The models of ``--models``, or trained here at ``--size``; ``--k`` checked against their codebook."""
    if cfg.models is not None:
        models = _load_models(cfg.models, device)
    else:
        models = _train_models(SIZES[cfg.size], GENERATE_CODEBOOK, cfg.data, cfg.seed, ctx, device)
    _check_k(cfg.k, models["vq"].codebook_size, " of the codebook in --models")
    return models


def _arms(cfg: BenchConfig, table: Any) -> list[tuple[str, str, Any]]:
    """``(name, method, relaxation)`` of every arm: target-only AR, standard SD, LANTERN per delta and lambda."""
    from iclr25_lantern._relaxed import Relaxation

    arms: list[tuple[str, str, Any]] = [
        ("target-only AR", "ar", None),
        (SD_NAME, "sd", Relaxation()),
    ]
    for delta in cfg.deltas:
        arms.append((_relax_label(cfg.k, delta, None), "sd", Relaxation(neighbours=table, delta=delta)))
    for lam in cfg.lams:
        arms.append((_relax_label(cfg.k, None, lam), "sd", Relaxation(neighbours=table, lam=lam)))
    return arms


def _quality_table(
    cfg: BenchConfig, ctx: RunContext, models: dict[str, Any], arms: list, device: Any
) -> tuple[list[dict[str, Any]], Any]:
    """Quality rows of ``--quality-images`` images per arm against 1000 real test images, and their prompts."""
    import torch

    xt, _ = _images("test", cfg.data, 1000, cfg.seed)
    with torch.no_grad():
        real = _real_stats(models["clf"].features(xt.to(device)).cpu().numpy().astype(np.float64))
    q_labels = torch.arange(cfg.quality_images) % 10
    return _quality_rows(models, arms, q_labels, cfg.seed + 1, cfg.gamma, real, ctx), q_labels


def _speed_run(
    cfg: BenchConfig, ctx: RunContext, models: dict[str, Any], arms: list, labels: Any, device: Any
) -> tuple[Any, dict[str, int]]:
    """Every arm decoding the same ``labels`` with the same generator seed, interleaved; target calls per arm."""
    from iclr25_shared.bench import interleaved

    calls: dict[str, int] = {}

    def arm(name, method, relax):
        def run():
            _, stats = _decode_images(models, labels, cfg.seed, method=method, relax=relax, gamma=cfg.gamma)
            calls[name] = stats["target_calls"]

        return run

    run = interleaved({name: arm(name, m, r) for name, m, r in arms}, repeats=cfg.repeats, warmup=1,
                      device=device, threads=cfg.threads or None, progress=lambda it: ctx.progress(it, desc="speed"))  # fmt: skip
    return run, calls


def _speed_rows(
    arms: list, run: Any, calls: dict[str, int], quality: list[dict[str, Any]], n_tok: int
) -> list[dict[str, Any]]:
    """Tokens/s, speed-ups against AR and SD, and the round cost of each arm."""
    by_name = {r["method"]: r for r in quality}
    speed = []
    for name, method, _ in arms:
        vs_ar, vs_sd = run.speedup(name, "target-only AR"), run.speedup(name, SD_NAME)
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
            scale = calls[SD_NAME] / calls[name]
            est = run.ratio(name, SD_NAME)
            cost = (est.value * scale, est.low * scale, est.high * scale)
            row["round cost vs SD [95% CI]"] = f"{cost[0]:.3f} [{cost[1]:.3f}, {cost[2]:.3f}]"
            # the tau of a few timed prompts is noisy: tokens/s at the tau of the quality images' decode instead
            gain = by_name[name]["tau (tokens/target call)"] / by_name[SD_NAME]["tau (tokens/target call)"]
            row["speed-up vs SD at the quality tau [95% CI]"] = (
                f"{gain / cost[0]:.3f} [{gain / cost[2]:.3f}, {gain / cost[1]:.3f}]"
            )
        speed.append(row)
    return speed


def _acceptance_step(
    cfg: BenchConfig, models: dict[str, Any], arms: list, q_labels: Any, device: Any
) -> tuple[Any, list[dict[str, Any]], int]:
    """The acceptance step alone: the same recorded rounds verified with standard SD and with each LANTERN arm."""
    import torch

    from iclr25_lantern._decoding import verify_drafts
    from iclr25_shared.bench import interleaved

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
        est = step_run.ratio(name, SD_NAME)
        steps.append({"method": name, "microseconds per verification": 1e6 * step_run.median(name) / len(rounds),
                      "cost vs SD verification [95% CI]": f"{est.value:.3f} [{est.low:.3f}, {est.high:.3f}]"})  # fmt: skip
    return step_run, steps, len(rounds)


def _profile_rows(cfg: BenchConfig, models: dict[str, Any], arms: list, labels: Any) -> list[dict[str, Any]]:
    """CPU microseconds per round in each part of decoding, for every speculative arm."""
    profile = []
    for name, method, relax in arms:
        if method == "sd":
            prof = _round_profile(models, relax, labels, cfg.seed, cfg.gamma)
            profile.append({"method": name, **{f"{k} (us/round)": v for k, v in prof.items()}})
    return profile


def _notes(cfg: BenchConfig, n_tok: int, n_rounds: int) -> list[str]:
    """What each table measures and what its protocol holds equal."""
    return [
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
        f"acceptance step: {n_rounds} recorded verification rounds (gamma = {cfg.gamma} positions each) "
        "verified with verify_drafts (acceptance probabilities, draws, residual at the first rejection), "
        "interleaved with the same protocol.",
        f"profile: CPU microseconds per round (target call) in each part, one decode of the {cfg.images} speed "
        "prompts per speculative arm, parts timed with process_time wrappers (removed afterwards).",
    ]


def bench(cfg: BenchConfig, ctx: RunContext) -> Result:
    """Tokens/s of target-only AR, standard SD and LANTERN (shared interleaved protocol) and their quality."""
    import torch

    from iclr25_lantern._relaxed import latent_proximity

    device = ctx.torch_device()
    models = _bench_models(cfg, ctx, device)
    tic = time.perf_counter()
    table = latent_proximity(models["vq"].codebook.detach(), cfg.k)  # once per codebook
    timings = {"proximity_table": time.perf_counter() - tic}
    arms = _arms(cfg, table)

    # quality: many images, decoded once per arm, with intervals
    tic = time.perf_counter()
    quality, q_labels = _quality_table(cfg, ctx, models, arms, device)
    timings["quality"] = time.perf_counter() - tic

    # speed: each call decodes the same --images prompts with the same generator seed (identical tokens every call)
    labels = torch.from_numpy(np.random.default_rng(cfg.seed).integers(0, 10, cfg.images))
    tic = time.perf_counter()
    run, calls = _speed_run(cfg, ctx, models, arms, labels, device)
    timings["speed"] = time.perf_counter() - tic
    n_tok = 49 * cfg.images
    speed = _speed_rows(arms, run, calls, quality, n_tok)
    step_run, steps, n_rounds = _acceptance_step(cfg, models, arms, q_labels, device)
    tables: dict[str, Any] = {
        "speed": speed,
        "quality": quality,
        "acceptance_step": steps,
        "profile": _profile_rows(cfg, models, arms, labels),
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
        notes=_notes(cfg, n_tok, n_rounds),
    )
