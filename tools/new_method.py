"""Start a new method package from templates/method (docs/adding-a-method.md).

    uv run python tools/new_method.py lantern --title "LANTERN relaxed speculative decoding" \
        --arxiv 2410.03355 --verb decode --algorithm relaxed_accept

Writes packages/<slug>/ with every placeholder filled in; refuses to overwrite an existing folder.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "templates" / "method"


def fill(text: str, values: dict[str, str]) -> str:
    for key in sorted(values, key=len, reverse=True):
        text = text.replace(key, values[key])
    return text


def create(slug: str, *, title: str, arxiv: str, verb: str, algorithm: str, root: Path = ROOT) -> Path:
    """Copy the template into ``root/packages/<slug>`` with the names filled in; return the folder."""
    if not re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", slug):
        raise ValueError(f"slug must be lower-case words joined by '-', got {slug!r}")
    if not re.fullmatch(r"[a-z][a-z0-9_]*", verb) or not re.fullmatch(r"[a-z_][a-z0-9_]*", algorithm):
        raise ValueError("verb and algorithm must be Python identifiers in snake_case")
    target = root / "packages" / slug
    if target.exists():
        raise FileExistsError(f"{target} exists; refusing to overwrite it")
    values = {
        "__DIST__": slug,
        "__SLUG__": slug.replace("-", "_"),
        "__TITLE__": title,
        "__ARXIV__": arxiv,
        "__VERB_CLASS__": "".join(part.capitalize() for part in verb.split("_")),
        "__VERB__": verb,
        "__ALGORITHM__": algorithm,
    }
    for source in sorted(TEMPLATE.rglob("*")):
        if source.is_dir() or "__pycache__" in source.parts:
            continue
        rel = Path(fill(str(source.relative_to(TEMPLATE)), values))
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if source.suffix in {".py", ".toml", ".md"}:
            dest.write_text(fill(source.read_text(), values))
        else:
            shutil.copyfile(source, dest)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("slug")
    parser.add_argument("--title", required=True)
    parser.add_argument("--arxiv", required=True)
    parser.add_argument(
        "--verb", required=True, help="the method's own subcommand, e.g. solve, train, select"
    )
    parser.add_argument("--algorithm", required=True, help="the main public function or class name")
    args = parser.parse_args(argv)
    try:
        path = create(args.slug, title=args.title, arxiv=args.arxiv, verb=args.verb, algorithm=args.algorithm)
    except (ValueError, FileExistsError) as exc:
        print(f"new_method: error: {exc}", file=sys.stderr)
        return 2
    print(f"created {path.relative_to(ROOT)}; next: fill in the placeholders, `uv lock`, write the tests")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
