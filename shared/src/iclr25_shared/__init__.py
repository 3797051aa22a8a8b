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
- :mod:`iclr25_shared.fetch` — fetching a missing source into the cache (Debian packages without root, URLs).

``cache_dir()`` is the user cache of every package; ``package_dir(name)`` the folder of an installed data package.
"""

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from iclr25_shared._paths import cache_dir, package_dir
from iclr25_shared.errors import DatasetUnavailable, ModelUnavailable, SourceUnavailable

__all__ = [
    "DatasetUnavailable",
    "ModelUnavailable",
    "SourceUnavailable",
    "__version__",
    "cache_dir",
    "distribution_version",
    "lazy_exports",
    "package_dir",
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


def lazy_exports(
    package: str, where: Mapping[str, str], *, eager: Iterable[str] = ("__version__",)
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's module-level ``__getattr__`` and ``__dir__`` (PEP 562) that import its public API on first use.

    ``import iclr25_<slug>`` then stays light (no torch / scipy / jax until a name that needs them is touched)::

        _WHERE = {"LOZO": "_optimizer", "MeZO": "_optimizer"}  # public name -> private submodule
        __all__ = ["LOZO", "MeZO", "__version__"]
        __getattr__, __dir__ = lazy_exports(__name__, _WHERE)

    Args:
        package: the package's ``__name__``.
        where: public name -> submodule (relative to ``package``) that defines it.
        eager: names defined in the package itself, listed by ``dir()`` besides ``where``'s (and the package's
            ``__all__``, when it has one).

    Returns:
        ``(__getattr__, __dir__)``. The first access imports ``package.<where[name]>``, caches the value in the
        package's namespace (later accesses never reach ``__getattr__``) and returns it; an unknown name raises
        ``AttributeError`` as for any module.
    """
    import importlib
    import sys

    names = dict(where)

    def __getattr__(name: str) -> Any:
        submodule = names.get(name)
        if submodule is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{submodule}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(names) | set(eager) | set(getattr(sys.modules.get(package), "__all__", ())))

    return __getattr__, __dir__


__version__ = distribution_version("iclr25-shared")
