"""The reproduction's frozen MoE: a small Hugging Face Mixtral trained on Wikipedia summaries with SmolLM2's tokenizer.

No MoE language model is packaged for offline use, so the reproduction pre-trains one (static top-2 of 8 experts,
as Mixtral) on the lead summaries of Wikipedia's vital articles (``iclr25_shared.data.wiki_summaries``), tokenised
with SmolLM2-135M's tokenizer and restricted to the ``vocab - 1`` most frequent training tokens plus one ``<unk>``
id (the LM head over all 49 152 ids would cost ten times the rest of this small model). The trained model is
cached (``save_pretrained``) under the iclr25 user cache, keyed by its spec, so later commands reuse it.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from iclr25_shared import cache_dir
from iclr25_shared.checks import check_int
from iclr25_shared.errors import ModelUnavailable

__all__ = ["MoESpec", "WikiTokens", "load_smollm2_tokenizer", "pretrain_moe", "wiki_moe", "wiki_tokens"]

_SMOLLM2_CACHE = "SmolLM2-135M-Instruct-Q4_1-fp32"  # the fp32 copy iclr25_shared.models writes


def load_smollm2_tokenizer() -> Any:
    """SmolLM2-135M's tokenizer, offline: the fp32 cache folder if present, else the packaged GGUF.

    Raises:
        ModelUnavailable: neither is installed (the message names the install command).
    """
    from transformers import AutoTokenizer

    from iclr25_shared.models import SMOLLM2_INSTALL, smollm2_gguf_path

    cached = cache_dir("models") / _SMOLLM2_CACHE
    if (cached / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(cached)
    gguf = smollm2_gguf_path()
    if gguf is None:
        raise ModelUnavailable(f"SmolLM2's tokenizer is not installed: `{SMOLLM2_INSTALL}`")
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


@dataclass(frozen=True)
class WikiTokens:
    """Token blocks of the Wikipedia summaries in the reduced vocabulary.

    Attributes:
        train, val: ``(blocks, block_len)`` int64 ids in ``[0, vocab)``; id 0 is ``<unk>``.
        vocab_ids: ``(vocab,)`` int64, the SmolLM2 id of each reduced id (``-1`` for ``<unk>``).
        pieces: ``(vocab,)`` the decoded text of each reduced id (``"<unk>"`` for 0).
    """

    train: np.ndarray
    val: np.ndarray
    vocab_ids: np.ndarray
    pieces: list[str]


def wiki_tokens(
    texts: list[str], tokenizer: Any, *, vocab: int, block_len: int, val_fraction: float = 0.1, seed: int = 0
) -> WikiTokens:
    """Tokenise ``texts`` (documents), split them into train/validation documents and cut fixed-length blocks.

    Documents are joined with the tokenizer's EOS id; the vocabulary is the ``vocab - 1`` most frequent
    *training* ids (ties by id) plus ``<unk>`` = 0.

    Raises:
        ValueError: fewer than 2 documents, or too little text for one block of each split.
    """
    vocab = check_int("vocab", vocab, low=2)
    block_len = check_int("block_len", block_len, low=2)
    if len(texts) < 2:
        raise ValueError(f"texts must hold at least 2 documents (train and validation), got {len(texts)}")
    order = np.random.default_rng(seed).permutation(len(texts))
    n_val = max(1, round(val_fraction * len(texts)))
    val_docs, train_docs = order[:n_val], order[n_val:]
    enc = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0

    def stream(docs: np.ndarray) -> np.ndarray:
        parts = []
        for i in docs:
            parts.append(np.asarray(enc[i], dtype=np.int64))
            parts.append(np.asarray([eos], dtype=np.int64))
        return np.concatenate(parts)

    tr, va = stream(train_docs), stream(val_docs)
    ids, counts = np.unique(tr, return_counts=True)
    keep = ids[np.lexsort((ids, -counts))][: vocab - 1]
    vocab_ids = np.concatenate([[-1], keep]).astype(np.int64)
    lut = {int(t): i + 1 for i, t in enumerate(keep)}

    def remap(a: np.ndarray) -> np.ndarray:
        return np.fromiter((lut.get(int(t), 0) for t in a), dtype=np.int64, count=len(a))

    tr, va = remap(tr), remap(va)
    if len(tr) < block_len or len(va) < block_len:
        raise ValueError(f"too little text for one block of {block_len} tokens in each split")
    train = tr[: len(tr) // block_len * block_len].reshape(-1, block_len)
    val = va[: len(va) // block_len * block_len].reshape(-1, block_len)
    pieces = ["<unk>"] + [tokenizer.decode([int(t)]) for t in keep]
    return WikiTokens(train=train, val=val, vocab_ids=vocab_ids, pieces=pieces)


@dataclass(frozen=True)
class MoESpec:
    """Size and training budget of the reproduction's MoE (a Hugging Face ``MixtralForCausalLM``)."""

    vocab: int = 8192
    hidden: int = 128
    layers: int = 4
    heads: int = 4
    experts: int = 8
    top_k: int = 2
    ffn: int = 256
    block_len: int = 64
    docs: int = 3000
    steps: int = 300
    batch: int = 16
    lr: float = 3e-3
    aux_loss: float = 0.01
    seed: int = 0

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


