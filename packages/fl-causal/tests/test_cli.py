"""The CLI end to end on tiny inputs, and its one-line exit-2 errors on bad input."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from iclr25_fl_causal.cli import main

pytestmark = pytest.mark.filterwarnings("ignore::iclr25_fl_causal.PositivityWarning")

SIM_ARGS = [
    "--treatment", "A", "--covariates", "L", "--outcome", "Y", "--death", "", "--censor", "", "--horizon", "1",
    "--no-absorbing", "--outcome-model", "cum_L + cum_A + L + A",
    "--treatment-model", "first + L + first:L + A_lag + A_lag:L",
]  # fmt: skip


@pytest.fixture(scope="module")
def sim_csv(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim") / "run"
    assert (
        main(["simulate", "--n", "400", "--n-fine", "10", "--out", str(out), "--seed", "3", "--quiet"]) == 0
    )
    return out / "simulated.csv"


def test_estimate_help_lists_its_options(capsys):
    assert main(["estimate", "--help"]) == 0
    assert "--regime" in capsys.readouterr().out


def test_estimate_end_to_end_writes_results(sim_csv, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["estimate", "--data", str(sim_csv), "--estimator", "dr", "--grid", "0.5,0.2,0.1", "--quiet",
                 "--out", str(out), *SIM_ARGS])  # fmt: skip
    assert code == 0
    text = capsys.readouterr().out
    assert "| 0.1 | 10 | dr | always | mean |" in text
    res = json.loads((out / "results.json").read_text())
    rows = res["tables"]["estimates"]
    assert [r["intervals"] for r in rows] == [2, 5, 10]
    assert (out / "results.md").is_file()
    assert (out / "config.json").is_file()


@pytest.mark.parametrize("estimator", ["gcomp", "ipw"])
def test_estimate_other_estimators(sim_csv, estimator, capsys):
    code = main(["estimate", "--data", str(sim_csv), "--estimator", estimator, "--grid", "0.5", "--n-boot", "5",
                 "--quiet", *SIM_ARGS])  # fmt: skip
    assert code == 0
    assert f"| {estimator} | always |" in capsys.readouterr().out


def _bad(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1
    assert "Traceback" not in err
    return err


def test_bad_inputs_exit_2_with_one_line(sim_csv, tmp_path, capsys):
    base = ["estimate", "--data", str(sim_csv), "--quiet", *SIM_ARGS]
    assert "does not divide the horizon" in _bad(capsys, [*base, "--grid", "0.3"])
    assert "regime must be always, never" in _bad(capsys, [*base, "--regime", "often"])
    assert "estimator must be one of gcomp, ipw, dr" in _bad(capsys, [*base, "--estimator", "tmle"])
    assert "does not exist" in _bad(capsys, ["estimate", "--data", str(tmp_path / "none.csv")])
    assert "'Z'" in _bad(capsys, [*base, "--covariates", "Z"])
    assert "grid must be comma-separated" in _bad(capsys, [*base, "--grid", "a,b"])
    df = pd.read_csv(sim_csv)
    dup = pd.concat([df.iloc[:1], df]).reset_index(drop=True)
    dup_path = tmp_path / "dup.csv"
    dup.to_csv(dup_path, index=False)
    err = _bad(capsys, ["estimate", "--data", str(dup_path), "--quiet", *SIM_ARGS])
    assert "duplicated (id, time) rows: [0, 1]" in err
    nobody = df.assign(A=0)
    nb_path = tmp_path / "never_treated.csv"
    nobody.to_csv(nb_path, index=False)
    err = _bad(capsys, ["estimate", "--data", str(nb_path), "--quiet", "--grid", "0.5", *SIM_ARGS])
    assert "positivity: regime 'always' has no observed support" in err
    err = _bad(capsys, [*base, "--grid", "0.5", "--min-followers", "100000"])
    assert "fewer than min_followers=100000" in err and "interval 0 [0, 0.5)" in err


def test_reproduce_dr_part_and_bench(tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["reproduce", "--parts", "dr", "--reps", "2", "--quiet", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    (table,) = res["tables"].values()
    assert [r["case"] for r in table] == [
        "both right",
        "treatment model wrong",
        "outcome model wrong",
        "both wrong",
    ]
    capsys.readouterr()
    assert (
        main(["bench", "--ns", "100,200", "--intervals", "10,20", "--repeats", "1", "--quiet", "--no-zepid"])
        == 0
    )
    assert "time_per_row_ratio" in capsys.readouterr().out
    assert "intervals must divide 40" in _bad(capsys, ["bench", "--intervals", "7"])


@pytest.mark.slow
def test_default_verb_runs_on_the_hiv_cohort(capsys):
    from iclr25_fl_causal import hiv_art
    from iclr25_shared.testing import require

    require(hiv_art)
    assert main(["--quiet", "--grid", "9"]) == 0
    assert "zEpid HIV/ART cohort" in capsys.readouterr().out


def test_missing_zepid_names_the_install_command(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "zepid" else real(name, *a)
    )
    assert "pip install zepid" in _bad(capsys, ["estimate", "--quiet"])
