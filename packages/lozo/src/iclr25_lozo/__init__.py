"""iclr25_lozo: LOZO, low-rank zeroth-order fine-tuning (Chen et al., ICLR 2025, arXiv 2410.07698).

Public API:

- :class:`LOZO` — the optimizer (LOZO, and LOZO-M with ``momentum > 0``), ``step(closure)`` with forward passes only.
- :class:`MeZO` — the full-Gaussian zeroth-order SGD baseline with the same interface.
- :func:`decay_param_groups` — weight-decay groups that skip norm layers and biases by module type.

Nothing heavy is imported at ``import iclr25_lozo`` (so ``iclr25-lozo --help`` stays fast): the names below load
torch on first use.
"""

from typing import TYPE_CHECKING

from iclr25_shared import distribution_version, lazy_exports

if TYPE_CHECKING:
    from iclr25_lozo._optimizer import LOZO, MeZO, ZerothOrderOptimizer, decay_param_groups

_WHERE = {
    "LOZO": "_optimizer",
    "MeZO": "_optimizer",
    "ZerothOrderOptimizer": "_optimizer",
    "decay_param_groups": "_optimizer",
}

__all__ = ["LOZO", "MeZO", "ZerothOrderOptimizer", "__version__", "decay_param_groups"]
__version__ = distribution_version("iclr25-lozo")

__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
