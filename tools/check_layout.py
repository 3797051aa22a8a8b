"""The package-layout rules `nox -s lint` enforces (docs/package-contract.md).

    python tools/check_layout.py            # checks every workspace member; exit 1 with one line per problem

Rules:
- one name, four forms: folder ``packages/<slug>`` → distribution ``iclr25-<slug>`` → import package
  ``src/iclr25_<slug>/`` → console script ``iclr25-<slug> = "iclr25_<slug>.cli:main"``;
- every member has README.md, tests/, a py.typed marker; every method has tests/test_contract.py;
- ``cli.py`` holds configs and ``main`` only: top level may have a docstring, imports, assignments (``PROG``,
  ``DEFAULT``, ``COMMANDS``, ``__all__``, type aliases), dataclass definitions and ``def main`` whose body is at
  most 3 statements; no other functions, no loops / with / try / calls at top level, and no module-level import of
  a command's module (commands are named as ``"module:function"`` strings; light private modules holding constants a
  config validates against may be imported — the contract tests check that importing cli.py loads nothing heavy);
- one module per command (issue 41): the ``COMMANDS`` modules are distinct, ``reproduce`` lives in ``_reproduce``
  and ``bench`` in ``_bench``;
- a member that calls a shared function needing an optional stack declares it: ``iclr25-shared[<extra>]`` (or
  the stack itself) in its dependencies or one of its extras (``paired_t_interval`` and ``cluster_accuracy`` need ``metrics``, i.e.
  scipy; the function imports it lazily, so a missing declaration fails only at run time, after a user's
  experiment has run);
- results are files (issue 41): a member's ``[tool.iclr25.verify]`` names its primary reproduction (``reproduce``:
  the argv after the console script; ``committed``: the folder that command wrote, committed under ``results/``);
  that folder's ``results.json`` has exactly one comparison row with ``role: primary``, and the README declares it
  in a paragraph starting ``**Primary comparison (declared before the run):**`` whose numbers are value blocks read
  from that file. Every method declares one;
- no "brief §" references (a document users cannot open).
"""

from __future__ import annotations

import ast
import json
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_CONFIG_HELPER_LINES = 30
"""A function a config validates with may sit in cli.py when it is this short and has no loop."""
MAX_MAIN_STATEMENTS = 3
_BRIEF = re.compile(r"brief\s*§")
# shared function -> (extra of iclr25-shared, the distribution that extra brings)
NEEDS_EXTRA = {
    "paired_t_interval": ("metrics", "scipy"),
    "cluster_accuracy": ("metrics", "scipy"),
}
PRIMARY_HEADING = "**Primary comparison (declared before the run):**"
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*(?:\[([^\]]*)\])?")


def extra_problems(folder: Path, dist: str, dependencies: list[str]) -> list[str]:
    """Shared functions used in ``src/`` whose optional stack the member does not declare."""
    declared_extras: set[str] = set()
    declared: set[str] = set()
    for requirement in dependencies:
        match = _REQUIREMENT.match(requirement)
        if match is None:
            continue
        name = match.group(1).lower().replace("_", "-")
        declared.add(name)
        if name == "iclr25-shared" and match.group(2):
            declared_extras |= {e.strip() for e in match.group(2).split(",")}
    source = "\n".join(path.read_text() for path in sorted(folder.glob("src/**/*.py")))
    problems = []
    for function, (extra, stack) in NEEDS_EXTRA.items():
        if re.search(rf"\b{function}\b", source) and extra not in declared_extras and stack not in declared:
            problems.append(
                f"{dist}: uses iclr25_shared {function}, which needs {stack}; "
                f"declare 'iclr25-shared[{extra}]' (or {stack}) in its dependencies or an extra"
            )
    return problems


