"""The CLI end to end on tiny inputs, and every bad input the issue names → exit 2 with one line."""

import json
import os

import pytest
import torch

from iclr25_diffusion_curriculum import CurriculumSampler, PatiencePacer, TimestepClusters
from iclr25_diffusion_curriculum.cli import main
from iclr25_shared.data import fashion_mnist
from iclr25_shared.testing import require

TINY = [
    "--steps",
    "3",
    "--batch-size",
    "4",
    "--channels",
    "8",
    "8",
    "--num-samples",
    "4",
    "--num-inference-steps",
    "2",
    "--quiet",
    "--device",
    "cpu",
]


def test_help_lists_the_verbs(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for verb in ("train", "reproduce", "bench"):
        assert verb in out


def test_train_end_to_end_on_digits_writes_model_samples_and_state_with_ordinary_modes(tmp_path, capsys):
    out = tmp_path / "run"
    argv = [
        "train",
        "--dataset",
        "digits",
        "--sampler",
        "curriculum",
        "--num-clusters",
        "4",
        "--patience",
        "1",
        "--max-steps-per-stage",
        "1",
        "--ema",
        "0.0",
        "--num-train-timesteps",
        "100",
        "--out",
        str(out),
        *TINY,
    ]
    previous = os.umask(0o022)
    try:
        assert main(argv) == 0
    finally:
        os.umask(previous)
    # Regression: safetensors wrote unet/diffusion_pytorch_model.safetensors 0600 (group/others could not read it)
    modes = {str(p.relative_to(out)): p.stat().st_mode & 0o777 for p in out.rglob("*")}
    assert "unet/diffusion_pytorch_model.safetensors" in modes, sorted(modes)
    assert modes == {k: 0o755 if (out / k).is_dir() else 0o644 for k in modes}, {
        k: oct(v) for k, v in modes.items()
    }
    for name in (
        "unet",
        "scheduler",
        "sampler_state.json",
        "samples.png",
        "results.json",
        "results.md",
        "config.json",
    ):
        assert (out / name).exists(), name
    results = json.loads((out / "results.json").read_text())
    assert (
        results["metrics"]["final_stage"] == 4
    )  # cap 1 → one stage per step: 1, 2, 3 then stage 4 after step 3
    assert results["config"]["sampler"] == "curriculum"
    # the saved sampler state resumes a sampler in the same stage
    state = json.loads((out / "sampler_state.json").read_text())
    s = CurriculumSampler(TimestepClusters(100, 4), PatiencePacer(patience=1, max_steps_per_stage=1, ema=0.0))
    s.load_state_dict(state)
    assert s.stage == 4
    from diffusers import UNet2DModel

    model = UNet2DModel.from_pretrained(out / "unet")
    assert model(torch.zeros(1, 1, 8, 8), torch.tensor([5])).sample.shape == (1, 1, 8, 8)
    # a second run into the same folder is refused without --overwrite, and replaces it completely with it
    assert main(argv) == 2
    assert main([*argv, "--overwrite"]) == 0
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []


def test_train_on_fashion_mnist_uniform_writes_the_difficulty_analysis(tmp_path, capsys):
    require(fashion_mnist, "test")
    argv = [
        "train",
        "--dataset",
        "fashion-mnist",
        "--sampler",
        "uniform",
        "--image-size",
        "8",
        "--out",
        str(tmp_path),
    ]
    assert main([*argv, *TINY]) == 0
    assert "final_stage: 10" in capsys.readouterr().out
    assert (tmp_path / "difficulty.png").is_file()
    rows = json.loads((tmp_path / "results.json").read_text())["tables"][
        "Difficulty analysis (per timestep cluster)"
    ]
    assert [r["cluster"] for r in rows][:2] == ["C1 t∈[0,99]", "C2 t∈[100,199]"]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["train", "--num-clusters", "0"], "num_clusters must be an integer in [1, 1000]"),
        (["train", "--num-clusters", "1001"], "num_clusters must be an integer in [1, 1000]"),
        (["train", "--patience", "0"], "patience"),
        (["train", "--ema", "1.0"], "ema"),
        (["train", "--max-steps-per-stage", "0"], "max_steps_per_stage"),
        (["train", "--sampler", "hard-first"], "--sampler"),
        (["train", "--dataset", "cifar10"], "--dataset"),
        (["train", "--channels", "12", "24"], "channels"),
        (["train", "--image-size", "10", "--channels", "8", "8", "8"], "image_size"),
        (["train", "--snr-gamma", "-1"], "snr_gamma"),
        (["train", "--steps", "0"], "steps"),
        (["train", "--timestep-range", "500", "400"], "empty or inverted"),
        (["train", "--timestep-range", "500", "500"], "empty or inverted"),
        (["train", "--timestep-range", "0", "1001"], "timestep_range end"),
        (
            ["train", "--timestep-range", "0", "5", "--num-clusters", "10"],
            "num_clusters must be an integer in [1, 5]",
        ),
        (["reproduce", "--num-seeds", "0"], "num_seeds"),
        (["reproduce", "--methods", "curriculum"], "methods must list uniform"),
        (["reproduce", "--methods", "uniform", "uniform"], "no duplicates"),
        (["reproduce", "--methods", "uniform"], "at least one of curriculum, reverse"),
        (["reproduce", "--weight-ema", "1.0"], "weight_ema"),
        (["reproduce", "--sync-every", "0"], "sync_every"),
        (["reproduce", "--combine", "/nonexistent/run"], "--combine: '/nonexistent/run' does not exist"),
        (["bench", "--batch-size", "0"], "batch_size"),
        (["fly"], "unknown subcommand"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err
    assert len(err.splitlines()) == 1
    assert "Traceback" not in err


def test_full_replaces_only_the_options_left_at_their_quick_defaults():
    from iclr25_diffusion_curriculum.cli import ReproduceConfig

    quick = ReproduceConfig()
    assert quick.effective() is quick
    full = ReproduceConfig(full=True).effective()
    for k, v in ReproduceConfig.FULL.items():
        assert getattr(full, k) == v, k
    mine = ReproduceConfig(full=True, num_seeds=1, seed=3, steps=900).effective()
    assert (mine.num_seeds, mine.seed, mine.steps) == (1, 3, 900)
    assert mine.patience == ReproduceConfig.FULL["patience"]


def test_bench_reports_overhead_ratios(tmp_path, capsys):
    argv = [
        "bench",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--sampler-calls",
        "50",
        "--repeats",
        "3",
        "--batch-size",
        "4",
        "--image-size",
        "8",
        "--channels",
        "8",
        "8",
        "--quiet",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    m = json.loads((tmp_path / "results.json").read_text())["metrics"]
    assert m["step_ms"] > 0
    assert m["curriculum_sampler_us"] > 0
    assert m["uniform_randint_us"] > 0
    assert m["sampler_fraction_of_step"] == pytest.approx(m["curriculum_sampler_us"] / (1000 * m["step_ms"]))
    low, high = m["curriculum_step_vs_uniform_step_interval"]
    assert low <= m["curriculum_step_vs_uniform_step"] <= high
    steps = m["bench"]["steps"]
    assert steps["order"] == [["uniform", "curriculum"], ["curriculum", "uniform"]]  # interleaved, rotated
    assert len(m["bench"]["sampler_calls"]["times_s"]["randint"]) == 3


@pytest.mark.slow
def test_reproduce_tiny_end_to_end(tmp_path):
    require(fashion_mnist, "test")
    argv = [
        "reproduce",
        "--steps",
        "6",
        "--num-seeds",
        "2",
        "--batch-size",
        "8",
        "--image-size",
        "8",
        "--channels",
        "8",
        "8",
        "--num-checkpoints",
        "2",
        "--num-fid-samples",
        "40",
        "--methods",
        "uniform",
        "curriculum",
        "reverse",
        "--num-inference-steps",
        "2",
        "--heldout-images",
        "20",
        "--analysis-bins",
        "2",
        "--num-clusters",
        "3",
        "--patience",
        "1",
        "--quiet",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    res = json.loads((tmp_path / "results.json").read_text())
    for name in (
        "difficulty.png",
        "convergence.png",
        "runs.json",
        "samples_uniform.png",
        "samples_curriculum.png",
        "samples_reverse.png",
    ):
        assert (tmp_path / name).is_file()
    per_seed = res["tables"]["per_seed"]
    assert [(r["seed"], r["method"]) for r in per_seed] == [
        (s, m) for s in (0, 1) for m in ("uniform", "curriculum", "reverse")
    ]
    assert len(res["tables"]["Held-out ε-MSE per timestep cluster at the end (mean over seeds)"]) == 3
    comparisons = res["tables"]["comparisons"]
    assert [c["role"] for c in comparisons].count("primary") == 1
    assert comparisons[0]["name"] == "final FID, curriculum / uniform - 1"
    fid = {(r["seed"], r["method"]): r["final FID"] for r in per_seed}
    ratio = [fid[s, "curriculum"] / fid[s, "uniform"] - 1 for s in (0, 1)]
    assert comparisons[0]["mean_difference"] == pytest.approx(sum(ratio) / 2)
    assert comparisons[0]["n"] == 2
    # every checkpoint's paired difference is exploratory: 2 methods × 2 metrics × 2 checkpoints
    assert sum(" at step " in c["name"] and c["role"] == "exploratory" for c in comparisons) == 8
    assert res["metrics"]["verdict"]
    assert res["metrics"]["heldout_paired_delta_eval_noise_sd"] >= 0
    # the per-seed runs of two one-seed runs, combined, give exactly the summary of the two-seed run
    singles = []
    for seed in (0, 1):
        out = tmp_path / f"s{seed}"
        args = [a for a in argv if a != str(tmp_path)]
        i = args.index("--num-seeds")
        args[i + 1] = "1"
        assert main([*args, str(out), "--seed", str(seed)]) == 0
        singles.append(str(out))
    combined = tmp_path / "combined"
    assert main(["reproduce", *argv[argv.index("--steps") : -1], str(combined), "--combine", *singles]) == 0
    got = json.loads((combined / "results.json").read_text())
    assert got["tables"]["comparisons"] == res["tables"]["comparisons"]
    timeless = lambda rows: [{k: v for k, v in r.items() if k != "train s"} for r in rows]  # noqa: E731
    assert timeless(got["tables"]["per_seed"]) == timeless(res["tables"]["per_seed"])  # wall times differ
    assert got["metrics"]["verdict"] == res["metrics"]["verdict"]
    # runs with other settings are refused
    other = tmp_path / "other"
    args = [a for a in argv if a != str(tmp_path)]
    args[args.index("--patience") + 1] = "2"
    assert main([*args, str(other), "--seed", "5", "--num-seeds", "1"]) == 0
    assert main(["reproduce", "--out", str(tmp_path / "bad"), "--combine", singles[0], str(other)]) == 2


def test_combine_refuses_a_folder_that_is_not_a_reproduce_result_naming_it(tmp_path, capsys):
    # Regression: --combine was undeclared; a folder without runs.json failed during the run (FileNotFoundError,
    # exit 1), a corrupt runs.json with a JSONDecodeError traceback message.
    no_runs = tmp_path / "train-run"  # a train result: results.json, no runs.json
    no_runs.mkdir()
    (no_runs / "results.json").write_text("{}")
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "runs.json").write_text('{"meta": {')
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "runs.json").write_text(
        '{"meta": {"config": {}, "feature_net_test_accuracy": 1, "fid_real_vs_real": 0}}'
    )
    a_file = tmp_path / "runs.json"
    a_file.write_text("{}")
    out = tmp_path / "out"
    for folder, needle in (
        (corrupt, "is not valid JSON"),  # before: the JSON parser's message alone, after torch had loaded
        (no_runs, "has no runs.json"),
        (empty, "holds no per-seed runs"),
        (a_file, "is a file"),
    ):
        assert main(["reproduce", "--combine", str(folder), "--out", str(out)]) == 2, folder
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--combine" in err[0] and str(folder) in err[0] and needle in err[0], err
    assert not out.exists()


def test_size_gpu_scales_the_quick_defaults_10_to_100x_and_excludes_full():
    from iclr25_diffusion_curriculum.cli import ReproduceConfig

    quick = ReproduceConfig()
    gpu = ReproduceConfig(size="gpu").effective()
    assert {k: getattr(gpu, k) for k in ReproduceConfig.GPU} == ReproduceConfig.GPU
    seen = lambda c: c.steps * c.batch_size * c.num_seeds  # noqa: E731  (training images seen, all seeds)
    assert 10 <= seen(gpu) / seen(quick) <= 100
    # the curriculum phase keeps its share of training: (clusters - 1) x cap / steps as in quick
    share = lambda c: (c.num_clusters - 1) * c.max_steps_per_stage / c.steps  # noqa: E731
    assert abs(share(gpu) - share(quick)) < 0.01
    assert ReproduceConfig(size="gpu", num_seeds=2).effective().num_seeds == 2
    with pytest.raises(ValueError, match="two presets"):
        ReproduceConfig(size="gpu", full=True)
