"""iclr25_lozo: LOZO, low-rank zeroth-order fine-tuning (Chen et al., ICLR 2025, arXiv 2410.07698).

Public API:

- :class:`LOZO` — the optimizer (LOZO, and LOZO-M with ``momentum > 0``), ``step(closure)`` with forward passes only.
- :class:`MeZO` — the full-Gaussian zeroth-order SGD baseline with the same interface.
- :func:`decay_param_groups` — weight-decay groups that skip norm layers and biases by module type.
"""

from iclr25_lozo._optimizer import LOZO, MeZO, ZerothOrderOptimizer, decay_param_groups
from iclr25_shared import distribution_version

__all__ = ["LOZO", "MeZO", "ZerothOrderOptimizer", "__version__", "decay_param_groups"]
__version__ = distribution_version("iclr25-lozo")
