"""Real image–caption inputs: Fashion-MNIST with templated captions, and a user's own pairs + unlabelled images.

Fashion-MNIST comes through ``iclr25_shared.data.fashion_mnist`` (Debian package or its cache). A user's data is
a tab-separated pairs file (``image_path<TAB>caption`` per line, paths relative to the file) and a folder of
unlabelled images (``.png``/``.jpg``/``.jpeg``/``.bmp``/``.webp``, read with Pillow).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from iclr25_shared.checks import check_float, check_int

__all__ = [
    "FASHION_NAMES",
    "TEMPLATES",
    "CaptionedSplit",
    "emoji_pairs",
    "fashion_captions",
    "fashion_split",
    "image_folder_files",
    "pairs_images",
    "read_image_folder",
    "read_pairs",
]

#: Fashion-MNIST class names as they appear in the captions.
FASHION_NAMES = (
    "t-shirt",
    "trouser",
    "pullover",
    "dress",
    "coat",
    "sandal",
    "shirt",
    "sneaker",
    "bag",
    "ankle boot",
)
#: Caption templates; each labelled image gets one at random.
TEMPLATES = (
    "a photo of a {}.",
    "a grayscale product photo of a {} from an online shop.",
    "a {} on a black background.",
    "a small picture showing a {}.",
    "a catalogue image of a {}, centred.",
)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")


def fashion_captions(labels: np.ndarray, rng: np.random.Generator) -> list[str]:
    """One templated caption per label (template drawn uniformly at random)."""
    t = rng.integers(len(TEMPLATES), size=len(labels))
    return [TEMPLATES[int(j)].format(FASHION_NAMES[int(c)]) for j, c in zip(t, labels)]


@dataclass
class CaptionedSplit:
    """A semi-supervised training split: captioned images and unlabelled images (uint8 arrays)."""

    labelled_images: np.ndarray  # (N_l, 28, 28)
    captions: list[str]
    labelled_classes: np.ndarray  # (N_l,)
    unlabelled_images: np.ndarray  # (N_u, 28, 28)
    unlabelled_classes: np.ndarray  # (N_u,), for diagnostics only


def fashion_split(
    images: np.ndarray, labels: np.ndarray, *, labelled_fraction: float, seed: int
) -> CaptionedSplit:
    """Split a pool into a captioned fraction (class-stratified shuffle) and the unlabelled rest.

    Raises:
        ValueError: ``labelled_fraction`` outside ``(0, 1]``, or fewer than one captioned image results.
    """
    f = check_float("labelled_fraction", labelled_fraction, low=0.0, high=1.0, low_inclusive=False)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(images))
    n_l = round(f * len(images))
    if n_l < 1:
        raise ValueError(f"labelled_fraction={f} of {len(images)} images leaves no captioned image")
    lab, unl = order[:n_l], order[n_l:]
    return CaptionedSplit(
        labelled_images=images[lab],
        captions=fashion_captions(labels[lab], rng),
        labelled_classes=labels[lab],
        unlabelled_images=images[unl],
        unlabelled_classes=labels[unl],
    )


def _pillow() -> None:
    """Pillow reads every user image; without it, say how to install it (exit 2 in the CLI)."""
    import importlib.util

    if importlib.util.find_spec("PIL") is None:
        from iclr25_shared.errors import SourceUnavailable

        raise SourceUnavailable(
            "reading images needs Pillow, which is not installed: pip install 'iclr25-semiclip[towers]'"
        )


def _read_image(path: Path, size: int, label: str | None = None) -> np.ndarray:
    from PIL import Image

    from iclr25_shared.inputs import read_image

    image = read_image(path, label=label, mode="RGB")  # InputError naming the file if it does not decode
    return np.asarray(image.resize((size, size), Image.BILINEAR), dtype=np.uint8)


def _where(path: Path, label: str | None) -> str:
    return f"{label}: {str(path)!r}" if label else repr(str(path))


def pairs_images(path: str | Path, *, label: str | None = None) -> tuple[list[Path], list[str]]:
    """Parse a pairs file (``image_path<TAB>caption`` per line, paths relative to it) without reading the images.

    Returns:
        The image paths (resolved, each an existing file) and the captions, in file order.

    Raises:
        InputError: the file is missing, empty or not UTF-8 text; a line has no tab or an empty caption; an image
            does not exist; no pair at all (each message names the file, the line and the image).
    """
    from iclr25_shared.errors import InputError
    from iclr25_shared.inputs import check_file

    path = check_file(path, label=label, expected="a pairs file ('image_path<TAB>caption' per line)")
    where = _where(path, label)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{where} is not UTF-8 text; expected 'image_path<TAB>caption' lines") from None
    images, captions = [], []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if "\t" not in line:
            raise InputError(f"{where} line {lineno}: expected 'image_path<TAB>caption', got {line[:60]!r}")
        rel, caption = line.split("\t", 1)
        image = (path.parent / rel.strip()).resolve()
        if not image.is_file():
            raise InputError(
                f"{where} line {lineno}: caption without an image: {str(image)!r} does not exist"
            )
        if not caption.strip():
            raise InputError(f"{where} line {lineno}: image {rel.strip()!r} has an empty caption")
        images.append(image)
        captions.append(caption.strip())
    if not images:
        raise InputError(f"{where} holds no image–caption pair")
    return images, captions


def read_pairs(path: str | Path, *, size: int = 64, label: str | None = None) -> tuple[np.ndarray, list[str]]:
    """Read ``image_path<TAB>caption`` lines → ``(N, 3, size, size)`` uint8 images and ``N`` captions.

    Args:
        path: the pairs file. size: output side in pixels. label: the option that named it, for the messages.

    Raises:
        InputError (a ``ValueError``): the file is empty or not text, a line has no tab or an empty caption, an
            image is missing or does not decode (e.g. a text file named ``.png``); the message names the file, the
            line or the image.
        SourceUnavailable: Pillow is not installed (the message gives the install command).
    """
    size = check_int("size", size, low=8)
    files, captions = pairs_images(path, label=label)
    _pillow()
    return np.stack([_read_image(f, size, label).transpose(2, 0, 1) for f in files]), captions


def image_folder_files(folder: str | Path, *, label: str | None = None) -> list[Path]:
    """The images of ``folder`` (suffixes :data:`IMAGE_SUFFIXES`), sorted by name.

    Raises:
        InputError: missing, not a folder, or it holds no image.
    """
    from iclr25_shared.errors import InputError
    from iclr25_shared.inputs import check_folder

    folder = check_folder(folder, label=label, expected="a folder of images")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise InputError(f"{_where(folder, label)} holds no image ({', '.join(IMAGE_SUFFIXES)})")
    return files


def read_image_folder(folder: str | Path, *, size: int = 64, label: str | None = None) -> np.ndarray:
    """All images of ``folder`` (sorted by name) → ``(N, 3, size, size)`` uint8.

    Raises:
        InputError (a ``ValueError``): not a folder, it holds no image, or an image does not decode (named).
        SourceUnavailable: Pillow is not installed.
    """
    size = check_int("size", size, low=8)
    files = image_folder_files(folder, label=label)
    _pillow()
    return np.stack([_read_image(p, size, label).transpose(2, 0, 1) for p in files])


def check_pairs(path: Path, label: str) -> None:
    """The CLI's check of ``--pairs``: every line parses and every listed image decodes (before any model)."""
    files, _ = pairs_images(path, label=label)
    _pillow()
    from iclr25_shared.inputs import read_image

    for f in files:
        read_image(f, label=label, mode=None)


