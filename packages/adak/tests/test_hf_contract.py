"""The shared Hugging Face integration contract (iclr25_shared.testing) on every MoE family Ada-K patches: casts to
bf16/fp16/fp64 and device moves after patching, forward and backward, ``patch.remove()`` restoring outputs,
``requires_grad`` flags and training modes, and ``save_pretrained`` -> :func:`iclr25_adak.load_pretrained`
restoring the patched model exactly."""

from __future__ import annotations

import pytest

from iclr25_adak import apply_adak, load_pretrained
from iclr25_shared.testing import HFIntegrationContract

FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3")


class TestAdaKKeepsTheHFContract(HFIntegrationContract):
    roundtrip = "exact"

    @pytest.fixture(autouse=True)
    def _factory(self, make_tiny):
        self._make_tiny = make_tiny  # conftest's tiny random configs (test modules cannot import conftest)

    def architectures(self):
        # the eager expert kernel: transformers' default grouped_mm has no float64 kernel (the unpatched host raises
        # "Expected mat_a to be Float32, BFloat16 or Float16" in float64 too); test_routing casts patched models to
        # bf16/fp16 under every kernel
        return {
            family: (lambda f=family: self._make_tiny(f, experts_implementation="eager"))
            for family in FAMILIES
        }

    def patch(self, model):
        patch = apply_adak(model)
        # apply_adak freezes the host (PPO trains the allocators without backpropagating through the model); the
        # contract's backward needs a gradient path through the variable-k routing, as a user who fine-tunes the
        # host under Ada-K routing would have. remove() must still give every parameter back its own flag.
        for p in model.parameters():
            p.requires_grad_(True)
        return patch

    def load_patched(self, path):
        # the kernel is a runtime choice transformers does not save (like attn_implementation): ask for the same one
        return load_pretrained(path, experts_implementation="eager").model