def _config(spec: MoESpec) -> Any:
    from transformers import MixtralConfig

    return MixtralConfig(
        vocab_size=spec.vocab,
        hidden_size=spec.hidden,
        intermediate_size=spec.ffn,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.heads,
        num_local_experts=spec.experts,
        num_experts_per_tok=spec.top_k,
        max_position_embeddings=spec.block_len,
        router_aux_loss_coef=spec.aux_loss,
        output_router_logits=True,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )


def pretrain_moe(spec: MoESpec, train: np.ndarray, *, device: Any = "cpu", progress: Any = None) -> Any:
    """Train the MoE from scratch on ``train`` blocks ``(blocks, block_len)`` with AdamW, LM loss + the
    host's load-balancing loss; return it in eval mode."""
    import torch
    from transformers import MixtralForCausalLM

    torch.manual_seed(spec.seed)
    model = MixtralForCausalLM(_config(spec)).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.01)
    warm = max(1, spec.steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, spec.steps) / spec.steps)),
    )
    gen = torch.Generator().manual_seed(spec.seed)
    data = torch.from_numpy(train)
    steps = range(spec.steps)
    for _ in progress(steps) if progress is not None else steps:
        rows = torch.randint(0, data.shape[0], (spec.batch,), generator=gen)
        ids = data[rows].to(device)
        out = model(input_ids=ids, labels=ids)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    model.eval()
    model.config.output_router_logits = False
    return model


def wiki_moe(
    spec: MoESpec,
    *,
    wiki_path: str | Path | None = None,
    label: str | None = None,
    device: Any = "cpu",
    cache: bool = True,
    log: Any = None,
    progress: Any = None,
) -> tuple[Any, WikiTokens]:
    """The reproduction's frozen MoE and its token blocks: from the cache, or tokenised and trained now.

    Args:
        wiki_path: a Wikipedia summaries JSON to train on instead of the installed copy (then nothing is cached).
        label: the option that named ``wiki_path`` (e.g. ``"--wiki-path"``), for error messages.

    Raises:
        DatasetUnavailable / ModelUnavailable: the Wikipedia summaries or SmolLM2's tokenizer are missing.
        InputError: ``wiki_path`` is not a summaries file, or holds too little text for one block per split.
    """
    import torch
    from transformers import MixtralForCausalLM

    from iclr25_shared.data import wiki_summaries

    folder = cache_dir("adak") / f"wiki-moe-{spec.key()}" if cache and wiki_path is None else None
    tokens_file = folder / "tokens.npz" if folder is not None else None
    if folder is not None and tokens_file.is_file() and (folder / "config.json").is_file():
        z = np.load(tokens_file, allow_pickle=False)
        tokens = WikiTokens(z["train"], z["val"], z["vocab_ids"], [str(p) for p in z["pieces"]])
        model = MixtralForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device).eval()
        model.config.output_router_logits = False
        if log:
            log.info(f"loaded the cached MoE from {folder}")
        return model, tokens
    corpus = wiki_summaries("en", path=wiki_path, label=label)
    texts = corpus.texts
    order = np.random.default_rng(spec.seed).permutation(len(texts))[: spec.docs]
    if log:
        log.info(f"tokenising {len(order)} Wikipedia summaries with SmolLM2's tokenizer")
    tokenizer = load_smollm2_tokenizer()
    try:
        tokens = wiki_tokens(
            [texts[i] for i in order], tokenizer, vocab=spec.vocab, block_len=spec.block_len, seed=spec.seed
        )
    except ValueError as exc:  # too few documents or too little text in the user's file
        if wiki_path is None:
            raise
        from iclr25_shared.errors import InputError

        raise InputError(f"{label or 'wiki_path'}: {str(wiki_path)!r}: {exc}") from None
    if log:
        log.info(f"pre-training the MoE ({spec.steps} steps, {tokens.train.shape[0]} train blocks)")
    model = pretrain_moe(spec, tokens.train, device=device, progress=progress)
    if folder is not None:
        model.save_pretrained(folder)
        np.savez(
            tokens_file,
            train=tokens.train,
            val=tokens.val,
            vocab_ids=tokens.vocab_ids,
            pieces=np.asarray(tokens.pieces),
        )
    return model, tokens