def check_image_folder(path: Path, label: str) -> None:
    """The CLI's check of ``--images``: a folder whose every image decodes."""
    files = image_folder_files(path, label=label)
    _pillow()
    from iclr25_shared.inputs import read_image

    for f in files:
        read_image(f, label=label, mode=None)


def emoji_pairs(
    root: str | Path, *, size: int = 64, style: str = "google"
) -> tuple[np.ndarray, list[str], list[str]]:
    """The emoji image–name pairs of the npm package ``emoji-datasource-<style>`` (real designed images with
    human-written names; ``npm install emoji-datasource-google@16.0.0``).

    Args:
        root: the package folder (holding ``emoji.json`` and ``img/<style>/64/``).
        size: output side in pixels. style: the image set (``google``, ``apple``, ...).

    Returns:
        ``(images, captions, categories)``: ``(N, 3, size, size)`` uint8 (transparent pixels on white), the
        lower-cased names (``short_name`` when ``name`` is empty) and the 9 top-level categories.

    Raises:
        ValueError: ``emoji.json`` or the image folder is missing, or no entry has an image of ``style``.
    """
    import json

    from PIL import Image

    root = Path(root)
    meta, folder = root / "emoji.json", root / "img" / style / "64"
    if not meta.is_file() or not folder.is_dir():
        raise ValueError(
            f"{root} is not an emoji-datasource-{style} package (needs emoji.json and img/{style}/64/): "
            f"npm install emoji-datasource-{style}"
        )
    images, captions, categories = [], [], []
    for entry in json.loads(meta.read_text(encoding="utf-8")):
        path = folder / str(entry.get("image", ""))
        if not entry.get(f"has_img_{style}") or not path.is_file():
            continue
        with Image.open(path) as im:
            rgba = im.convert("RGBA").resize((size, size), Image.BILINEAR)
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        images.append(
            np.asarray(Image.alpha_composite(white, rgba).convert("RGB"), dtype=np.uint8).transpose(2, 0, 1)
        )
        captions.append(str(entry.get("name") or entry.get("short_name")).lower())
        categories.append(str(entry.get("category", "")))
    if not images:
        raise ValueError(f"{meta} lists no emoji with an image in {folder}")
    return np.stack(images), captions, categories
