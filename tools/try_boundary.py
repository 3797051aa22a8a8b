"""Try every CLI's boundary as a new user would, through the installed console scripts, and print the table.

    uv run --no-sync python tools/try_boundary.py [--slugs lozo,qqa] [--sigint-tries 1] [--jax-tries 10]
        [--mid-run 12] [--out docs/boundary-trials.json]

Cases, for every package (slug × case → exit codes seen):
- ``out-file``: the default verb with ``--out`` at an existing file → 2, the file unchanged;
- ``empty`` / ``junk``: for every command and every declared path option (``INPUTS`` / ``OUTPUTS``), an empty and
  a junk file → 2, one stderr line, nothing written, an existing ``--out`` untouched (whether the line names the
  path is recorded: it does not where the option needs a companion option first, e.g. ``--q`` without ``--k``);
- ``sigint@0.5s`` / ``sigint@2s``: SIGINT to the default verb at 0.5 s and 2 s after the start;
- ``sigint@mid``: SIGINT to ``reproduce`` after ``--mid-run`` seconds (it runs for minutes): a Ctrl-C mid-run.
  Each SIGINT case runs with ``--quiet`` and expects 130, at most one stderr line, and neither ``--out`` nor a
  ``.NAME.partial-*`` folder.
JAX packages (prdp, qqa) get ``--jax-tries`` tries of each SIGINT case, the others ``--sigint-tries``.

Runs one process at a time (the machine's cores are shared); nothing is written in the repository unless ``--out``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JAX = {"prdp", "qqa"}
JUNK = b"\x89\x00junk: not what this option reads \xff\xfe\n"
SUFFIX = {
    "torch_checkpoint": ".pt",
    "npz": ".npz",
    "npy": ".npy",
    "image": ".png",
    "video": ".mp4",
    "table": ".json",
}


def _script(slug: str) -> str:
    path = Path(sys.executable).parent / f"iclr25-{slug}"
    return str(path) if path.exists() else shutil.which(f"iclr25-{slug}") or f"iclr25-{slug}"


def _ok_stderr(err: str) -> bool:
    lines = [line for line in err.splitlines() if line.strip()]
    return len(lines) <= 1 and "Traceback" not in err


def _leftovers(folder: Path, out: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name == out.name or p.name.startswith(f".{out.name}.")]


def _files(slug: str, tmp: Path) -> list[dict]:
    from iclr25_shared.inputs import declared_inputs, declared_outputs, option

    cli = importlib.import_module(f"iclr25_{slug.replace('-', '_')}.cli")
    rows = []
    out_file = tmp / "results.json"
    out_file.write_text("{}")
    done = subprocess.run(
        [_script(slug), cli.DEFAULT, "--out", str(out_file)], capture_output=True, text=True
    )
    good = done.returncode == 2 and _ok_stderr(done.stderr) and out_file.read_text() == "{}"
    rows.append(
        {"case": "out-file", "command": cli.DEFAULT, "option": "--out", "exit": done.returncode, "ok": good}
    )
    previous = tmp / "previous"
    previous.mkdir()
    (previous / "results.json").write_text('{"kept": 1}')
    for name, (cls, _) in cli.COMMANDS.items():
        for field, spec in {**declared_inputs(cls), **declared_outputs(cls)}.items():
            for case, content in (("empty", b""), ("junk", JUNK)):
                path = tmp / f"{name}-{field}-{case}{SUFFIX.get(spec.kind, '.bin')}"
                path.write_bytes(content)
                args = [_script(slug), name, option(field), str(path), "--out", str(previous), "--overwrite"]
                start = time.perf_counter()
                done = subprocess.run(args, capture_output=True, text=True)
                seconds = time.perf_counter() - start
                good = (
                    done.returncode == 2
                    and _ok_stderr(done.stderr)
                    and (previous / "results.json").read_text() == '{"kept": 1}'
                    and not [p for p in tmp.iterdir() if p.name.startswith(".")]
                )
                rows.append(
                    {
                        "case": case,
                        "command": name,
                        "option": option(field),
                        "exit": done.returncode,
                        "seconds": round(seconds, 2),
                        "ok": good,
                        "names_path": str(path) in done.stderr,  # False where a companion option is missing
                        "stderr": done.stderr.strip()[-300:],
                    }
                )
    return rows


def _sigint(slug: str, tmp: Path, command: list[str], at: float, label: str) -> dict:
    out = tmp / f"out-{label}"
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.Popen(
        [_script(slug), *command, "--out", str(out), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    time.sleep(at)
    finished_first = proc.poll() is not None
    if not finished_first:
        proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        err = "did not stop within 120 s after SIGINT\n" + err
    left = _leftovers(tmp, out)
    good = proc.returncode == 130 and _ok_stderr(err) and not left
    row = {"case": label, "command": " ".join(command), "exit": proc.returncode, "ok": good, "left": left}
    complete = (out / "results.json").is_file() and left == [out.name]
    if finished_first or (complete and proc.returncode in (0, -signal.SIGINT) and not err.strip()):
        # the command had committed its results: the signal came after the work (during interpreter shutdown, where
        # Python has restored the default disposition), so there was nothing left to interrupt
        row["note"] = "finished before the signal"
        row["ok"] = complete
    if not good:
        row["stderr"] = err.strip()[-400:]
    for name in left:
        shutil.rmtree(tmp / name, ignore_errors=True)
    return row


def trial(slug: str, sigint_tries: int, jax_tries: int, mid_run: float) -> list[dict]:
    cli = importlib.import_module(f"iclr25_{slug.replace('-', '_')}.cli")
    rows = []
    with tempfile.TemporaryDirectory(prefix=f"try-{slug}-") as tmp_name:
        tmp = Path(tmp_name)
        files = tmp / "files"
        files.mkdir()
        rows += _files(slug, files)
        tries = jax_tries if slug in JAX else sigint_tries
        sig = tmp / "sig"
        sig.mkdir()
        for i in range(tries):
            rows.append(_sigint(slug, sig, [cli.DEFAULT], 0.5, "sigint@0.5s") | {"try": i})
            rows.append(_sigint(slug, sig, [cli.DEFAULT], 2.0, "sigint@2s") | {"try": i})
            rows.append(_sigint(slug, sig, ["reproduce"], mid_run, "sigint@mid") | {"try": i})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slugs", default="", help="comma-separated slugs (default: every package)")
    parser.add_argument("--sigint-tries", type=int, default=1)
    parser.add_argument("--jax-tries", type=int, default=10)
    parser.add_argument("--mid-run", type=float, default=12.0, help="seconds before the mid-run SIGINT")
    parser.add_argument("--out", type=Path, default=None, help="write every row as JSON here")
    args = parser.parse_args()
    slugs = [s for s in args.slugs.split(",") if s] or sorted(p.name for p in (ROOT / "packages").iterdir())
    table: dict[str, dict[str, str]] = {}
    everything = []
    for slug in slugs:
        rows = trial(slug, args.sigint_tries, args.jax_tries, args.mid_run)
        everything += [r | {"slug": slug} for r in rows]
        cells: dict[str, list[dict]] = {}
        for r in rows:
            cells.setdefault(r["case"], []).append(r)
        table[slug] = {
            case: f"{sum(r['ok'] for r in rs)}/{len(rs)} ok (exit {sorted({r['exit'] for r in rs})})"
            for case, rs in cells.items()
        }
        for r in rows:
            if not r["ok"]:
                print(f"NOT OK {slug}: {json.dumps(r)}", file=sys.stderr)
        print(f"{slug}: {table[slug]}", file=sys.stderr, flush=True)
    cases = ["out-file", "empty", "junk", "sigint@0.5s", "sigint@2s", "sigint@mid"]
    print("| package | " + " | ".join(cases) + " |")
    print("|---|" + "---|" * len(cases))
    for slug, cells in table.items():
        print(f"| {slug} | " + " | ".join(cells.get(c, "n/a") for c in cases) + " |")
    if args.out is not None:
        args.out.write_text(json.dumps(everything, indent=1) + "\n")
    return 0 if all(r["ok"] for r in everything) else 1


if __name__ == "__main__":
    sys.exit(main())
