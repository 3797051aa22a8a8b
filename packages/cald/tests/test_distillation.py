"""Layerwise distillation and the guidance strategies (CALD Section 3.2): closed forms and exact reductions."""

import copy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import tiny_llama

from iclr25_cald import Guidance, MambaConfig, convert, distill, layerwise_loss, logits_kl


def test_layerwise_loss_is_zero_when_student_equals_teacher():
    h = [torch.randn(2, 5, 4) for _ in range(4)]
    assert layerwise_loss(h, [t.clone() for t in h]).item() == 0.0


def test_layerwise_loss_is_zero_for_an_unconverted_student_model():
    teacher = tiny_llama(3)
    student = copy.deepcopy(teacher)
    ids = torch.randint(1, 40, (2, 8))
    hs = student(ids, output_hidden_states=True).hidden_states
    ht = teacher(ids, output_hidden_states=True).hidden_states
    assert layerwise_loss(hs, ht).item() == 0.0


@pytest.mark.parametrize("depth", [1, 3, 6])
def test_layerwise_loss_sums_mse_over_all_hidden_states_for_any_depth(depth):
    """Brute force in numpy; the official NLP script hard-codes range(13) (roberta-base only)."""
    rng = np.random.default_rng(depth)
    hs = [rng.standard_normal((2, 5, 3)) for _ in range(depth + 1)]
    ht = [rng.standard_normal((2, 5, 3)) for _ in range(depth + 1)]
    want = sum(((a - b) ** 2).mean() for a, b in zip(hs, ht))
    got = layerwise_loss([torch.tensor(a) for a in hs], [torch.tensor(b) for b in ht])
    assert got.item() == pytest.approx(want, rel=1e-12)
    got_mean = layerwise_loss([torch.tensor(a) for a in hs], [torch.tensor(b) for b in ht], reduction="mean")
    assert got_mean.item() == pytest.approx(want / (depth + 1), rel=1e-12)


def test_layerwise_loss_ignores_pad_positions():
    rng = np.random.default_rng(0)
    hs = [torch.tensor(rng.standard_normal((2, 6, 3))) for _ in range(3)]
    ht = [torch.tensor(rng.standard_normal((2, 6, 3))) for _ in range(3)]
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    a = layerwise_loss(hs, ht, mask)
    hs2 = [h.clone() for h in hs]
    for h in hs2:
        h[0, 4:] += 100.0
    assert layerwise_loss(hs2, ht, mask).item() == pytest.approx(a.item(), rel=1e-12)
    m = mask.numpy()[..., None].astype(float)
    want = sum((((s.numpy() - t.numpy()) ** 2) * m).sum() / (m.sum() * 3) for s, t in zip(hs, ht))
    assert a.item() == pytest.approx(want, rel=1e-12)


def test_layerwise_loss_refuses_different_depths_and_shapes():
    h = [torch.zeros(1, 2, 3)] * 3
    with pytest.raises(ValueError, match="same depth"):
        layerwise_loss(h, h[:2])
    with pytest.raises(ValueError, match="hidden state 0"):
        layerwise_loss([torch.zeros(1, 2, 4)] * 3, h)


def test_logits_kl_matches_the_closed_form():
    rng = np.random.default_rng(1)
    s, t = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    T = 2.0

    def softmax(z):
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    p, q = softmax(t / T), softmax(s / T)
    want = T**2 * (p * (np.log(p) - np.log(q))).sum(-1).mean()
    assert logits_kl(torch.tensor(s), torch.tensor(t), T).item() == pytest.approx(want, rel=1e-6)
    assert logits_kl(torch.tensor(t), torch.tensor(t), T).item() == pytest.approx(0.0, abs=1e-7)


# ---- strategies ----------------------------------------------------------------------------------------------


def batches(n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(1, 40, (2, 8), generator=g)
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()})
    return out


def setup():
    pretrained = tiny_llama(2)
    fine_tuned = copy.deepcopy(pretrained)
    distill(fine_tuned, batches(seed=9), steps=3, guidance=Guidance("unguided"), lr=1e-2)
    student = convert(pretrained, "mamba", mamba=MambaConfig(d_state=4)).model  # a causal LM stays causal
    return pretrained, fine_tuned, student


def run(student, strategy, teacher=None, steps=4, **kw):
    s = copy.deepcopy(student)
    g = {k: kw.pop(k) for k in list(kw) if k in Guidance.__dataclass_fields__}
    res = distill(s, batches(), steps=steps, guidance=Guidance(strategy, **g), teacher=teacher, lr=1e-3, **kw)
    return res


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_unguided_student_does_not_depend_on_the_teacher():
    _pretrained, fine_tuned, student = setup()
    a = run(student, "unguided", teacher=None).student
    b = run(student, "unguided", teacher=fine_tuned).student
    assert same(a, b)
    c = run(student, "target", teacher=fine_tuned).student
    assert not same(a, c)


