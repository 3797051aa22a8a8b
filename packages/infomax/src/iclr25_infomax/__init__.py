"""iclr25_infomax: InfoMax coreset selection (Tan et al., "Data Pruning by Information Maximization", ICLR 2025).

Keep the ``p`` samples that maximise total importance minus pairwise redundancy,

    max_{X ∈ {0,1}^N}  Σ_z X_z I(z) − α Σ_{z,s} K_{z,s} X_z X_s   s.t.  Σ_z X_z = p,

with a gradient-based solver on a kNN-sparsified ``K`` and optional dataset partitioning (arXiv:2506.01701).

>>> import numpy as np, iclr25_infomax as im
>>> feats = np.random.default_rng(0).normal(size=(1000, 16)).astype("float32")
>>> scores = np.random.default_rng(1).random(1000)
>>> K = im.knn_similarity(feats, k=10)
>>> idx = im.select(scores, K, budget=0.1, alpha=1.0)
>>> idx.shape
(100,)
"""

from typing import TYPE_CHECKING

from iclr25_shared import distribution_version, lazy_exports

if TYPE_CHECKING:
    from iclr25_infomax._baselines import (
        ccs_select,
        facility_location_select,
        greedy_select,
        kcenter_select,
        milp_select,
        random_select,
        topk_select,
    )
    from iclr25_infomax._scores import (
        el2n_scores,
        forgetting_scores,
        importance_scores,
        margin_scores,
        ssp_scores,
        train_scoring_model,
    )
    from iclr25_infomax._similarity import knn_similarity
    from iclr25_infomax._solver import (
        SolverResult,
        objective,
        partition_budgets,
        project_capped_simplex,
        select,
        solve,
    )
    from iclr25_infomax._validate import resolve_budget

_LAZY = {
    "ccs_select": "_baselines",
    "facility_location_select": "_baselines",
    "greedy_select": "_baselines",
    "kcenter_select": "_baselines",
    "milp_select": "_baselines",
    "random_select": "_baselines",
    "topk_select": "_baselines",
    "el2n_scores": "_scores",
    "forgetting_scores": "_scores",
    "importance_scores": "_scores",
    "margin_scores": "_scores",
    "ssp_scores": "_scores",
    "train_scoring_model": "_scores",
    "knn_similarity": "_similarity",
    "SolverResult": "_solver",
    "objective": "_solver",
    "partition_budgets": "_solver",
    "project_capped_simplex": "_solver",
    "select": "_solver",
    "solve": "_solver",
    "resolve_budget": "_validate",
}


__all__ = [
    "SolverResult",
    "__version__",
    "ccs_select",
    "el2n_scores",
    "facility_location_select",
    "forgetting_scores",
    "greedy_select",
    "importance_scores",
    "kcenter_select",
    "knn_similarity",
    "margin_scores",
    "milp_select",
    "objective",
    "partition_budgets",
    "project_capped_simplex",
    "random_select",
    "resolve_budget",
    "select",
    "solve",
    "ssp_scores",
    "topk_select",
    "train_scoring_model",
]
__version__ = distribution_version("iclr25-infomax")

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
