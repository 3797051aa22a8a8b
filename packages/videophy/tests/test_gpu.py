"""Issue 40: the CUDA paths of videophy (collected everywhere, skipped without a CUDA device): generation with a
diffusers pipeline and the logit judge.

Tolerances: fp32 on CUDA vs the CPU (TF32 off) differs by the order of floating-point reductions only (~1e-6
relative per op); after 4 denoising steps and the VAE decode the frames (in [0, 1]) agree within 1e-3. bf16 keeps 8
mantissa bits (2**-8 = 3.9e-3 relative per rounding): the bf16 pipeline's frames stay within 0.05 of fp32 on
average. The judge's score P(Yes) / (P(Yes) + P(No)) in fp32 agrees within 1e-4.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _frames(device, dtype=torch.float32):
    from iclr25_videophy._generation import DiffusersGenerator
    from iclr25_videophy._tiny import tiny_text_to_video_pipeline

    pipe = tiny_text_to_video_pipeline(0, device).to(dtype=dtype)
    gen = DiffusersGenerator(pipe, num_frames=8, num_inference_steps=4, height=32, width=32)
    return gen(
        "A ball falls and bounces.", 7
    )  # the generator is a CPU torch.Generator: same latents anywhere


def test_generation_on_cuda_fp32_matches_the_cpu():
    from iclr25_shared.device import require_cuda

    dev = require_cuda()
    cpu, gpu = _frames("cpu"), _frames(dev)
    assert gpu.shape == cpu.shape == (8, 32, 32, 3)
    np.testing.assert_allclose(gpu, cpu, atol=1e-3)


def test_generation_in_bf16_stays_close_to_fp32():
    from iclr25_shared.device import require_cuda

    dev = require_cuda()
    ref, low = _frames(dev), _frames(dev, torch.bfloat16)
    assert np.isfinite(low).all() and low.shape == ref.shape
    assert float(np.mean(np.abs(low.astype(np.float32) - ref))) <= 0.05


def test_the_logit_judge_on_cuda_matches_the_cpu(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    from iclr25_shared.device import require_cuda
    from iclr25_videophy import LogitJudge, write_video

    dev = require_cuda()
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=512,
    )  # fmt: skip
    cpu_lm = LlamaForCausalLM(cfg).eval()
    gpu_lm = LlamaForCausalLM(cfg).eval()
    gpu_lm.load_state_dict(cpu_lm.state_dict())
    gpu_lm.to(dev)

    def forward_on(lm, device):
        def forward(frames, prompts):
            seqs = [
                [1 + int(f.mean()) % 255] + [1 + b for b in p.encode()[-40:]] for f, p in zip(frames, prompts)
            ]
            n = max(map(len, seqs))
            ids = torch.zeros((len(seqs), n), dtype=torch.long)
            mask = torch.zeros((len(seqs), n), dtype=torch.long)
            for i, s in enumerate(seqs):
                ids[i, : len(s)] = torch.tensor(s)
                mask[i, : len(s)] = 1
            with torch.no_grad():
                logits = lm(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
            return logits, mask.to(device)

        return forward

    vids = [
        str(write_video(tmp_path / f"{i}.mp4", np.full((4, 8, 8, 3), 40 * i, np.uint8))) for i in range(3)
    ]
    caps = ["short", "a much longer caption, with commas", "mid length one"]
    kw = dict(yes_id=90, no_id=79, num_frames=4, size=None, batch_size=2)
    on_cpu = LogitJudge(forward_on(cpu_lm, "cpu"), **kw).score(vids, caps, "sa")
    on_gpu = LogitJudge(forward_on(gpu_lm, dev), **kw).score(vids, caps, "sa")
    assert on_gpu.shape == (3,) and np.isfinite(on_gpu).all() and len(set(on_cpu.tolist())) > 1
    np.testing.assert_allclose(on_gpu, on_cpu, atol=1e-4)
