"""CUDA tier (issue 40): the logit lens, c_o and the ProjectAway hook on a GPU against the CPU, bf16 against fp32, and
the host-device copies they add to a forward pass. Skipped where no CUDA device is visible.

The model is the tiny random-weight LLaVA (3 layers, width 32, 64-token vocabulary, 16 image tokens): the numbers
mean nothing, the comparisons are between devices and dtypes of the same weights.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from iclr25_vl_interp import ProjectAway, internal_confidence, logit_lens, vlm_parts  # noqa: E402
from iclr25_vl_interp._tiny import N_IMAGE, tiny_inputs, tiny_llava  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

OBJECTS = [[5], [7, 9], [11]]


def _to(inputs, device, dtype=None):
    out = {k: v.to(device) for k, v in inputs.items()}
    if dtype is not None:
        out["pixel_values"] = out["pixel_values"].to(dtype)
    return out


@pytest.fixture
def exact_fp32():
    """fp32 on CUDA without TF32 (cuDNN allows TF32 convolutions by default: CLIP's patch embedding is one)."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def test_lens_and_confidence_on_cuda_fp32_match_the_cpu(exact_fp32):
    """fp32, TF32 off: only the kernels' summation order differs (length <= 64 sums, 5 layers deep): 1e-5 absolute
    on probabilities, 1e-4 relative, is ~100x fp32 rounding and far below a wrong-row or wrong-layer bug (O(1e-2))."""
    model, inputs = tiny_llava(), tiny_inputs()
    cpu_probs = logit_lens(model, inputs)
    cpu_conf, cpu_maps = internal_confidence(model, inputs, OBJECTS)
    model = model.cuda()
    gpu_probs = logit_lens(model, _to(inputs, "cuda"))
    gpu_conf, gpu_maps = internal_confidence(model, _to(inputs, "cuda"), OBJECTS)
    assert gpu_probs.device.type == "cuda" and gpu_maps.device.type == "cpu"  # maps come back to the host
    torch.testing.assert_close(gpu_probs.cpu(), cpu_probs, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gpu_maps, cpu_maps, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gpu_conf, cpu_conf, rtol=1e-4, atol=1e-5)


def test_bf16_confidence_on_cuda_is_within_bf16_rounding_of_fp32(exact_fp32):
    """bf16 weights and activations (8-bit mantissa, eps 2^-8 = 3.9e-3 relative): logits of size O(1) move by a few
    1e-2 through 3 layers, so probabilities by at most ~3e-2 absolute; the argmax layer of c_o may change, c_o itself
    stays within that bound."""
    ref = tiny_llava().cuda()
    low = tiny_llava(dtype=torch.bfloat16).cuda()  # the same seed: the fp32 weights rounded to bf16
    inputs = tiny_inputs()
    conf32, maps32 = internal_confidence(ref, _to(inputs, "cuda"), OBJECTS)
    conf16, maps16 = internal_confidence(low, _to(inputs, "cuda", torch.bfloat16), OBJECTS)
    assert maps16.dtype == torch.float32  # the lens softmax runs in fp32 whatever the model's dtype
    torch.testing.assert_close(maps16, maps32, rtol=0, atol=3e-2)
    torch.testing.assert_close(conf16, conf32, rtol=0, atol=3e-2)
    assert not torch.equal(maps16, maps32), "bf16 must actually run in bf16"


def test_project_away_on_cuda_matches_the_cpu_and_removal_restores_it_bit_for_bit(exact_fp32):
    model, inputs = tiny_llava(), tiny_inputs()
    d = vlm_parts(model).lm_head.weight.shape[1]
    t = torch.randn(d, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        with ProjectAway(model, [t], layer=2, alpha=1.5) as hook:
            cpu_edited = model(**inputs).logits
        cpu_rows = hook.edited_rows
        model = model.cuda()
        gpu_in = _to(inputs, "cuda")
        plain = model(**gpu_in).logits
        with ProjectAway(
            model, [t], layer=2, alpha=1.5
        ) as hook:  # t stays on the CPU: the hook moves it once
            gpu_edited = model(**gpu_in).logits
        assert hook.edited_rows == cpu_rows and 0 < cpu_rows <= N_IMAGE
        torch.testing.assert_close(gpu_edited.cpu(), cpu_edited, rtol=1e-4, atol=1e-5)
        assert not torch.allclose(gpu_edited, plain)
        assert torch.equal(model(**gpu_in).logits, plain)  # removed: the same kernels, the same bits


def test_the_hook_and_the_lens_add_no_host_device_copies_per_forward_or_per_layer():
    """count_memcpy: a forward with ProjectAway installed makes exactly the copies of a plain forward (the directions
    move to the device once, the mask is never read back); c_o's device-to-host copies do not grow with the number
    of layers scanned (one copy of the maps at the end, not one per layer and object)."""
    from iclr25_shared.device import count_memcpy

    model = tiny_llava(layers=6).cuda()
    inputs = _to(tiny_inputs(), "cuda")
    t = torch.randn(vlm_parts(model).lm_head.weight.shape[1])

    def plain():
        with torch.no_grad():
            return model(**inputs).logits

    with ProjectAway(model, [t], layer=3, alpha=1.0):
        plain()  # warm-up: the directions move to the device here, once

        def hooked():
            with torch.no_grad():
                return model(**inputs).logits

        edited = count_memcpy(hooked)
    base = count_memcpy(plain)
    assert edited == base, (edited, base)

    one = count_memcpy(lambda: internal_confidence(model, inputs, OBJECTS, layers=[1]))
    every = count_memcpy(lambda: internal_confidence(model, inputs, OBJECTS))  # 7 layers x 3 objects
    assert every["DtoH"] == one["DtoH"], (one, every)
    assert every["HtoD"] == one["HtoD"], (one, every)
