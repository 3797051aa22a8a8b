"""The command line end to end on tiny inputs, and its bad-input exits (2, one line, before any work)."""

import json

import numpy as np
import pytest

from iclr25_videophy import Prompt, generate, write_prompts
from iclr25_videophy.cli import main


def _videos(tmp_path):
    def gen(prompt, seed):
        rng = np.random.default_rng(seed)
        base = rng.integers(0, 200, (16, 16, 3))
        return np.stack([np.clip(base + 3 * t, 0, 255) for t in range(8)]).astype(np.uint8)

    return generate(
        gen, [Prompt("A ball falls, bounces; stops."), Prompt("Water pours")], tmp_path / "v", source="toy"
    )


def test_leaderboard_default_runs_on_the_published_example_labels(tmp_path, capsys):
    assert main(["leaderboard", "--out", str(tmp_path / "r")]) == 0
    res = json.loads((tmp_path / "r" / "results.json").read_text())
    (row,) = res["tables"]["leaderboard"]
    assert row["joint"] == pytest.approx(28.6)


def test_evaluate_a_mapping_writes_labels_in_the_published_format(tmp_path):
    _videos(tmp_path)
    assert (
        main(
            [
                "evaluate",
                "--mapping",
                str(tmp_path / "v" / "mapping.csv"),
                "--out",
                str(tmp_path / "e"),
                "--quiet",
            ]
        )
        == 0
    )
    header = (tmp_path / "e" / "labels.csv").read_text().splitlines()[0]
    assert (
        header
        == "video_url,caption,states_of_matter,source,complexity,majority_sa,majority_pc,sa_score,pc_score"
    )
    assert main(["leaderboard", "--labels", str(tmp_path / "e" / "labels.csv"), "--quiet"]) == 0


