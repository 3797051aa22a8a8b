"""The GCD split protocol, the augmentation, the model heads and a short training run on real digits."""

import numpy as np
import pytest
import torch

from iclr25_debgcd import (
    CosineClassifier,
    GCDLossConfig,
    GCDModel,
    TrainConfig,
    augment,
    gcd_split,
    load_images,
    train_gcd,
)

torch.set_num_threads(1)


def test_split_labels_the_requested_fraction_of_known_classes_only():
    y = np.repeat(np.arange(6), [10, 11, 12, 13, 14, 15])
    sp = gcd_split(y, known_classes=[4, 1], labelled_fraction=0.5, seed=3)
    # Old classes come first in the given order, New ones after in increasing original id
    assert sp.original == (4, 1, 0, 2, 3, 5) and sp.num_old == 2 and sp.num_classes == 6
    assert np.array_equal(np.asarray(sp.original)[sp.labels], y)
    for c, n in ((4, 14), (1, 11)):
        assert sp.labelled[y == c].sum() == n // 2
    assert not sp.labelled[~np.isin(y, [4, 1])].any()
    # the labelled images are re-indexed into 0..K_old-1
    assert set(sp.labels[sp.labelled].tolist()) == {0, 1}


def test_split_is_seeded():
    y = np.repeat(np.arange(4), 20)
    a, b = gcd_split(y, [0, 1], 0.5, seed=1), gcd_split(y, [0, 1], 0.5, seed=1)
    c = gcd_split(y, [0, 1], 0.5, seed=2)
    assert np.array_equal(a.labelled, b.labelled) and not np.array_equal(a.labelled, c.labelled)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"known_classes": [0, 7]}, r"known_classes \[7\] are absent"),
        ({"labelled_fraction": 0.0}, "labelled_fraction must be in"),
        ({"labelled_fraction": 1.5}, "labelled_fraction must be in"),
        ({"num_classes": 1}, "num_classes must be >="),
        ({"num_classes": 3}, "num_classes must be >="),  # fewer than the 4 classes present
        ({"known_classes": [1, 1]}, "distinct"),
        ({"known_classes": []}, "at least one"),
    ],
)
def test_bad_split_inputs_are_refused_with_the_field_name(kwargs, match):
    y = np.repeat(np.arange(4), 5)
    args = {"known_classes": [0, 1], "labelled_fraction": 0.5} | kwargs
    with pytest.raises(ValueError, match=match):
        gcd_split(y, **args)


def test_augment_translates_without_mixing_images_and_is_seeded():
    x = torch.zeros(3, 1, 6, 6)
    x[:, :, 2:4, 2:4] = 1.0
    v = augment(x, shift=1, flip=False, noise=0.0, generator=torch.Generator().manual_seed(0))
    assert v.shape == x.shape
    assert torch.all(v.sum(dim=(1, 2, 3)) == 4)  # a 2x2 block shifted by <= 1 px stays inside
    w = augment(x, shift=1, flip=False, noise=0.0, generator=torch.Generator().manual_seed(0))
    assert torch.equal(v, w)
    # shift 0, no flip, no noise: identity
    assert torch.equal(augment(x, shift=0, flip=False, noise=0.0, generator=torch.Generator()), x)


def test_cosine_classifier_equals_weight_norm_with_unit_gain():
    torch.manual_seed(0)
    clf = CosineClassifier(5, 3)
    ref = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(5, 3, bias=False))
    ref.parametrizations.weight.original0.data.fill_(1.0)  # the gain g
    ref.parametrizations.weight.original1.data.copy_(clf.weight.data)  # the direction v
    x = torch.randn(4, 5)
    expected = ref(torch.nn.functional.normalize(x, dim=-1))
    assert torch.allclose(clf(x), expected, atol=1e-6)
    assert clf(x).abs().max() <= 1.0 + 1e-6


def test_model_output_shapes():
    model = GCDModel(torch.nn.Flatten(), 12, num_classes=7, num_old=3, hidden=16, bottleneck=8)
    out = model(torch.randn(10, 3, 4))
    assert out.proj.shape == (10, 8) and out.logits.shape == (10, 7)
    assert out.logits_deb.shape == (10, 7) and out.logits_ood.shape == (10, 6)
    with pytest.raises(ValueError, match="num_old"):
        GCDModel(torch.nn.Flatten(), 12, num_classes=3, num_old=4)


def test_train_config_refuses_bad_values():
    with pytest.raises(ValueError, match="method must be one of"):
        TrainConfig(method="gcd")
    with pytest.raises(ValueError, match="epochs"):
        TrainConfig(epochs=0)


def _digits_subset(per_class=20):
    x, y = load_images("digits", per_class=per_class, seed=0)
    return x, y, gcd_split(y, [0, 1, 2, 3, 4], 0.5, seed=0)


