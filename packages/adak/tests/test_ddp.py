"""Data-parallel PPO training and evaluation (issue 39): 2 CPU processes (gloo) against one process.

The reference is the one-process run of the same function on the same global batches; the 2-rank run splits every
batch's rows over the ranks, wraps the allocators in DistributedDataParallel and reduces the statistics.
"""

import numpy as np
import pytest
import torch

from iclr25_shared.testing import RankFailed, run_ranks

pytestmark = (
    pytest.mark.slow
)  # two fresh processes import torch and transformers: ~30 s on the shared machine


def _model(seed=0, nan_head=False):
    import transformers as T

    torch.manual_seed(seed)
    config = T.MixtralConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=24,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        num_local_experts=6,
        num_experts_per_tok=2,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    config._experts_implementation = "eager"
    model = T.MixtralForCausalLM(config).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".gate.weight" in name or ".experts." in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        if nan_head:
            model.lm_head.weight[0, 0] = float("nan")
    return model


def train_and_evaluate(steps, rows, nan_on_rank=None):
    """PPO on a tiny Mixtral, then evaluation; the same global batches on every rank. Module level: run_ranks
    calls it in fresh processes."""
    torch.set_num_threads(1)
    from iclr25_adak import PPOConfig, apply_adak, evaluate_lm, train_allocators
    from iclr25_shared.distributed import ByteCounter, world

    here = world()
    model = _model(nan_head=nan_on_rank is not None and here.rank == nan_on_rank)
    patch = apply_adak(model, init_logit=0.5, seed=3)
    g = torch.Generator().manual_seed(7)
    batches = [torch.randint(0, 64, (rows, 10), generator=g) for _ in range(steps)]
    counter = ByteCounter()
    hist = train_allocators(patch, batches, PPOConfig(lam=0.02, lr=5e-2, epochs=2), comm_hook=counter.hook)
    blocks = torch.randint(0, 64, (6, 10), generator=g).numpy()
    ev = evaluate_lm(patch, blocks, mode="argmax")
    return {
        "state": {k: v.detach().numpy().copy() for k, v in patch.allocator_state_dict().items()},
        "history": [(h.reward, h.mean_k, h.loss[-1], h.ratio_max[-1]) for h in hist],
        "eval": (ev["loss"], ev["mean_k"], ev["flops_reduction"], *ev["k_per_layer"]),
        "bytes": counter.bytes,
        "calls": counter.calls,
    }


def test_two_ranks_equal_one_process_within_summation_order():
    steps, rows = 3, 4
    one = train_and_evaluate(steps, rows)
    two = run_ranks(train_and_evaluate, steps, rows, world_size=2, timeout_s=240)
    # DDP keeps the ranks' allocators identical, bit for bit
    for k in one["state"]:
        assert np.array_equal(two[0]["state"][k], two[1]["state"][k])
    # against one process: the same sampled k for every token (per-token uniforms), the same update up to the
    # float32 summation order of the loss mean and of the gradient all-reduce (two partial means averaged vs one
    # mean). Measured: 2.0e-6 on the allocator weights after 3 Adam steps at lr 5e-2, 4.8e-7 on the step
    # statistics, 1.4e-7 on the evaluation; tolerances 2e-5 / 1e-5 / 1e-6
    for k in one["state"]:
        np.testing.assert_allclose(two[0]["state"][k], one["state"][k], rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(np.array(two[0]["history"]), np.array(one["history"]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(two[1]["eval"]), np.array(one["eval"]), rtol=1e-5, atol=1e-6)
    # what was communicated: the allocators' gradients once per PPO epoch (2 layers x (6 x 32 + 6) float32)
    n_params = 2 * (6 * 32 + 6)
    assert two[0]["bytes"] == steps * 2 * n_params * 4
    assert one["bytes"] == 0 and one["calls"] == 0  # one process: no DDP, nothing sent


def test_a_non_finite_reward_on_one_rank_stops_every_rank_with_one_error():
    with pytest.raises(RankFailed, match=r"non-finite reward in a PPO rollout.*on rank 1 of 2"):
        run_ranks(train_and_evaluate, 2, 4, 1, world_size=2, timeout_s=240)


def test_rows_that_do_not_split_over_the_ranks_are_refused():
    with pytest.raises(RankFailed, match="divisible by the 2 ranks"):
        run_ranks(train_and_evaluate, 1, 3, world_size=2, timeout_s=240)
