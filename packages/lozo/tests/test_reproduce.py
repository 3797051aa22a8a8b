"""The reproduction's comparisons on hand-made per-seed rows: the declared primary first, the roles, the values
each comparison pairs, and non-finite values left out with a note."""

import pytest

from iclr25_lozo._reproduce import PAPER_EFFECT, comparisons


def _rows(values):
    """per_seed rows from ``{(part, method, seed): (test accuracy, train loss)}``."""
    return [
        {"part": part, "method": method, "seed": seed, "test_accuracy": acc, "train_loss": loss}
        for (part, method, seed), (acc, loss) in values.items()
    ]


def _values():
    v = {}
    for s in (0, 1, 2):
        v["LM", "zero-shot", s] = (0.5, 1.1)
        v["LM", "mezo", s] = (0.58 + 0.01 * s, 0.64)
        v["LM", "lozo", s] = (0.50 + 0.02 * s, 0.90 - 0.01 * s)
        v["LM", "lozo-m", s] = (0.50, 0.91)
        v["LM", "adam", s] = (0.64, 0.06)
    return v


def test_the_primary_is_lm_test_accuracy_lozo_minus_mezo():
    rows, notes = comparisons(_rows(_values()))
    assert notes == []
    assert rows[0].role == "primary" and [r.role for r in rows].count("primary") == 1
    assert rows[0].name == "LM test accuracy: LOZO - MeZO"
    by_hand = [(0.50 + 0.02 * s) - (0.58 + 0.01 * s) for s in (0, 1, 2)]
    assert rows[0].estimate.value == pytest.approx(sum(by_hand) / 3)
    roles = {r.name: r.role for r in rows}
    assert roles["LM test accuracy: LOZO-M - MeZO"] == "secondary"
    assert roles["LM train loss: LOZO - MeZO"] == "secondary"
    assert roles["LM test accuracy: Adam - zero-shot"] == "exploratory"
    assert sum(role == "secondary" for role in roles.values()) == 4
    assert PAPER_EFFECT > 0


def test_a_diverged_seed_is_left_out_of_that_comparison_only():
    values = _rows(_values())
    for r in values:
        if r["method"] == "mezo" and r["seed"] == 2:
            r["train_loss"] = None  # non-finite in the run, null in per_seed
    rows, notes = comparisons(values)
    loss = next(r for r in rows if r.name == "LM train loss: LOZO - MeZO")
    assert loss.estimate.n == 2 and rows[0].estimate.n == 3
    assert any("train_loss lozo - mezo" in n and "[2]" in n for n in notes)


def test_without_lozo_the_primary_is_replaced_and_the_notes_say_so():
    rows, notes = comparisons([r for r in _rows(_values()) if r["method"] != "lozo"])
    assert rows[0].name == "LM test accuracy: LOZO-M - MeZO"
    assert any("NOT THE DECLARED ONE" in n for n in notes)
