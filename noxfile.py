"""Every package tested in its own clean environment (docs/design.md §6).

Members are discovered from ``shared/`` and ``packages/*/pyproject.toml``; nothing is listed by hand.
Each session syncs exactly one member (plus its ``test`` group) from the committed ``uv.lock`` into the session's
own venv, so an import a package forgot to declare fails here.

    uv run nox                      # lint + fast tests of every member (the default)
    uv run nox -s "tests(lozo)"     # one package
    uv run nox -s "slow(lozo)"      # slow tier (packaged pretrained weights)
    uv run nox -s "reproduce(lozo)" # the paper's comparison at its quick size
    uv run nox -s "wheel(lozo)"     # build with --no-sources, pip-install the wheels in a clean venv, contract tests
    uv run nox -s lowest            # every member at its lowest direct dependency versions, fast tier
    uv run nox -s docs              # every Python block of README.md, docs/*.md, packages/*/README.md, as written
    uv run nox -s workspace         # every package's default verb at its smallest size, in the README's set-up
    uv run nox -s "verify(lozo)"    # re-run the declared reproduction; its primary number within the committed one
    uv run nox -s gpu               # on a GPU machine: every package's gpu tests and CUDA bench, one table
    uv run nox -s gpu_reproduce     # on a GPU machine: every primary reproduction at --size gpu

Data sources a test cannot get are skipped with the install command; with ICLR25_REQUIRE_DATA=1 (set by .ci/run)
they fail instead, so CI never goes green by skipping.
"""

from __future__ import annotations

import os
import shutil
import tomllib
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv"
nox.options.sessions = ["lint", "tests", "docs"]
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
PASS_THROUGH = ("ICLR25_REQUIRE_DATA", "ICLR25_CACHE")