def verify_problems(folder: Path, dist: str, tool: dict) -> list[str]:
    """Issue 41's rules for a member that declares ``[tool.iclr25.verify]`` (see the module docstring)."""
    table = tool.get("iclr25", {}).get("verify")
    if table is None:
        return []
    if not isinstance(table.get("reproduce"), list) or not isinstance(table.get("committed"), str):
        return [
            f"{dist}: [tool.iclr25.verify] needs reproduce (a list of arguments) and committed (a folder)"
        ]
    committed = folder / table["committed"]
    results = committed / "results.json"
    if not results.is_file():
        return [f"{dist}: [tool.iclr25.verify] committed = {table['committed']!r} has no results.json"]
    data = json.loads(results.read_text())
    primaries = [
        row
        for rows in data.get("tables", {}).values()
        if isinstance(rows, list)
        for row in rows
        if isinstance(row, dict) and row.get("role") == "primary"
    ]
    problems = []
    if len(primaries) != 1:
        problems.append(
            f"{dist}: {results.relative_to(folder)} has {len(primaries)} primary comparisons, need 1"
        )
    readme = (folder / "README.md").read_text() if (folder / "README.md").is_file() else ""
    start = readme.find(PRIMARY_HEADING)
    paragraph = (
        readme[start : readme.find("\n\n", start) if "\n\n" in readme[start:] else None] if start >= 0 else ""
    )
    if not paragraph:
        problems.append(f"{dist}: README.md has no paragraph starting {PRIMARY_HEADING!r}")
    elif f"<!-- value: {table['committed'].rstrip('/')}/results.json " not in paragraph:
        problems.append(
            f"{dist}: the README's primary comparison quotes no value block from {table['committed']}/results.json"
        )
    return problems


def _cli_problems(path: Path, import_name: str) -> list[str]:
    """Problems of one ``cli.py`` (empty when it holds configs and ``main`` only)."""
    problems: list[str] = []
    tree = ast.parse(path.read_text(), filename=str(path))
    has_main = False
    # Names the config classes use: a small function a config validates with (an INPUTS check, a __post_init__
    # helper) is part of the configs, not run logic.
    used_by_configs = {
        n.id
        for top in tree.body
        if isinstance(top, ast.ClassDef | ast.Assign | ast.AnnAssign)
        for n in ast.walk(top)
        if isinstance(n, ast.Name)
    }
    commands = _commands(tree)
    command_modules = {target.partition(":")[0] for target in commands.values()}
    problems += _command_module_problems(path, import_name, commands)
    for node in tree.body:
        where = f"{path}:{node.lineno}"
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            if module in command_modules or module == f"{import_name}._experiment":
                problems.append(
                    f"{where}: cli.py imports {module} at module level; name commands as "
                    f"'{module}:function' strings in COMMANDS so --help stays light"
                )
            continue
        if isinstance(node, ast.Assign | ast.AnnAssign):
            continue
        if isinstance(node, ast.ClassDef):
            continue
        if isinstance(node, ast.FunctionDef) and node.name == "main":
            has_main = True
            body = [
                s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
            ]
            if len(body) > MAX_MAIN_STATEMENTS:
                problems.append(
                    f"{where}: main() has {len(body)} statements; it only calls iclr25_shared.cli.run "
                    "(run logic belongs in the command's module)"
                )
            continue
        if isinstance(node, ast.If) and _is_main_guard(node):
            continue
        if (
            isinstance(node, ast.FunctionDef)
            and node.name in used_by_configs
            and (node.end_lineno or node.lineno) - node.lineno < MAX_CONFIG_HELPER_LINES
            and not any(isinstance(n, ast.For | ast.While) for n in ast.walk(node))
        ):
            continue
        kind = type(node).__name__
        name = getattr(node, "name", "")
        problems.append(
            f"{where}: cli.py holds config dataclasses and main only; found {kind} {name}".rstrip()
            + " (run logic belongs in the command's module)"
        )
    if not has_main:
        problems.append(f"{path}: no main() function")
    return problems


def _commands(tree: ast.Module) -> dict[str, str]:
    """``COMMANDS`` of a cli.py as {command: "module:function"} (entries that are not literal are skipped)."""
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == "COMMANDS" for t in targets) and isinstance(
            node.value, ast.Dict
        ):
            return {
                key.value: value.elts[1].value
                for key, value in zip(node.value.keys, node.value.values, strict=True)
                if isinstance(key, ast.Constant)
                and isinstance(value, ast.Tuple)
                and len(value.elts) == 2
                and isinstance(value.elts[1], ast.Constant)
                and isinstance(value.elts[1].value, str)
            }
    return {}