def test_evaluate_by_file_name_without_a_match_exits_2_naming_the_prompt(tmp_path, capsys):
    _videos(tmp_path)
    write_prompts(tmp_path / "p.csv", [Prompt("A cat jumps over a fence")])
    rc = main(["evaluate", "--videos", str(tmp_path / "v" / "videos"), "--prompts", str(tmp_path / "p.csv")])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "A cat jumps over a fence" in err[0]


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["evaluate", "--mapping", "/nonexistent/m.csv"], "--mapping: '/nonexistent/m.csv' does not exist"),
        (["evaluate", "--pc", "labels"], "--labels"),
        (["evaluate", "--threshold", "2"], "threshold"),
        (["leaderboard", "--labels", "/nonexistent.csv"], "--labels: '/nonexistent.csv' does not exist"),
        (["generate", "--pipeline", "/no/such/model", "--videos-dir", "x"], "pipeline"),
        (["generate", "--prompt", " ", "--videos-dir", "x"], "empty"),
        (["generate"], "videos-dir"),
        (["reproduce", "--seeds", "0"], "seeds"),
        (["reproduce", "--parts", "B,E"], "parts"),
        (["reproduce", "--parts", "C"], "C reads the label file part A writes"),
        (["reproduce", "--parts", "B", "--no-physics"], "no part to run"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, match, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and match in err[0]


def test_a_video_that_does_not_decode_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\\x00" * 100)
    (tmp_path / "m.json").write_text(json.dumps({"A ball falls": "bad.mp4"}))
    assert main(["evaluate", "--mapping", str(tmp_path / "m.json")]) == 2
    assert "bad.mp4" in capsys.readouterr().err


def test_empty_prompt_set_exits_2(tmp_path, capsys):
    (tmp_path / "p.csv").write_text("caption\n")
    assert main(["generate", "--prompts", str(tmp_path / "p.csv"), "--videos-dir", str(tmp_path / "v")]) == 2
    assert "empty" in capsys.readouterr().err


def test_evaluate_released_videos_with_human_labels_end_to_end(tmp_path, numbered_video):
    # released-video convention (caption with '_' for spaces, _k suffix) + a label file with relative paths
    folder = tmp_path / "released"
    folder.mkdir()
    numbered_video(4, name="Shoe_squishes_a_bug._0.mp4", folder=folder)
    numbered_video(4, name="An_apple_falls._1.mp4", folder=folder)
    write_prompts(tmp_path / "p.csv", [Prompt("Shoe squishes a bug."), Prompt("An apple falls.")])
    (tmp_path / "labels.csv").write_text(
        "videopath,caption,sa,pc\nexamples/Shoe_squishes_a_bug._0.mp4,Shoe squishes a bug.,0,1\n"
        "examples/An_apple_falls._1.mp4,An apple falls.,1,0\n"
    )
    argv = [
        "evaluate",
        "--videos",
        str(folder),
        "--prompts",
        str(tmp_path / "p.csv"),
        "--sa",
        "labels",
        "--pc",
        "labels",
        "--labels",
        str(tmp_path / "labels.csv"),
        "--out",
        str(tmp_path / "r"),
        "--quiet",
    ]
    assert main(argv) == 0
    (row,) = json.loads((tmp_path / "r" / "results.json").read_text())["tables"]["aggregate"]
    assert (row["joint"], row["sa"], row["pc"]) == (0.0, 50.0, 50.0)


@pytest.mark.slow
def test_reproduce_tiny_and_bench_run_on_the_real_clips(tmp_path):
    from iclr25_shared.testing import require
    from iclr25_videophy._clips import real_clips

    require(real_clips)
    assert main(["reproduce", "--size", "tiny", "--seeds", "2", "--out", str(tmp_path / "r"), "--quiet"]) == 0
    rec = json.loads((tmp_path / "r" / "results.json").read_text())
    m = rec["metrics"]
    assert m["A_auc_shuffled_vs_original"] == 1.0 and m["A_auc_reversed_vs_original"] == 0.5
    assert m["C_label_file_round_trip_exact"] is True
    # issue 41 wiring: one primary comparison first, computed from the per_seed rows, and the verdict
    comp, per_seed = rec["tables"]["comparisons"], rec["tables"]["per_seed"]
    assert [r["role"] for r in comp] == ["primary"] + ["secondary"] * 4 + ["exploratory"] * 4
    assert comp[0]["n"] == 2 and len(per_seed) == 2 * 2  # seeds x evaluators
    by = {(r["seed"], r["evaluator"]): r["auc_overall"] for r in per_seed}
    diffs = [by[(s, "trajectory features")] - by[(s, "frame-difference baseline")] for s in (0, 1)]
    assert comp[0]["mean_difference"] == pytest.approx(sum(diffs) / 2)
    assert m["paper_effect"] == 0.10 and isinstance(m["verdict"], str)
    agg = rec["tables"]["A_aggregate_by_source"]  # SA is not scored: null with a reason, never "nan"
    assert all(r["sa"] is None and r["joint"] is None and r["null_reason"] for r in agg)
    assert all(isinstance(r["pc"], float) for r in agg)
    assert (
        main(["bench", "--repeats", "1", "--num-frames", "4", "--out", str(tmp_path / "b"), "--quiet"]) == 0
    )


def _fake_pipeline(calls):
    """Stands in for the tiny random diffusers pipeline: records that it was built, returns 4 grey frames."""
    from types import SimpleNamespace

    def build(seed, device=None):
        calls.append("built")

        def pipe(prompt, *, num_frames, **kwargs):
            return SimpleNamespace(frames=[np.full((num_frames, 16, 16, 3), 100, np.uint8)])

        return pipe

    return build


def test_generate_videos_dir_at_an_existing_file_exits_2_before_building_the_pipeline(
    tmp_path, capsys, monkeypatch
):
    # Regression: on main this built the pipeline, then exited 1 with two lines (mkdir on a file).
    import iclr25_videophy._tiny

    calls = []
    monkeypatch.setattr(iclr25_videophy._tiny, "tiny_text_to_video_pipeline", _fake_pipeline(calls))
    a_file = tmp_path / "videos.txt"
    a_file.write_text("not a folder")
    assert main(["generate", "--videos-dir", str(a_file), "--prompt", "a ball falls"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--videos-dir" in err[0] and str(a_file) in err[0], err
    assert calls == [] and a_file.read_text() == "not a folder"


def test_generated_videos_outside_out_get_ordinary_modes_under_umask_022(tmp_path, monkeypatch):
    # Regression: write_video's mkstemp left every .mp4 in --videos-dir 0600 (the runner fixes modes only in --out).
    import os

    import iclr25_videophy._tiny

    calls = []
    monkeypatch.setattr(iclr25_videophy._tiny, "tiny_text_to_video_pipeline", _fake_pipeline(calls))
    folder = tmp_path / "vids"
    previous = os.umask(0o022)
    try:
        argv = ["generate", "--videos-dir", str(folder), "--prompt", "a ball falls", "--num-frames", "4"]
        assert main([*argv, "--quiet"]) == 0
    finally:
        os.umask(previous)
    assert calls == ["built"]
    modes = {str(p.relative_to(folder)): p.stat().st_mode & 0o777 for p in folder.rglob("*")}
    assert any(k.endswith(".mp4") for k in modes) and "mapping.csv" in modes, modes
    expected = {k: (0o755 if (folder / k).is_dir() else 0o644) for k in modes}
    assert modes == expected, {k: oct(v) for k, v in modes.items()}


def test_user_file_problems_found_during_the_run_exit_2_naming_the_file(tmp_path, capsys):
    entries = _videos(tmp_path)
    mapping = tmp_path / "v" / "mapping.csv"
    labels = tmp_path / "labels.csv"  # labels only the first video: the second has none
    labels.write_text(f"videopath,caption,sa,pc\n{entries[0][0]},A ball falls,1,1\n")
    five = tmp_path / "five.csv"  # 1..5 scores read in threshold mode
    five.write_text("videopath,caption,sa,pc\na.mp4,A ball falls,4,5\n")
    missing_video = tmp_path / "m.json"
    missing_video.write_text(json.dumps({"A ball falls": "gone.mp4"}))
    no_index = tmp_path / "pipe"
    no_index.mkdir()
    for argv, needle in (
        (["evaluate", "--mapping", str(mapping), "--pc", "labels", "--labels", str(labels)], "no label"),
        (["leaderboard", "--labels", str(five)], "videophy2"),
        (["evaluate", "--mapping", str(missing_video)], "gone.mp4"),
        (["generate", "--pipeline", str(no_index), "--videos-dir", str(tmp_path / "g")], "model_index.json"),
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "g").exists()
