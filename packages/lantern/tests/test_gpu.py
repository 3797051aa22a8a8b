"""CUDA checks (issue 40), skipped where no GPU is visible (root conftest), never yet run on a GPU.

What could break on CUDA only: the relaxed acceptance's gathers/cumsum on device tensors (a parallel scan sums in
another order), the cached int64 neighbour table (one per device), generators on the device, bf16 models, host
syncs in the verification step, and the proximity table's chunked workspace. Tolerances are stated per test with
their basis; the bf16 ones were calibrated on the CPU's bf16 (the same 8-bit-mantissa format) with a 4-5x margin
for CUDA's different kernels.
"""

import pytest
import torch

from iclr25_lantern import (
    LogitsProcessor,
    Relaxation,
    latent_proximity,
    residual_distribution,
    speculative_generate,
)
from iclr25_lantern._decoding import verify_drafts
from iclr25_lantern._models import TokenTransformer, TransformerConfig
from iclr25_lantern._relaxed import relaxed_acceptance

pytestmark = pytest.mark.gpu

V = 64
PROC = LogitsProcessor()


def _pair(seed=0):
    """A target and a drafter with random weights and sharpened heads (so p and q are not near-uniform)."""
    torch.manual_seed(seed)
    target = TokenTransformer(TransformerConfig(V, dim=32, layers=2, heads=2)).eval()
    drafter = TokenTransformer(TransformerConfig(V, dim=16, layers=1, heads=2)).eval()
    with torch.no_grad():
        for m in (target, drafter):
            m.head.weight.mul_(8.0)
    return target, drafter


def _copy(model, device, dtype=torch.float32):
    out = TokenTransformer(model.cfg)
    out.load_state_dict(model.state_dict())
    return out.to(device=device, dtype=dtype).eval()


def _probs(model, seq):
    with torch.no_grad():
        return PROC(model.logits(seq).unsqueeze(0)).reshape(-1, V)


def _seq(device):
    g = torch.Generator().manual_seed(5)
    return torch.cat([torch.full((32, 1), V + 3), torch.randint(0, V, (32, 20), generator=g)], 1).to(device)


RELAX = Relaxation(neighbours=latent_proximity(torch.randn(V, 4, generator=torch.Generator().manual_seed(2)), 8),
                   delta=0.1)  # fmt: skip