def test_target_guided_with_alpha_zero_equals_unguided():
    _, fine_tuned, student = setup()
    assert same(run(student, "target", fine_tuned, alpha_layer=0.0).student, run(student, "unguided").student)


def test_trajectory_with_zero_teacher_lr_equals_target_guided_by_the_pretrained_model():
    pretrained, _, student = setup()
    a = run(student, "trajectory", pretrained, teacher_lr=0.0)
    b = run(student, "target", pretrained)
    assert same(a.student, b.student)
    assert same(a.teacher, pretrained)


def test_trajectory_teacher_is_co_trained_and_the_pretrained_teacher_is_untouched():
    pretrained, _, student = setup()
    before = copy.deepcopy(pretrained)
    res = run(student, "trajectory", pretrained, teacher_lr=1e-3)
    assert same(pretrained, before)
    assert not same(res.teacher, pretrained)
    assert all("teacher_task" in r for r in res.history)


def test_trajectory_teacher_update_cycle_skips_updates():
    pretrained, _, student = setup()
    every_step = run(student, "trajectory", pretrained, teacher_lr=1e-3, steps=1, teacher_update_cycle=2)
    assert same(every_step.teacher, pretrained)  # cycle 2: step 0 does not update the teacher


def test_waypoint_with_a_single_checkpoint_equals_target_guided():
    pretrained, fine_tuned, student = setup()
    a = run(student, "waypoint", pretrained, waypoints=[fine_tuned.state_dict()])
    b = run(student, "target", fine_tuned)
    assert same(a.student, b.student)


def test_waypoint_switches_checkpoints_on_schedule():
    pretrained, fine_tuned, student = setup()
    a = run(
        student,
        "waypoint",
        pretrained,
        waypoints=[pretrained.state_dict(), fine_tuned.state_dict()],
        waypoint_every=2,
    )
    # first two steps guided by the pretrained model, the last two by the fine-tuned one
    first = run(student, "target", pretrained, steps=2)
    assert not same(a.student, first.student)
    assert [r["layer"] > 0 for r in a.history] == [True] * 4


def test_hybrid_switches_alpha_to_zero_exactly_at_max_distill_steps():
    _, fine_tuned, student = setup()
    res = run(student, "hybrid", fine_tuned, steps=5, max_distill_steps=3, alpha_layer=2.5)
    assert [r["alpha_layer"] for r in res.history] == [2.5, 2.5, 2.5, 0.0, 0.0]
    assert ["layer" in r for r in res.history] == [True, True, True, False, False]


def test_alphas_accept_floats():
    """The official NLP scripts declare --alpha_layer / --alpha_output as int."""
    g = Guidance("target", alpha_layer=0.25, alpha_logits=1.5)
    assert g.alphas(0) == (0.25, 1.5)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"strategy": "distill"}, "strategy"),
        ({"alpha_layer": -1.0}, "alpha_layer"),
        ({"alpha_layer": float("nan")}, "alpha_layer"),
        ({"teacher_update_cycle": 0}, "teacher_update_cycle"),
        ({"temperature": 0.0}, "temperature"),
    ],
)
def test_bad_guidance_names_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        Guidance(**kw)


def test_guided_strategies_need_a_teacher():
    _, _, student = setup()
    with pytest.raises(ValueError, match="strategy 'target' needs a teacher model"):
        distill(student, batches(), steps=1, guidance=Guidance("target"))
    with pytest.raises(ValueError, match="waypoints"):
        distill(student, batches(), steps=1, guidance=Guidance("waypoint"), teacher=student)


def test_non_finite_loss_raises_and_applies_no_update():
    _, fine_tuned, student = setup()
    s = copy.deepcopy(student)
    before = copy.deepcopy(s)
    with torch.no_grad():
        s.model.embed_tokens.weight[5] = float("nan")
    before.model.embed_tokens.weight.data.copy_(s.model.embed_tokens.weight.data)
    bad = [
        {
            "input_ids": torch.full((2, 8), 5),
            "attention_mask": torch.ones(2, 8, dtype=torch.long),
            "labels": torch.full((2, 8), 5),
        }
    ]
    with pytest.raises(FloatingPointError, match="non-finite student loss at step 0"):
        distill(s, bad, steps=2, guidance=Guidance("target"), teacher=fine_tuned)
    for (n, a), b in zip(s.state_dict().items(), before.state_dict().values()):
        assert torch.equal(a.nan_to_num(), b.nan_to_num()), n


