"""Hugging Face causal LMs as target and drafter: cache cropping, layer-prefix drafter, greedy equivalence."""

import pytest
import torch

from iclr25_lantern import (
    HFDecoder,
    LogitsProcessor,
    Relaxation,
    autoregressive_generate,
    latent_proximity,
    layer_prefix_drafter,
    speculative_generate,
)

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny_llama():
    cfg = transformers.LlamaConfig(
        vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def test_hf_decoder_cache_with_crop_matches_a_full_forward(tiny_llama):
    ids = torch.randint(0, 40, (1, 14))
    with torch.no_grad():
        full = tiny_llama(input_ids=ids).logits
    dec = HFDecoder(tiny_llama)
    a = dec.forward(ids[:, :6])
    dec.forward(ids[:, 6:10])
    dec.crop(8)
    assert dec.cache_len == 8
    b = dec.forward(ids[:, 8:14])
    torch.testing.assert_close(torch.cat([a, full[:, 6:8], b], 1), full, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(b, full[:, 8:], atol=1e-5, rtol=1e-4)


def test_layer_prefix_drafter_keeps_weights_and_vocabulary(tiny_llama):
    same = layer_prefix_drafter(tiny_llama, 3)
    ids = torch.randint(0, 40, (1, 9))
    with torch.no_grad():
        torch.testing.assert_close(same(input_ids=ids).logits, tiny_llama(input_ids=ids).logits)
    one = layer_prefix_drafter(tiny_llama, 1)
    assert one.config.num_hidden_layers == 1 and one.config.vocab_size == 40
    torch.testing.assert_close(
        one.model.layers[0].mlp.up_proj.weight, tiny_llama.model.layers[0].mlp.up_proj.weight
    )
    with pytest.raises(ValueError, match="num_layers must be"):
        layer_prefix_drafter(tiny_llama, 4)


def test_greedy_speculative_decoding_with_hf_models_equals_target_greedy(tiny_llama):
    draft = layer_prefix_drafter(tiny_llama, 1)
    greedy = LogitsProcessor(temperature=0.0)
    prefix = torch.tensor([[3, 17, 5]])
    ref = autoregressive_generate(HFDecoder(tiny_llama), prefix, max_new_tokens=20, processor=greedy)
    out = speculative_generate(HFDecoder(tiny_llama), HFDecoder(draft), prefix, max_new_tokens=20, gamma=3,
                               processor=greedy)  # fmt: skip
    assert torch.equal(out.tokens, ref.tokens)


def test_sampling_with_lantern_on_hf_models_respects_the_budget(tiny_llama):
    draft = layer_prefix_drafter(tiny_llama, 1)
    table = latent_proximity(tiny_llama.get_input_embeddings().weight.detach(), 5, precision="float32")
    relax = Relaxation(neighbours=table, delta=0.15)
    out = speculative_generate(HFDecoder(tiny_llama), HFDecoder(draft), torch.tensor([[1, 2]]), max_new_tokens=30,
                               gamma=4, relax=relax, generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert len(out.tokens) == 30 and max(out.draft_moved) <= 0.15
    assert out.target_calls <= 30


def test_text_rows_runs_with_a_causal_lm_and_tokenizer(tiny_llama):
    from types import SimpleNamespace

    from iclr25_lantern._common import text_rows

    class Tok:
        def __call__(self, text, return_tensors="pt"):
            return {"input_ids": torch.tensor([[ord(c) % 40 for c in text]])}

        def decode(self, ids, skip_special_tokens=True):
            return " ".join(str(int(i)) for i in ids)

    import logging

    lm = SimpleNamespace(model=tiny_llama, tokenizer=Tok())
    res = text_rows(lm, ["ab", "xyz"], [(4, 0.2, None)], processor=LogitsProcessor(), gamma=3, max_new_tokens=6,
                    draft_layers=1, samples=1, seed=0, log=logging.getLogger("t"))  # fmt: skip
    assert [r["method"] for r in res["rows"]] == [
        "target-only AR",
        "standard SD (delta=0)",
        "LANTERN k=4 delta=0.2",
    ]
    assert res["rows"][0]["tau (tokens/target call)"] == 1.0
    assert all(r["tau (tokens/target call)"] >= 1.0 for r in res["rows"])


def test_reproduce_text_row_glue_with_a_stand_in_model(tiny_llama, monkeypatch):
    """The SmolLM2 row's loading glue (model, Wikipedia prompts) with a tiny stand-in model and corpus."""
    import logging
    from types import SimpleNamespace

    import iclr25_shared.data
    import iclr25_shared.models
    from iclr25_lantern._common import _text_row

    class Tok:
        def __call__(self, text, return_tensors="pt"):
            return {"input_ids": torch.tensor([[ord(c) % 40 for c in text[:6]]])}

        def decode(self, ids, skip_special_tokens=True):
            return str(ids.tolist())

    monkeypatch.setattr(iclr25_shared.models, "load_causal_lm", lambda **kw: SimpleNamespace(model=tiny_llama,
                        tokenizer=Tok()))  # fmt: skip
    monkeypatch.setattr(
        iclr25_shared.data, "wiki_summaries", lambda: SimpleNamespace(texts=["a b c", "d e f g"])
    )
    cfg = SimpleNamespace(size="tiny", gamma=3, seed=0)
    ctx = SimpleNamespace(torch_device=lambda: torch.device("cpu"), log=logging.getLogger("t"))
    timings = {}
    rows = _text_row(cfg, ctx, timings)
    assert len(rows) == 4 and "text" in timings
    assert rows[0]["speed-up vs AR (CPU time)"] == 1.0
