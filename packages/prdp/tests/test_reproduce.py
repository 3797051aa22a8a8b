"""The reproduction's comparisons: which per-seed quantities they pair, the declared primary first, the roles."""

import math

import pytest

from iclr25_prdp._reproduce import PAPER_EFFECT, comparisons

EXPERIMENTS = ("poisson-inverse", "heat-emulator", "heat2d-emulator", "navier-stokes")


def _rows(values):
    """per_seed rows from ``{(experiment, seed, arm): (iterations, wall s, final metric)}``."""
    return [
        {
            "experiment": experiment,
            "solver": "jacobi",
            "seed": seed,
            "arm": arm,
            "iterations to target": it,
            "wall s to target": wall,
            "final metric": final,
        }
        for (experiment, seed, arm), (it, wall, final) in values.items()
    ]


def _values(seeds=(0, 1, 2)):
    values = {}
    for e, experiment in enumerate(EXPERIMENTS):
        for seed in seeds:
            values[experiment, seed, "converged"] = (1000, 10.0 + seed, 0.1)
            values[experiment, seed, "PRDP"] = (400 + 10 * e + seed, 6.0 + e + 0.5 * seed, 0.1 + 0.01 * seed)
    return values


def test_the_primary_is_the_navier_stokes_wall_time_ratio():
    values = _values()
    rows, notes = comparisons(_rows(values))
    assert notes == []
    assert [r.role for r in rows].count("primary") == 1
    primary = rows[0]
    assert primary.role == "primary"
    assert primary.name == "Navier-Stokes (jacobi): wall time to equal accuracy, PRDP / converged - 1"
    # by hand: NS is e = 3, PRDP 9 + 0.5 s over converged 10 + s seconds
    ratios = [(9.0 + 0.5 * s) / (10.0 + s) - 1 for s in (0, 1, 2)]
    assert primary.estimate.value == pytest.approx(sum(ratios) / 3)
    assert primary.estimate.n == 3
    roles = {r.name: r.role for r in rows}
    assert (
        roles["Navier-Stokes (jacobi): solver iterations to equal accuracy, PRDP / converged - 1"]
        == "secondary"
    )
    assert roles["2-D heat: wall time to equal accuracy, PRDP / converged - 1"] == "secondary"
    assert roles["1-D heat: wall time to equal accuracy, PRDP / converged - 1"] == "exploratory"
    assert roles["Poisson: solver iterations to equal accuracy, PRDP / converged - 1"] == "exploratory"
    secondary = [r for r in rows if r.role == "secondary"]
    assert len(secondary) == 5 and all(r.p_adjusted is not None for r in secondary)
    assert all(r.p_adjusted is None for r in rows if r.role != "secondary")
    assert PAPER_EFFECT == -0.62


def test_a_seed_whose_converged_cost_is_zero_is_left_out_with_a_note():
    values = _values()
    values["heat-emulator", 1, "converged"] = (0, 0.0, 0.1)
    rows, notes = comparisons(_rows(values))
    row = next(r for r in rows if r.name.startswith("1-D heat: solver iterations"))
    assert row.estimate.n == 2
    assert any("heat-emulator" in n and "[1]" in n for n in notes)
    assert all(math.isfinite(r.estimate.value) for r in rows)


def test_without_navier_stokes_the_first_experiment_present_is_primary():
    rows, _ = comparisons([r for r in _rows(_values()) if r["experiment"] != "navier-stokes"])
    assert rows[0].name == "2-D heat: wall time to equal accuracy, PRDP / converged - 1"
    assert sum(r.name == rows[0].name for r in rows) == 1
