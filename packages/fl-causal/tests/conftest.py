from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from iclr25_fl_causal import LongitudinalData, simulate
from iclr25_shared import DatasetUnavailable

ZEPID_INSTALL = 'pip install zepid "setuptools<82"  (or: uv sync --group test in the iclr25 workspace)'


def zepid_attr(module: str, name: str):
    """``name`` from zEpid's ``module`` (a loader for ``iclr25_shared.testing.require``).

    Raises DatasetUnavailable with the install command when zepid, or the ``pkg_resources`` it imports at
    ``import zepid`` (setuptools < 82), is missing.
    """
    import importlib
    import warnings

    try:
        with warnings.catch_warnings():  # setuptools 81 warns that pkg_resources is deprecated
            warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)
            return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        if exc.name not in ("zepid", "pkg_resources"):
            raise
        raise DatasetUnavailable(f"zEpid's {module}.{name} needs {exc.name!r}: {ZEPID_INSTALL}") from None


def pytest_configure(config):
    # statsmodels/patsy (used only as independent references in the tests) emit these on new pandas.
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:patsy.*")
    config.addinivalue_line("filterwarnings", "ignore::FutureWarning:statsmodels.*")
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:zepid.*")


def point_data(n: int = 400, seed: int = 0, death: bool = False) -> tuple[pd.DataFrame, LongitudinalData]:
    """One interval: L and A at time 0, the outcome (or death) at time 1. Confounded treatment."""
    rng = np.random.default_rng(seed)
    L = rng.standard_normal(n)
    A = (rng.random(n) < 1 / (1 + np.exp(-(0.3 + 0.8 * L)))).astype(float)
    Y = 1.0 + 0.7 * L + 0.5 * A + rng.standard_normal(n)
    D = (rng.random(n) < 1 / (1 + np.exp(-(-0.5 + 0.8 * L - 0.7 * A)))).astype(int)
    wide = pd.DataFrame({"id": np.arange(n), "L": L, "A": A, "Y": Y, "D": D})
    first = pd.DataFrame({"id": wide.id, "time": 0.0, "L": L, "A": A, "Y": np.nan, "dead": 0})
    last = pd.DataFrame(
        {
            "id": wide.id,
            "time": 1.0,
            "L": L,
            "A": A,
            "Y": np.where(death, np.nan, Y),
            "dead": D if death else 0,
        }
    )
    long = pd.concat([first, last]).sort_values(["id", "time"], kind="stable").reset_index(drop=True)
    if death:
        data = LongitudinalData(long.drop(columns="Y"), treatment="A", covariates=["L"], death="dead")
    else:
        data = LongitudinalData(long.drop(columns="dead"), treatment="A", covariates=["L"], outcome="Y")
    return wide, data


@pytest.fixture(scope="session")
def make_point():
    return point_data


@pytest.fixture(scope="session")
def sim_small():
    return simulate(3000, n_fine=10, seed=11)


@pytest.fixture(scope="session")
def zepid_ice():
    """zEpid's IterativeCondGFormula class (skips with the install command when zepid is missing)."""
    from iclr25_shared.testing import require

    return require(zepid_attr, "zepid.causal.gformula", "IterativeCondGFormula")


@pytest.fixture(scope="session")
def zepid_loader():
    """The loader behind ``zepid_ice`` (for testing its missing-package path)."""
    return zepid_attr


SIM_ARGS = [
    "--treatment", "A", "--covariates", "L", "--outcome", "Y", "--death", "", "--censor", "", "--horizon", "1",
    "--no-absorbing", "--outcome-model", "cum_L + cum_A + L + A",
    "--treatment-model", "first + L + first:L + A_lag + A_lag:L",
]  # fmt: skip
"""The ``estimate`` options that describe the simulated CSV (``simulate --out``): columns, horizon, correct models."""


@pytest.fixture(scope="session")
def sim_args() -> list[str]:
    """:data:`SIM_ARGS` (a copy per test)."""
    return list(SIM_ARGS)


@pytest.fixture(scope="session")
def sim_csv(tmp_path_factory):
    """``simulate --n 400 --n-fine 10 --seed 3`` written by the CLI: the CSV the ``estimate`` tests read."""
    from iclr25_fl_causal.cli import main

    out = tmp_path_factory.mktemp("sim") / "run"
    assert (
        main(["simulate", "--n", "400", "--n-fine", "10", "--out", str(out), "--seed", "3", "--quiet"]) == 0
    )
    return out / "simulated.csv"
