"""Data-parallel SemiCLIP (issue 39): 2 gloo ranks on CPU equal one process on the concatenated batch.

The loss of a step is computed on the embeddings gathered with gradient from every rank, so the negatives of the
CLIP loss, the top-ρ selection and the trapezoid of stage 2 span both ranks' rows, as in one process. Tolerance:
rel 1e-5 on every logged loss and 1e-5 absolute on every parameter after 3 + 3 AdamW steps: the only differences
are summation order (a half-batch matmul per rank; the two partial gradients summed by DDP's all-reduce), float32
round-off of order 1e-7 that AdamW's normalised steps carry over a few steps.
"""

import time

import pytest
import torch

from iclr25_semiclip import (
    Features,
    SemiCLIPHead,
    Settings,
    SurrogateCaptions,
    store_concept_logits,
    train_stage1,
    train_stage2,
)
from iclr25_semiclip._model import tiny_towers
from iclr25_shared.testing import RankFailed, run_ranks

CONCEPTS = ["coat", "dress", "bag", "shirt", "sandal"]


def _setup():
    _, tower = tiny_towers(resolution=16, seed=0)
    g = torch.Generator().manual_seed(0)
    n_l, n_u, f = 15, 21, 10
    fe = Features(
        torch.randn(n_l, f, generator=g),
        torch.randn(n_l, tower.dim, generator=g),
        (torch.rand(n_l, len(CONCEPTS), generator=g) < 0.4).float(),
        torch.randn(n_u, f, generator=g),
        torch.randn(n_u, f, generator=g),
    )
    torch.manual_seed(0)
    head = SemiCLIPHead(f, tower.dim, dim=8)
    head.init_concepts(torch.randn(len(CONCEPTS), tower.dim))
    return tower, fe, head


def _train(batch: int, ubatch: int):
    """Stage 1 then stage 2, 3 steps each; returns the loss history and every trained parameter."""
    tower, fe, head = _setup()
    s = Settings(batch_size=batch, unlabelled_batch=ubatch, warmup=1, topk=2, words=2, select_ratio=0.5)
    gen = torch.Generator().manual_seed(1)
    hist = train_stage1(head, fe, steps=3, settings=s, generator=gen)
    stored = store_concept_logits(head, fe.unlabelled_weak)
    sur = SurrogateCaptions(tower, CONCEPTS, words=2)
    hist += train_stage2(head, sur, tower, fe, stored, steps=3, settings=s, generator=gen)
    params = {k: v.detach().clone() for k, v in head.named_parameters()}
    params |= {f"surrogate.{k}": v.detach().clone() for k, v in sur.named_parameters() if v.requires_grad}
    return hist, params


@pytest.mark.slow
def test_two_ranks_equal_one_process_on_the_concatenated_batch_uneven_split():
    # global batches of 7 labelled (4 + 3 rows) and 9 unlabelled (5 + 4) images: uneven blocks are gathered too
    want_hist, want_params = _train(7, 9)
    (h0, p0), (h1, p1) = run_ranks(_train, 7, 9, world_size=2, timeout_s=240)
    assert h0 == h1  # every rank computes the same global loss from the same gathered tensors
    assert all(torch.equal(p0[k], p1[k]) for k in p0)  # DDP leaves the replicas bit-identical
    assert len(h0) == len(want_hist) == 6
    assert h0[-1]["selected"] == want_hist[-1]["selected"] == 4  # ⌊0.5 · 9⌋ of the *global* unlabelled batch
    for got, want in zip(h0, want_hist):
        assert got.keys() == want.keys()
        for k in want:
            assert got[k] == pytest.approx(want[k], rel=1e-5, abs=1e-7), k
    for k, want in want_params.items():
        torch.testing.assert_close(p0[k], want, rtol=0, atol=1e-5, msg=k)
    # the comparison can fail: training moved the parameters much further than the tolerance
    _, _, head0 = _setup()
    assert (want_params["image_proj.weight"] - head0.image_proj.weight).abs().max() > 1e-3


def _stage1(broken_rank: int):
    """3 stage-1 steps on random features; ``broken_rank`` builds its features with one text row too few, so its
    ValueError comes while the other rank already waits in DDP's set-up collective."""
    import torch.distributed as dist

    g = torch.Generator().manual_seed(0)
    n_text = 11 if dist.get_rank() == broken_rank else 12
    fe = Features(
        torch.randn(12, 10, generator=g),
        torch.randn(n_text, 6, generator=g),
        torch.ones(12, 1),
        torch.randn(0, 10),
        torch.randn(0, 10),
    )
    head = SemiCLIPHead(10, 6, dim=8)
    return train_stage1(head, fe, steps=3, settings=Settings(batch_size=8), generator=torch.Generator())


@pytest.mark.slow
def test_a_failure_on_one_rank_stops_every_rank_with_one_error():
    t0 = time.perf_counter()
    with pytest.raises(RankFailed, match=r"rank 1 failed: .*labelled_text has 11 rows") as info:
        run_ranks(_stage1, 1, world_size=2, timeout_s=120)
    assert info.value.rank == 1
    assert (
        time.perf_counter() - t0 < 100
    )  # rank 0, blocked in a collective, was stopped (no wait for a timeout)
