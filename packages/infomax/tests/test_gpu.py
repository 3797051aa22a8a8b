"""CUDA tier (issue 40): the torch parts of InfoMax on a GPU. Skipped where no CUDA device is visible.

What runs on the device is the scoring MLP (``train_scoring_model``: EL2N / margin / forgetting scores and the kNN
features) and the coreset classifier of the reproduction (``classifier_accuracy``). The selection itself (sparse kNN
graph, solver) is numpy / scipy on the host whatever ``--device`` says, so the README's memory row (the solver's
peak against the size of ``K``) has no CUDA counterpart; nothing here runs in reduced precision, so there is no
bf16 comparison either.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from iclr25_infomax import el2n_scores, train_scoring_model  # noqa: E402
from iclr25_infomax._experiment import classifier_accuracy  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.fixture(autouse=True)
def _no_tf32():
    """fp32 means fp32: TF32 matmuls (10-bit mantissa) would dominate the CPU/CUDA difference."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def _data(n=600, d=20, classes=4, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, d)) * 2
    y = rng.integers(0, classes, size=n)
    x = (centres[y] + rng.normal(size=(n, d))).astype(np.float32)
    return x, y.astype(np.int64)


def test_scoring_model_on_cuda_matches_the_cpu():
    """The same seeded initialisation and batch order on both devices; fp32 (TF32 off) differs only in summation
    order, ~1e-7 relative per op, grown over 2 x 10 Adam steps (lr 1e-3) to well under 1e-4 on the logits. 1e-4
    absolute on logits and EL2N is ~100x that and far below one wrong step (an Adam step moves logits by ~1e-2)."""
    x, y = _data()
    cpu = train_scoring_model(x, y, epochs=2, hidden=(32, 8), batch_size=64, seed=3, device="cpu")
    gpu = train_scoring_model(x, y, epochs=2, hidden=(32, 8), batch_size=64, seed=3, device="cuda")
    np.testing.assert_allclose(gpu.logits, cpu.logits, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gpu.features, cpu.features, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(el2n_scores(gpu.logits, y), el2n_scores(cpu.logits, y), rtol=1e-4, atol=1e-4)
    assert next(gpu.model.parameters()).device.type == "cpu"  # returned on the CPU, as documented


def test_coreset_classifier_on_cuda_matches_the_cpu():
    """200 Adam steps: the two devices' test accuracies differ by at most 2 test examples (a logit within ~1e-4 of
    a tie may flip; a wrong batch order or learning-rate schedule moves accuracy by many examples)."""
    x, y = _data(n=1300)
    x, y, xt, yt = x[:800], y[:800], x[800:], y[800:]  # one mixture: train and test share the class centres
    kw = {"steps": 200, "hidden": 32, "batch_size": 32, "lr": 3e-3, "seed": 5}
    a_cpu = classifier_accuracy(x, y, xt, yt, device=torch.device("cpu"), **kw)
    a_gpu = classifier_accuracy(x, y, xt, yt, device=torch.device("cuda"), **kw)
    assert a_cpu > 0.5  # it learned something: the comparison is not between two chance levels
    assert abs(a_gpu - a_cpu) <= 2 / len(yt)


def test_no_host_device_copy_per_training_step():
    """count_memcpy: the copies of a whole run do not grow with the number of steps (4x the steps, the same number of
    copies): the batch indices go to the device once, never once per step. Before the fix classifier_accuracy
    copied each step's indices (one host-to-device copy, i.e. one host synchronisation, per step)."""
    from iclr25_shared.device import count_memcpy

    x, y = _data(n=500)
    x, y, xt, yt = x[:400], y[:400], x[400:], y[400:]
    dev = torch.device("cuda")
    kw = {"hidden": 16, "batch_size": 16, "lr": 1e-3, "seed": 0, "device": dev}
    classifier_accuracy(x, y, xt, yt, steps=10, **kw)  # warm-up (CUDA context, cuBLAS handles)
    few = count_memcpy(lambda: classifier_accuracy(x, y, xt, yt, steps=10, **kw))
    many = count_memcpy(lambda: classifier_accuracy(x, y, xt, yt, steps=40, **kw))
    assert many == few, (few, many)

    # the scoring MLP reads its logits back once per epoch (by design: the score history), not once per step
    kw = {"epochs": 2, "hidden": (16, 8), "seed": 0, "device": "cuda"}
    big = count_memcpy(lambda: train_scoring_model(x, y, batch_size=100, **kw))  # 4 steps per epoch
    small = count_memcpy(lambda: train_scoring_model(x, y, batch_size=25, **kw))  # 16 steps per epoch
    assert small == big, (big, small)


def test_cuda_runs_repeat_bit_for_bit():
    """The CPU path is deterministic for a seed (the reproduction's paired seeds rely on it); on CUDA the same seed
    gives the same scores twice (plain Linear / ReLU / cross-entropy / Adam: no atomics-based kernels)."""
    x, y = _data(n=300)
    a = train_scoring_model(x, y, epochs=2, hidden=(16, 8), batch_size=32, seed=7, device="cuda")
    b = train_scoring_model(x, y, epochs=2, hidden=(16, 8), batch_size=32, seed=7, device="cuda")
    np.testing.assert_array_equal(a.logits, b.logits)
    np.testing.assert_array_equal(a.features, b.features)
