"""The shared Hugging Face integration contract passes a patch that keeps the contract and catches the defects it
exists for (a removal that leaves parameters frozen, a patch that breaks a dtype cast, a silently re-initialised
load)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from iclr25_shared.testing import HFIntegrationContract  # noqa: E402


def _tiny_llama():
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    return transformers.LlamaForCausalLM(config)


class _ScaleHook:
    """Multiplies the last norm's output by a factor kept in the model's dtype; removable."""

    def __init__(self, model, factor=1.5, freeze_on_remove=False, fixed_weight=False):
        norm = model.model.norm
        self.freeze_on_remove, self.model = freeze_on_remove, model
        hidden = model.config.hidden_size
        # a weight kept outside the module tree: .to(dtype) never reaches it (the Ada-K allocator defect)
        self.weight = factor * torch.eye(hidden) if fixed_weight else None

        def hook(mod, args, out):
            return torch.nn.functional.linear(out, self.weight) if self.weight is not None else out * factor

        self.handle = norm.register_forward_hook(hook)

    def remove(self):
        self.handle.remove()
        if self.freeze_on_remove:  # the Ada-K defect: every parameter left requires_grad=False
            for p in self.model.parameters():
                p.requires_grad_(False)


class TestAHookThatKeepsTheContract(HFIntegrationContract):
    roundtrip = "refuse"  # a forward hook is not saved by save_pretrained: the patch refuses instead
    refuse_match = "re-apply the patch"

    def architectures(self):
        return {"llama": _tiny_llama}

    def patch(self, model):
        hook = _ScaleHook(model)

        def refuse(*args, **kwargs):
            raise RuntimeError(
                "a hooked model is not saved with its hook; save the base model and re-apply the patch"
            )

        model.save_pretrained = refuse
        return hook


class _Broken(HFIntegrationContract):
    def architectures(self):
        return {"llama": _tiny_llama}


def test_a_removal_that_freezes_parameters_fails_the_contract():
    class FreezesOnRemove(_Broken):
        def patch(self, model):
            return _ScaleHook(model, factor=1.0, freeze_on_remove=True)

    with pytest.raises(AssertionError, match="requires_grad"):
        FreezesOnRemove().test_remove_restores_outputs_requires_grad_and_training_mode()


def test_a_patch_with_a_weight_that_casts_do_not_reach_fails_after_a_cast():
    class FixedDtype(_Broken):
        def patch(self, model):
            return _ScaleHook(model, fixed_weight=True)

    with pytest.raises(RuntimeError, match="dtype"):
        FixedDtype().test_forward_and_backward_after_a_cast()


def test_a_load_that_drops_the_patch_fails_the_round_trip(tmp_path):
    class DropsOnLoad(
        _Broken
    ):  # save_pretrained writes the base weights; from_pretrained loads a plain model
        def patch(self, model):
            return _ScaleHook(model)

    with pytest.raises(AssertionError, match="differs from the saved one"):
        DropsOnLoad().test_save_pretrained_round_trip_restores_the_patch_or_refuses(tmp_path)