def test_a_short_debgcd_run_on_real_digits_reports_every_diagnostic():
    x, _y, sp = _digits_subset()
    cfg = TrainConfig(method="debgcd", epochs=2, batch_size=50, hidden=32, feat_dim=16, bottleneck=16)
    res = train_gcd(x, sp, cfg, seed=0, eval_every=1)
    assert len(res.history) == 2 and res.predictions.shape == (int(sp.unlabelled.sum()),)
    assert {"all", "old", "new", "deb_all", "auroc", "certainty", "pl_rate"} <= set(res.final)
    assert "auroc" in res.history[0] and all(np.isfinite(r["loss"]) for r in res.history)
    assert 0.0 <= res.final["certainty"] <= 1.0


@pytest.mark.slow
def test_training_on_real_digits_learns_old_classes_and_a_detector_better_than_chance():
    x, _y, sp = _digits_subset(60)
    cfg = TrainConfig(
        method="debgcd",
        epochs=15,
        batch_size=64,
        hidden=128,
        feat_dim=64,
        bottleneck=64,
        shift=1,
        loss=GCDLossConfig(warmup_teacher_epochs=2),
    )
    res = train_gcd(x, sp, cfg, seed=0)
    # chance is 10 % (All) and 0.5 (AUROC)
    assert res.final["all"] > 0.4 and res.final["old"] > 0.7
    assert res.final["auroc"] > 0.75


def test_same_seed_same_result_and_simgcd_has_no_debgcd_outputs():
    x, _y, sp = _digits_subset()
    cfg = TrainConfig(method="simgcd", epochs=2, batch_size=64, hidden=32, feat_dim=16, bottleneck=16)
    a, b = train_gcd(x, sp, cfg, seed=5), train_gcd(x, sp, cfg, seed=5)
    assert np.array_equal(a.predictions, b.predictions) and a.final == b.final
    assert "auroc" not in a.final


def test_training_refuses_images_that_do_not_match_the_split():
    x, _y, sp = _digits_subset()
    with pytest.raises(ValueError, match="images"):
        train_gcd(x[:-1], sp, TrainConfig(epochs=1))
    bad = x.copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        train_gcd(bad, sp, TrainConfig(epochs=1))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_training_runs_on_cuda():
    x, _y, sp = _digits_subset()
    cfg = TrainConfig(method="debgcd", epochs=1, batch_size=64, hidden=32, feat_dim=16, bottleneck=16)
    res = train_gcd(x, sp, cfg, seed=0, device="cuda")
    assert next(res.model.parameters()).is_cuda and np.isfinite(res.final["all"])


@pytest.mark.slow
def test_efficientnet_lite0_backbone_loads_the_packaged_imagenet_weights():
    pytest.importorskip("timm")
    from iclr25_debgcd import efficientnet_lite0

    try:
        net, dim = efficientnet_lite0(trainable_blocks=1)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    assert dim == 1280
    trainable = {n.split(".")[0] for n, p in net.named_parameters() if p.requires_grad}
    assert trainable == {"blocks", "conv_head", "bn2"}
    assert all(not p.requires_grad for n, p in net.named_parameters() if n.startswith("blocks.0"))
    net.eval()
    with torch.no_grad():
        f = net(torch.randn(2, 3, 32, 32))
    assert f.shape == (2, 1280) and torch.isfinite(f).all()


def test_fashion_mnist_subset_loads_as_float_images_in_unit_range():
    from iclr25_shared.testing import require

    x, y = require(load_images, "fashion-mnist", per_class=3, seed=0)
    assert x.shape == (30, 1, 28, 28) and x.dtype == np.float32
    assert x.min() >= 0.0 and x.max() <= 1.0 and x.max() > 0.5
    assert np.array_equal(np.bincount(y), np.full(10, 3))


def test_unknown_data_name_is_refused():
    with pytest.raises(ValueError, match="data must be one of fashion-mnist, digits"):
        load_images("cifar10")


def test_npz_loader_accepts_uint8_and_channel_first_images(tmp_path):
    from iclr25_debgcd._experiment import load_npz

    p = tmp_path / "u8.npz"
    np.savez(p, images=np.full((3, 5, 5), 255, np.uint8), labels=np.array([0, 1, 1]))
    x, y = load_npz(p)
    assert x.shape == (3, 1, 5, 5) and x.dtype == np.float32 and x.max() == 1.0 and y.dtype == np.int64
    q = tmp_path / "chw.npz"
    np.savez(q, images=np.zeros((2, 3, 4, 4), np.float32), labels=np.array([0, 1]))
    assert load_npz(q)[0].shape == (2, 3, 4, 4)
    r = tmp_path / "neg.npz"
    np.savez(r, images=np.zeros((2, 4, 4)), labels=np.array([0, -1]))
    with pytest.raises(ValueError, match="non-negative integers"):
        load_npz(r)
