"""Training loops for the small Fashion-MNIST models of the reproduction (standard, not part of LANTERN)."""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from iclr25_lantern._models import VQVAE, FeatureCNN, TokenTransformer, TransformerConfig, cosine_lr


def _batches(n: int, batch: int, steps: int, rng: np.random.Generator, device=None):
    for _ in range(steps):
        yield torch.from_numpy(rng.integers(0, n, size=batch)).to(device)


def train_vqvae(
    images: torch.Tensor,
    *,
    codebook_size: int,
    code_dim: int,
    steps: int,
    seed: int,
    batch: int = 64,
    log=None,
    device=None,
) -> VQVAE:
    """Train a :class:`VQVAE` on ``(n, 28, 28)`` images in [0, 1]; dead codes are re-seeded from encoder outputs
    every 100 steps (a standard fix for codebook collapse)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    device = images.device if device is None else torch.device(device)
    images = images.to(device)
    model = VQVAE(codebook_size, code_dim).to(device)
    with torch.no_grad():  # initialise the codebook from encoder outputs
        z = model.encoder(images[:512].unsqueeze(1)).permute(0, 2, 3, 1).reshape(-1, code_dim)
        model.codebook.copy_(z[torch.randperm(len(z)).to(device)[:codebook_size]])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    usage = torch.zeros(codebook_size, device=device)
    for step, idx in enumerate(_batches(len(images), batch, steps, rng, device)):
        for g in opt.param_groups:
            g["lr"] = cosine_lr(step, steps, 1e-3)
        loss, codes = model.loss(images[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        usage += torch.bincount(codes.flatten(), minlength=codebook_size)
        if (step + 1) % 100 == 0 and step < steps * 0.8:
            dead = (usage == 0).nonzero().flatten()
            if len(dead):
                with torch.no_grad():
                    z = model.encoder(images[idx].unsqueeze(1)).permute(0, 2, 3, 1).reshape(-1, code_dim)
                    model.codebook[dead] = z[torch.randint(0, len(z), (len(dead),)).to(device)]
            usage.zero_()
        if log is not None and (step + 1) % max(1, steps // 4) == 0:
            log.info("vq-vae step %d/%d loss %.4f", step + 1, steps, loss.item())
    return model.eval()


def train_token_model(
    tokens: torch.Tensor,
    labels: torch.Tensor,
    cfg: TransformerConfig,
    *,
    steps: int,
    seed: int,
    batch: int = 32,
    lr: float = 3e-3,
    label_dropout: float = 0.1,
    log=None,
    name: str = "model",
    device=None,
) -> TokenTransformer:
    """Train a class-conditional :class:`TokenTransformer` on ``(n, 49)`` token grids with next-token
    cross-entropy; the class token is replaced by the null token with probability ``label_dropout`` (for CFG)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    device = tokens.device if device is None else torch.device(device)
    tokens, labels = tokens.to(device), labels.to(device)
    model = TokenTransformer(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    for step, idx in enumerate(_batches(len(tokens), batch, steps, rng, device)):
        for g in opt.param_groups:
            g["lr"] = cosine_lr(step, steps, lr)
        cond = cfg.vocab_size + labels[idx]
        drop = (torch.rand(len(idx)) < label_dropout).to(device)
        cond = torch.where(drop, cfg.vocab_size + cfg.num_classes, cond)
        seq = torch.cat([cond[:, None], tokens[idx]], dim=1)
        logits = model.logits(seq[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), seq[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if log is not None and (step + 1) % max(1, steps // 4) == 0:
            log.info("%s step %d/%d loss %.4f", name, step + 1, steps, loss.item())
    return model.eval()


def train_classifier(
    images: torch.Tensor, labels: torch.Tensor, *, steps: int, seed: int, batch: int = 64, device=None
):
    """Train a :class:`FeatureCNN` (cross-entropy, Adam)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    device = images.device if device is None else torch.device(device)
    images, labels = images.to(device), labels.to(device)
    model = FeatureCNN().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for step, idx in enumerate(_batches(len(images), batch, steps, rng, device)):
        for g in opt.param_groups:
            g["lr"] = cosine_lr(step, steps, 2e-3)
        loss = F.cross_entropy(model(images[idx]), labels[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@torch.no_grad()
def token_nll(model: TokenTransformer, tokens: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean per-token negative log-likelihood (nats) of ``(n, 49)`` token grids under ``model``, conditional."""
    seq = torch.cat([(model.cfg.vocab_size + labels)[:, None], tokens], dim=1)
    logits = model.logits(seq[:, :-1])
    return float(F.cross_entropy(logits.reshape(-1, model.cfg.vocab_size), seq[:, 1:].reshape(-1)))
