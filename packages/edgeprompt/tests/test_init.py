"""Prompt initialisation option: zero start = the frozen backbone exactly; small = scaled Glorot; bad names."""

from __future__ import annotations

import math

import pytest
import torch

from iclr25_edgeprompt import (
    GPF,
    INITS,
    EdgePrompt,
    EdgePromptPlus,
    GNNEncoder,
    GPFPlus,
    init_prompt,
    make_prompt,
)
from iclr25_edgeprompt import cli as cli_module
from iclr25_edgeprompt._prompt import DEFAULT_INIT, SMALL_SCALE


def test_cli_default_and_choices_agree_with_the_library():
    assert cli_module._DEFAULT_INIT == DEFAULT_INIT
    assert tuple(cli_module._INITS) == INITS


@pytest.mark.parametrize("conv", ["gcn", "gin"])
@pytest.mark.parametrize("name", ["gpf", "gpf-plus", "edgeprompt", "edgeprompt+"])
def test_zero_init_starts_exactly_at_the_frozen_backbone(graph, conv, name):
    """With init='zero' every prompt method is classifier-only at step 0 (bit for bit, BatchNorm layout too)."""
    x, edge_index = graph
    x = x.abs()  # non-negative layer-0 input: GIN's ReLU'd messages are the plain ones
    torch.manual_seed(0)
    model = GNNEncoder(conv=conv, in_channels=5, hidden_channels=8, num_layers=3).eval()
    prompt = make_prompt(name, model, init="zero")
    assert torch.equal(model(x, edge_index, prompt), model(x, edge_index))
    glorot = make_prompt(name, model, init="glorot")
    assert not torch.allclose(model(x, edge_index, glorot), model(x, edge_index))


def test_small_init_is_glorot_scaled_and_glorot_has_the_glorot_bound():
    torch.manual_seed(0)
    a = init_prompt(torch.empty(200, 300), "glorot")
    bound = math.sqrt(6 / (200 + 300))
    assert a.abs().max() <= bound and a.abs().max() > 0.95 * bound
    torch.manual_seed(0)
    b = init_prompt(torch.empty(200, 300), "small")
    torch.testing.assert_close(b, a * SMALL_SCALE)
    assert torch.count_nonzero(init_prompt(torch.ones(3, 4), "zero")) == 0


def test_every_prompt_class_takes_init_and_rejects_unknown_names():
    assert torch.count_nonzero(EdgePrompt(2, [3, 4], init="zero").global_prompt[1]) == 0
    plus = EdgePromptPlus(2, [3, 4], 5, init="zero")
    assert all(torch.count_nonzero(a) == 0 for a in plus.anchors)
    assert any(torch.count_nonzero(s.weight) > 0 for s in plus.scores)  # the score map keeps its own init
    assert torch.count_nonzero(GPF(3, init="zero").global_emb) == 0
    assert torch.count_nonzero(GPFPlus(3, init="zero").basis) == 0
    for make in (
        lambda: EdgePrompt(1, 3, init="he"),
        lambda: GPF(3, init="he"),
        lambda: init_prompt(torch.ones(1), "he"),
    ):
        with pytest.raises(ValueError, match="init must be one of glorot, zero, small; got 'he'"):
            make()