def _test_env() -> dict[str, str]:
    env = dict(TEST_ENV)
    env.update({k: os.environ[k] for k in PASS_THROUGH if k in os.environ})
    return env


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
        env=_test_env(),
        success_codes=[0, 5] if allow_empty else [0],
    )


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, uv lock --check, the package layout rules (tools/check_layout.py) and the
    README tables against their results files (tools/results_tables.py --check)."""
    session.run_install(
        "uv",
        "sync",
        "--only-group",
        "lint",
        "--locked",
        env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location},
        external=True,
    )
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("uv", "lock", "--check", external=True)
    session.run(
        "python", "-m", "pytest", "-q", "-c", str(ROOT / "pyproject.toml"), str(ROOT / "tools" / "tests")
    )
    session.run("python", str(ROOT / "tools" / "check_layout.py"))
    session.run("python", str(ROOT / "tools" / "results_tables.py"), "--check")


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
    """Build the package and iclr25-shared with --no-sources, install the wheels with plain pip in a clean venv,
    run --help and the contract tests (real calls of the installed CLI) against the installed wheel."""
    dist, folder = MEMBERS[package]
    tmp = Path(session.create_tmp())
    wheels = tmp / "dist"
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
    venv = tmp / "pip-venv"
    session.run("python", "-m", "venv", "--clear", str(venv))
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    built = sorted(str(p) for p in wheels.glob("*.whl"))
    session.run(*pip, *built, "pytest>=8.3", external=True)
    session.run(str(venv / "bin" / f"iclr25-{package}"), "--help", external=True)
    session.run(str(venv / "bin" / f"iclr25-{package}"), "--version", external=True)
    # The contract tests import the installed wheel (src/ is not on the path): --help, --version, errors, --out.
    session.run(
        str(venv / "bin" / "python"),
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--import-mode=importlib",
        "--rootdir",
        str(tmp),
        str(folder / "tests" / "test_contract.py"),
        env=_test_env(),
        external=True,
    )


def _sync_workspace(session: nox.Session) -> None:
    """The README's set-up in the session's venv: every member with its runtime extras (the root `dev` group)."""
    session.run_install(
        "uv",
        "sync",
        "--all-packages",
        "--locked",
        "--inexact",
        env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location},
        external=True,
    )


@nox.session
def docs(session: nox.Session) -> None:
    """Every Python code block of the project's Markdown runs as written, in order per file, in one environment with
    every member (tools/doc_blocks.py; a block that cannot run here carries `<!-- docs: skip REASON -->`)."""
    _sync_workspace(session)
    session.run("python", str(ROOT / "tools" / "doc_blocks.py"), *session.posargs, env=_test_env())


@nox.session(default=False)
def workspace(session: nox.Session) -> None:
    """After the README's set-up, every package's default verb runs at its smallest size (tests/, slow)."""
    _sync_workspace(session)
    _pytest(session, ROOT, "slow or not slow")  # ROOT/tests


@nox.session(default=False)
@nox.parametrize("package", [nox.param(slug, id=slug) for slug in METHODS])
def verify(session: nox.Session, package: str) -> None:
    """Re-run the package's declared reproduction ([tool.iclr25.verify]) and check that its primary comparison lies
    inside the committed interval, or matches bit for bit where the package promises determinism
    (tools/verify_results.py). CI runs it weekly or on demand."""
    dist, folder = MEMBERS[package]
    table = (
        tomllib.loads((folder / "pyproject.toml").read_text()).get("tool", {}).get("iclr25", {}).get("verify")
    )
    if not isinstance(table, dict) or not {"reproduce", "committed"} <= set(table):
        session.error(
            f"{package}: no [tool.iclr25.verify] table with reproduce and committed in its pyproject.toml"
        )
    _sync(session, dist)
    out = ROOT / "runs" / package / "verify"
    session.run(f"iclr25-{package}", *table["reproduce"], "--out", str(out), "--overwrite", env=OFFLINE)
    flags = ["--deterministic"] if table.get("deterministic") else []
    committed = folder / table["committed"] / "results.json"
    session.run(
        "python", str(ROOT / "tools" / "verify_results.py"), str(committed), str(out / "results.json"), *flags
    )


def _gpu_check(session: nox.Session, *flags: str) -> None:
    """tools/gpu_check.py in one environment with every member and the `cuda` extras (jax[cuda13] for the JAX
    packages; torch from PyPI is already the CUDA build). On a machine without CUDA it stops before installing."""
    if shutil.which("nvidia-smi") is None:
        session.error("no CUDA device is visible (nvidia-smi not found); the gpu sessions need an NVIDIA GPU")
    session.run_install(
        "uv",
        "sync",
        "--all-packages",
        "--locked",
        "--inexact",
        "--extra",
        "cuda",
        env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location},
        external=True,
    )
    session.run("python", str(ROOT / "tools" / "gpu_check.py"), *flags, *session.posargs, env=OFFLINE)


@nox.session(default=False)
def gpu(session: nox.Session) -> None:
    """Every package's `gpu`-marked tests (a missing GPU fails them) and its CUDA bench ([tool.iclr25.gpu] bench):
    the table lands in runs/gpu/summary.md. Budget: 10 minutes on one GPU, 1 minute a package."""
    _gpu_check(session, "--out", str(ROOT / "runs" / "gpu"))


@nox.session(default=False)
def gpu_reproduce(session: nox.Session) -> None:
    """Every package's primary reproduction at `--size gpu` ([tool.iclr25.gpu] reproduce), about a minute each on
    one H200; results and a table under runs/gpu-reproduce."""
    _gpu_check(session, "--reproduce", "--out", str(ROOT / "runs" / "gpu-reproduce"))


@nox.session(default=False)
def lowest(session: nox.Session) -> None:
    """Every member with its direct dependencies at their lowest allowed versions (plus test groups): fast tier.

    Proves the floors in the pyproject files are true. One environment for the whole workspace.
    """
    env = {"VIRTUAL_ENV": session.virtualenv.location, "UV_PROJECT_ENVIRONMENT": session.virtualenv.location}
    editables = []
    groups = []
    for _slug, (_dist, folder) in MEMBERS.items():
        editables += ["-e", str(folder)]
        if "test" in tomllib.loads((folder / "pyproject.toml").read_text()).get("dependency-groups", {}):
            groups += ["--group", f"{folder / 'pyproject.toml'}:test"]
    session.run_install(
        "uv", "pip", "install", "--resolution", "lowest-direct", *editables, *groups, env=env, external=True
    )
    session.run("uv", "pip", "list", env=env, external=True)
    for _slug, (_dist, folder) in MEMBERS.items():
        _pytest(session, folder, "not slow and not gpu")


if os.environ.get("NOX_PRINT_MEMBERS"):
    print(MEMBERS)
