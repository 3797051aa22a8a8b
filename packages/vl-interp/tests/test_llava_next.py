"""The lens and the edit on a second LLaVA-family class (LLaVA-NeXT, anyres image features with newline tokens)."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from iclr25_vl_interp import ProjectAway, logit_lens, vlm_parts  # noqa: E402


def _tiny_next():
    v = transformers.CLIPVisionConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=16,
        patch_size=4,
    )
    t = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
    )
    c = transformers.LlavaNextConfig(
        vision_config=v,
        text_config=t,
        image_token_id=9,
        image_grid_pinpoints=[[16, 16]],
        vision_feature_select_strategy="default",
    )
    torch.manual_seed(0)
    model = transformers.LlavaNextForConditionalGeneration(c).eval()
    pv = torch.randn(1, 2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    sizes = torch.tensor([[16, 16]])
    with torch.no_grad():
        feats = model.model.get_image_features(pixel_values=pv, image_sizes=sizes)
    n = (feats.pooler_output[0] if hasattr(feats, "pooler_output") else feats[0]).shape[0]
    ids = torch.tensor([[1, 20, *([9] * n), 21, 22]])
    return model, {"input_ids": ids, "pixel_values": pv, "image_sizes": sizes}, n


def test_llava_next_lens_last_layer_equals_logits_and_hook_restores():
    model, x, n = _tiny_next()
    assert vlm_parts(model).num_layers == 3
    probs = logit_lens(model, x, layers=[3])
    with torch.no_grad():
        logits = model(**x).logits
    torch.testing.assert_close(probs[0], torch.softmax(logits[0, 2 : 2 + n].float(), -1), rtol=0, atol=0)
    with torch.no_grad():
        with ProjectAway(model, [torch.randn(32)], layer=1, alpha=1.0, only_positive=False) as hook:
            edited = model(**x).logits
        again = model(**x).logits
    assert hook.edited_rows == n
    assert not torch.equal(edited, logits) and torch.equal(again, logits)
