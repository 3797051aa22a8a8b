"""The reproduction's MoE pipeline on the real sources (SmolLM2 tokenizer, Wikipedia summaries): slow tier."""

import numpy as np
import pytest
import torch

from iclr25_shared.testing import require


@pytest.mark.slow
def test_wiki_moe_pretrains_caches_and_reloads_identically(tmp_path, monkeypatch):
    from iclr25_adak._zoo import MoESpec, load_smollm2_tokenizer, wiki_moe
    from iclr25_shared.data import wiki_summaries

    require(load_smollm2_tokenizer)
    require(wiki_summaries)
    monkeypatch.setenv("ICLR25_CACHE", str(tmp_path / "cache"))
    spec = MoESpec(
        vocab=256, hidden=32, layers=2, heads=2, experts=4, ffn=32, block_len=16, docs=40, steps=3, batch=2
    )
    m1, t1 = wiki_moe(spec)
    m2, t2 = wiki_moe(spec)  # from the cache
    assert (tmp_path / "cache" / "adak" / f"wiki-moe-{spec.key()}" / "config.json").is_file()
    assert np.array_equal(t1.train, t2.train) and np.array_equal(t1.val, t2.val) and t1.pieces == t2.pieces
    ids = torch.as_tensor(t1.val[:2])
    with torch.no_grad():
        assert torch.equal(m1(input_ids=ids).logits, m2(input_ids=ids).logits)
    assert type(m1).__name__ == "MixtralForCausalLM" and t1.train.max() < 256
