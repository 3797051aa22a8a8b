"""The CLI end to end on tiny inputs, and its one-line exit-2 errors on bad input."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from iclr25_fl_causal.cli import main

pytestmark = pytest.mark.filterwarnings("ignore::iclr25_fl_causal.PositivityWarning")


def test_estimate_help_lists_its_options(capsys):
    assert main(["estimate", "--help"]) == 0
    assert "--regime" in capsys.readouterr().out


def test_estimate_end_to_end_writes_results(sim_args, sim_csv, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["estimate", "--data", str(sim_csv), "--estimator", "dr", "--grid", "0.5,0.2,0.1", "--quiet",
                 "--out", str(out), *sim_args])  # fmt: skip
    assert code == 0
    text = capsys.readouterr().out
    assert "| 0.1 | 10 | dr | always | mean |" in text
    res = json.loads((out / "results.json").read_text())
    rows = res["tables"]["estimates"]
    assert [r["intervals"] for r in rows] == [2, 5, 10]
    assert (out / "results.md").is_file()
    assert (out / "config.json").is_file()


@pytest.mark.parametrize("estimator", ["gcomp", "ipw"])
def test_estimate_other_estimators(sim_args, sim_csv, estimator, capsys):
    code = main(["estimate", "--data", str(sim_csv), "--estimator", estimator, "--grid", "0.5", "--n-boot", "5",
                 "--quiet", *sim_args])  # fmt: skip
    assert code == 0
    assert f"| {estimator} | always |" in capsys.readouterr().out


def _bad(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1
    assert "Traceback" not in err
    return err


def test_bad_inputs_exit_2_with_one_line(sim_args, sim_csv, tmp_path, capsys):
    base = ["estimate", "--data", str(sim_csv), "--quiet", *sim_args]
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
    err = _bad(capsys, ["estimate", "--data", str(dup_path), "--quiet", *sim_args])
    assert "duplicated (id, time) rows: [0, 1]" in err
    nobody = df.assign(A=0)
    nb_path = tmp_path / "never_treated.csv"
    nobody.to_csv(nb_path, index=False)
    err = _bad(capsys, ["estimate", "--data", str(nb_path), "--quiet", "--grid", "0.5", *sim_args])
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


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "is empty (0 bytes)"),
        (b"\x89\x00\xff\xfe not text\n", "is not a readable CSV file"),
        (b"id,time,A,L,Y\n", "has a header but no data rows"),
        (b"just one column\n1\n", "has no header row of column names"),
    ],
)
def test_a_bad_data_file_exits_2_before_the_command_is_imported(
    sim_args, tmp_path, capsys, monkeypatch, content, needle
):
    """Issue 37: --data is declared (INPUTS), so a bad file is refused before the command module is imported."""
    import sys

    from iclr25_fl_causal import cli

    for name in ("iclr25_fl_causal._estimate", "iclr25_fl_causal._experiment"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    bad = tmp_path / "data.csv"
    bad.write_bytes(content)
    err = _bad(capsys, ["estimate", "--data", str(bad), *sim_args])
    assert needle in err and repr(str(bad)) in err, err
    assert (
        "iclr25_fl_causal._estimate" not in sys.modules and "iclr25_fl_causal._experiment" not in sys.modules
    )
    assert cli.EstimateConfig.INPUTS["data"].kind == "csv"


def test_bad_input_found_during_the_run_is_input_error_and_names_the_option(
    sim_args, sim_csv, tmp_path, capsys
):
    """Issue 37: the grid, a missing column and positivity are the user's input (exit 2, the option named),
    found before any fit; they exited 1 ("failed: ValueError") after the core's exit codes went by meaning."""
    base = ["estimate", "--data", str(sim_csv), "--quiet", *sim_args]
    assert _bad(capsys, [*base, "--grid", "0.3"]).startswith(
        "iclr25-fl-causal estimate: error: --grid: grid width 0.3 does not divide the horizon 1"
    )
    assert "has no column 'Z' (--covariates)" in _bad(capsys, [*base, "--covariates", "L,Z"])
    assert "has no column 'W' (--outcome)" in _bad(capsys, [*base, "--outcome", "W"])
    err = _bad(capsys, [*base, "--grid", "0.5", "--min-followers", "100000"])
    assert f"--data {str(sim_csv)!r}, grid width 0.5: positivity" in err


def test_the_library_keeps_raising_value_error_outside_the_cli(sim_small):
    from iclr25_fl_causal import ipw
    from iclr25_fl_causal._estimators import inputs_named
    from iclr25_shared.errors import InputError

    with pytest.raises(ValueError, match="does not divide the horizon") as caught:
        ipw(sim_small, "always", grid=0.3, treatment_model="L")
    assert not isinstance(caught.value, InputError)
    with inputs_named("--data 'x.csv'"), pytest.raises(InputError, match="^--data 'x.csv': grid width 0.3"):
        ipw(sim_small, "always", grid=0.3, treatment_model="L")


def test_bench_interleaves_the_arms_and_reports_intervals(tmp_path, capsys):
    import json

    from iclr25_fl_causal._bench import _zepid_ice_class

    argv = [
        "bench",
        "--ns",
        "100",
        "--intervals",
        "10",
        "--repeats",
        "2",
        "--quiet",
        "--out",
        str(tmp_path / "b"),
    ]
    if _zepid_ice_class() is None:
        argv.append("--no-zepid")
    assert main(argv) == 0
    rec = json.loads((tmp_path / "b" / "results.json").read_text())
    order = rec["metrics"]["bench"]["scaling"]["100x10"]["order"]
    assert order == [["gcomp", "ipw", "dr", "statsmodels_ice"], ["ipw", "dr", "statsmodels_ice", "gcomp"]]
    (gcomp,) = [r for r in rec["tables"]["scaling"] if r["estimator"] == "gcomp"]
    assert gcomp["rounds"] == 2 and gcomp["speedup_vs_statsmodels"] > 0 and gcomp["held_equal"]
    assert gcomp["abs_diff_vs_statsmodels"] < 1e-9
    if "--no-zepid" not in argv:
        (z,) = rec["tables"]["zepid"]
        assert z["abs_diff"] < 1e-8 and z["rounds"] == 2 and z["interval"].startswith("[")


def test_size_gpu_takes_10x_the_replicates_and_explicit_options_win():
    from iclr25_fl_causal.cli import GPU_SIZE, ReproduceConfig

    quick = ReproduceConfig()
    assert quick.sized() == quick
    gpu = ReproduceConfig(size="gpu").sized()
    assert (gpu.reps, gpu.n_boot) == (GPU_SIZE["reps"], GPU_SIZE["n_boot"]) and gpu.reps == 10 * quick.reps
    assert ReproduceConfig(size="gpu", reps=5).sized().reps == 5
    with pytest.raises(ValueError, match="size"):
        ReproduceConfig(size="huge")
