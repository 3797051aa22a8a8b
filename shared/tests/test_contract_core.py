"""Template v2 core: validators, the runner's --out / --threads / Result handling, JAX devices, peak memory."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from iclr25_shared import checks
from iclr25_shared.cli import CommonOptions, Result, RunContext, apply_threads, parse, run
from iclr25_shared.testing import require


# -- checks -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [True, False, 1.0, "3", None, np.float64(2.0)])
def test_check_int_rejects_non_integers_and_bool(value):
    with pytest.raises(TypeError, match=r"steps must be an integer in \[1, inf\), got"):
        checks.check_int("steps", value, low=1)


def test_check_int_accepts_numpy_integers_and_names_the_range():
    assert checks.check_int("k", np.int64(3), low=1, high=5) == 3
    assert type(checks.check_int("k", np.int32(3))) is int
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 5\], got 6"):
        checks.check_int("k", 6, low=1, high=5)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_check_float_rejects_non_finite_values_whatever_the_bounds(value):
    with pytest.raises(ValueError, match="lr must be a finite number"):
        checks.check_float("lr", value)


def test_check_float_bounds_open_and_closed():
    assert checks.check_float("lr", 1e-3, low=0.0, low_inclusive=False) == 1e-3
    with pytest.raises(ValueError, match=r"lr must be in \(0.0, inf\), got 0.0"):
        checks.check_float("lr", 0.0, low=0.0, low_inclusive=False)
    with pytest.raises(TypeError, match="lr must be a number"):
        checks.check_float("lr", True)
    assert checks.check_probability("p", 1.0) == 1.0
    with pytest.raises(ValueError, match=r"p must be in \[0.0, 1.0\)"):
        checks.check_probability("p", 1.0, open_high=True)


def test_check_range_rejects_nan():
    with pytest.raises(ValueError, match="x must be in"):
        checks.check_range("x", float("nan"), low=0)


def test_check_choice_lists_the_allowed_values():
    with pytest.raises(ValueError, match="solver must be one of greedy, lazy; got 'fast'"):
        checks.check_choice("solver", "fast", ("greedy", "lazy"))
    assert checks.check_choice("solver", "lazy", {"greedy": 1, "lazy": 2}) == "lazy"


def test_check_finite_counts_and_locates_bad_entries():
    x = np.zeros((3, 4))
    x[1, 2] = np.nan
    x[2, 0] = np.inf
    with pytest.raises(ValueError, match=r"2 of 12 entries are NaN or inf \(first at index \(1, 2\)\)"):
        checks.check_finite("x", x)
    assert checks.check_finite("ints", np.arange(3)) is not None
    with pytest.raises(TypeError, match="numeric"):
        checks.check_finite("s", np.array(["a"]))


def test_check_finite_on_torch_low_precision():
    torch = pytest.importorskip("torch")
    t = torch.ones(4, dtype=torch.bfloat16)
    checks.check_finite("t", t)
    t[3] = float("inf")
    with pytest.raises(ValueError, match="1 of 4"):
        checks.check_finite("t", t)


def test_check_shape_binds_named_axes_across_arrays():
    sizes = checks.check_shape("keys", np.zeros((5, 3)), ("n", "d"))
    assert sizes == {"n": 5, "d": 3}
    checks.check_shape("queries", np.zeros((7, 3)), ("m", "d"), bind=sizes)
    with pytest.raises(ValueError, match=r"queries must have shape \(m, d\) with d=3, got \(7, 4\)"):
        checks.check_shape("queries", np.zeros((7, 4)), ("m", "d"), bind=sizes)
    with pytest.raises(ValueError, match=r"x must have shape \(n, 2\), got \(5, 3\)"):
        checks.check_shape("x", np.zeros((5, 3)), ("n", 2))
    checks.check_shape("batch", np.zeros((2, 9, 5, 3)), ("...", "n", "d"))
    with pytest.raises(ValueError, match="must have shape"):
        checks.check_shape("x", np.zeros(3), ("n", "d"))


# -- the runner ---------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class _Cfg(CommonOptions):
    """Toy command."""

    steps: int = 2
    """Steps."""
    fail: bool = False
    """Raise during the run."""

    def __post_init__(self) -> None:
        super().__post_init__()
        checks.check_int("steps", self.steps, low=1)


def _go(cfg: _Cfg, ctx: RunContext) -> Result:
    ctx.save_array("x", np.arange(cfg.steps))
    ctx.save_text("notes/a.txt", "hello")
    ctx.log.info("working")
    if cfg.fail:
        raise RuntimeError("boom")
    return Result(metrics={"steps": cfg.steps}, tables={"rows": [{"a": 1}]}, timings={"t": 0.5})


COMMANDS = {"go": (_Cfg, _go), "reproduce": (_Cfg, _go), "bench": (_Cfg, _go)}


def _main(argv):
    return run("iclr25-toy", COMMANDS, argv, default="go", version="9.9")


def test_result_becomes_the_results_folder_and_is_printed(tmp_path, capsys):
    out = tmp_path / "o"
    assert _main(["--out", str(out), "--steps", "3"]) == 0
    record = json.loads((out / "results.json").read_text())
    assert record["metrics"] == {"steps": 3} and record["tables"]["rows"] == [{"a": 1}]
    assert record["config"]["steps"] == 3 and record["command"] == "iclr25-toy go"
    assert np.load(out / "x.npy").tolist() == [0, 1, 2]
    assert (out / "notes" / "a.txt").read_text() == "hello"
    printed = capsys.readouterr()
    assert "steps: 3" in printed.out and "| a |" in printed.out and "working" in printed.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def test_result_files_get_ordinary_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        assert _main(["--out", str(tmp_path / "o")]) == 0
    finally:
        os.umask(old)
    for path in (tmp_path / "o").rglob("*"):
        assert path.stat().st_mode & 0o777 == (0o755 if path.is_dir() else 0o644), path
    assert (tmp_path / "o").stat().st_mode & 0o777 == 0o755


def test_a_failed_run_leaves_the_old_results_and_no_temporary_folder(tmp_path, capsys):
    out = tmp_path / "o"
    assert _main(["--out", str(out), "--steps", "2"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert _main(["--out", str(out), "--overwrite", "--steps", "5", "--fail"]) == 1
    assert "failed: RuntimeError: boom" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def test_an_interrupted_run_leaves_nothing(tmp_path, capsys):
    def interrupted(cfg, ctx):
        ctx.save_text("half.txt", "partial")
        raise KeyboardInterrupt

    code = run("iclr25-toy", {"go": (_Cfg, interrupted)}, ["--out", str(tmp_path / "o")], default="go")
    assert code == 130 and "interrupted" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_out_is_refused_before_any_work(tmp_path, capsys):
    calls = []

    def never(cfg, ctx):
        calls.append(cfg)
        return Result()

    cmds = {"go": (_Cfg, never)}
    existing = tmp_path / "file.txt"
    existing.write_text("keep me")
    full = tmp_path / "full"
    full.mkdir()
    (full / "results.json").write_text("{}")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    cases = [existing, full, existing / "sub"]
    if os.geteuid() != 0:  # root may write anywhere
        cases.append(locked / "o")
    for out in cases:
        assert run("iclr25-toy", cmds, ["--out", str(out)], default="go") == 2, out
        err = capsys.readouterr().err.strip()
        assert err.startswith("iclr25-toy: error: --out:") and len(err.splitlines()) == 1, err
    assert calls == [] and existing.read_text() == "keep me"
    # an existing empty folder is fine
    (tmp_path / "empty").mkdir()
    assert run("iclr25-toy", cmds, ["--out", str(tmp_path / "empty")], default="go") == 0


def test_overwrite_replaces_the_whole_folder(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "stale.npy").write_text("old")
    assert _main(["--out", str(out), "--overwrite"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "notes",
        "results.json",
        "results.md",
        "x.npy",
    ]
    file_out = tmp_path / "was-a-file"
    file_out.write_text("x")
    assert _main(["--out", str(file_out), "--overwrite"]) == 0 and file_out.is_dir()


def test_no_out_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _main(["--steps", "2"]) == 0
    assert list(tmp_path.iterdir()) == []


def test_version_help_and_parse(capsys):
    assert _main(["--version"]) == 0 and capsys.readouterr().out.strip() == "iclr25-toy 9.9"
    name, cfg = parse("iclr25-toy", COMMANDS, ["bench", "--steps", "4", "--threads", "0"], default="go")
    assert name == "bench" and cfg.steps == 4 and cfg.threads == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--threads", "-1"], "threads must be an integer in [0, 1024], got -1"),
        (["--seed", "-3"], "seed must be an integer in [0, inf), got -3"),
        (["--steps", "0"], "steps must be an integer in [1, inf), got 0"),
        (["--device", "tpu"], "device must be one of"),
    ],
)
def test_bad_common_options_exit_2_with_one_line(argv, message, capsys):
    assert _main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_commands_named_as_strings_are_imported_only_when_run(tmp_path, monkeypatch, capsys):
    module = tmp_path / "lazy_cmd_mod.py"
    module.write_text(
        "from iclr25_shared.cli import Result\ndef go(cfg, ctx):\n    return Result(metrics={'lazy': True})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cmds = {"go": (_Cfg, "lazy_cmd_mod:go")}
    assert run("iclr25-toy", cmds, ["--help"], default="go") == 0
    assert "lazy_cmd_mod" not in sys.modules
    assert run("iclr25-toy", cmds, [], default="go") == 0
    assert "lazy: True" in capsys.readouterr().out


def test_a_result_exit_code_of_1_is_returned(capsys):
    cmds = {"go": (_Cfg, lambda cfg, ctx: Result(metrics={"ok": False}, exit_code=1))}
    assert run("iclr25-toy", cmds, [], default="go") == 1


def test_threads_reach_torch_and_the_blas_environment(monkeypatch):
    torch = pytest.importorskip("torch")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "XLA_FLAGS"):
        monkeypatch.delenv(var, raising=False)
    before = torch.get_num_threads()
    try:
        apply_threads(1)
        assert os.environ["OMP_NUM_THREADS"] == "1" and torch.get_num_threads() == 1
        if "jax" not in sys.modules:
            assert "intra_op_parallelism_threads=1" in os.environ["XLA_FLAGS"]
        monkeypatch.setenv("OMP_NUM_THREADS", "7")
        apply_threads(0)  # 0 leaves everything as it is
        assert os.environ["OMP_NUM_THREADS"] == "7"
    finally:
        torch.set_num_threads(before)


def test_the_default_thread_count_applies_in_a_fresh_process(tmp_path):
    code = (
        "import os, dataclasses\n"
        "from iclr25_shared.cli import CommonOptions, Result, run\n"
        "@dataclasses.dataclass(frozen=True, kw_only=True)\n"
        "class C(CommonOptions):\n    '''c'''\n"
        "def go(cfg, ctx):\n    return Result(metrics={'omp': os.environ.get('OMP_NUM_THREADS')})\n"
        "raise SystemExit(run('p', {'go': (C, go)}, [], default='go'))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert "omp: 1" in done.stdout


# -- devices, memory, require --------------------------------------------------------------------------------------
def test_resolve_jax_devices_auto_means_every_device_of_the_best_backend():
    code = (
        "from iclr25_shared.device import resolve_jax_devices\n"
        "import jax\n"
        "auto = resolve_jax_devices('auto'); cpu = resolve_jax_devices('cpu')\n"
        "gpus = [d for d in jax.devices() if d.platform == 'gpu']\n"
        "assert auto == (gpus or cpu), (auto, cpu)\n"
        "assert len(cpu) == 2, cpu\n"
        "for bad in ('tpu', 'mps', 'cuda:x'):\n"
        "    try:\n        resolve_jax_devices(bad)\n    except ValueError:\n        pass\n"
        "    else:\n        raise AssertionError(bad)\n"
        "if not gpus:\n"
        "    try:\n        resolve_jax_devices('cuda')\n    except ValueError as e:\n        assert '[cuda]' in str(e)\n"
        "    else:\n        raise AssertionError('cuda')\n"
        "print('ok')\n"
    )
    pytest.importorskip("jax")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr


def test_peak_memory_without_a_resettable_kernel_peak_uses_the_sampler(monkeypatch):
    from iclr25_shared import device

    monkeypatch.setattr(device, "_reset_peak_rss", lambda: False)  # as on macOS / Windows
    with device.PeakMemory("cpu") as mem:
        block = np.ones(96 * 2**20 // 8)
        block.sum()
        import time

        time.sleep(0.05)
    del block
    assert not mem.exact and mem.peak_bytes >= 64 * 2**20


def test_require_skips_or_fails_on_a_missing_source(monkeypatch):
    from iclr25_shared.errors import DatasetUnavailable

    def missing():
        raise DatasetUnavailable("install it with `apt-get install x`")

    monkeypatch.delenv("ICLR25_REQUIRE_DATA", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install x"):
        require(missing)
    monkeypatch.setenv("ICLR25_REQUIRE_DATA", "1")
    with pytest.raises(pytest.fail.Exception, match="ICLR25_REQUIRE_DATA"):
        require(missing)
    assert require(lambda: 3) == 3


def test_context_without_out_refuses_paths_but_allows_saving_calls():
    ctx = RunContext("p go", _Cfg())
    assert not ctx.writes and ctx.save_array("x", [1]) is None and ctx.save_text("a", "b") is None
    with pytest.raises(RuntimeError, match="no --out"):
        ctx.path("x")


def test_context_paths_stay_inside_the_results_folder(tmp_path):
    ctx = RunContext("p go", _Cfg(), staging=tmp_path)
    for bad in ("../x", "/etc/passwd"):
        with pytest.raises(ValueError, match="relative path inside --out"):
            ctx.path(bad)
    assert ctx.path("a/b.txt") == tmp_path / "a" / "b.txt"


def test_the_template_package_reads_its_version_from_metadata():
    from importlib.metadata import version

    import iclr25_shared

    assert iclr25_shared.__version__ == version("iclr25-shared")
    assert iclr25_shared.distribution_version("no-such-distribution-xyz") == "0+unknown"
    assert Path(iclr25_shared.__file__).is_file()


# tyro's error panel as tyro 0.9.1 - 1.0.9 print it into a captured stream (boxed) and as 1.0.10+ do (plain).
_BOXED = (
    "╭─ Unrecognized options ────────────╮\n│ Unrecognized options: --stepz     │\n"
    "│ ───────────────────────────────── │\n│ Perhaps you meant:                │\n"
    "│     --steps INT                   │\n│         (default: 3)              │\n"
    "│ ───────────────────────────────── │\n│ For full helptext, run p a --help │\n"
    "╰───────────────────────────────────╯\n"
)
_PLAIN = (
    " Unrecognized options                \n ----------------------------------- \n"
    "  Unrecognized options: --stepz   \n  -----------------------------------\n"
    "  Perhaps you meant:                 \n      --steps INT                    \n"
    "          (default: 3)               \n  -----------------------------------\n"
    "  For full helptext, run p a --help  \n                                     \n"
)


@pytest.mark.parametrize("panel", [_BOXED, _PLAIN], ids=["boxed", "plain"])
def test_tyro_error_panels_of_every_supported_version_become_one_line(panel):
    from iclr25_shared.cli import _one_line

    assert _one_line(panel) == "Unrecognized options: --stepz Perhaps you meant: --steps INT (default: 3)"


def test_tyro_value_error_panel_names_the_option():
    from iclr25_shared.cli import _one_line

    panel = (
        "╭─ Value error ─────────╮\n│ Error parsing --steps: invalid literal for int() with base 10: 'x' │\n"
        "│ ─────────── │\n│ Argument helptext: │\n│ --steps INT │\n│ ─────────── │\n"
        "│ For full helptext, see p a --help │\n╰──────────╯\n"
    )
    assert _one_line(panel) == "--steps: invalid literal for int() with base 10: 'x'"


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Typed(CommonOptions):
    """Typed fields."""

    methods: tuple[str, ...] = ("a", "b")
    """Methods."""
    pair: tuple[int, float] = (1, 2.0)
    """A pair."""
    data: Path | None = None
    """A path."""


def test_config_file_values_take_the_field_types(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"methods": ["x"], "pair": [3, 4.5], "data": "d.csv"}))
    _, cfg = parse("p", {"go": (_Typed, _go)}, ["--config", str(path)], default="go")
    assert cfg.methods == ("x",) and cfg.pair == (3, 4.5) and cfg.data == Path("d.csv")
    _, again = parse("p", {"go": (_Typed, _go)}, ["--config", str(path), "--methods", "y", "z"], default="go")
    assert again.methods == ("y", "z")


def test_paired_t_interval_against_the_textbook_formula():
    pytest.importorskip("scipy")
    from iclr25_shared.metrics import paired_t_interval

    d = [0.5, 1.5, 1.0, 2.0]  # mean 1.25, sd 0.6455, t_{3,0.975} = 3.182446305284263
    est = paired_t_interval(d)
    half = 3.182446305284263 * np.std(d, ddof=1) / 2.0
    assert (est.value, est.low, est.high, est.n) == pytest.approx((1.25, 1.25 - half, 1.25 + half, 4))
    one = paired_t_interval([0.3])
    assert one.value == 0.3 and one.low == -np.inf and one.high == np.inf
    with pytest.raises(ValueError, match="finite"):
        paired_t_interval([1.0, np.nan])
    with pytest.raises(ValueError, match="non-empty"):
        paired_t_interval([])


def test_threads_limit_an_existing_numpy_blas_pool():
    code = (
        "import numpy, threadpoolctl\n"
        "from iclr25_shared.cli import apply_threads\n"
        "apply_threads(1)\n"
        "pools = threadpoolctl.threadpool_info()\n"
        "print(all(p['num_threads'] == 1 for p in pools), len(pools))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.split()[0] == "True", done.stdout
