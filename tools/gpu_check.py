"""The GPU check of every package in one command (issue 40; docs/testing.md, "The GPU tier").

Run by ``uv run nox -s gpu`` (tests + benches) and ``uv run nox -s gpu_reproduce`` (the ``--size gpu``
reproductions) inside an environment with every member and the ``cuda`` extras. Each package declares its parts in
its ``pyproject.toml``::

    [tool.iclr25.gpu]
    bench = ["bench", "--device", "cuda"]            # argv after iclr25-<slug>; <= 1 minute on one H100
    reproduce = ["reproduce", "--size", "gpu"]       # about a minute on one H200

For each package: ``pytest -m gpu`` (ICLR25_REQUIRE_GPU=1: a missing GPU fails, never skips), then the bench into
``OUT/<slug>/bench``. The table ``OUT/summary.md`` / ``summary.json`` lists package x part: status, tests passed /
failed / skipped, wall seconds, and the bench's ratio, speed-up and peak-memory metrics. Exit 0 only when every part
passed; exit 2 with one line when no CUDA device is visible.

    python tools/gpu_check.py --out runs/gpu [slug ...]
    python tools/gpu_check.py --reproduce --out runs/gpu-reproduce [slug ...]
    python tools/gpu_check.py --dry-run            # the commands, without a GPU
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PART_BUDGET_S = 60.0  # the budget for one package's part on one GPU; over it is flagged, not killed
PART_LIMIT_S = 300.0  # a hung part is killed here
METRIC_WORDS = ("ratio", "speedup", "peak", "per_s", "memory")


def packages() -> dict[str, Path]:
    """slug -> package folder, for every package under packages/."""
    return {p.parent.name: p.parent for p in sorted(ROOT.glob("packages/*/pyproject.toml"))}


def gpu_table(folder: Path) -> dict[str, list[str]]:
    """The package's ``[tool.iclr25.gpu]`` table (bench / reproduce argv).

    Raises:
        ValueError: the table is missing, or an entry is not a list of strings.
    """
    table = (
        tomllib.loads((folder / "pyproject.toml").read_text()).get("tool", {}).get("iclr25", {}).get("gpu")
    )
    if not isinstance(table, dict):
        raise ValueError(
            f"{folder / 'pyproject.toml'}: no [tool.iclr25.gpu] table (bench and reproduce argv)"
        )
    for key in ("bench", "reproduce"):
        value = table.get(key)
        if not (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
            raise ValueError(
                f"{folder / 'pyproject.toml'}: [tool.iclr25.gpu] {key} must be a list of strings"
            )
    return table


def cuda_visible() -> str | None:
    """None when torch sees a CUDA device, else why not (one line)."""
    if shutil.which("nvidia-smi") is None:
        return "no CUDA device is visible (nvidia-smi not found); the gpu sessions need a machine with an NVIDIA GPU"
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)"
    code = subprocess.run([sys.executable, "-c", probe], check=False).returncode
    if code != 0:
        return "no CUDA device is visible to torch (torch.cuda.is_available() is False)"
    return None


def junit_counts(path: Path) -> dict[str, int]:
    """passed / failed / skipped counts of a pytest junit XML file (zeros when it is missing)."""
    if not path.is_file():
        return {"passed": 0, "failed": 0, "skipped": 0}
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = sum(int(s.get("tests", 0)) for s in suites)
    failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
    skipped = sum(int(s.get("skipped", 0)) for s in suites)
    return {"passed": total - failed - skipped, "failed": failed, "skipped": skipped}


def bench_metrics(results: Path) -> dict[str, Any]:
    """The ratio / speed-up / peak-memory / throughput metrics of a run's results.json ({} when missing)."""
    if not results.is_file():
        return {}
    metrics = json.loads(results.read_text()).get("metrics", {})
    return {k: v for k, v in metrics.items() if any(word in k.lower() for word in METRIC_WORDS)}


def _timed(cmd: list[str], env: dict[str, str], log: Path, dry_run: bool) -> tuple[int, float]:
    print("+", " ".join(cmd), flush=True)
    if dry_run:
        return 0, 0.0
    start = time.perf_counter()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as fh:
        try:
            code = subprocess.run(
                cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=PART_LIMIT_S
            ).returncode
        except subprocess.TimeoutExpired:
            code = 124
    return code, time.perf_counter() - start


def check(slugs: list[str], out: Path, *, reproduce: bool, dry_run: bool) -> list[dict[str, Any]]:
    """Run every part of every package; one row per part."""
    env = {**os.environ, "ICLR25_REQUIRE_GPU": "1"}
    rows = []
    found = packages()
    for slug in slugs:
        folder = found[slug]
        table = gpu_table(folder)
        parts: list[tuple[str, list[str], Path]] = []
        if not reproduce:
            junit = out / slug / "junit.xml"
            pytest_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c"]
            pytest_cmd += [str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT), str(folder / "tests")]
            pytest_cmd += ["-m", "gpu", f"--junitxml={junit}"]
            parts.append(("tests", pytest_cmd, junit))
        verb = "reproduce" if reproduce else "bench"
        run_out = out / slug / verb
        cli = [str(Path(sys.executable).parent / f"iclr25-{slug}"), *table[verb], "--out", str(run_out)]
        parts.append((verb, [*cli, "--overwrite"], run_out / "results.json"))
        for part, cmd, artefact in parts:
            code, seconds = _timed(cmd, env, out / slug / f"{part}.log", dry_run)
            row: dict[str, Any] = {"package": slug, "part": part, "exit": code, "seconds": round(seconds, 1)}
            if part == "tests":
                counts = junit_counts(artefact)
                row.update(counts)
                ok = code == 0 and counts["failed"] == 0 and counts["passed"] > 0
            else:
                row["metrics"] = bench_metrics(artefact)
                ok = code == 0
            row["status"] = "pass" if ok or dry_run else "FAIL"
            row["over_budget"] = seconds > PART_BUDGET_S
            rows.append(row)
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| package | part | status | tests (pass/fail/skip) | seconds | metrics |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        tests = f"{r['passed']}/{r['failed']}/{r['skipped']}" if r["part"] == "tests" else ""
        metrics = ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.get("metrics", {}).items()
        )
        over = " (over 60 s)" if r["over_budget"] else ""
        lines.append(
            f"| {r['package']} | {r['part']} | {r['status']} | {tests} | {r['seconds']}{over} | {metrics} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("slugs", nargs="*", help="packages (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "gpu")
    parser.add_argument("--reproduce", action="store_true", help="run the --size gpu reproductions instead")
    parser.add_argument("--dry-run", action="store_true", help="print the commands; no GPU needed")
    args = parser.parse_args(argv)
    found = packages()
    unknown = [s for s in args.slugs if s not in found]
    if unknown:
        print(
            f"gpu_check: unknown package(s) {', '.join(unknown)}; choose from {', '.join(found)}",
            file=sys.stderr,
        )
        return 2
    slugs = args.slugs or list(found)
    try:
        for slug in slugs:
            gpu_table(found[slug])
    except ValueError as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 2
    if not args.dry_run:
        why = cuda_visible()
        if why is not None:
            print(f"gpu_check: {why}", file=sys.stderr)
            return 2
    rows = check(slugs, args.out, reproduce=args.reproduce, dry_run=args.dry_run)
    if args.dry_run:
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")
    (args.out / "summary.md").write_text(markdown(rows))
    print(markdown(rows))
    failed = [f"{r['package']}:{r['part']}" for r in rows if r["status"] != "pass"]
    if failed:
        print(f"gpu_check: {len(failed)} part(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
