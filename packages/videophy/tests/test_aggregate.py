"""The leaderboard metric: joint = SA ∧ PC per video, averaged per prompt then per model (arXiv:2406.03520
human-evaluation leaderboard), its modes, dedupe and the constant-judge warning."""

import math
import warnings
from importlib.resources import files

import numpy as np
import pytest

from iclr25_videophy import (
    ConstantScoresWarning,
    Judgement,
    aggregate,
    dedupe,
    leaderboard,
    read_labels,
    rule_summary,
)


def test_published_example_labels_give_joint_two_of_seven():
    # the authors' train_example.csv: SA ∧ PC holds only for the spatula and the apple videos
    rows = read_labels(str(files("iclr25_videophy") / "data" / "videophy_train_example.csv"))
    both = sorted(j.caption.split()[1] for j in rows if j.sa == 1 and j.pc == 1)
    assert both == ["apple", "spatula"]
    (r,) = aggregate(rows)
    assert r["joint"] == pytest.approx(200 / 7)
    assert r["sa"] == pytest.approx(300 / 7) and r["pc"] == pytest.approx(400 / 7)


def _random_rows(rng, n_models=3, n_prompts=6, max_videos=3, continuous=False):
    rows = []
    for m in range(n_models):
        for p in range(n_prompts):
            for k in range(rng.integers(1, max_videos + 1)):
                sa, pc = (rng.random(2) if continuous else rng.integers(0, 2, 2)).tolist()
                rows.append(
                    Judgement(
                        f"m{m}/p{p}_{k}.mp4",
                        f"prompt {p}",
                        float(sa),
                        float(pc),
                        source=f"m{m}",
                        states_of_matter=["solid_solid", "fluid_fluid"][p % 2],
                        complexity=p % 2,
                    )
                )
    return rows


def _brute_force(rows, source, t=0.5):
    # per prompt: mean over its videos; then mean over prompts (written with plain loops)
    prompts = {}
    for j in rows:
        if j.source == source:
            prompts.setdefault(j.caption, []).append((j.sa >= t, j.pc >= t))
    per = [
        [np.mean([a and b for a, b in v]), np.mean([a for a, _ in v]), np.mean([b for _, b in v])]
        for v in prompts.values()
    ]
    return 100 * np.mean(per, axis=0)


@pytest.mark.parametrize("seed", range(5))
def test_per_prompt_then_per_model_matches_brute_force_and_joint_le_min(seed):
    rng = np.random.default_rng(seed)
    rows = _random_rows(rng, continuous=bool(seed % 2))
    for r in aggregate(rows, mode="threshold"):
        np.testing.assert_allclose([r["joint"], r["sa"], r["pc"]], _brute_force(rows, r["source"]))
        assert r["joint"] <= min(r["sa"], r["pc"]) + 1e-12
    for r in aggregate(rows, mode="mean"):
        assert r["joint"] <= min(r["sa"], r["pc"]) + 1e-12


def test_a_prompt_with_many_videos_counts_once():
    rows = [Judgement(f"v{k}", "p1", 1.0, 1.0) for k in range(3)] + [Judgement("w", "p2", 0.0, 0.0)]
    (r,) = aggregate(rows, by=())
    assert r["joint"] == 50.0 and r["n_prompts"] == 2 and r["n_videos"] == 4


def test_joint_equals_sa_equals_pc_when_labels_agree():
    rng = np.random.default_rng(0)
    rows = [Judgement(f"v{i}", f"p{i}", float(b), float(b)) for i, b in enumerate(rng.integers(0, 2, 20))]
    (r,) = aggregate(rows, by=())
    assert r["joint"] == r["sa"] == r["pc"]
    (m,) = aggregate(
        [Judgement(f"v{i}", f"p{i}", s, s) for i, s in enumerate(rng.random(9))], mode="mean", by=()
    )
    assert m["joint"] == pytest.approx(m["sa"]) and m["sa"] == pytest.approx(m["pc"])


def test_threshold_and_mean_modes_on_continuous_scores():
    # Hritikbansal/videophy#5: continuous judge scores (e.g. 0.347) are averaged (the authors) or thresholded
    rows = [Judgement("a", "p", 0.347, 0.9), Judgement("b", "q", 0.7, 0.2)]
    (t,) = aggregate(rows, mode="threshold", by=())
    assert (t["sa"], t["pc"], t["joint"]) == (50.0, 50.0, 0.0)
    (m,) = aggregate(rows, mode="mean", by=())
    assert m["sa"] == pytest.approx(52.35) and m["pc"] == pytest.approx(55.0)
    assert m["joint"] == pytest.approx(100 * (0.347 + 0.2) / 2)
    (t2,) = aggregate(rows, mode="threshold", threshold=0.3, by=())
    assert t2["sa"] == 100.0


def test_the_default_aggregation_of_judge_scores_is_the_authors_mean():
    # issue 41: the authors average VideoCon-Physics scores; binarising at 0.5 is an option, not the default
    rows = [Judgement("a", "p", 0.6, 0.55), Judgement("b", "q", 0.2, 0.45)]
    (d,) = aggregate(rows, by=())
    assert d["sa"] == pytest.approx(40.0) and d["pc"] == pytest.approx(50.0)  # (0.6+0.2)/2, (0.55+0.45)/2
    assert d["joint"] == pytest.approx(100 * (0.55 + 0.2) / 2)  # min(SA, PC) per video
    (t,) = aggregate(rows, mode="threshold", by=())
    assert (t["sa"], t["pc"], t["joint"]) == (50.0, 50.0, 50.0)  # what the old default gave: not the same
    assert leaderboard(rows)[0]["sa"] == pytest.approx(40.0)  # the leaderboard's default too


