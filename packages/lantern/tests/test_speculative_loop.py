"""The speculative decoding loop: exactness at δ = 0 by sampling (chi-square against the target's exact joint law),
the bonus token, the drafter's q, greedy equivalence, KV caches and bad inputs (arXiv:2410.03355)."""

import itertools
import math
import warnings

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from iclr25_lantern import (
    FunctionDecoder,
    LogitsProcessor,
    Relaxation,
    autoregressive_generate,
    latent_proximity,
    speculative_generate,
)
from iclr25_lantern._models import TokenTransformer, TransformerConfig

V = 3


def _markov(logits_table: torch.Tensor):
    """A model whose next-token logits depend on the last token only: ``fn(ids (R, T)) -> (R, T, V)``."""

    def fn(ids):
        return logits_table[ids]

    return FunctionDecoder(fn)


def _softmax_np(z):
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def _processed_np(z, top_k=0, temperature=1.0):
    """Temperature then top-k, written independently of LogitsProcessor."""
    z = np.asarray(z, np.float64) / temperature
    if top_k:
        kth = np.sort(z, -1)[..., -top_k][..., None]
        z = np.where(z >= kth, z, -np.inf)
    return _softmax_np(z)


def _joint_law(cond: np.ndarray, start: int, n: int) -> dict[tuple, float]:
    """Exact law of n tokens of a Markov chain with transition matrix ``cond`` started after token ``start``."""
    law = {}
    for seq in itertools.product(range(cond.shape[0]), repeat=n):
        prob, last = 1.0, start
        for t in seq:
            prob *= cond[last, t]
            last = t
        law[seq] = prob
    return law


def _chi2_pvalue(samples: list[tuple], law: dict[tuple, float]) -> float:
    keys = [k for k, v in law.items() if v > 0]
    counts = np.array([sum(1 for s in samples if s == k) for k in keys], dtype=float)
    assert sum(1 for s in samples if law.get(s, 0) == 0) == 0, "a zero-probability sequence was generated"
    expected = np.array([law[k] for k in keys]) * len(samples)
    return float(chisquare(counts, expected).pvalue)


def _run_many(target, drafter, n, *, relax=None, processor=None, gamma=2, runs=3000, seed=0):
    gen = torch.Generator().manual_seed(seed)
    outs = []
    for _ in range(runs):
        out = speculative_generate(target, drafter, torch.tensor([0]), max_new_tokens=n, gamma=gamma, relax=relax,
                                   processor=processor, generator=gen)  # fmt: skip
        outs.append(out)
    return outs


T_LOGITS = torch.tensor([[1.5, 0.0, -0.5], [0.2, 0.8, -1.0], [-0.3, 0.4, 1.1]], dtype=torch.float64)
D_LOGITS = torch.tensor([[0.0, 1.0, 0.3], [1.0, -0.5, 0.2], [0.6, 0.6, -0.2]], dtype=torch.float64)


@pytest.mark.parametrize(
    "gamma", [2, pytest.param(1, marks=pytest.mark.slow), pytest.param(4, marks=pytest.mark.slow)]
)
def test_delta_zero_loop_samples_the_target_joint_law(gamma):
    """Standard speculative sampling (δ = 0) is lossless: 3-token sequences follow the target's exact law."""
    outs = _run_many(_markov(T_LOGITS), _markov(D_LOGITS), 3, gamma=gamma, runs=1500, seed=gamma)
    law = _joint_law(_softmax_np(T_LOGITS.numpy()), 0, 3)
    assert _chi2_pvalue([tuple(o.tokens.tolist()) for o in outs], law) > 1e-3
    assert sum(o.drafted for o in outs) > 0


