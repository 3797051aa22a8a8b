"""SiMHand: mining similar hands for 3-D hand pose pre-training (ICLR 2025, arXiv:2502.15251).

Contrastive pre-training whose positives are *different* images with similar 2-D hand poses
(:func:`mine_similar_hands`), with the NT-Xent loss weighted inside the exponent by the pose distance of each pair
(:func:`weighted_ntxent`, :func:`pair_weights`), on PeCLR-style equivariant views (:func:`similarity_views`,
:func:`undo_latent_transform`); evaluated by 3-D keypoint regression (:func:`mpjpe`, :func:`pa_mpjpe`). Hands are
rendered offline by a kinematic 21-joint model over real photos (:func:`render_hands`)::

    from iclr25_simhand import mine_similar_hands, pair_weights, weighted_ntxent
    idx, _ = mine_similar_hands(keypoints2d)               # (n,) positive per sample, never the same image
    loss = weighted_ntxent(z1, z2, *pair_weights(j1, j2))   # weights from the views' 2-D joints

Nothing heavy is imported at ``import iclr25_simhand``; torch / scikit-learn / scikit-image load on first use.
"""

from iclr25_shared import distribution_version, lazy_exports

_EXPORTS = {
    "ntxent": "_loss",
    "weighted_ntxent": "_loss",
    "adaptive_weights": "_loss",
    "pair_weights": "_loss",
    "mpjpe_2d_matrix": "_loss",
    "mine_similar_hands": "_pose",
    "normalise_keypoints": "_pose",
    "mpjpe": "_pose",
    "pa_mpjpe": "_pose",
    "procrustes_align": "_pose",
    "undo_latent_transform": "_pose",
    "similarity_views": "_pose",
    "HandBatch": "_render",
    "render_hands": "_render",
    "forward_kinematics": "_render",
    "project": "_render",
    "load_backgrounds": "_render",
    "load_freihand": "_render",
    "HandEncoder": "_model",
    "SmallConvNet": "_model",
}
__all__ = [*_EXPORTS, "__version__"]
__version__ = distribution_version("iclr25-simhand")
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
