"""PPO for the allocators (arXiv:2410.10456, Section 3.3; clipped surrogate of arXiv:1707.06347, Eq. 7)."""

import math

import pytest
import torch

from iclr25_adak import PPOConfig, apply_adak, ppo_objective, rollout, train_allocators
from iclr25_adak._ppo import ppo_update


def _policy(seed=0, n=50, a=5):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, a, generator=g, requires_grad=True)
    actions = torch.randint(0, a, (n,), generator=g)
    adv = torch.randn(n, generator=g)
    return logits, actions, adv


def _logp_entropy(logits, actions):
    lp = torch.log_softmax(logits, -1)
    return lp.gather(1, actions[:, None]).squeeze(1), -(lp.exp() * lp).sum(-1)


def test_first_epoch_ratio_is_one_and_the_gradient_is_reinforce():
    logits, actions, adv = _policy()
    logp, ent = _logp_entropy(logits, actions)
    loss, info = ppo_objective(logp, logp.detach(), adv, ent, clip_eps=0.2, entropy_coef=0.05)
    assert torch.equal(info["ratio"], torch.ones(50))
    assert not info["clipped"].any()
    (g,) = torch.autograd.grad(loss, logits)
    # REINFORCE with the same entropy bonus: -mean(A * log pi(a)) - c_H mean(H)
    logits2 = logits.detach().clone().requires_grad_(True)
    lp2, ent2 = _logp_entropy(logits2, actions)
    (g_ref,) = torch.autograd.grad(-(adv * lp2).mean() - 0.05 * ent2.mean(), logits2)
    torch.testing.assert_close(g, g_ref, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("shift", "sign", "bound"), [(math.log(1.5), 1.0, 1.2), (math.log(0.5), -1.0, 0.8)])
def test_ratio_is_clipped_at_1_plus_minus_eps(shift, sign, bound):
    # positive advantage and ratio 1.5: objective (1 + eps) A, no gradient; negative advantage and ratio 0.5:
    # objective (1 - eps) A, no gradient
    logp_old = torch.log(torch.full((4,), 0.3))
    logp_new = (logp_old + shift).requires_grad_(True)
    adv = torch.full((4,), 2.0 * sign)
    loss, info = ppo_objective(logp_new, logp_old, adv, torch.zeros(4), clip_eps=0.2, entropy_coef=0.0)
    assert loss.item() == pytest.approx(-bound * 2.0 * sign)
    assert info["clipped"].all()
    (g,) = torch.autograd.grad(loss, logp_new)
    assert torch.count_nonzero(g) == 0


def test_unclipped_side_keeps_the_gradient():
    # positive advantage with ratio 0.5 (below 1 - eps): min picks the unclipped term, gradient -A*ratio/n
    logp_old = torch.log(torch.full((4,), 0.3))
    logp_new = (logp_old + math.log(0.5)).requires_grad_(True)
    loss, info = ppo_objective(
        logp_new, logp_old, torch.full((4,), 2.0), torch.zeros(4), clip_eps=0.2, entropy_coef=0.0
    )
    (g,) = torch.autograd.grad(loss, logp_new)
    torch.testing.assert_close(g, torch.full((4,), -2.0 * 0.5 / 4))
    assert not info["clipped"].any()


def test_entropy_bonus_is_non_negative_and_lowers_the_loss():
    logits, actions, adv = _policy(1)
    logp, ent = _logp_entropy(logits, actions)
    assert (ent >= 0).all()
    a, _ = ppo_objective(logp, logp.detach(), adv, ent, clip_eps=0.2, entropy_coef=0.0)
    b, _ = ppo_objective(logp, logp.detach(), adv, ent, clip_eps=0.2, entropy_coef=0.1)
    assert b.item() == pytest.approx(a.item() - 0.1 * ent.mean().item(), rel=1e-6)


def test_objective_rejects_mismatched_shapes_and_bad_clip():
    x = torch.zeros(3)
    with pytest.raises(ValueError, match="one shape"):
        ppo_objective(x, torch.zeros(2), x, x, clip_eps=0.2, entropy_coef=0.0)
    with pytest.raises(ValueError, match="clip_eps must be"):
        ppo_objective(x, x, x, x, clip_eps=1.5, entropy_coef=0.0)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"lam": -0.1}, "lam"),
        ({"clip_eps": 0.0}, "clip_eps"),
        ({"epochs": 0}, "epochs"),
        ({"lr": 0.0}, "lr"),
        ({"lam": float("nan")}, "lam"),
        ({"baseline": "value"}, "baseline"),
    ],
)
def test_bad_ppo_settings_are_refused_with_their_name(kw, field):
    with pytest.raises(ValueError, match=f"{field} must be"):
        PPOConfig(**kw)


