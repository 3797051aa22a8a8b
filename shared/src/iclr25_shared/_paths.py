"""Where things live: the user cache and installed data packages (found without importing them)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

__all__ = ["cache_dir", "package_dir"]


def cache_dir(*parts: str) -> Path:
    """The iclr25 user cache (``$ICLR25_CACHE`` or the platform cache dir), created on demand."""
    import platformdirs

    root = Path(os.environ.get("ICLR25_CACHE") or platformdirs.user_cache_dir("iclr25"))
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def package_dir(import_name: str) -> Path | None:
    """Folder of an installed package, found with ``find_spec`` so its ``__init__`` is not run.

    Several data-carrying packages import heavy or broken dependencies at import time; we only need their files.
    Returns ``None`` when the package is not installed.
    """
    try:
        spec = importlib.util.find_spec(import_name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))
