"""The shared Hugging Face integration contract (issue 38) for the package's hooks, on tiny random LLaVA and
LLaVA-NeXT models (the two classes the package claims): casts and device moves after hooking, forward and backward,
removal restoring outputs bit for bit with ``requires_grad`` and training modes, and ``save_pretrained``.

- :class:`~iclr25_vl_interp.ProjectAway` changes outputs and is a hook, not a weight: while it is installed
  ``save_pretrained`` is refused with a message that says to remove it, save the base model and re-apply it after
  loading (``roundtrip = "refuse"``).
- The lens's hooks (:func:`~iclr25_vl_interp.capture_hidden_states`, which :func:`internal_confidence` and
  :func:`logit_lens` install for one forward pass) only read: ``save_pretrained`` saves the base model, and the
  loaded model gives exactly the hooked model's outputs (``roundtrip = "exact"``).
"""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from iclr25_shared.testing import HFIntegrationContract  # noqa: E402
from iclr25_vl_interp import ProjectAway, capture_hidden_states, vlm_parts  # noqa: E402
from iclr25_vl_interp._edit import SAVE_REFUSAL  # noqa: E402
from iclr25_vl_interp._tiny import IMAGE_TOKEN, tiny_llava  # noqa: E402

HIDDEN, VOCAB, SIZE = 16, 64, 16


def _llava():
    return tiny_llava(layers=2, hidden=HIDDEN, vocab=VOCAB)


def _llava_next():
    vision = transformers.CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                           num_attention_heads=2, image_size=SIZE, patch_size=4)  # fmt: skip
    text = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=32, num_hidden_layers=2,
                                    num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=False)  # fmt: skip
    config = transformers.LlavaNextConfig(vision_config=vision, text_config=text, image_token_id=IMAGE_TOKEN,
                                          image_grid_pinpoints=[[SIZE, SIZE]],
                                          vision_feature_select_strategy="default")  # fmt: skip
    return transformers.LlavaNextForConditionalGeneration(config).eval()


def _image_inputs(model):
    """Two prompts with the model's number of image placeholders between text tokens, and random pixels."""
    g = torch.Generator().manual_seed(0)
    next_ = isinstance(model, transformers.LlavaNextForConditionalGeneration)
    shape = (2, 2, 3, SIZE, SIZE) if next_ else (2, 3, SIZE, SIZE)  # LLaVA-NeXT: base image + one anyres tile
    pixels = torch.randn(*shape, generator=g)
    extra = {"image_sizes": torch.tensor([[SIZE, SIZE]] * 2)} if next_ else {}
    if next_:
        with torch.no_grad():
            feats = model.model.get_image_features(
                pixel_values=pixels[:1], image_sizes=extra["image_sizes"][:1]
            )
        n = (feats.pooler_output[0] if hasattr(feats, "pooler_output") else feats[0]).shape[0]
    else:
        n = (SIZE // 4) ** 2
    text = torch.randint(10, VOCAB, (2, 6), generator=g)
    ids = torch.cat([text[:, :1], text[:, 1:3], torch.full((2, n), IMAGE_TOKEN), text[:, 3:]], dim=1)
    ids[:, 0] = 1
    return {"input_ids": ids, "pixel_values": pixels, **extra}


class _TinyVLMs(HFIntegrationContract):
    def architectures(self):
        return {"llava": _llava, "llava_next": _llava_next}

    def inputs(self, model):
        return _image_inputs(model)

    def load_patched(self, path):
        return transformers.AutoModelForImageTextToText.from_pretrained(path)


class TestProjectAway(_TinyVLMs):
    roundtrip = "refuse"
    refuse_match = r"call remove\(\).*save the base model.*apply ProjectAway again after loading"

    def patch(self, model):
        t = torch.randn(HIDDEN, generator=torch.Generator().manual_seed(3))
        return ProjectAway(model, [t], layer=1, alpha=1.5, only_positive=False)


class _CaptureHandle:
    """The lens's hooks, installed as a handle (``internal_confidence`` holds them for one forward pass)."""

    def __init__(self, model):
        self._context = capture_hidden_states(vlm_parts(model))
        self.states = self._context.__enter__()

    def remove(self):
        self._context.__exit__(None, None, None)


class TestLensHooks(_TinyVLMs):
    roundtrip = (
        "exact"  # the hooks only read: save_pretrained saves the base model, which gives the same outputs
    )

    def patch(self, model):
        return _CaptureHandle(model)


# -- ProjectAway's save refusal, beyond the contract ----------------------------------------------------------------


def test_the_edit_changes_outputs_so_a_plain_save_would_drop_it():
    model = _llava()
    x = _image_inputs(model)
    with torch.no_grad():
        base = model(**x).logits
        with TestProjectAway().patch(model):
            edited = model(**x).logits
    assert not torch.equal(base, edited)


def test_after_remove_the_base_model_saves_and_loads_exactly(tmp_path):
    model = _llava()
    x = _image_inputs(model)
    hook = TestProjectAway().patch(model)
    with pytest.raises(RuntimeError, match="call remove"):
        model.save_pretrained(tmp_path / "hooked")
    assert not (tmp_path / "hooked").exists()
    hook.remove()
    assert "save_pretrained" not in model.__dict__  # the class's own method again
    model.save_pretrained(tmp_path / "base")
    loaded = transformers.AutoModelForImageTextToText.from_pretrained(tmp_path / "base").eval()
    with torch.no_grad():
        assert torch.equal(model(**x).logits, loaded(**x).logits)
        with TestProjectAway().patch(loaded), TestProjectAway().patch(model):  # re-applied after loading
            assert torch.equal(model(**x).logits, loaded(**x).logits)


def test_nested_hooks_keep_the_refusal_until_the_last_is_removed(tmp_path):
    model = _llava()
    own = model.save_pretrained
    model.save_pretrained = own  # a caller's own instance attribute is restored, not dropped
    first, second = TestProjectAway().patch(model), TestProjectAway().patch(model)
    first.remove()
    with pytest.raises(RuntimeError, match="ProjectAway is installed"):
        model.save_pretrained(tmp_path / "x")
    second.remove()
    second.remove()  # idempotent
    assert model.__dict__["save_pretrained"] is own
    assert SAVE_REFUSAL.startswith("ProjectAway is installed")
