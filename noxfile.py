"""Every package tested in its own clean environment (DESIGN.md §6).

Members are discovered from ``shared/`` and ``packages/*/pyproject.toml``; nothing is listed by hand.
Each session syncs exactly one member (plus its ``test`` group) from the committed ``uv.lock`` into the session's
own venv, so an import a package forgot to declare fails here.

    uv run nox                      # lint + fast tests of every member (the default)
    uv run nox -s "tests(lozo)"     # one package
    uv run nox -s "slow(lozo)"      # slow tier (packaged pretrained weights)
    uv run nox -s "reproduce(lozo)" # the paper's comparison at its quick size
    uv run nox -s "wheel(lozo)"     # build with --no-sources, install in a clean venv, run --help
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv"
nox.options.sessions = ["lint", "tests"]
nox.options.error_on_external_run = False

ROOT = Path(__file__).parent.resolve()
OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}
# One thread per BLAS/OpenMP pool in test sessions: several suites start worker processes, and oversubscribed
# pools were 10-30x slower on 2-core machines. Reproductions keep the libraries' defaults.
TEST_ENV = {**OFFLINE, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _discover() -> dict[str, tuple[str, Path]]:
    """slug -> (distribution name, folder) for every workspace member."""
    found: dict[str, tuple[str, Path]] = {}
    for pyproject in [ROOT / "shared" / "pyproject.toml", *sorted(ROOT.glob("packages/*/pyproject.toml"))]:
        if pyproject.is_file():
            name = tomllib.loads(pyproject.read_text())["project"]["name"]
            slug = "shared" if pyproject.parent.name == "shared" else pyproject.parent.name
            found[slug] = (name, pyproject.parent)
    return found


MEMBERS = _discover()
METHODS = [slug for slug in MEMBERS if slug != "shared"]


def _sync(session: nox.Session, dist: str, *extra: str) -> None:
    session.run_install(
        "uv",
        "sync",
        "--package",
        dist,
        "--locked",
        "--inexact",
        "--group",
        "test",
        *extra,
        env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location},
        external=True,
    )


def _pytest(session: nox.Session, folder: Path, marker: str, *, allow_empty: bool = False) -> None:
    session.run(
        "python",
        "-m",
        "pytest",
        "-c",
        str(ROOT / "pyproject.toml"),
        "--rootdir",
        str(ROOT),
        str(folder / "tests"),
        "-m",
        marker,
        *session.posargs,
        env=TEST_ENV,
        success_codes=[0, 5] if allow_empty else [0],
    )


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, uv lock --check, and the package layout rules."""
    session.run_install(
        "uv",
        "sync",
        "--only-group",
        "dev",
        "--locked",
        env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location},
        external=True,
    )
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("uv", "lock", "--check", external=True)
    problems = []
    for slug, (dist, folder) in MEMBERS.items():
        if not (folder / "README.md").is_file():
            problems.append(f"{dist}: no README.md")
        if not (folder / "tests").is_dir():
            problems.append(f"{dist}: no tests/")
        if not list(folder.glob("src/*/py.typed")):
            problems.append(f"{dist}: no py.typed marker")
        if slug != "shared":
            scripts = tomllib.loads((folder / "pyproject.toml").read_text())["project"].get("scripts", {})
            if f"iclr25-{slug}" not in scripts:
                problems.append(f"{dist}: no console script iclr25-{slug}")
    if problems:
        session.error("; ".join(problems))


@nox.session
@nox.parametrize("package", [nox.param(slug, id=slug) for slug in MEMBERS])
def tests(session: nox.Session, package: str) -> None:
    """Fast tier of one package (not slow, not gpu)."""
    dist, folder = MEMBERS[package]
    _sync(session, dist)
    _pytest(session, folder, "not slow and not gpu")


@nox.session(default=False)
@nox.parametrize("package", [nox.param(slug, id=slug) for slug in MEMBERS])
def slow(session: nox.Session, package: str) -> None:
    """Slow tier of one package (packaged pretrained weights, longer runs)."""
    dist, folder = MEMBERS[package]
    _sync(session, dist)
    _pytest(session, folder, "slow and not gpu", allow_empty=True)


@nox.session(default=False)
@nox.parametrize("package", [nox.param(slug, id=slug) for slug in METHODS])
def reproduce(session: nox.Session, package: str) -> None:
    """`iclr25-<slug> reproduce` at its quick size; results under runs/<slug>/reproduce."""
    dist, _ = MEMBERS[package]
    _sync(session, dist)
    out = ROOT / "runs" / package / "reproduce"
    session.run(f"iclr25-{package}", "reproduce", "--out", str(out), *session.posargs, env=OFFLINE)


@nox.session(default=False)
@nox.parametrize("package", [nox.param(slug, id=slug) for slug in METHODS])
def wheel(session: nox.Session, package: str) -> None:
    """Build the package and iclr25-shared with --no-sources, install the wheels in a clean venv, run --help."""
    dist, _ = MEMBERS[package]
    wheels = Path(session.create_tmp()) / "dist"
    for name in (dist, MEMBERS["shared"][0]):
        session.run(
            "uv",
            "build",
            "--package",
            name,
            "--no-sources",
            "--wheel",
            "--out-dir",
            str(wheels),
            external=True,
        )
    built = sorted(str(p) for p in wheels.glob("*.whl"))
    session.run_install(
        "uv", "pip", "install", "--python", session.virtualenv.location, *built, external=True
    )
    session.run(f"iclr25-{package}", "--help")
    module = dist.replace("-", "_")
    session.run(
        "python", "-c", f"import {module}; print({module}.__name__, 'imports from', {module}.__file__)"
    )


if os.environ.get("NOX_PRINT_MEMBERS"):
    print(MEMBERS)
