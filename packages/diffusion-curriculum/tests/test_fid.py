"""The FID feature network of the reproduction: what it is, how well it classifies, and the distance's invariants."""

import numpy as np
import pytest
import torch

from iclr25_diffusion_curriculum._fid import (
    FeatureNet,
    classifier_fid,
    feature_net_accuracy,
    feature_stats,
    train_feature_net,
)
from iclr25_shared.testing import require

CPU = torch.device("cpu")


def test_feature_net_classifies_fashion_mnist():
    from iclr25_diffusion_curriculum._training import load_images

    train_x, train_y = require(load_images, "fashion-mnist", "train", 16)
    test_x, test_y = require(load_images, "fashion-mnist", "test", 16)
    net = train_feature_net(train_x[:20_000], train_y[:20_000], seed=0, epochs=1, device=CPU)
    acc = feature_net_accuracy(net, test_x, test_y, CPU)
    assert acc > 0.72, (
        acc
    )  # 10 classes: chance is 0.10; the reproduction's net (60 000 images, 3 epochs): 0.85
    # real test images are far closer to the test-set statistics than noise or a single repeated image
    ref = feature_stats(net, test_x, CPU)
    real = classifier_fid(
        net, test_x[torch.randperm(10_000, generator=torch.Generator().manual_seed(0))[:500]], ref, CPU
    )
    noise = classifier_fid(net, torch.rand(500, 1, 16, 16) * 2 - 1, ref, CPU)
    one = classifier_fid(
        net, test_x[:1].expand(500, 1, 16, 16) + 0.01 * torch.randn(500, 1, 16, 16), ref, CPU
    )
    assert real < noise / 10 and real < one / 10, (real, noise, one)


def test_classifier_fid_is_zero_on_its_reference_and_order_free():
    torch.manual_seed(0)
    net = FeatureNet(8).eval()
    x = torch.rand(300, 1, 8, 8) * 2 - 1
    ref = feature_stats(net, x, CPU)
    assert ref[0].shape == (64,) and ref[1].shape == (64, 64) and ref[1].dtype == np.float64
    assert classifier_fid(net, x, ref, CPU) == pytest.approx(0.0, abs=1e-6)
    assert classifier_fid(net, x.flip(0), ref, CPU) == pytest.approx(0.0, abs=1e-6)
    shifted = classifier_fid(net, x + 0.5, ref, CPU)
    more = classifier_fid(net, x + 1.0, ref, CPU)
    assert 0 < shifted < more
    # features are computed in chunks of 1000: a set larger than a chunk gives the same statistics as one pass
    big = torch.rand(2300, 1, 8, 8)
    mu, cov = feature_stats(net, big, CPU)
    with torch.no_grad():
        f = net.features(big).double().numpy()
    np.testing.assert_allclose(mu, f.mean(0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(cov, np.cov(f, rowvar=False), rtol=1e-5, atol=1e-7)


def test_feature_net_accuracy_counts_correct_labels():
    class Fixed(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.one_hot(x.flatten(1)[:, 0].long(), 10).float()

    x = torch.tensor([0, 1, 2, 3]).float().view(4, 1, 1, 1)
    assert feature_net_accuracy(Fixed(), x, torch.tensor([0, 1, 9, 9]), CPU) == 0.5