def test_delta_zero_is_lossless_under_top_k_and_temperature_applied_to_q_and_p():
    """q is computed after the same processors as drafting (huggingface/transformers#47932): with top-k the
    output still follows the *processed* target law exactly."""
    proc = LogitsProcessor(temperature=0.7, top_k=2)
    outs = _run_many(_markov(T_LOGITS), _markov(D_LOGITS), 3, processor=proc, runs=1500, seed=11)
    law = _joint_law(_processed_np(T_LOGITS.numpy(), top_k=2, temperature=0.7), 0, 3)
    assert _chi2_pvalue([tuple(o.tokens.tolist()) for o in outs], law) > 1e-3
    # and q(x) in each ratio is the processed drafter probability of the drafted token
    q_proc = _processed_np(D_LOGITS.numpy(), top_k=2, temperature=0.7)
    for o in outs[:300]:
        seq = [0, *o.tokens.tolist()]
        # the drafter's context of its i-th draft is the committed prefix plus earlier drafts of the round; with
        # a Markov drafter q depends on the previous token only, so check the first draft of each run exactly
        x = o.draft_tokens[0]
        assert o.draft_q[0] == pytest.approx(q_proc[seq[0], x], abs=1e-12)
        assert all(q > 0 for q in o.draft_q)  # never a token outside the drafter's top-k


def test_bonus_token_comes_from_the_unmodified_target_distribution():
    """Drafter = target: every draft is accepted (also with δ > 0, since p~ >= p = q), so the last token is the
    bonus; the joint law must still be the target's (SafeAILab/EAGLE PR #47), and the drafter must sample."""
    table = latent_proximity(torch.tensor([[0.0], [0.1], [1.0]]))
    relax = Relaxation(neighbours=table, delta=0.5)
    outs = _run_many(_markov(T_LOGITS), _markov(T_LOGITS), 3, relax=relax, gamma=2, runs=1500, seed=3)
    assert all(o.accepted == o.drafted == 2 and o.target_calls == 1 for o in outs)
    law = _joint_law(_softmax_np(T_LOGITS.numpy()), 0, 3)
    assert _chi2_pvalue([tuple(o.tokens.tolist()) for o in outs], law) > 1e-3
    # sampling mode: the drafted tokens are not always the drafter's argmax
    first = np.array([o.tokens[0].item() for o in outs])
    assert 0.2 < float((first != 0).mean()) < 0.5  # P(x1 != argmax) = 1 - softmax(T[0])[0] = 0.29


def test_cfg_rows_are_combined_identically_for_drafter_and_target():
    cond_t, uncond_t = T_LOGITS, T_LOGITS.flip(1)
    cond_d, uncond_d = D_LOGITS, D_LOGITS.flip(0)

    def two_rows(cond, uncond):
        def fn(ids):
            assert ids.shape[0] == 2 and torch.equal(
                ids[0, 1:], ids[1, 1:]
            )  # same generated tokens in both rows
            return torch.stack([cond[ids[0]], uncond[ids[1]]])

        return FunctionDecoder(fn)

    proc = LogitsProcessor(cfg_scale=1.5)
    gen = torch.Generator().manual_seed(5)
    samples = []
    for _ in range(1200):
        out = speculative_generate(two_rows(cond_t, uncond_t), two_rows(cond_d, uncond_d), torch.tensor([[0], [0]]),
                                   max_new_tokens=2, gamma=2, processor=proc, generator=gen)  # fmt: skip
        samples.append(tuple(out.tokens.tolist()))
    guided = uncond_t.numpy() + 1.5 * (cond_t.numpy() - uncond_t.numpy())
    law = _joint_law(_softmax_np(guided), 0, 2)
    assert _chi2_pvalue(samples, law) > 1e-3


def test_relaxed_loop_acceptance_matches_the_closed_form_rate():
    """With context-free (unigram) models the per-draft acceptance rate is Σ_x q(x) min(1, p~_x(x)/q(x))."""
    zt, zd = torch.tensor([[0.3, 0.1, -0.2, 0.5, 0.0]] * 5), torch.tensor([[0.0, 0.6, 0.1, -0.4, 0.2]] * 5)
    table = latent_proximity(torch.tensor([[0.0], [0.2], [0.5], [0.9], [2.0]]), 2)
    relax = Relaxation(neighbours=table, delta=0.25)
    p, q = _softmax_np(zt[0].numpy().astype(np.float64)), _softmax_np(zd[0].numpy().astype(np.float64))
    rate = 0.0
    for x in range(5):
        total, row = 0.0, table[x].long().tolist()
        for y in row:
            if total + p[y] > 0.25:
                break
            total += p[y]
        rate += q[x] * min(1.0, (p[x] + total) / q[x])
    gen = torch.Generator().manual_seed(0)
    drafted = accepted = 0
    for _ in range(400):
        out = speculative_generate(_markov(zt.double()), _markov(zd.double()), torch.tensor([0]), max_new_tokens=5,
                                   gamma=4, relax=relax, generator=gen)  # fmt: skip
        drafted += out.drafted
        accepted += out.accepted
        assert max(out.draft_moved) <= 0.25
    assert abs(accepted / drafted - rate) < 4 * np.sqrt(rate * (1 - rate) / drafted)


