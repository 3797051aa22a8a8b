"""Run every Python code block of the project's Markdown as a test (the ``docs`` nox session).

    python tools/doc_blocks.py                 # every README.md, docs/*.md, packages/*/README.md
    python tools/doc_blocks.py packages/qqa/README.md --list

The blocks of one file run in order, as written, in one fresh Python process whose working folder is an empty
temporary folder (so ``pairs.csv`` and friends are the ones the file's setup made, never the user's). Two markers,
HTML comments that renderers hide, say what a block may not show:

- ``<!-- docs: skip REASON -->`` on the line before a fence: the block is not run (a GPU, an endpoint, a model that
  is not packaged). The reason is required and is printed.
- ``<!-- docs: setup`` … ``-->`` around a fenced Python block: it runs before the visible blocks that follow and
  makes the tiny inputs they read (files, ``model``, ``loader``). It may not redefine what a visible block defines.

``ICLR25_DOCS=1`` is set for the run, and ``ICLR25_CACHE`` passes through. Exit 0 when every runnable block passed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_FENCE = re.compile(r"^```(\w*)\s*$")
_SKIP = re.compile(r"^<!--\s*docs:\s*skip\b(.*?)-->\s*$")
_SETUP_OPEN = re.compile(r"^<!--\s*docs:\s*setup\s*$")


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced Python block: its first code line (1-based), code, and how it runs."""

    line: int
    code: str
    setup: bool = False
    skip: str | None = None


def extract(text: str, *, name: str = "<markdown>") -> list[Block]:
    """The Python blocks of a Markdown text, in order.

    Raises:
        ValueError: a skip marker without a reason, a setup comment without a closing ``-->``, or an unclosed fence.
    """
    lines = text.splitlines()
    blocks: list[Block] = []
    i, in_setup, pending_skip = 0, False, None
    while i < len(lines):
        line = lines[i]
        if _SETUP_OPEN.match(line.strip()):
            in_setup = True
            i += 1
            continue
        if in_setup and line.strip() == "-->":
            in_setup = False
            i += 1
            continue
        skip = _SKIP.match(line.strip())
        if skip:
            reason = skip.group(1).strip(" :—-")
            if not reason:
                raise ValueError(f"{name}:{i + 1}: 'docs: skip' needs a reason")
            pending_skip = reason
            i += 1
            continue
        fence = _FENCE.match(line)
        if fence:
            lang, start = fence.group(1), i + 1
            j = start
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            if j == len(lines):
                raise ValueError(f"{name}:{i + 1}: unclosed code fence")
            if lang in ("python", "py"):
                code = "\n".join(lines[start:j]) + "\n"
                blocks.append(Block(line=start + 1, code=code, setup=in_setup, skip=pending_skip))
            pending_skip = None
            i = j + 1
            continue
        if line.strip():
            pending_skip = None
        i += 1
    if in_setup:
        raise ValueError(f"{name}: 'docs: setup' comment is never closed with -->")
    return blocks


_RUNNER = """
import sys, traceback
ns = {"__name__": "__main__"}
for label, path in BLOCKS:
    code = open(path, encoding="utf-8").read()
    print(f"-- {label}", flush=True)
    try:
        exec(compile(code, label, "exec"), ns)
    except BaseException:
        traceback.print_exc()
        print(f"FAILED {label}", flush=True)
        sys.exit(1)
"""


@dataclasses.dataclass
class FileResult:
    path: str
    ran: int
    skipped: list[str]
    ok: bool
    seconds: float
    output: str = ""


def run_file(path: Path, *, timeout: float = 600.0, python: str = sys.executable) -> FileResult:
    """Run the runnable blocks of one Markdown file in order, in one fresh process in an empty folder."""
    rel = str(path.relative_to(ROOT)) if path.is_absolute() and path.is_relative_to(ROOT) else str(path)
    blocks = extract(path.read_text(encoding="utf-8"), name=rel)
    runnable = [b for b in blocks if b.skip is None]
    skipped = [f"{rel}:{b.line}: {b.skip}" for b in blocks if b.skip is not None]
    if not runnable:
        return FileResult(rel, 0, skipped, True, 0.0)
    with tempfile.TemporaryDirectory(prefix="docs-") as tmp:
        pairs = []
        for n, block in enumerate(runnable):
            code_path = Path(tmp, f".block{n}.py")
            code_path.write_text(block.code, encoding="utf-8")
            kind = "setup" if block.setup else "block"
            pairs.append((f"{rel}:{block.line} ({kind})", str(code_path)))
        script = f"BLOCKS = {pairs!r}\n{_RUNNER}"
        env = dict(os.environ, ICLR25_DOCS="1", MPLBACKEND="Agg")
        start = time.perf_counter()
        try:
            done = subprocess.run(
                [python, "-c", script], cwd=tmp, capture_output=True, text=True, timeout=timeout, env=env
            )
            ok, output = done.returncode == 0, done.stdout + done.stderr
        except subprocess.TimeoutExpired as exc:
            ok, output = False, f"timed out after {timeout:.0f} s\n{exc.stdout or ''}{exc.stderr or ''}"
        seconds = time.perf_counter() - start
    return FileResult(rel, len([b for b in runnable if not b.setup]), skipped, ok, seconds, output)


def markdown_files(root: Path = ROOT) -> list[Path]:
    """README.md, docs/*.md and packages/*/README.md."""
    return [
        root / "README.md",
        *sorted((root / "docs").glob("*.md")),
        *sorted(root.glob("packages/*/README.md")),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="Markdown files (default: all of the project's)")
    parser.add_argument("--list", action="store_true", help="list the blocks and skip reasons; run nothing")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per file")
    args = parser.parse_args(argv)
    files = [f.resolve() for f in args.files] or markdown_files()
    failed = 0
    for path in files:
        if args.list:
            for b in extract(path.read_text(encoding="utf-8"), name=str(path)):
                state = f"skip: {b.skip}" if b.skip else ("setup" if b.setup else "run")
                print(f"{path.relative_to(ROOT)}:{b.line}: {state}")
            continue
        result = run_file(path, timeout=args.timeout)
        for line in result.skipped:
            print(f"skipped {line}")
        if not result.ran and not result.skipped:
            continue
        status = "ok" if result.ok else "FAILED"
        print(f"{status} {result.path}: {result.ran} block(s) in {result.seconds:.1f} s", flush=True)
        if not result.ok:
            failed += 1
            print("\n".join("    " + line for line in result.output.rstrip().splitlines()[-25:]))
    if not args.list:
        print(f"{len(files) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
