"""The user's files: a ``--models`` folder written by ``reproduce --out`` and a ``--data`` folder of Fashion-MNIST.

Both are checked by the CLI before the command is imported (``INPUTS`` in cli.py) and again by the code that loads
them, so a corrupt, non-finite or foreign file raises :class:`~iclr25_shared.errors.InputError` naming the option
and the file (exit 2), never a torch traceback or its advice to unpickle unsafely.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from iclr25_shared.errors import InputError
from iclr25_shared.inputs import check_folder, read_torch

MODELS_FILE = "models.pt"
MODEL_KEYS = ("vq", "vq_shape", "target", "target_cfg", "drafter", "drafter_cfg", "clf")
"""What ``reproduce --out`` saves in models.pt: state dicts plus plain numbers (``vq_shape`` a tuple, the two
``*_cfg`` dicts of ints), all loadable with ``torch.load(weights_only=True)``."""


def _where(path: Path | str, label: str | None) -> str:
    return f"{label}: {str(path)!r}" if label else repr(str(path))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = " ".join(" ".join(text[:2]).split()) if text else type(exc).__name__
    return line if len(line) <= 200 else line[:197] + "..."


def load_models(folder: str | Path, *, label: str | None = "--models") -> dict[str, Any]:
    """The VQ-VAE, target, drafter and classifier saved by ``reproduce --out`` in ``folder/models.pt``.

    Raises:
        InputError: ``folder`` is missing or a file, has no models.pt, or models.pt is corrupt, holds objects that
            need unsafe unpickling, holds NaN/inf weights (names the tensor) or is not the layout ``reproduce``
            writes (names the missing or mismatched part).
    """
    from iclr25_lantern._models import VQVAE, FeatureCNN, TokenTransformer, TransformerConfig

    expected = f"a folder written by `reproduce --out` holding {MODELS_FILE}"
    root = check_folder(folder, label=label, expected=expected)
    path = root / MODELS_FILE
    if not path.exists():
        raise InputError(f"{_where(root, label)} holds no {MODELS_FILE}; expected {expected}")
    blob = read_torch(path, label=label, expected=f"a {MODELS_FILE} written by `reproduce --out`")
    where = _where(path, label)
    if not isinstance(blob, dict):
        raise InputError(f"{where} holds a {type(blob).__name__}; expected the dict `reproduce --out` writes")
    missing = [k for k in MODEL_KEYS if k not in blob]
    if missing:
        raise InputError(
            f"{where} has no {', '.join(map(repr, missing))}; expected {', '.join(MODEL_KEYS)} "
            "(the models.pt `reproduce --out` writes)"
        )

    def build(name: str, make: Any) -> Any:
        try:
            module = make()
            module.load_state_dict(blob[name])
        except (TypeError, ValueError, RuntimeError, KeyError, AttributeError) as exc:
            raise InputError(f"{where}: {name!r} does not fit its model ({_first_line(exc)})") from None
        return module.eval()

    def transformer(name: str) -> Any:
        cfg = blob[f"{name}_cfg"]
        if not isinstance(cfg, dict):
            raise InputError(f"{where}: {name + '_cfg'!r} is a {type(cfg).__name__}; expected a dict")
        try:
            config = TransformerConfig(**cfg)
        except TypeError as exc:
            raise InputError(f"{where}: {name + '_cfg'!r} is not a transformer config ({exc})") from None
        return build(name, lambda: TokenTransformer(config))

    shape = blob["vq_shape"]
    if not (isinstance(shape, (tuple, list)) and len(shape) == 2 and all(isinstance(v, int) for v in shape)):
        raise InputError(f"{where}: 'vq_shape' is {shape!r}; expected (codebook size, code dim)")
    models = {
        "vq": build("vq", lambda: VQVAE(*shape)),
        "target": transformer("target"),
        "drafter": transformer("drafter"),
        "clf": build("clf", FeatureCNN),
    }
    v_vq, v_t, v_d = (
        models["vq"].codebook_size,
        models["target"].cfg.vocab_size,
        models["drafter"].cfg.vocab_size,
    )
    if not v_vq == v_t == v_d:
        raise InputError(
            f"{where}: the codebook has {v_vq} codes but the target and drafter predict {v_t} and {v_d} tokens"
        )
    return models


def check_models_folder(path: Path, label: str) -> None:
    """The ``INPUTS`` check of ``--models`` (see :func:`load_models`)."""
    load_models(path, label=label)


def fashion_images(split: str, data: Any, *, label: str = "--data") -> tuple[Any, Any]:
    """``iclr25_shared.data.fashion_mnist(split, root=data, label=label)``: with a user's folder only that folder is
    read, and a folder without the split's files, or with truncated or foreign ones, raises :class:`InputError`
    naming ``label`` and the folder."""
    from iclr25_shared.data import fashion_mnist

    if data is None:
        return fashion_mnist(split)
    return fashion_mnist(split, root=Path(data), label=label)
