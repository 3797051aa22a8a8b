"""__TITLE__ (ICLR 2025, arXiv:__ARXIV__).

One paragraph: what the method does, the public entry points, and a three-line example.

Only the public API is exported here; nothing heavy is imported at ``import iclr25___SLUG__`` (heavy stacks are
imported inside the functions that need them, or lazily through ``iclr25_shared.lazy_exports``).
"""

from iclr25___SLUG__._method import __ALGORITHM__
from iclr25_shared import distribution_version

__all__ = ["__ALGORITHM__", "__version__"]
__version__ = distribution_version("iclr25-__DIST__")
