"""PRDP: Progressively Refined Differentiable Physics (Bhatia, Koehler, Thuerey; ICLR 2025, arXiv:2502.19611).

Differentiable fixed-iteration sparse linear solvers (unrolled and implicit), PDE operators, and the progressive
refinement controller that raises the solver's iteration count only when the validation metric plateaus.

The public names load lazily (module ``__getattr__``), so ``import iclr25_prdp`` does not import JAX.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iclr25_shared import distribution_version, lazy_exports

__version__ = distribution_version("iclr25-prdp")

_LAZY = {
    "Decision": "_controller",
    "RefinementController": "_controller",
    "ema": "_controller",
    "Operator": "_operators",
    "advection_diffusion": "_operators",
    "as_operator": "_operators",
    "heat": "_operators",
    "laplacian": "_operators",
    "DIFF_MODES": "_solvers",
    "METHODS": "_solvers",
    "conjugate_gradient": "_solvers",
    "gauss_seidel": "_solvers",
    "jacobi": "_solvers",
    "solve": "_solvers",
    "steepest_descent": "_solvers",
    "PRDPRun": "_training",
    "TrainingLog": "_training",
    "train_with_prdp": "_training",
}

__all__ = [
    "DIFF_MODES",
    "METHODS",
    "Decision",
    "Operator",
    "PRDPRun",
    "RefinementController",
    "TrainingLog",
    "__version__",
    "advection_diffusion",
    "as_operator",
    "conjugate_gradient",
    "ema",
    "gauss_seidel",
    "heat",
    "jacobi",
    "laplacian",
    "solve",
    "steepest_descent",
    "train_with_prdp",
]

if TYPE_CHECKING:
    from iclr25_prdp._controller import Decision, RefinementController, ema
    from iclr25_prdp._operators import Operator, advection_diffusion, as_operator, heat, laplacian
    from iclr25_prdp._solvers import (
        DIFF_MODES,
        METHODS,
        conjugate_gradient,
        gauss_seidel,
        jacobi,
        solve,
        steepest_descent,
    )
    from iclr25_prdp._training import PRDPRun, TrainingLog, train_with_prdp

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
