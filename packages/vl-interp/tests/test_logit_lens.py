"""Paper Sec. 3 (arXiv:2410.02762): the logit lens over image-token hidden states and the internal confidence c_o.

Expected values come from independent computations: HF's own ``output_hidden_states`` and ``logits``, and a
brute-force softmax over the full vocabulary.
"""

import pytest

from iclr25_vl_interp._tiny import IMAGE_TOKEN, N_IMAGE, VOCAB, tiny_inputs, tiny_llava

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from iclr25_vl_interp import (  # noqa: E402
    image_token_mask,
    internal_confidence,
    localization_map,
    logit_lens,
    object_token_ids,
    vlm_parts,
)
from iclr25_vl_interp._lens import _forward_states  # noqa: E402


def test_logit_lens_at_the_last_layer_equals_the_models_own_logits(model, inputs):
    probs = logit_lens(model, inputs, layers=[vlm_parts(model).num_layers])
    with torch.no_grad():
        ref = torch.softmax(model(**inputs).logits[0, 4 : 4 + N_IMAGE].float(), -1)
    assert probs.shape == (1, N_IMAGE, VOCAB)
    torch.testing.assert_close(probs[0], ref, rtol=0, atol=0)


def test_captured_states_match_hf_output_hidden_states_before_the_final_norm(model, inputs):
    parts = vlm_parts(model)
    states, _ = _forward_states(model, inputs, parts)
    with torch.no_grad():
        hf = model(**inputs, output_hidden_states=True).hidden_states
    assert states.shape[0] == len(hf) == parts.num_layers + 1
    for layer in range(parts.num_layers):  # HF's last entry already has the final norm applied
        torch.testing.assert_close(states[layer, 0], hf[layer][0], rtol=0, atol=0)
    torch.testing.assert_close(parts.norm(states[-1, 0]), hf[-1][0], rtol=1e-6, atol=1e-6)


def test_lens_without_final_norm_is_plain_unembedding(model, inputs):
    parts = vlm_parts(model)
    states, _ = _forward_states(model, inputs, parts)
    probs = logit_lens(model, inputs, layers=[1], apply_final_norm=False)
    w = model.get_output_embeddings().weight
    ref = torch.softmax(states[1, 0, 4 : 4 + N_IMAGE] @ w.T, -1)
    torch.testing.assert_close(probs[0], ref, rtol=1e-5, atol=1e-6)


def test_internal_confidence_is_the_max_over_layers_positions_and_word_tokens(model, inputs):
    probs = logit_lens(model, inputs)  # (L+1, n_image, V): brute force over the full vocabulary
    words = [[11], [12, 40, 63], [20, 20]]
    conf, maps = internal_confidence(model, inputs, words)
    for o, toks in enumerate(words):
        brute = max(
            float(probs[layer, i, t]) for layer in range(probs.shape[0]) for i in range(N_IMAGE) for t in toks
        )
        assert conf[o].item() == pytest.approx(brute, rel=1e-6)
        torch.testing.assert_close(maps[o], probs[:, :, toks].amax(-1), rtol=1e-6, atol=1e-7)
    assert bool(((conf >= 0) & (conf <= 1)).all())


def test_internal_confidence_is_monotone_in_the_layers_it_may_use(model, inputs):
    c_few, _ = internal_confidence(model, inputs, [[11], [30]], layers=[0, 1])
    c_all, _ = internal_confidence(model, inputs, [[11], [30]])
    assert bool((c_all >= c_few).all())


def test_image_span_found_anywhere_in_a_long_prompt():
    # transformers PR #28032: index errors on long prompts; the span is read from input_ids, not assumed at 0
    m = tiny_llava()
    x = tiny_inputs(prefix=40, suffix=30)
    mask = image_token_mask(x["input_ids"], vlm_parts(m).image_token_id)
    assert mask.sum() == N_IMAGE and int(mask[0].nonzero()[0]) == 41
    probs = logit_lens(m, x, layers=[vlm_parts(m).num_layers])
    with torch.no_grad():
        ref = torch.softmax(m(**x).logits[0, 41 : 41 + N_IMAGE].float(), -1)
    torch.testing.assert_close(probs[0], ref, rtol=0, atol=0)


def test_lens_in_bfloat16_matches_the_bf16_models_logits():
    m = tiny_llava(dtype=torch.bfloat16)
    x = tiny_inputs(dtype=torch.bfloat16)
    probs = logit_lens(m, x, layers=[vlm_parts(m).num_layers])
    with torch.no_grad():
        ref = torch.softmax(m(**x).logits[0, 4 : 4 + N_IMAGE].float(), -1)
    torch.testing.assert_close(probs[0], ref, rtol=0, atol=0)


def test_localization_map_is_raster_order_max_over_layers():
    maps = torch.rand(2, 3, 6)
    out = localization_map(maps, grid=(2, 3))
    for o in range(2):
        for r in range(2):
            for c in range(3):
                assert out[o, r, c] == maps[o, :, r * 3 + c].max()
    assert localization_map(torch.rand(1, 2, 16)).shape == (1, 4, 4)


# ---- bad input ---------------------------------------------------------------------------------------------------


def test_model_class_with_no_image_tokens_is_refused():
    cfg = transformers.LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )
    lm = transformers.LlamaForCausalLM(cfg)
    with pytest.raises(TypeError, match="LlamaForCausalLM has no image tokens"):
        vlm_parts(lm)


@pytest.mark.parametrize("layer", [-1, 4, 100])
def test_layer_out_of_range_is_refused_with_its_name(model, inputs, layer):
    with pytest.raises(ValueError, match=r"layer must be an integer in \[0, 3\]"):
        logit_lens(model, inputs, layers=[layer])


def test_prompt_without_image_tokens_is_refused(model):
    x = {"input_ids": torch.tensor([[1, 20, 21]])}
    with pytest.raises(ValueError, match=f"no image token \\(image_token_id={IMAGE_TOKEN}\\)"):
        logit_lens(model, x)


def test_bad_token_ids_are_refused(model, inputs):
    with pytest.raises(ValueError, match="token_ids\\[0\\] must be an integer in \\[0, 63\\]"):
        internal_confidence(model, inputs, [[VOCAB]])
    with pytest.raises(ValueError, match="token_ids\\[1\\] is empty"):
        internal_confidence(model, inputs, [[3], []])


def test_localization_grid_must_cover_the_image_tokens():
    with pytest.raises(ValueError, match="not a square"):
        localization_map(torch.rand(1, 2, 6))
    with pytest.raises(ValueError, match="has 4 cells"):
        localization_map(torch.rand(1, 2, 6), grid=(2, 2))


def _word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "<s>": 1, "cat": 2, "dog": 3, "hot": 4, "##dog": 5}
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", bos_token="<s>")


def test_object_word_tokens_multi_token_words_kept_and_unknown_words_refused():
    tok = _word_tokenizer()
    assert object_token_ids(tok, "cat") == [2]
    assert object_token_ids(tok, "hotdog") == [4, 5]
    with pytest.raises(ValueError, match=r"'zebra' is not in the vocabulary: it tokenises to \['\[UNK\]'\]"):
        object_token_ids(tok, "zebra")
    with pytest.raises(ValueError, match="non-empty string"):
        object_token_ids(tok, " ")
