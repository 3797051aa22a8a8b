"""DebGCD: Debiased Learning with Distribution Guidance for Generalized Category Discovery (ICLR 2025, arXiv:2504.04804).

Generalized category discovery (GCD) labels every image of an unlabelled set that mixes known ("Old") and new
classes, given labels for part of the Old classes. DebGCD adds to the SimGCD baseline an auxiliary debiased
classifier, a one-vs-all semantic distribution detector in a separate feature space, and a curriculum that weights
each unlabelled image's pseudo-label loss by the detector's certainty.

    from iclr25_debgcd import GCDModel, GCDLossConfig, debgcd_loss, gcd_accuracy

    model = GCDModel(backbone, feat_dim=128, num_classes=10, num_old=5)   # any nn.Module backbone
    out = model(torch.cat([view1, view2]))                                 # (2B, C, H, W) images
    loss, parts = debgcd_loss(out, labels, mask_lab, epoch=0, cfg=GCDLossConfig())
    gcd_accuracy(y_true, y_pred, old_classes=range(5))                     # All / Old / New

Nothing heavy is imported at ``import iclr25_debgcd``: torch, scipy and scikit-learn load when a name that needs
them is first used.
"""

from __future__ import annotations

from iclr25_shared import distribution_version, lazy_exports

__version__ = distribution_version("iclr25-debgcd")

_LAZY = {
    "GCDAccuracy": "_metrics",
    "gcd_accuracy": "_metrics",
    "known_vs_new_auroc": "_metrics",
    "GCDLossConfig": "_losses",
    "GCDOutputs": "_losses",
    "certainty": "_losses",
    "debgcd_loss": "_losses",
    "debiased_loss": "_losses",
    "distill_loss": "_losses",
    "info_nce_loss": "_losses",
    "mean_entropy_regulariser": "_losses",
    "ova_consistency": "_losses",
    "ova_entropy": "_losses",
    "ova_loss": "_losses",
    "ova_probabilities": "_losses",
    "simgcd_loss": "_losses",
    "supcon_loss": "_losses",
    "teacher_temperature": "_losses",
    "unknown_score": "_losses",
    "CosineClassifier": "_model",
    "GCDModel": "_model",
    "efficientnet_lite0": "_model",
    "small_convnet": "_model",
    "GCDSplit": "_data",
    "augment": "_data",
    "gcd_split": "_data",
    "load_images": "_data",
    "load_npz": "_experiment",
    "TrainConfig": "_train",
    "TrainResult": "_train",
    "evaluate": "_train",
    "train_gcd": "_train",
}

__all__ = [*sorted(_LAZY), "__version__"]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