def test_acceptance_on_cuda_fp32_matches_the_cpu():
    """fp32 logits on CUDA vs CPU: max |Δ| <= 1e-4 (same weights, another reduction order; TF32 off), then the
    acceptance probabilities <= 1e-5 apart, |B| equal except where a cumulative sum lies within 1e-6 of the
    budget, and accept/reject decisions with the same uniforms equal except where |u - α| <= 1e-5."""
    cuda = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    target, drafter = _pair()
    seq = _seq("cpu")
    for model in (target, drafter):
        ref = model.logits(seq).detach()
        got = _copy(model, cuda).logits(seq.to(cuda)).detach().cpu()
        assert (got - ref).abs().max() <= 1e-4
    p_cpu, q_cpu = _probs(target, seq), _probs(drafter, seq)
    p_gpu, q_gpu = _probs(_copy(target, cuda), seq.to(cuda)), _probs(_copy(drafter, cuda), seq.to(cuda))
    x = torch.multinomial(q_cpu, 1, generator=torch.Generator().manual_seed(1)).squeeze(-1)
    a_cpu, _, moved_cpu, b_cpu = relaxed_acceptance(p_cpu, q_cpu, x, RELAX)
    a_gpu, _, moved_gpu, b_gpu = relaxed_acceptance(p_gpu, q_gpu, x.to(cuda), RELAX)
    assert (a_gpu.cpu() - a_cpu).abs().max() <= 1e-5
    assert (moved_gpu.cpu() - moved_cpu).abs().max() <= 1e-5
    cums = torch.cumsum(p_cpu.gather(-1, RELAX.neighbours.long()[x]), -1)
    near = (cums - RELAX.delta).abs() <= 1e-6
    assert torch.equal(b_gpu.cpu() | near, b_cpu | near)
    u = torch.rand(len(x), generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    close = (u - a_cpu).abs() <= 1e-5
    assert torch.equal((u.to(cuda) < a_gpu).cpu() | close, (u < a_cpu) | close)
    # the same float64 inputs moved to CUDA: only the cumsum's order may differ (<= 1e-12)
    a2, _, m2, _ = relaxed_acceptance(p_cpu.to(cuda), q_cpu.to(cuda), x.to(cuda), RELAX)
    assert (a2.cpu() - a_cpu).abs().max() <= 1e-12 and (m2.cpu() - moved_cpu).abs().max() <= 1e-12


def test_bf16_models_give_acceptance_close_to_fp32_on_cuda():
    """bf16 weights and activations vs fp32 on CUDA: the target's distributions within total variation 0.1 of
    fp32 (CPU bf16 measured 0.026), acceptance probabilities within 0.01 on average (CPU bf16: 0.0019) and the
    mean acceptance probability within 0.01 (CPU bf16: 1e-4)."""
    cuda = torch.device("cuda")
    target, drafter = _pair()
    seq = _seq(cuda)
    p32, q32 = _probs(_copy(target, cuda), seq), _probs(_copy(drafter, cuda), seq)
    p16, q16 = (_probs(_copy(m, cuda, torch.bfloat16), seq) for m in (target, drafter))
    assert p16.dtype == torch.float64  # the processor works in float64 whatever the logits' dtype
    assert (0.5 * (p16 - p32).abs().sum(-1)).max() <= 0.1
    x = torch.multinomial(q32, 1, generator=torch.Generator(device=cuda).manual_seed(1)).squeeze(-1)
    a32 = relaxed_acceptance(p32, q32, x, RELAX)[0]
    a16 = relaxed_acceptance(p16, q16, x, RELAX)[0]
    assert (a16 - a32).abs().mean() <= 0.01
    assert abs(float(a16.mean() - a32.mean())) <= 0.01


def test_the_acceptance_step_makes_no_host_sync_on_cuda():
    """relaxed_acceptance, the uniforms and the residual of a rejected position stay on the device: no .item(),
    no blocking copy (torch's sync debug mode set to "error"). The table is moved to the device once, before."""
    from iclr25_shared.device import no_host_sync

    cuda = torch.device("cuda")
    gen = torch.Generator(device=cuda).manual_seed(0)
    p = torch.softmax(torch.randn(4, V, device=cuda, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(4, V, device=cuda, dtype=torch.float64), -1)
    x = torch.multinomial(q, 1, generator=gen).squeeze(-1)
    for relax in (Relaxation(), RELAX, Relaxation(neighbours=RELAX.neighbours, lam=3.0)):
        if relax.k:
            relax.index(cuda)  # the one host-to-device copy of the table, cached
        with no_host_sync():
            alpha, _, _, in_b = relaxed_acceptance(p, q, x, relax)
            ok = torch.rand(4, generator=gen, device=cuda, dtype=alpha.dtype) < alpha
            first = (
                ok.cumprod(0).sum().clamp(max=3).view(1)
            )  # the first rejected position, kept on the device
            row_b = None if in_b is None else in_b.index_select(0, first)
            res = residual_distribution(p.index_select(0, first), q.index_select(0, first), x.index_select(0, first),
                                        relax, in_b=row_b)  # fmt: skip
            torch.multinomial(res, 1, generator=gen)


def test_verification_copies_to_the_host_do_not_grow_with_the_draft_length():
    """verify_drafts reads one number back (the accepted prefix length) whatever γ is: device-to-host copies
    counted by the profiler are equal at γ = 2 and γ = 8, and nothing is copied host-to-device."""
    from iclr25_shared.device import count_memcpy

    cuda = torch.device("cuda")
    relax = Relaxation(neighbours=RELAX.neighbours, lam=3.0)
    relax.index(cuda)
    counts = []
    for g in (2, 8):
        p = torch.softmax(torch.randn(g, V, device=cuda, dtype=torch.float64) * 3, -1)
        p[:, 0] = (
            0.0  # p(x) = 0 and λ p(x) = 0: α = 0, the first draft is rejected and the residual branch runs
        )
        q = torch.softmax(torch.randn(g, V, device=cuda, dtype=torch.float64) * 3, -1)
        x = torch.zeros(g, dtype=torch.long, device=cuda)
        gen = torch.Generator(device=cuda).manual_seed(0)
        counts.append(count_memcpy(verify_drafts, p, q, x, relax, greedy=False, generator=gen))
    assert counts[0]["DtoH"] == counts[1]["DtoH"] >= 1
    assert counts[0]["HtoD"] == counts[1]["HtoD"] == 0


def test_sampling_on_cuda_is_deterministic_given_the_generator():
    """The CPU path reproduces a run from the generator's seed; so must CUDA (same seed -> same tokens and
    acceptance trace)."""
    cuda = torch.device("cuda")
    target, drafter = (_copy(m, cuda) for m in _pair())
    prefix = torch.tensor([[V + 1]], device=cuda)
    runs = []
    for _ in range(2):
        gen = torch.Generator(device=cuda).manual_seed(7)
        runs.append(
            speculative_generate(target, drafter, prefix, max_new_tokens=20, relax=RELAX, generator=gen)
        )
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    assert runs[0].accepted_per_round == runs[1].accepted_per_round
    assert runs[0].draft_moved == runs[1].draft_moved
    assert max(runs[0].draft_moved) <= RELAX.delta


def test_proximity_table_on_cuda_matches_the_cpu_within_its_workspace_claim():
    """latent_proximity on CUDA equals the CPU table (float64 distances, a random codebook without ties) and, for
    V = 16 384, its peak memory stays within a few chunk x V float64 buffers (the README's workspace claim:
    chunk_size x V doubles; the distance computation holds up to 4 such temporaries at once, plus the int16
    table), far below one V x V matrix (2 GiB)."""
    from iclr25_shared.device import PeakMemory

    cuda = torch.device("cuda")
    codebook = torch.randn(16384, 8, generator=torch.Generator().manual_seed(0))
    ref = latent_proximity(codebook[:2048], 16)
    assert torch.equal(latent_proximity(codebook[:2048].to(cuda), 16).cpu(), ref)
    big = codebook.to(cuda)
    chunk = 256
    with PeakMemory(cuda) as peak:
        table = latent_proximity(big, 100, chunk_size=chunk)
    assert table.shape == (16384, 100) and table.dtype == torch.int16
    assert peak.peak_bytes <= 6 * chunk * 16384 * 8 + table.numel() * 2
