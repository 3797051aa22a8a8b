"""The reproduction's pieces that decide its numbers: the comparisons it declares (through iclr25_shared.stats) and
the attention diagnostic that says whether the setting can show the effect."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")


def _per_seed(acc: dict[str, list[float]]) -> list[dict]:
    return [
        {"seed": 10 + i, "arm": arm, "accuracy": value}
        for arm, values in acc.items()
        for i, value in enumerate(values)
    ]


def test_comparisons_primary_is_the_lev_over_full_ratio_paired_by_seed():
    from iclr25_levattention._reproduce import PRIMARY, comparisons

    acc = {"full": [0.80, 0.90, 0.85], "lev": [0.76, 0.81, 0.85], "inference": [0.40, 0.50, 0.45]}
    rows = [c.as_dict() for c in comparisons(_per_seed(acc))]
    assert [r["role"] for r in rows] == ["primary", "secondary", "secondary", "exploratory"]
    primary = rows[0]
    assert primary["name"] == PRIMARY and primary["n"] == 3
    # per seed: 0.76/0.80 - 1 = -0.05, 0.81/0.90 - 1 = -0.10, 0 -> mean -0.05, sd 0.05
    assert primary["mean_difference"] == pytest.approx(-0.05)
    half = 4.302652729911275 * 0.05 / np.sqrt(3)  # t_{0.975, 2} * sd / sqrt(n)
    assert primary["low"] == pytest.approx(-0.05 - half) and primary["high"] == pytest.approx(-0.05 + half)
    assert rows[1]["p_adjusted"] is not None and rows[3]["p_adjusted"] is None


def test_comparisons_pair_by_seed_whatever_the_row_order():
    from iclr25_levattention._reproduce import comparisons

    acc = {"full": [0.8, 0.9], "lev": [0.4, 0.9], "inference": [0.1, 0.2]}
    rows = _per_seed(acc)
    forward = comparisons(rows)[0].as_dict()
    backward = comparisons(rows[::-1])[0].as_dict()
    assert forward == backward
    assert forward["mean_difference"] == pytest.approx(((0.4 / 0.8 - 1) + 0) / 2)


def _tiny_vit():
    from iclr25_levattention._vit import ViT

    torch.manual_seed(0)
    return ViT(image_size=8, patch_size=2, dim=16, depth=2, num_heads=2, mlp_ratio=2.0, top_k=None)


def test_attention_diagnostic_keeping_every_key_keeps_all_the_mass():
    from iclr25_levattention._parts import attention_diagnostic

    model = _tiny_vit()  # 16 patches + CLS = 17 tokens
    rows = attention_diagnostic(model, torch.randn(6, 1, 8, 8), top_k=17, device="cpu", batch_size=4)
    assert [r["block"] for r in rows] == [0, 1]
    for r in rows:
        assert r["mass on top-k leverage keys"] == pytest.approx(1.0, abs=1e-5)
        assert r["mass on own top-k keys"] == pytest.approx(1.0, abs=1e-5)
        assert r["mass on k random keys (k/n)"] == 1.0


def test_attention_diagnostic_matches_the_layers_own_weights():
    """The leverage mass equals the softmax mass on the keys LevAttention selects, computed from the layer's dense
    full-attention weights and its own selection; the row's own top-k mass is never below it."""
    from iclr25_levattention._layer import select_top_keys
    from iclr25_levattention._parts import attention_diagnostic

    model = _tiny_vit().eval()
    x = torch.randn(5, 1, 8, 8)
    (row0, _) = attention_diagnostic(model, x, top_k=3, device="cpu")
    with torch.no_grad():
        h = model.patch(x).flatten(2).transpose(1, 2)
        h = torch.cat([model.cls.expand(5, -1, -1), h], dim=1) + model.pos
        block = model.blocks[0]
        _, w = block.attn(block.norm1(h), return_weights=True)  # full attention: (B, H, n, n)
        b, n, _ = h.shape
        k = block.attn.qkv(block.norm1(h)).view(b, n, 3, 2, 8)[:, :, 1].transpose(1, 2)
        index = select_top_keys(k, 3)
    expected = w.gather(-1, index.unsqueeze(-2).expand(-1, -1, n, -1)).sum(-1).mean()
    assert row0["mass on top-k leverage keys"] == pytest.approx(float(expected), rel=1e-5)
    assert row0["mass on own top-k keys"] >= row0["mass on top-k leverage keys"] - 1e-6
    heavy = (w >= 1 / 3).any(-1).float().mean()
    assert row0["rows with a heavy key"] == pytest.approx(float(heavy))