def test_a_score_of_exactly_the_threshold_passes():
    # the tie rule: score >= threshold passes, so 0.5 counts as SA = 1 / PC = 1
    rows = [Judgement("a", "p", 0.5, 0.5), Judgement("b", "q", np.nextafter(0.5, 0.0), 0.5)]
    (t,) = aggregate(rows, mode="threshold", by=(), warn_constant=False)  # PC is 0.5 everywhere
    assert (t["sa"], t["pc"], t["joint"]) == (50.0, 100.0, 50.0)
    (t7,) = aggregate(rows, mode="threshold", threshold=0.7, by=(), warn_constant=False)
    assert (t7["sa"], t7["pc"]) == (0.0, 0.0)
    # on 0/1 human labels the two modes agree (the paper's leaderboard metric)
    labels = [Judgement(f"v{i}", f"p{i}", float(i % 2), float(i % 3 == 0)) for i in range(6)]
    (a,) = aggregate(labels, by=())
    (b,) = aggregate(labels, mode="threshold", by=())
    assert (a["joint"], a["sa"], a["pc"]) == (b["joint"], b["sa"], b["pc"])


def test_videophy2_mode_uses_sa_ge_4_and_pc_ge_4():
    # Hritikbansal/videophy#10: joint = SA >= 4 and PC >= 4 on the 1..5 scale
    rows = [
        Judgement("a", "p", 4, 5),
        Judgement("b", "q", 5, 3),
        Judgement("c", "r", 3, 4),
        Judgement("d", "s", 4, 4),
    ]
    (r,) = aggregate(rows, mode="videophy2", by=())
    assert (r["joint"], r["sa"], r["pc"]) == (50.0, 75.0, 75.0)
    with pytest.raises(ValueError, match="1..5"):
        aggregate([Judgement("a", "p", 4.5, 4)], mode="videophy2")
    with pytest.raises(ValueError, match="videophy2"):
        aggregate([Judgement("a", "p", 4, 4)])


def test_appended_duplicate_rows_do_not_double_count():
    rows = [Judgement("a", "p", 1, 1), Judgement("b", "q", 0, 0)]
    (r,) = aggregate([*rows, rows[0], rows[0]], by=())
    assert r["joint"] == 50.0 and r["n_videos"] == 2
    assert dedupe([*rows, rows[1]])[1] == 1
    with pytest.raises(ValueError, match="appears twice"):
        dedupe([*rows, Judgement("a", "p", 0, 1)])


def test_a_constant_judge_is_flagged():
    # Hritikbansal/videophy#20: the PC judge returned 4 for every example
    rows = [Judgement(f"v{i}", f"p{i}", 4, 4 if i else 5) for i in range(5)]
    with pytest.warns(ConstantScoresWarning, match="all 5 SA scores equal 4"):
        aggregate(rows, mode="videophy2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        aggregate([Judgement("a", "p", 1, 0), Judgement("b", "q", 0, 1)])


def test_leaderboard_sorts_by_joint_and_breaks_ties_by_name():
    rows = [
        Judgement("1", "p", 1, 1, source="B"),
        Judgement("2", "p", 1, 1, source="A"),
        Judgement("3", "p", 1, 0, source="C"),
        Judgement("4", "p", 0, 0, source="D"),
    ]
    board = leaderboard(rows)
    assert [(r["rank"], r["source"]) for r in board] == [(1, "A"), (2, "B"), (3, "C"), (4, "D")]


def test_breakdowns_by_states_of_matter_and_complexity():
    rows = _random_rows(np.random.default_rng(3))
    by_state = aggregate(rows, by=("source", "states_of_matter"))
    assert {(r["source"], r["states_of_matter"]) for r in by_state} == {
        (f"m{m}", s) for m in range(3) for s in ("solid_solid", "fluid_fluid")
    }
    for r in aggregate(rows, by=("complexity",)):
        assert r["n_prompts"] == 3


def test_a_task_not_scored_gives_nan_joint_and_partial_scores_are_refused():
    (r,) = aggregate([Judgement("a", "p", math.nan, 1.0), Judgement("b", "q", math.nan, 0.0)], by=())
    assert math.isnan(r["sa"]) and math.isnan(r["joint"]) and r["pc"] == 50.0
    with pytest.raises(ValueError, match="lacks a SA score"):
        aggregate([Judgement("a", "p", math.nan, 1.0), Judgement("b", "q", 1.0, 0.0)])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"mode": "median"}, "mode"), ({"threshold": 1.5}, "threshold"), ({"by": ("model",)}, "by")],
)
def test_bad_options_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        aggregate([Judgement("a", "p", 1, 1)], **kwargs)


def test_empty_input_is_refused():
    with pytest.raises(ValueError, match="empty"):
        aggregate([])


def test_rule_labels_are_summarised_apart_from_the_joint_score():
    # Hritikbansal/videophy#10: each video has a list of rules; rules are aggregated explicitly, joint ignores them
    rows = [("a", "r1", 1), ("a", "r2", 0), ("a", "r3", 1), ("a", "r4", 1), ("b", "r1", 2), ("a", "r1", 1)]
    s = rule_summary(rows)
    assert s["n_rules"] == 5 and s["n_videos"] == 2
    assert s["per_rule"] == {0: 0.2, 1: 0.6, 2: 0.2}
    assert s["per_video"] == {0: 0.125, 1: 0.375, 2: 0.5}  # a: (1/4, 3/4, 0), b: (0, 0, 1)
    with pytest.raises(ValueError, match="0, 1 or 2"):
        rule_summary([("a", "r", 3)])
    with pytest.raises(ValueError, match="two labels"):
        rule_summary([("a", "r", 1), ("a", "r", 0)])
    with pytest.raises(ValueError, match="empty"):
        rule_summary([])
