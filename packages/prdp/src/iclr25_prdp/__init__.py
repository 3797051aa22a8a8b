"""PRDP: Progressively Refined Differentiable Physics (Bhatia, Koehler, Thuerey; ICLR 2025, arXiv:2502.19611).

Differentiable fixed-iteration sparse linear solvers (unrolled and implicit), PDE operators, and the progressive
refinement controller that raises the solver's iteration count only when the validation metric plateaus.
"""

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
from iclr25_prdp._training import TrainingLog, train_with_prdp
from iclr25_shared import distribution_version

__version__ = distribution_version("iclr25-prdp")

__all__ = [
    "DIFF_MODES",
    "METHODS",
    "Decision",
    "Operator",
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