IDS = torch.randint(0, 64, (4, 12), generator=torch.Generator().manual_seed(0))


def test_reward_is_log_likelihood_minus_lambda_times_mean_k(make_tiny):
    model = make_tiny("mixtral")
    patch = apply_adak(model, init_logit=0.0)
    batch = rollout(patch, IDS, lam=0.3, baseline="mean")
    # the log-likelihood under the sampled k, recomputed from the sampled actions in fixed-per-token form
    ll = batch["log_likelihood"]
    assert ll.shape == (4, 11)
    k = batch["k"].double()  # (L, tokens)
    reward = batch["reward"].reshape(4, 12)
    expected = ll.double() - 0.3 * k.mean(0).reshape(4, 12)[:, :-1]
    torch.testing.assert_close(reward[:, :-1].double(), expected, rtol=1e-6, atol=1e-6)
    assert batch["valid"].reshape(4, 12)[:, -1].sum() == 0  # the last position has no next token
    assert ((batch["k"] >= 1) & (batch["k"] <= 6)).all()


def test_greedy_baseline_is_the_argmax_policy_reward(make_tiny):
    from iclr25_adak._ppo import token_log_likelihood

    model = make_tiny("qwen2_moe")
    patch = apply_adak(
        model
    )  # untrained: argmax k = K everywhere, so the baseline is the static top-K reward
    batch = rollout(patch, IDS, lam=0.2, baseline="greedy")
    with torch.no_grad():
        patch.remove()
        ll = token_log_likelihood(model(input_ids=IDS).logits, IDS)
    expected = ll - 0.2 * 3
    torch.testing.assert_close(batch["baseline"].reshape(4, 12)[:, :-1], expected, rtol=1e-6, atol=1e-6)


def test_only_allocators_change_during_ppo(make_tiny):
    model = make_tiny("deepseek_v3")
    patch = apply_adak(model)
    before = {k: v.clone() for k, v in model.state_dict().items() if ".allocator." not in k}
    alloc_before = [p.clone() for p in patch.parameters()]
    train_allocators(patch, [IDS, IDS, IDS], PPOConfig(lam=0.1, lr=0.05))
    after = {k: v for k, v in model.state_dict().items() if ".allocator." not in k}
    assert before.keys() == after.keys()
    for k, v in before.items():  # routers, experts, shared experts, attention, embeddings: byte-identical
        assert torch.equal(v, after[k]), k
    assert any(not torch.equal(a, b) for a, b in zip(alloc_before, patch.parameters(), strict=True))
    assert all(not p.requires_grad for n, p in model.named_parameters() if ".allocator." not in n)


def test_ppo_first_epoch_ratio_is_one_in_the_trainer(make_tiny):
    model = make_tiny("olmoe")
    patch = apply_adak(model)
    opt = torch.optim.Adam(patch.parameters(), lr=0.05)
    stats = ppo_update(patch, rollout(patch, IDS, 0.1, "mean"), opt, PPOConfig(lam=0.1, epochs=3))
    assert stats.ratio_mean[0] == 1.0 and stats.ratio_max[0] == 1.0
    assert stats.clip_fraction[0] == 0.0
    assert stats.ratio_max[-1] != 1.0  # later epochs move away from the rollout policy


def test_a_high_expert_cost_pushes_k_towards_its_minimum(make_tiny):
    # with lam far above any log-likelihood difference, fewer experts always pays: k must fall towards k_min = 1
    # (the untrained policy samples a mean k near 3 and its argmax is K = 2)
    model = make_tiny("mixtral")
    patch = apply_adak(model, seed=0)
    batches = [torch.randint(0, 64, (4, 12), generator=torch.Generator().manual_seed(s)) for s in range(25)]
    hist = train_allocators(patch, batches, PPOConfig(lam=50.0, lr=0.1, entropy_coef=0.0))
    assert hist[0].mean_k > 2.5
    assert hist[-1].mean_k < hist[0].mean_k - 1.0
    with torch.no_grad():
        patch.reset_counters()
        model(input_ids=IDS)
    assert max(patch.mean_k_per_layer()) < 1.75  # argmax policy now below the static K = 2


def test_rollout_needs_two_positions(make_tiny):
    patch = apply_adak(make_tiny("mixtral"))
    with pytest.raises(ValueError, match="at least 2 positions"):
        rollout(patch, IDS[:, :1], 0.1)
