"""Importance scores: hand-computed values, score direction, the scoring model, bad input."""

from __future__ import annotations

import numpy as np
import pytest

import iclr25_infomax as im


def test_el2n_hand_computed():
    logits = np.array([[0.0, 0.0], [np.log(3.0), 0.0]])
    labels = np.array([0, 1])
    # softmax rows: [0.5, 0.5] and [0.75, 0.25]
    expected = [np.sqrt(0.5**2 + 0.5**2), np.sqrt(0.75**2 + 0.75**2)]
    np.testing.assert_allclose(im.el2n_scores(logits, labels), expected)
    # (R, N, C) logits are averaged over R
    # second run: rows swapped, so row 0 sees softmax [0.75, 0.25] (label 0) and row 1 sees [0.5, 0.5] (label 1)
    stacked = np.stack([logits, logits[::-1]])
    second = [np.sqrt(0.25**2 + 0.25**2), np.sqrt(0.5**2 + 0.5**2)]
    np.testing.assert_allclose(im.el2n_scores(stacked, labels), (np.asarray(expected) + second) / 2)


def test_margin_hand_computed():
    logits = np.array([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0]])
    np.testing.assert_allclose(im.margin_scores(logits, np.array([0, 0])), [-1.0, 3.0])


def test_forgetting_counts_transitions_and_never_learned():
    hist = np.array(
        [
            [1, 0, 1, 0],
            [0, 1, 1, 0],
            [1, 0, 1, 0],
            [0, 1, 1, 0],
        ],
        dtype=bool,
    )
    np.testing.assert_array_equal(im.forgetting_scores(hist), [2, 1, 0, 4])


def test_ssp_scores_outlier_highest():
    rng = np.random.default_rng(0)
    centres = np.eye(8)[:4] * 10
    feats = np.vstack([c + 0.1 * rng.normal(size=(50, 8)) for c in centres] + [np.ones((1, 8))])
    s = im.ssp_scores(feats, num_prototypes=4, seed=0)
    assert s.shape == (201,)
    assert int(np.argmax(s)) == 200


def test_direction_is_explicit():
    logits = np.random.default_rng(1).normal(size=(30, 3))
    labels = np.arange(30) % 3
    hard = im.importance_scores("el2n", logits=logits, labels=labels)
    easy = im.importance_scores("el2n", logits=logits, labels=labels, direction="easy_first")
    np.testing.assert_allclose(easy, -hard)
    np.testing.assert_array_equal(
        im.topk_select(hard, 5, direction="easy_first"), im.topk_select(easy, 5, direction="hard_first")
    )


def test_scoring_model_trains_and_feeds_every_score():
    import torch

    torch.set_num_threads(1)
    rng = np.random.default_rng(2)
    y = np.repeat(np.arange(3), 40)
    x = rng.normal(size=(120, 5)).astype(np.float32) + 3.0 * np.eye(3, 5)[y]
    y[:3] = (y[:3] + 1) % 3  # three mislabelled samples
    run = im.train_scoring_model(x, y, epochs=6, hidden=(16, 8), batch_size=32, lr=1e-2, seed=0, device="cpu")
    assert run.logits.shape == (6, 120, 3)
    assert run.correct.shape == (6, 120)
    assert run.features.shape == (120, 8)
    assert run.correct[-1].mean() > 0.85
    el2n = im.el2n_scores(run.logits, y)
    assert el2n[:3].mean() > np.median(el2n)  # mislabelled samples look hard
    again = im.train_scoring_model(
        x, y, epochs=2, hidden=(16, 8), batch_size=32, lr=1e-2, seed=0, device="cpu"
    )
    np.testing.assert_array_equal(run.logits[:2], again.logits)  # seeded: the same first two epochs
    trained = im.importance_scores("forgetting", inputs=x, labels=y, epochs=2, device="cpu")
    assert trained.shape == (120,)
    assert np.isfinite(trained).all()


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: im.el2n_scores(np.zeros((4, 3)), np.array([0, 1, 2])), ValueError, "labels must have shape"),
        (lambda: im.el2n_scores(np.zeros((3, 3)), np.array([0, 1, 3])), ValueError, "labels must be in"),
        (lambda: im.el2n_scores(np.zeros((3, 3)), np.array([0.0, 1.0, 2.0])), TypeError, "integer"),
        (lambda: im.el2n_scores(np.full((2, 2), np.nan), np.array([0, 1])), ValueError, "finite"),
        (lambda: im.forgetting_scores(np.ones((1, 5), bool)), ValueError, "E >= 2"),
        (lambda: im.ssp_scores(np.ones((5, 2)), num_prototypes=6), ValueError, "num_prototypes"),
        (lambda: im.importance_scores("aum"), ValueError, "method"),
        (lambda: im.importance_scores("el2n", direction="up"), ValueError, "direction"),
        (lambda: im.importance_scores("el2n"), ValueError, "needs logits"),
        (lambda: im.importance_scores("ssp"), ValueError, "needs features"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()