def _tiny_pair(seed=0, vocab=24):
    torch.manual_seed(seed)
    t = TokenTransformer(TransformerConfig(vocab, dim=32, layers=2, heads=2, seq_len=30)).eval()
    d = TokenTransformer(TransformerConfig(vocab, dim=16, layers=1, heads=2, seq_len=30)).eval()
    return t, d


def test_kv_cache_with_crops_matches_the_full_forward():
    t, _ = _tiny_pair()
    seq = torch.randint(0, 24, (2, 20))
    full = t.logits(seq)
    t.reset()
    a = t.forward(seq[:, :7])
    b = t.forward(seq[:, 7:12])
    t.crop(9)
    c = t.forward(seq[:, 9:20])
    torch.testing.assert_close(torch.cat([a, b[:, :2], c], 1), full, atol=1e-5, rtol=1e-5)


def test_greedy_delta_zero_equals_target_greedy_decoding():
    t, d = _tiny_pair(1)
    greedy = LogitsProcessor(temperature=0.0)
    for c in range(3):
        prefix = torch.tensor([[24 + c]])
        ref = autoregressive_generate(t, prefix, max_new_tokens=25, processor=greedy)
        for gamma in (1, 3, 6):
            out = speculative_generate(t, d, prefix, max_new_tokens=25, gamma=gamma, processor=greedy)
            assert torch.equal(out.tokens, ref.tokens)
        # drafter = target: all accepted, one target call per gamma + 1 tokens
        out = speculative_generate(t, t, prefix, max_new_tokens=25, gamma=4, processor=greedy)
        assert torch.equal(out.tokens, ref.tokens) and out.target_calls == 5


def test_temperature_zero_with_lantern_warns_and_exact_greedy_does_not():
    t, d = _tiny_pair(2)
    relax = Relaxation(neighbours=latent_proximity(torch.randn(24, 3), 4), delta=0.2)
    with pytest.warns(UserWarning, match="LANTERN#6"):
        speculative_generate(t, d, torch.tensor([[24]]), max_new_tokens=5, relax=relax,
                             processor=LogitsProcessor(temperature=0.0))  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        speculative_generate(
            t, d, torch.tensor([[24]]), max_new_tokens=5, processor=LogitsProcessor(temperature=0.0)
        )


def test_vocabulary_mismatches_between_models_and_table_are_refused():
    t, _ = _tiny_pair(3, vocab=24)
    _, d = _tiny_pair(3, vocab=20)
    with pytest.raises(ValueError, match="vocabulary size mismatch"):
        speculative_generate(t, d, torch.tensor([[20]]), max_new_tokens=5)
    t2, d2 = _tiny_pair(4, vocab=24)
    relax = Relaxation(neighbours=latent_proximity(torch.randn(16, 2), 3), delta=0.1)
    with pytest.raises(ValueError, match="V = 16"):
        speculative_generate(t2, d2, torch.tensor([[24]]), max_new_tokens=5, relax=relax)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_new_tokens": 0}, "max_new_tokens must be"),
        ({"gamma": 0}, "gamma must be"),
        ({"prefix": torch.zeros(1, 0, dtype=torch.long)}, "prefix must be"),
        ({"prefix": torch.zeros(2, 1, dtype=torch.long)}, "prefix must be"),
    ],
)
def test_bad_loop_arguments_are_refused(kwargs, match):
    t, d = _tiny_pair(5)
    args = {"prefix": torch.tensor([[24]]), "max_new_tokens": 3} | kwargs
    with pytest.raises(ValueError, match=match):
        speculative_generate(t, d, **args)


