"""Names of the residual-connection variants the experiments compare (no heavy imports: the CLI validates with it)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_EXPANSION_RATE", "Variant"]

MAX_EXPANSION_RATE = 16


@dataclass(frozen=True, kw_only=True)
class Variant:
    """Residual connections of a run: ``expansion_rate=0`` is the residual (Pre-Norm) baseline."""

    name: str
    expansion_rate: int = 0
    dynamic: bool = True
    tanh: bool = True

    @staticmethod
    def parse(text: str) -> Variant:
        """``residual``, or ``dhc<n>`` / ``shc<n>`` (e.g. ``dhc4``), optionally with ``-notanh``.

        Raises:
            ValueError: anything else (the message lists the accepted forms).
        """
        key = str(text).strip().lower()
        if key == "residual":
            return Variant(name="residual")
        tanh = not key.endswith("-notanh")
        core = key.removesuffix("-notanh")
        if core[:3] in ("dhc", "shc") and core[3:].isdigit() and int(core[3:]) >= 1:
            n = int(core[3:])
            return Variant(
                name=f"{core[:3].upper()}x{n}{'' if tanh else ' w/o tanh'}",
                expansion_rate=n,
                dynamic=core[:3] == "dhc",
                tanh=tanh,
            )
        raise ValueError(
            f"variant must be residual, dhc<n>, shc<n> (n >= 1, optional -notanh suffix); got {text!r}"
        )


def check_variant(name: str, value: str) -> Variant:
    """Parse a variant given on the command line; ``ValueError`` names the field, the value and the forms."""
    try:
        variant = Variant.parse(value)
    except ValueError:
        raise ValueError(
            f"{name} must be residual, dhc<n> or shc<n> with n in 1..{MAX_EXPANSION_RATE} (optional -notanh "
            f"suffix), got {value!r}"
        ) from None
    if variant.expansion_rate > MAX_EXPANSION_RATE:
        raise ValueError(
            f"{name}: expansion rate must be in 1..{MAX_EXPANSION_RATE}, got {variant.expansion_rate}"
        )
    return variant
