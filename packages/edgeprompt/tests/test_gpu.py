"""CUDA: the same tuning step on GPU as on CPU, backbone still frozen (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch_geometric.data import Batch

from iclr25_edgeprompt import GNNEncoder, PromptTuner, make_prompt

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@pytest.mark.parametrize("prompt", ["edgeprompt", "edgeprompt+", "gpf-plus"])
def test_cuda_matches_cpu_and_keeps_the_backbone_frozen(make_graph, prompt):
    from torch_geometric.data import Data

    graphs = []
    for s in range(6):
        x, ei = make_graph(10, 20, 5, seed=s, self_loops=1)
        graphs.append(Data(x=x, edge_index=ei, y=torch.tensor([s % 3])))
    batch = Batch.from_data_list(graphs)
    torch.manual_seed(0)
    backbone = GNNEncoder(conv="gin", in_channels=5, hidden_channels=16, num_layers=3).eval()
    torch.manual_seed(1)
    tuner = PromptTuner(
        backbone, make_prompt(prompt, backbone, num_anchors=3, init="glorot"), nn.Linear(16, 3)
    )
    cpu = tuner(batch)
    tuner = tuner.cuda()
    before = {k: v.clone() for k, v in tuner.backbone.state_dict().items()}
    gpu = tuner(batch.cuda())
    assert torch.allclose(gpu.cpu(), cpu, atol=1e-4)
    nn.functional.cross_entropy(gpu, batch.y.cuda()).backward()
    assert all(torch.equal(v, tuner.backbone.state_dict()[k]) for k, v in before.items())
