"""iclr25_shared: the thin core shared by the iclr25 method packages.

Submodules (import them directly; nothing heavy runs at import):

- :mod:`iclr25_shared.data` — offline loaders for real inputs (Wikipedia summaries, digits, Fashion-MNIST).
- :mod:`iclr25_shared.models` — packaged pretrained weights (SmolLM2-135M-Instruct).
- :mod:`iclr25_shared.device` — device resolution, seeding, peak-memory and time measurement.
- :mod:`iclr25_shared.metrics` — accuracy with confidence intervals, cluster accuracy, Fréchet distance.
- :mod:`iclr25_shared.results` — one run record written atomically as results.json / results.md.
- :mod:`iclr25_shared.cli` — the CLI contract: config dataclass → subcommand, run context, results, exit codes.
- :mod:`iclr25_shared.checks` — validators with messages that name the field, the value and what is allowed.
- :mod:`iclr25_shared.testing` — the contract tests every package runs, and ``require`` for data-backed tests.
"""

from iclr25_shared._paths import cache_dir
from iclr25_shared.errors import DatasetUnavailable, ModelUnavailable, SourceUnavailable

__all__ = [
    "DatasetUnavailable",
    "ModelUnavailable",
    "SourceUnavailable",
    "__version__",
    "cache_dir",
    "distribution_version",
]


def distribution_version(distribution: str) -> str:
    """The installed version of ``distribution`` (from its metadata), or ``"0+unknown"`` when not installed.

    Packages set ``__version__ = distribution_version("iclr25-<slug>")`` so the version lives in pyproject only.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "0+unknown"


__version__ = distribution_version("iclr25-shared")