def _command_module_problems(path: Path, import_name: str, commands: dict[str, str]) -> list[str]:
    """One module per command: distinct modules, ``reproduce`` in ``_reproduce``, ``bench`` in ``_bench``."""
    problems = []
    by_module: dict[str, list[str]] = {}
    for command, target in commands.items():
        by_module.setdefault(target.partition(":")[0], []).append(command)
    for module, names in sorted(by_module.items()):
        if len(names) > 1:
            problems.append(
                f"{path}: commands {', '.join(names)} share {module}; give each command its own module "
                "(_<verb>.py, _reproduce.py, _bench.py)"
            )
    for command in ("reproduce", "bench"):
        module = commands.get(command, "").partition(":")[0]
        if module and module != f"{import_name}._{command}":
            problems.append(f"{path}: '{command}' runs from {module}; it belongs in {import_name}._{command}")
    return problems


def _is_main_guard(node: ast.If) -> bool:
    test = node.test
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(node.body) == 1
    )


def member_problems(folder: Path, *, is_shared: bool = False) -> list[str]:
    """Every layout problem of one workspace member folder."""
    problems: list[str] = []
    pyproject = folder / "pyproject.toml"
    meta = tomllib.loads(pyproject.read_text())["project"]
    dist = meta["name"]
    for required in ("README.md", "tests"):
        if not (folder / required).exists():
            problems.append(f"{dist}: no {required}")
    if not list(folder.glob("src/*/py.typed")):
        problems.append(f"{dist}: no py.typed marker")
    if is_shared:
        return problems
    slug = folder.name
    import_name = "iclr25_" + slug.replace("-", "_")
    if dist != f"iclr25-{slug}":
        problems.append(f"{folder.name}: distribution is {dist!r}; the folder name says 'iclr25-{slug}'")
    packages = sorted(p.name for p in (folder / "src").glob("*") if (p / "__init__.py").is_file())
    if packages != [import_name]:
        problems.append(f"{dist}: src/ holds {packages}; expected exactly [{import_name!r}]")
    scripts = meta.get("scripts", {})
    want = f"{import_name}.cli:main"
    if scripts.get(f"iclr25-{slug}") != want:
        problems.append(f"{dist}: console script must be 'iclr25-{slug} = \"{want}\"', found {scripts}")
    if not (folder / "tests" / "test_contract.py").is_file():
        problems.append(f"{dist}: no tests/test_contract.py (subclass iclr25_shared.testing.ContractTests)")
    optional = [r for group in meta.get("optional-dependencies", {}).values() for r in group]
    problems += extra_problems(folder, dist, [*meta.get("dependencies", []), *optional])
    problems += verify_problems(folder, dist, tomllib.loads(pyproject.read_text()).get("tool", {}))
    cli = folder / "src" / import_name / "cli.py"
    if cli.is_file():
        problems += _cli_problems(cli, import_name)
    else:
        problems.append(f"{dist}: no {cli.relative_to(folder)}")
    return problems


def brief_references(paths: list[Path]) -> list[str]:
    """Files that cite 'brief §…'."""
    found = []
    for base in paths:
        for path in sorted(base.rglob("*")):
            if path.suffix in {".py", ".md", ".toml"} and path.is_file() and _BRIEF.search(path.read_text()):
                found.append(
                    f"{path}: cites 'brief §'; cite the paper's section/equation or the public issue"
                )
    return found


def check(root: Path = ROOT) -> list[str]:
    problems = member_problems(root / "shared", is_shared=True)
    for pyproject in sorted(root.glob("packages/*/pyproject.toml")):
        problems += member_problems(pyproject.parent)
        declared = "verify" in tomllib.loads(pyproject.read_text()).get("tool", {}).get("iclr25", {})
        if not declared:
            problems.append(
                f"iclr25-{pyproject.parent.name}: no [tool.iclr25.verify] (its primary reproduction; issue 41)"
            )
    problems += brief_references([root / "shared", root / "packages"])
    return problems


def main() -> int:
    problems = check()
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