def test_last_round_never_overshoots_max_new_tokens():
    t, _ = _tiny_pair(6)
    for n in (1, 2, 5, 9):
        out = speculative_generate(t, t, torch.tensor([[24]]), max_new_tokens=n, gamma=4,
                                   generator=torch.Generator().manual_seed(n))  # fmt: skip
        assert len(out.tokens) == n


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_greedy_speculative_decoding_on_cuda_equals_target_greedy():
    t, d = _tiny_pair(7)
    t, d = t.cuda(), d.cuda()
    relax = Relaxation(neighbours=latent_proximity(torch.randn(24, 3, device="cuda"), 4), delta=0.0)
    greedy = LogitsProcessor(temperature=0.0)
    prefix = torch.tensor([[24]], device="cuda")
    ref = autoregressive_generate(t, prefix, max_new_tokens=20, processor=greedy)
    out = speculative_generate(t, d, prefix, max_new_tokens=20, gamma=3, relax=relax, processor=greedy,
                               generator=torch.Generator(device="cuda").manual_seed(0))  # fmt: skip
    assert torch.equal(out.tokens, ref.tokens)


# -- non-finite logits (issue 38: greedy NaN logits returned tokens, all 0, silently) -------------------------------


def _broken(after: int, value: float):
    """A Markov model whose logits at positions ``after`` onwards are all ``value`` (with a prefix of one token,
    position ``i`` gives new token ``i + 1``)."""

    def fn(ids):
        logits = T_LOGITS[ids].clone()
        if ids.shape[1] > after:
            logits[:, after:] = value
        return logits

    return FunctionDecoder(fn)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_non_finite_target_logits_raise_naming_the_target_and_step(temperature, value):
    proc = LogitsProcessor(temperature=temperature)
    bad = _broken(after=2, value=value)  # the logits of new token 3 onwards are broken
    with pytest.raises(FloatingPointError, match=r"the target \(FunctionDecoder\).*new token 3 of 6"):
        autoregressive_generate(bad, torch.tensor([0]), max_new_tokens=6, processor=proc,
                                generator=torch.Generator().manual_seed(0))  # fmt: skip
    with pytest.raises(
        FloatingPointError, match=r"the target \(FunctionDecoder\) returned non-finite logits"
    ):
        speculative_generate(bad, _markov(D_LOGITS), torch.tensor([0]), max_new_tokens=6, gamma=2, processor=proc,
                             generator=torch.Generator().manual_seed(0))  # fmt: skip


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_non_finite_drafter_logits_raise_naming_the_drafter_and_step(temperature):
    proc = LogitsProcessor(temperature=temperature)
    bad = _broken(after=0, value=math.nan)  # the drafter's very first draft reads NaN
    with pytest.raises(
        FloatingPointError, match=r"the drafter \(FunctionDecoder\).*new token 1 of 4.*drafter call 1"
    ):
        speculative_generate(_markov(T_LOGITS), bad, torch.tensor([0]), max_new_tokens=4, gamma=2, processor=proc,
                             generator=torch.Generator().manual_seed(0))  # fmt: skip


def test_non_finite_logits_of_a_hugging_face_target_name_its_class():
    transformers = pytest.importorskip("transformers")
    from iclr25_lantern import HFDecoder

    cfg = transformers.LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)  # fmt: skip
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.fill_(math.nan)
    with pytest.raises(FloatingPointError, match=r"HFDecoder of LlamaForCausalLM.*new token 1 of 3"):
        autoregressive_generate(HFDecoder(model), torch.tensor([1, 2]), max_new_tokens=3,
                                processor=LogitsProcessor(temperature=0.0))  # fmt: skip


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_minus_inf_logits_are_a_mask_not_an_error(temperature):
    masked = T_LOGITS.clone()
    masked[:, 0] = -math.inf  # token 0 is never allowed
    proc = LogitsProcessor(temperature=temperature)
    gen = torch.Generator().manual_seed(0)
    out = speculative_generate(_markov(masked), _markov(masked), torch.tensor([1]), max_new_tokens=20, gamma=3,
                               processor=proc, generator=gen)  # fmt: skip
    ar = autoregressive_generate(
        _markov(masked), torch.tensor([1]), max_new_tokens=20, processor=proc, generator=gen
    )
    assert len(out.tokens) == 20 and (out.tokens != 0).all() and (ar.tokens != 0).all()
    every = torch.full_like(T_LOGITS, -math.inf)
    with pytest.raises(FloatingPointError, match="no probability distribution"):
        autoregressive_generate(
            _markov(every), torch.tensor([1]), max_new_tokens=2, processor=proc, generator=gen
        )
