"""The frozen towers: augmentation, device handling, and the packaged pretrained weights (slow)."""

import pytest
import torch

from iclr25_semiclip import SemiCLIPHead, Settings, SurrogateCaptions, strong_view, train_stage2
from iclr25_semiclip._stages import Features


def test_strong_view_is_deterministic_in_range_and_changes_the_image():
    x = torch.randint(0, 256, (4, 28, 28), dtype=torch.uint8)
    a = strong_view(x, torch.Generator().manual_seed(0))
    b = strong_view(x, torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.shape == (4, 28, 28)
    assert a.min() >= 0 and a.max() <= 1
    assert not torch.allclose(a, x.float() / 255)
    rgb = strong_view(torch.randint(0, 256, (2, 3, 16, 16), dtype=torch.uint8), torch.Generator())
    assert rgb.shape == (2, 3, 16, 16)
    with pytest.raises(ValueError, match="images must be"):
        strong_view(torch.zeros(3, 3), torch.Generator())


def test_image_tower_accepts_grey_and_rgb_and_refuses_other_layouts(tiny):
    image, _ = tiny
    grey = image.encode(torch.randint(0, 256, (3, 28, 28), dtype=torch.uint8))
    rgb = image.encode(torch.rand(3, 3, 20, 20))
    assert grey.shape == rgb.shape == (3, image.backbone.num_features)
    with pytest.raises(ValueError, match="images must be"):
        image.encode(torch.zeros(2, 2, 8, 8))


@pytest.mark.gpu
def test_stage2_on_cuda_matches_cpu(tiny):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _, tower = tiny
    g = torch.Generator().manual_seed(0)
    fe = Features(
        *(torch.randn(n, d, generator=g) for n, d in ((8, 6), (8, tower.dim))),
        (torch.rand(8, 4, generator=g) < 0.5).float(),
        torch.randn(12, 6, generator=g),
        torch.randn(12, 6, generator=g),
    )
    results = []
    for device in ("cpu", "cuda"):
        torch.manual_seed(0)
        head = SemiCLIPHead(6, tower.dim, dim=4)
        head.init_concepts(torch.randn(4, tower.dim))
        head.to(device)
        tw = tower.to(device)
        sur = SurrogateCaptions(tw, ["coat", "dress", "bag", "shirt"], words=2).to(device)
        fd = Features(
            *(
                t.to(device)
                for t in (
                    fe.labelled_image,
                    fe.labelled_text,
                    fe.concept_targets,
                    fe.unlabelled_weak,
                    fe.unlabelled_strong,
                )
            )
        )
        stored = head.concept_logits(head.image(fd.unlabelled_weak)).detach()
        hist = train_stage2(
            head,
            sur,
            tw,
            fd,
            stored,
            steps=2,
            settings=Settings(words=2, topk=2),
            generator=torch.Generator().manual_seed(1),
        )
        results.append(hist[-1]["clip"])
    tower.to("cpu")
    assert results[1] == pytest.approx(results[0], rel=1e-3)


@pytest.mark.slow
def test_packaged_towers_load_offline_and_carry_pretrained_knowledge():
    from iclr25_semiclip import load_image_tower, load_text_tower
    from iclr25_shared.testing import require

    text = require(load_text_tower)
    image = require(load_image_tower, resolution=64)
    assert text.dim == 384 and image.backbone.num_features == 1280
    f = torch.nn.functional.normalize(
        text.encode_texts(["a photo of a dress", "a picture of a dress", "stock market prices"]), dim=1
    )
    assert float(f[0] @ f[1]) > float(f[0] @ f[2]) + 0.2  # a paraphrase is closer than an unrelated sentence
    feats = image.encode(torch.randint(0, 256, (2, 28, 28), dtype=torch.uint8))
    assert feats.shape == (2, 1280) and torch.isfinite(feats).all()
