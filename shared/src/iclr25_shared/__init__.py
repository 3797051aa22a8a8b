"""iclr25_shared: the thin core shared by the iclr25 method packages.

Submodules (import them directly; nothing heavy runs at import):

- :mod:`iclr25_shared.data` — offline loaders for real inputs (Wikipedia summaries, digits, Fashion-MNIST).
- :mod:`iclr25_shared.models` — packaged pretrained weights (SmolLM2-135M-Instruct).
- :mod:`iclr25_shared.device` — device resolution, seeding, peak-memory and time measurement.
- :mod:`iclr25_shared.metrics` — accuracy with confidence intervals, cluster accuracy, Fréchet distance.
- :mod:`iclr25_shared.results` — one run record written atomically as results.json / results.md.
- :mod:`iclr25_shared.cli` — the CLI contract: config dataclass → subcommand, exit codes.
"""

from iclr25_shared.errors import DatasetUnavailable, ModelUnavailable, SourceUnavailable

__all__ = ["DatasetUnavailable", "ModelUnavailable", "SourceUnavailable", "__version__"]
__version__ = "0.1.0"
