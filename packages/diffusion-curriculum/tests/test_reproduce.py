"""The reproduction's comparisons on hand-made per-seed records: the declared primary first, which values each
comparison pairs, and what happens with a missing target or a non-finite value."""

import math

import pytest

from iclr25_diffusion_curriculum._reproduce import PAPER_EFFECT, comparisons


def _run(method, seed, fid, heldout):
    return {"method": method, "seed": seed, "steps": [100, 200], "fid": fid, "heldout": heldout}


def _runs():
    runs = []
    for s in (0, 1, 2):
        runs.append(_run("uniform", s, [50.0 + s, 40.0 + s], [0.2, 0.1]))
        runs.append(_run("curriculum", s, [60.0, 36.0 + 2 * s], [0.25, 0.09 + 0.001 * s]))
    return runs


def test_the_primary_is_the_final_fid_ratio_of_the_curriculum():
    rows, notes, tables = comparisons(_runs())
    primary = rows[0]
    assert primary.role == "primary" and [r.role for r in rows].count("primary") == 1
    assert primary.name == "final FID, curriculum / uniform - 1"
    by_hand = [(36.0 + 2 * s) / (40.0 + s) - 1 for s in (0, 1, 2)]
    assert primary.estimate.value == pytest.approx(sum(by_hand) / 3)
    roles = {r.name: r.role for r in rows}
    assert roles["final held-out ε-MSE, curriculum / uniform - 1"] == "secondary"
    assert roles["held-out ε-MSE mean over checkpoints, curriculum / uniform - 1"] == "secondary"
    assert roles["FID at step 100, curriculum - uniform"] == "exploratory"
    step100 = next(r for r in rows if r.name == "FID at step 100, curriculum - uniform")
    assert step100.estimate.value == pytest.approx(60.0 - 51.0)  # mean of 60 - (50 + s)
    assert PAPER_EFFECT < 0
    # the curriculum reaches uniform's final FID (40 + s) between steps 100 and 200 in every seed
    reach = [r for r in tables["steps to reach"] if r["metric"] == "FID"]
    assert all(r["method: steps to reach it"] is not None for r in reach)
    assert "steps to uniform's final FID, curriculum - uniform" in roles
    assert not any("FID (curriculum)" in n for n in notes)


def test_a_target_not_reached_gives_a_note_not_a_comparison():
    runs = _runs()
    for r in runs:
        if r["method"] == "curriculum" and r["seed"] == 1:
            r["heldout"] = [0.25, 0.2]  # never reaches uniform's final 0.1
    rows, notes, tables = comparisons(runs)
    assert not any(r.name.startswith("steps to uniform's final held-out") for r in rows)
    assert any("held-out ε-MSE (curriculum)" in n and "[1]" in n for n in notes)
    missed = [r for r in tables["steps to reach"] if r["metric"] == "held-out ε-MSE" and r["seed"] == 1]
    assert missed[0]["method: steps to reach it"] is None


def test_a_non_finite_fid_leaves_its_seed_out_with_a_note():
    runs = _runs()
    runs[3]["fid"] = [60.0, math.inf]  # curriculum, seed 1
    rows, notes, _ = comparisons(runs)
    assert rows[0].estimate.n == 2
    assert any("final FID" in n and "[1]" in n for n in notes)


def test_only_uniform_cannot_be_compared():
    with pytest.raises(ValueError, match="besides uniform"):
        comparisons([r for r in _runs() if r["method"] == "uniform"])
