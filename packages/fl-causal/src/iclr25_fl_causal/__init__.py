"""iclr25_fl_causal: causal effects of time-varying treatment regimes on functional longitudinal data.

Ying (ICLR 2025, arXiv:2206.12525) identifies the effect of a (stochastic, dynamic) regime on continuously
monitored data as the limit, as the time partition refines, of the discrete g-computation, IPW and doubly robust
formulas, with death (truncation) and censoring (a second treatment). This package estimates them on any
partition of long-format data and shows them settle as the partition refines (:func:`refine`).

    >>> from iclr25_fl_causal import simulate, doubly_robust
    >>> data = simulate(1000, n_fine=20, seed=0)
    >>> res = doubly_robust(data, "always", grid=0.05, outcome_model="cum_L + cum_A + L + A",
    ...                     treatment_model="first + L + first:L + A_lag + A_lag:L")
"""

from typing import TYPE_CHECKING

from iclr25_shared import distribution_version, lazy_exports

if TYPE_CHECKING:
    from iclr25_fl_causal._data import DiscreteData, LongitudinalData
    from iclr25_fl_causal._datasets import gvhd, hiv_art, zepid_longitudinal
    from iclr25_fl_causal._estimators import (
        PositivityWarning,
        Result,
        doubly_robust,
        g_computation,
        ipw,
        refine,
    )
    from iclr25_fl_causal._glm import ConvergenceWarning, Model
    from iclr25_fl_causal._regimes import Regime
    from iclr25_fl_causal._simulate import SimulationParams, simulate, true_value

_WHERE = {
    "DiscreteData": "_data",
    "LongitudinalData": "_data",
    "gvhd": "_datasets",
    "hiv_art": "_datasets",
    "zepid_longitudinal": "_datasets",
    "PositivityWarning": "_estimators",
    "Result": "_estimators",
    "doubly_robust": "_estimators",
    "g_computation": "_estimators",
    "ipw": "_estimators",
    "refine": "_estimators",
    "ConvergenceWarning": "_glm",
    "Model": "_glm",
    "Regime": "_regimes",
    "SimulationParams": "_simulate",
    "simulate": "_simulate",
    "true_value": "_simulate",
}

__all__ = [
    "ConvergenceWarning",
    "DiscreteData",
    "LongitudinalData",
    "Model",
    "PositivityWarning",
    "Regime",
    "Result",
    "SimulationParams",
    "__version__",
    "doubly_robust",
    "g_computation",
    "gvhd",
    "hiv_art",
    "ipw",
    "refine",
    "simulate",
    "true_value",
    "zepid_longitudinal",
]
__version__ = distribution_version("iclr25-fl-causal")

__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