def test_target_guidance_pulls_the_student_towards_the_teacher():
    """The layerwise term lowers the student's hidden-state distance to the teacher vs unguided (same budget)."""
    _, fine_tuned, student = setup()
    ids = batches(1, seed=3)[0]["input_ids"]

    def dist(m):
        hs = m(ids, output_hidden_states=True).hidden_states
        ht = fine_tuned(ids, output_hidden_states=True).hidden_states
        return layerwise_loss(hs, ht).item()

    g = run(student, "target", fine_tuned, steps=8, alpha_layer=10.0).student
    u = run(student, "unguided", steps=8).student
    assert dist(g) < dist(u)


def test_trainable_filter_freezes_the_rest():
    _, fine_tuned, student = setup()
    res = run(student, "target", fine_tuned, trainable=lambda n, p: "mamba" in n)
    for (n, a), b in zip(res.student.state_dict().items(), student.state_dict().values()):
        assert torch.equal(a, b) == ("mamba" not in n), n


# ---- issue 38: the caller's teacher is theirs -------------------------------------------------------------------


def snapshot(model):
    return (
        {n: p.requires_grad for n, p in model.named_parameters()},
        {n: m.training for n, m in model.named_modules()},
        {n: t.clone() for n, t in model.state_dict().items()},
    )


@pytest.mark.parametrize("strategy", ["target", "hybrid", "trajectory", "waypoint"])
def test_the_callers_teacher_is_unchanged_afterwards(strategy):
    """Target/hybrid set requires_grad=False and eval() on the caller's teacher and never restored them."""
    pretrained, fine_tuned, student = setup()
    teacher = fine_tuned
    for i, p in enumerate(teacher.parameters()):
        p.requires_grad_(i % 3 != 0)  # the caller's own freezing pattern
    teacher.train()
    teacher.model.layers[0].eval()  # and a submodule in eval mode
    flags, modes, weights = snapshot(teacher)
    kw = {"waypoints": [pretrained.state_dict()]} if strategy == "waypoint" else {}
    run(student, strategy, teacher, steps=3, max_distill_steps=2, **kw)
    after_flags, after_modes, after_weights = snapshot(teacher)
    assert after_flags == flags
    assert after_modes == modes
    assert all(torch.equal(after_weights[k], v) for k, v in weights.items())


def test_the_teacher_is_restored_when_a_step_fails():
    _, fine_tuned, student = setup()
    fine_tuned.train()
    flags, modes, _ = snapshot(fine_tuned)
    s = copy.deepcopy(student)
    with torch.no_grad():
        s.model.embed_tokens.weight[5] = float("nan")
    bad = [{"input_ids": torch.full((2, 8), 5), "labels": torch.full((2, 8), 5)}]
    with pytest.raises(FloatingPointError):
        distill(s, bad, steps=1, guidance=Guidance("target"), teacher=fine_tuned)
    assert snapshot(fine_tuned)[:2] == (flags, modes)


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_teacher_mode_sets_the_target_teachers_mode_during_distillation_only(mode):
    """teacher_mode="train" is the official target/hybrid script (teacher left in train()); "eval" the default."""
    _, fine_tuned, student = setup()
    fine_tuned.train(mode != "train")  # start in the other mode
    before = snapshot(fine_tuned)[1]
    seen = []
    hook = fine_tuned.model.layers[0].register_forward_hook(lambda m, a, o: seen.append(m.training))
    try:
        run(student, "target", fine_tuned, steps=2, teacher_mode=mode)
    finally:
        hook.remove()
    assert seen == [mode == "train"] * 2
    assert snapshot(fine_tuned)[1] == before


def test_bad_teacher_mode_names_the_field():
    with pytest.raises(ValueError, match="teacher_mode must be one of eval, train"):
        Guidance("target", teacher_mode="frozen")


def test_the_reproductions_llama_teacher_computes_the_same_in_train_and_eval_mode():
    """Issue 41: the official start keeps the teacher in train(). For the reproduction's Llama prefix classifier
    that changes nothing: its only dropout (attention_dropout) is 0 and it has no batch-norm (RMSNorm), so the
    mode matters only for BERT/RoBERTa teachers (dropout active in train())."""
    from tiny_models import tiny_llama

    from iclr25_cald._task import prefix_model

    teacher = prefix_model(tiny_llama(2), 2, task="classify", num_labels=3, seed=0)
    ids = torch.randint(1, 40, (3, 8), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        outs = []
        for mode in (False, True, True):
            teacher.train(mode)
            out = teacher(input_ids=ids, attention_mask=mask, output_hidden_states=True)
            outs.append((out.logits, *out.hidden_states))
    assert all(torch.equal(a, b) for a, b in zip(outs[0], outs[1])) and all(
        torch.equal(a, b) for a, b in zip(outs[1], outs[2])
    )
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in teacher.modules())
