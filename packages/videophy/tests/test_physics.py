"""The physics-plausibility evaluator: rendered clips with known ground truth (gravity, energy, mass conservation,
continuity), the violations VideoPhy's generated videos show most (arXiv:2406.03520, qualitative analysis)."""

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from iclr25_videophy import (
    VIOLATIONS,
    PhysicsPlausibility,
    held_out_split,
    make_dataset,
    render_clip,
    trajectory_features,
)
from iclr25_videophy._physics import CLIP_KINDS


@pytest.mark.parametrize("kind", ["physical", *VIOLATIONS])
def test_clips_have_the_documented_shape_and_range(kind):
    c = render_clip(kind, 0)
    assert c.shape == (16, 32, 32) and c.dtype == np.float32
    assert c.min() >= 0 and c.max() <= 1


def test_tracked_gravity_points_down_for_physical_and_up_for_upward_clips():
    down = [trajectory_features(render_clip("physical", s, noise=0.0))[0] for s in range(20)]
    up = [trajectory_features(render_clip("upward", s, noise=0.0))[0] for s in range(20)]
    assert np.median(down) > 0.05 and np.median(up) < 0


def test_tracked_mass_is_flat_for_physical_and_drifts_for_size_drift():
    flat = [abs(trajectory_features(render_clip("physical", s, noise=0.0))[4]) for s in range(20)]
    drift = [abs(trajectory_features(render_clip("size_drift", s, noise=0.0))[4]) for s in range(20)]
    assert np.median(drift) > 3 * np.median(flat)


def test_teleport_shows_as_a_jerk_spike():
    phys = [trajectory_features(render_clip("physical", s, noise=0.0))[2] for s in range(20)]
    tele = [trajectory_features(render_clip("teleport", s, noise=0.0))[2] for s in range(20)]
    assert np.median(tele) > np.median(phys)


def test_evaluator_separates_physical_from_violating_clips_on_held_out_data():
    x_tr, y_tr, _ = make_dataset(15, 0)
    x_te, y_te, _k_te = make_dataset(15, 1)
    s = PhysicsPlausibility().fit(x_tr, y_tr).score_clips(x_te)
    assert ((s >= 0) & (s <= 1)).all()
    assert roc_auc_score(y_te, s) > 0.8
    # control: the same pipeline trained on permuted labels is near chance
    perm = np.random.default_rng(0).permutation(y_tr)
    s0 = PhysicsPlausibility().fit(x_tr, perm).score_clips(x_te)
    assert abs(roc_auc_score(y_te, s0) - 0.5) < 0.25


def test_dataset_is_balanced_and_reproducible():
    x, y, k = make_dataset(3, 7)
    assert x.shape == (24, 16, 32, 32) and y.sum() == 12
    assert {str(v): int((k == v).sum()) for v in VIOLATIONS} == dict.fromkeys(VIOLATIONS, 3)
    np.testing.assert_array_equal(make_dataset(3, 7)[0], x)


def test_fit_needs_both_classes_and_scoring_needs_a_fit():
    x, y, _ = make_dataset(2, 0)
    with pytest.raises(ValueError, match="both 0 and 1"):
        PhysicsPlausibility().fit(x, np.ones_like(y))
    with pytest.raises(RuntimeError, match="fit"):
        PhysicsPlausibility().score_clips(x)
    with pytest.raises(ValueError, match="features"):
        PhysicsPlausibility("cnn")
    with pytest.raises(ValueError, match="kind"):
        render_clip("levitating", 0)


@pytest.mark.parametrize("held_out", VIOLATIONS)
def test_held_out_split_never_trains_on_the_held_out_kind(held_out):
    _, _, k_tr = make_dataset(2, 0)
    _, _, k_te = make_dataset(2, 1)
    train, test = held_out_split(k_tr, k_te, held_out)
    others = {v for v in VIOLATIONS if v != held_out}
    assert held_out not in set(k_tr[train].tolist())
    assert set(k_tr[train].tolist()) == {"physical", *others}  # everything else is kept for training
    assert set(k_te[test].tolist()) == {"physical", held_out}
    assert (k_te[test] == "physical").sum() == (k_te == "physical").sum()
    with pytest.raises(ValueError, match="held_out"):
        held_out_split(k_tr, k_te, "physical")


_CODE = {k: i / 10 for i, k in enumerate(CLIP_KINDS)}  # a clip's kind, written into its first pixel


def test_reproduce_part_b_held_out_rows_come_from_models_that_never_saw_that_kind(monkeypatch, capsys):
    """Part B end to end (tiny, 2 seeds, --parts B): every held-out-kind AUC is computed by a model whose training
    clips hold no clip of that kind, scored on physical clips and that kind only."""
    import iclr25_videophy._physics as physics
    from iclr25_videophy.cli import main

    real_make, real_fit, real_score = (
        physics.make_dataset,
        PhysicsPlausibility.fit,
        PhysicsPlausibility.score_clips,
    )

    def tagged_make(n, seed, **kw):
        x, y, k = real_make(n, seed, **kw)
        x[:, 0, 0, 0] = [_CODE[str(v)] for v in k]
        return x, y, k

    def kinds(clips):
        by_code = {round(c * 10): k for k, c in _CODE.items()}
        return {by_code[round(float(c[0, 0, 0]) * 10)] for c in clips}

    fits, scores = [], []

    def fit(self, clips, labels):
        self.trained_on = kinds(clips)
        fits.append((self.features, self.trained_on))
        return real_fit(self, clips, labels)

    def score(self, clips):
        scores.append((self.features, self.trained_on, kinds(clips)))
        return real_score(self, clips)

    monkeypatch.setattr(physics, "make_dataset", tagged_make)
    monkeypatch.setattr(PhysicsPlausibility, "fit", fit)
    monkeypatch.setattr(PhysicsPlausibility, "score_clips", score)
    assert main(["reproduce", "--size", "tiny", "--seeds", "2", "--parts", "B", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "B_auc_heldout_kind" in out and "A_real_clips" not in out
    for feats in ("trajectory", "framediff"):
        for v in VIOLATIONS:
            # the held-out evaluation scored physical vs v once per seed, each time with a model blind to v
            runs = [t for f, t, s in scores if f == feats and s == {"physical", v}]
            assert len(runs) == 2, (feats, v, runs)
            assert all(t == set(CLIP_KINDS) - {v} for t in runs), (feats, v, runs)
    # and no model scored a kind it was not trained on except in those runs
    for _feats, t, s in scores:
        assert s <= t or s == {"physical", *(set(CLIP_KINDS) - t)}
