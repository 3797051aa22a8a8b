"""The layout lint catches a cli.py with run logic and a name-form mismatch, and passes the template."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import check_layout
import new_method


@pytest.fixture
def package(tmp_path: Path) -> Path:
    (tmp_path / "packages").mkdir()
    return new_method.create(
        "demo-method", title="Demo", arxiv="2401.00001", verb="solve", algorithm="demo", root=tmp_path
    )


def test_the_template_satisfies_every_rule(package: Path):
    assert check_layout.member_problems(package) == []


def test_run_logic_in_cli_is_rejected(package: Path):
    cli = package / "src" / "iclr25_demo_method" / "cli.py"
    cli.write_text(
        cli.read_text()
        + "\n\ndef _solve(cfg):\n    for _ in range(3):\n        print(cfg)\n    return 0\n"
        + "\nfor name in COMMANDS:\n    print(name)\n"
    )
    problems = check_layout.member_problems(package)
    assert any("FunctionDef _solve" in p for p in problems), problems
    assert any("For" in p for p in problems), problems


def test_a_fat_main_and_a_private_import_are_rejected(package: Path):
    cli = package / "src" / "iclr25_demo_method" / "cli.py"
    text = cli.read_text().replace(
        '    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")',
        "    x = 1\n    y = 2\n    z = x + y\n    print(z)\n"
        '    return run(PROG, COMMANDS, argv, default=DEFAULT, description=__doc__ or "")',
    )
    text = text.replace(
        "from pathlib import Path",
        "from pathlib import Path\n\nfrom iclr25_demo_method._experiment import solve",
    )
    cli.write_text(text)
    problems = check_layout.member_problems(package)
    assert any("main() has 5 statements" in p for p in problems), problems
    assert any("imports iclr25_demo_method._experiment" in p for p in problems), problems


def test_name_form_mismatches_are_rejected(package: Path):
    pyproject = package / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text()
        .replace('name = "iclr25-demo-method"', 'name = "iclr25-demomethod"')
        .replace(
            'iclr25-demo-method = "iclr25_demo_method.cli:main"',
            'iclr25-demo = "iclr25_demo_method.cli:main"',
        )
    )
    problems = check_layout.member_problems(package)
    assert any("distribution is 'iclr25-demomethod'" in p for p in problems), problems
    assert any("console script must be 'iclr25-demo-method" in p for p in problems), problems


def test_import_folder_mismatch_is_rejected(package: Path):
    (package / "src" / "iclr25_demo_method").rename(package / "src" / "iclr25_demomethod")
    problems = check_layout.member_problems(package)
    assert any("expected exactly ['iclr25_demo_method']" in p for p in problems), problems


def test_missing_contract_test_is_rejected(package: Path):
    (package / "tests" / "test_contract.py").unlink()
    assert any("test_contract.py" in p for p in check_layout.member_problems(package))


def test_brief_references_are_found(tmp_path: Path):
    (tmp_path / "a.py").write_text("# see brief §3.2\n")
    (tmp_path / "b.py").write_text("# see the paper, Eq. (4)\n")
    found = check_layout.brief_references([tmp_path])
    assert len(found) == 1 and "a.py" in found[0]


def _declare(package: Path, results: dict | None, readme_line: str | None) -> None:
    import json

    pyproject = package / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text()
        + '\n[tool.iclr25.verify]\nreproduce = ["solve", "--seeds", "5"]\ncommitted = "results/repro"\n'
    )
    if results is not None:
        (package / "results" / "repro").mkdir(parents=True)
        (package / "results" / "repro" / "results.json").write_text(json.dumps(results))
    if readme_line is not None:
        readme = package / "README.md"
        readme.write_text(readme.read_text() + "\n" + readme_line + "\n")


PRIMARY = {
    "tables": {"comparisons": [{"name": "A - B", "role": "primary"}, {"name": "C - B", "role": "secondary"}]}
}
DECLARED = (
    "**Primary comparison (declared before the run):** A vs B, accuracy, equal steps, 5 seeds: "
    "<!-- value: results/repro/results.json tables.comparisons[0].mean_difference -->0.1<!-- /value -->."
)


def test_a_declared_primary_reproduction_with_its_committed_file_passes(package: Path):
    _declare(package, PRIMARY, DECLARED)
    assert check_layout.member_problems(package) == []


@pytest.mark.parametrize(
    ("results", "readme_line", "message"),
    [
        (None, DECLARED, "has no results.json"),
        ({"tables": {"comparisons": [{"name": "A - B", "role": "secondary"}]}}, DECLARED, "0 primary comparisons"),
        ({"tables": {"a": [{"role": "primary"}], "b": [{"role": "primary"}]}}, DECLARED, "2 primary comparisons"),
        (PRIMARY, None, "no paragraph starting"),
        (PRIMARY, "**Primary comparison (declared before the run):** A vs B: +0.1 (typed by hand).", "quotes no value block"),
    ],
)  # fmt: skip
def test_a_primary_without_its_file_or_its_declaration_is_rejected(
    package: Path, results, readme_line, message
):
    _declare(package, results, readme_line)
    problems = check_layout.member_problems(package)
    assert len(problems) == 1 and message in problems[0], problems


def test_every_method_must_declare_its_primary(tmp_path: Path):
    (tmp_path / "packages").mkdir()
    (tmp_path / "shared" / "src" / "iclr25_shared").mkdir(parents=True)
    (tmp_path / "shared" / "tests").mkdir()
    (tmp_path / "shared" / "README.md").write_text("x")
    (tmp_path / "shared" / "src" / "iclr25_shared" / "py.typed").write_text("")
    (tmp_path / "shared" / "pyproject.toml").write_text('[project]\nname = "iclr25-shared"\n')
    new_method.create(
        "demo-method", title="Demo", arxiv="2401.00001", verb="solve", algorithm="demo", root=tmp_path
    )
    assert check_layout.check(tmp_path) == [
        "iclr25-demo-method: no [tool.iclr25.verify] (its primary reproduction; issue 41)"
    ]


def test_commands_sharing_a_module_or_a_misplaced_bench_are_rejected(package: Path):
    cli = package / "src" / "iclr25_demo_method" / "cli.py"
    cli.write_text(
        cli.read_text()
        .replace('"iclr25_demo_method._solve:solve"', '"iclr25_demo_method._experiment:solve"')
        .replace('"iclr25_demo_method._bench:bench"', '"iclr25_demo_method._experiment:bench"')
    )
    problems = check_layout.member_problems(package)
    assert any("commands solve, bench share iclr25_demo_method._experiment" in p for p in problems), problems
    assert any("'bench' runs from iclr25_demo_method._experiment" in p for p in problems), problems


def test_a_module_level_import_of_any_command_module_is_rejected(package: Path):
    cli = package / "src" / "iclr25_demo_method" / "cli.py"
    text = cli.read_text().replace(
        "from pathlib import Path",
        "from pathlib import Path\n\nfrom iclr25_demo_method._reproduce import reproduce",
    )
    cli.write_text(text)
    assert any("imports iclr25_demo_method._reproduce" in p for p in check_layout.member_problems(package))
