"""Frozen means frozen; only prompt + head learn; the head outputs logits; node tasks really use the prompt."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch_geometric.data import Batch

from iclr25_edgeprompt import (
    PROMPTS,
    EdgePrompt,
    GNNEncoder,
    PromptTuner,
    TuneSettings,
    digit_grid_graphs,
    load_dataset,
    make_prompt,
)


@pytest.fixture(scope="module")
def digit_graphs():
    from iclr25_shared.data import digits

    images, labels = digits()
    return digit_grid_graphs(images[:40], labels[:40])


def _gin(seed: int = 0) -> GNNEncoder:
    torch.manual_seed(seed)
    return GNNEncoder(conv="gin", in_channels=3, hidden_channels=16, num_layers=2, dropout=0.5)


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("prompt", PROMPTS)
def test_backbone_parameters_and_batchnorm_buffers_are_bit_identical_after_tuning(digit_graphs, prompt):
    backbone = _gin()
    before = _state(backbone)
    tuner = PromptTuner(backbone, make_prompt(prompt, backbone, num_anchors=3), nn.Linear(16, 10))
    history = tuner.fit(digit_graphs, TuneSettings(epochs=2, lr=1e-2, batch_size=8), seed=0)
    assert len(history) == 2
    after = backbone.state_dict()
    assert before.keys() == after.keys()
    assert any("running_mean" in k for k in after)  # the check covers BatchNorm statistics
    for key, value in before.items():
        assert torch.equal(value, after[key]), key
    assert not backbone.training


def test_the_frozen_check_can_fail_in_train_mode(digit_graphs):
    """What the official code does (backbone left in train mode) does move BatchNorm statistics."""
    backbone = _gin()
    before = _state(backbone)
    backbone.train()
    batch = Batch.from_data_list(digit_graphs[:8])
    with torch.no_grad():
        backbone(batch.x, batch.edge_index)
    changed = [k for k in before if not torch.equal(before[k], backbone.state_dict()[k])]
    assert any("running_mean" in k for k in changed)


def test_only_prompt_and_head_require_and_receive_gradients(digit_graphs):
    """Regression (github.com/sheldonresearch/ProG put gnn.parameters() in the optimiser)."""
    backbone = _gin()
    # Glorot anchors: with zero anchors the score map's gradient is exactly 0 at the first step (p = b·A, A = 0)
    prompt = make_prompt("edgeprompt+", backbone, num_anchors=3, init="glorot")
    head = nn.Linear(16, 10)
    tuner = PromptTuner(backbone, prompt, head)
    assert all(not p.requires_grad for p in backbone.parameters())
    trainable = {id(p) for p in tuner.trainable_parameters()}
    assert trainable == {id(p) for p in [*prompt.parameters(), *head.parameters()]}
    assert trainable == {id(p) for p in tuner.parameters() if p.requires_grad}
    batch = Batch.from_data_list(digit_graphs[:8])
    nn.functional.cross_entropy(tuner(batch), batch.y).backward()
    assert all(p.grad is None for p in backbone.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in prompt.parameters())


def test_train_mode_on_the_tuner_keeps_the_backbone_in_eval(digit_graphs):
    tuner = PromptTuner(_gin(), None, nn.Linear(16, 10))
    tuner.train()
    assert tuner.head.training
    assert not tuner.backbone.training
    assert not any(m.training for m in tuner.backbone.modules())


def test_head_must_output_logits():
    """Regression (github.com/sheldonresearch/ProG's answering head ended in Softmax before cross-entropy)."""
    backbone = _gin()
    with pytest.raises(ValueError, match="logits"):
        PromptTuner(backbone, None, nn.Sequential(nn.Linear(16, 10), nn.Softmax(-1)))


def test_node_task_path_passes_the_prompt():
    """Regression (github.com/sheldonresearch/ProG's node path called gnn(x, edge_index) without the prompt)."""
    data = load_dataset("karate")
    torch.manual_seed(0)
    backbone = GNNEncoder(conv="gcn", in_channels=data.in_channels, hidden_channels=8, num_layers=2)
    prompt = EdgePrompt(2, backbone.layer_dims, init="glorot")  # a non-zero prompt, so scaling it matters
    tuner = PromptTuner(backbone, prompt, nn.Linear(8, 4))
    batch = Batch.from_data_list(data.graphs[:5])
    out = tuner(batch)
    with torch.no_grad():
        prompt.global_prompt[0].mul_(3.0)
    assert not torch.allclose(tuner(batch), out)


def test_mismatched_prompt_and_bad_arguments_are_rejected():
    backbone = _gin()
    with pytest.raises(
        ValueError, match=r"prompt dims \[3, 32\] do not match the backbone's layer input dims \[3, 16\]"
    ):
        PromptTuner(backbone, EdgePrompt(2, [3, 32]), nn.Linear(16, 10))
    with pytest.raises(ValueError, match="node prompt in_channels=4"):
        PromptTuner(
            backbone,
            make_prompt("gpf", GNNEncoder(conv="gin", in_channels=4, hidden_channels=16)),
            nn.Linear(16, 10),
        )
    with pytest.raises(TypeError, match="backbone must be a GNNEncoder"):
        PromptTuner(nn.Linear(3, 3), None, nn.Linear(16, 10))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prompt must be one of"):
        make_prompt("allinone", backbone)
    with pytest.raises(ValueError, match=r"epochs must be an integer in \[1, inf\)"):
        TuneSettings(epochs=0)
    with pytest.raises(ValueError, match="graphs is empty"):
        PromptTuner(backbone, None, nn.Linear(16, 10)).fit([])


def test_tuning_learns():
    """Loss falls and the training set is fitted with EdgePrompt+ on a frozen random GIN (digits 0 vs 1)."""
    from iclr25_shared.data import digits

    images, labels = digits()
    keep = labels < 2
    graphs = digit_grid_graphs(images[keep][:30], labels[keep][:30])
    backbone = _gin()
    tuner = PromptTuner(backbone, make_prompt("edgeprompt+", backbone, num_anchors=3), nn.Linear(16, 2))
    history = tuner.fit(graphs, TuneSettings(epochs=40, lr=5e-2, batch_size=30), seed=0)
    assert history[-1] < 0.3 * history[0]
    assert tuner.accuracy(graphs) >= 0.9


def test_fit_is_deterministic_per_seed(digit_graphs):
    def run(seed: int) -> list[float]:
        backbone = _gin()
        torch.manual_seed(1)
        tuner = PromptTuner(backbone, make_prompt("edgeprompt", backbone), nn.Linear(16, 10))
        return tuner.fit(digit_graphs, TuneSettings(epochs=2, batch_size=8), seed=seed)

    assert run(3) == run(3)
    assert run(3) != run(4)
