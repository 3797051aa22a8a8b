"""The CLI end to end on a tiny local model and a tiny Wikipedia-format file; bad input exits 2 before work."""

import json
import sys
from pathlib import Path

import pytest
import torch
import transformers

sys.path.insert(0, str(Path(__file__).parent))

from iclr25_cald import load_converted
from iclr25_cald.cli import main


def test_convert_end_to_end_saves_a_loadable_model(tiny_model_dir, wiki_file, tmp_path, capsys):
    import os

    out = tmp_path / "run"
    umask = os.umask(0o022)
    try:
        code = main(
            [
                "convert",
                "--model",
                str(tiny_model_dir),
                "--data",
                str(wiki_file),
                "--out",
                str(out),
                "--quiet",
            ]
        )
    finally:
        os.umask(umask)
    assert code == 0
    # issue 37: safetensors wrote model/model.safetensors 0600; every result file is ordinary (0644 under 022)
    modes = {str(p.relative_to(out)): p.stat().st_mode & 0o777 for p in out.rglob("*")}
    assert "model/model.safetensors" in modes
    assert modes == {k: 0o755 if (out / k).is_dir() else 0o644 for k in modes}, {
        k: oct(v) for k, v in modes.items()
    }
    res = json.loads((out / "results.json").read_text())
    m = res["metrics"]
    assert m["kept_tensors"] == m["kept_tensors_bit_identical"] > 0
    assert m["removed_tensors"] == 8  # q/k/v/o of 2 layers
    model = load_converted(out / "model")
    assert model(torch.tensor([[2, 3, 4]])).logits.shape == (1, 3, 40)
    # issue 38: the default mixer (was linformer) keeps the causal LM causal: token t + 1 never moves logits <= t
    assert res["metrics"]["mixer"] == "mamba"
    ids = torch.randint(2, 19, (2, 12), generator=torch.Generator().manual_seed(0))
    for t in (0, 4, 10):
        other = ids.clone()
        other[:, t + 1] = other[:, t + 1] % 18 + 2
        with torch.no_grad():
            assert torch.equal(model(ids).logits[:, : t + 1], model(other).logits[:, : t + 1]), t


def test_distill_end_to_end(tiny_model_dir, wiki_file, tmp_path):
    out = tmp_path / "d"
    code = main(
        [
            "distill",
            "--model",
            str(tiny_model_dir),
            "--data",
            str(wiki_file),
            "--strategy",
            "waypoint",
            "--layers",
            "2",
            "--seq-len",
            "8",
            "--k",
            "4",
            "--train-examples",
            "32",
            "--eval-examples",
            "16",
            "--batch-size",
            "4",
            "--steps",
            "3",
            "--teacher-steps",
            "4",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    res = json.loads((out / "results.json").read_text())
    assert 0.0 <= res["metrics"]["student_accuracy"] <= 1.0


def test_reproduce_end_to_end_pairs_the_strategies(tiny_model_dir, wiki_file, tmp_path):
    out = tmp_path / "r"
    code = main(
        [
            "reproduce",
            "--model",
            str(tiny_model_dir),
            "--data",
            str(wiki_file),
            "--seq-len",
            "8",
            "--k",
            "4",
            "--train-examples",
            "24",
            "--eval-examples",
            "12",
            "--batch-size",
            "4",
            "--steps",
            "2",
            "--teacher-steps",
            "2",
            "--seeds",
            "2",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    res = json.loads((out / "results.json").read_text())
    comp, per_seed = res["tables"]["comparisons"], res["tables"]["per_seed"]
    # issue 41: the README's declared primary comparison comes first, every other one is secondary
    assert comp[0]["name"] == "target (official start) - unguided, held-out accuracy"
    assert [r["role"] for r in comp] == ["primary"] + ["secondary"] * (len(comp) - 1)
    assert [r["name"] for r in comp[1:]] == [
        "trajectory - unguided",
        "target (pretrained start) - unguided",
        "target (official start) - target (pretrained start)",
        "trajectory - target (official start)",
    ]
    # the per-seed table holds the raw values the primary difference is computed from
    assert [r["seed"] for r in per_seed] == [0, 1]
    diffs = [r["target (official start)"] - r["unguided"] for r in per_seed]
    assert comp[0]["mean_difference"] == pytest.approx(sum(diffs) / 2, abs=1e-12)
    assert comp[0]["n"] == 2
    runs = {(r["seed"], r["arm"]): r["accuracy"] for r in res["tables"]["runs"]}
    assert len(runs) == 8 and all(runs[r["seed"], "unguided"] == r["unguided"] for r in per_seed)
    assert res["metrics"]["paper_effect"] == 0.187
    assert isinstance(res["metrics"]["verdict"], str) and res["metrics"]["verdict"]
    assert "wall_s" not in res["tables"]["runs"][0]  # timings apart: a rerun's tables can be bit-identical


def test_reproduce_needs_the_primary_arms():
    from iclr25_cald.cli import ReproduceConfig

    with pytest.raises(ValueError, match="strategies must include unguided and target"):
        ReproduceConfig(strategies=("unguided", "trajectory"))


@pytest.mark.slow
def test_bench_end_to_end_writes_the_scaling_table_and_plot(tmp_path):
    out = tmp_path / "b"
    code = main(["bench", "--lengths", "8", "32", "--k", "4", "--repeats", "1", "--out", str(out), "--quiet"])
    assert code == 0
    res = json.loads((out / "results.json").read_text())
    assert {r["mixer"] for r in res["tables"]["scaling"]} == {
        "attention (sdpa, teacher)",
        "linformer k=4",
        "mamba (recurrent scan)",
    }
    assert (out / "scaling.png").is_file()


def test_bench_interleaves_every_mixer_for_the_fixed_rounds_even_after_a_slow_call(tmp_path):
    """Issue 43: the bench timed each mixer in one block and stopped repeating after one call slower than
    max_seconds / 4, so a single slow call (machine load) decided a length's number. Now every mixer runs the same
    --repeats rounds, interleaved with rotated order, whatever a call took; --max-seconds only drops a mixer from
    the longer lengths."""
    out = tmp_path / "b"
    argv = ["bench", "--lengths", "8", "16", "--k", "4", "--repeats", "3", "--warmup", "1"]
    code = main([*argv, "--max-seconds", "1e-9", "--out", str(out), "--quiet"])
    assert code == 0
    res = json.loads((out / "results.json").read_text())
    run = res["metrics"]["protocol"]["8"]
    mixers = {"attention (sdpa, teacher)", "linformer k=4", "mamba (recurrent scan)"}
    assert set(run["times_s"]) == mixers
    assert all(len(times) == 3 for times in run["times_s"].values())  # every call exceeded 1e-9 s
    assert len({tuple(order) for order in run["order"]}) > 1  # the order rotates between rounds
    rows = {(r["seq_len"], r["mixer"]): r for r in res["tables"]["scaling"]}
    for name in mixers - {"attention (sdpa, teacher)"}:
        r = rows[(8, name)]
        assert r["ratio_low"] <= r["time_vs_attention"] <= r["ratio_high"]
    assert all(
        rows[(16, name)]["seconds"] is None and "skipped" in rows[(16, name)]["note"] for name in mixers
    )
    assert "16" not in res["metrics"]["protocol"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["convert", "--k", "300", "--max-seq-len", "256"], "k must be an integer in [1, max_seq_len=256]"),
        (["reproduce", "--k", "64", "--seq-len", "32"], "k must be an integer in [1, seq_len=32]"),
        (["distill", "--alpha-layer", "-1"], "alpha_layer must be"),
        (["distill", "--strategy", "mimic"], "mimic"),
        (["bench", "--k", "512", "--lengths", "256"], "k must be an integer in [1, min(lengths)=256]"),
        (["reproduce", "--seeds", "0"], "seeds must be"),
        (["convert", "--mixer", "performer"], "performer"),
        (["convert", "--mixer", "linformer"], "--allow-bidirectional"),  # issue 38: a causal LM stays causal
    ],
)
def test_bad_input_exits_2_with_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_unsupported_architecture_exits_2(tmp_path, capsys, wiki_file):
    folder = tmp_path / "gpt2"
    transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=40)
    ).save_pretrained(folder)
    from tokenizers import Tokenizer, models

    transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")), unk_token="<unk>"
    ).save_pretrained(folder)
    assert main(["convert", "--model", str(folder), "--data", str(wiki_file)]) == 2
    err = capsys.readouterr().err
    assert "--model: " in err and "unsupported architecture: model_type='gpt2'" in err
    assert main(["distill", "--model", str(folder), "--data", str(wiki_file)]) == 2
    assert "supported model_type values are llama" in capsys.readouterr().err


COMMAND_MODULES = (
    "iclr25_cald._experiment",
    "iclr25_cald._convert_cmd",
    "iclr25_cald._distill_cmd",
    "iclr25_cald._reproduce",
)
"""The modules a command runs from (and the helpers they share): none is imported before the input is checked."""


@pytest.fixture
def no_model(monkeypatch):
    """Fail the test if the command gets as far as loading a model."""
    import iclr25_shared.models

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded although an input was bad")

    monkeypatch.setattr(iclr25_shared.models, "load_causal_lm", refuse)


@pytest.mark.parametrize("command", ["convert", "distill", "reproduce"])
@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"[]", "holds a JSON list; expected an object of records"),
        (b'{"a": {"extract": "text", "title": "t"}}', "record 0 has no 'topic'"),
        (b"", "is empty (0 bytes)"),
    ],
)
def test_a_bad_wiki_file_exits_2_naming_it_before_any_model_loads(
    tmp_path, capsys, monkeypatch, no_model, command, content, needle
):
    """Issue 37: a JSON list exited 1 (AttributeError), a record without topic 1 (KeyError), an empty file 2 with
    "Expecting value: line 1 column 1" and no file name, each only after SmolLM2 had loaded (30-60 s)."""
    import time

    for name in COMMAND_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    bad = tmp_path / "summaries.json"
    bad.write_bytes(content)
    start = time.perf_counter()
    code = main([command, "--data", str(bad)])
    elapsed = time.perf_counter() - start
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith(f"iclr25-cald {command}: error: --data: "), err
    assert repr(str(bad)) in err and needle in err, err
    assert not set(COMMAND_MODULES) & set(sys.modules)  # refused before the command was imported
    assert elapsed < 3.0, elapsed


def test_the_library_loader_names_the_file_too(tmp_path):
    from iclr25_cald._experiment import _wiki
    from iclr25_shared.errors import InputError

    bad = tmp_path / "summaries.json"
    bad.write_text("[]")
    with pytest.raises(InputError, match=r"^--data: '.*summaries.json' holds a JSON list"):
        _wiki(bad)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (
            ["distill", "--train-examples", "40", "--eval-examples", "9"],
            "40 + 9 examples exceed the 48 in --data",
        ),
        (
            [
                "distill",
                "--layers",
                "3",
                "--train-examples",
                "8",
                "--eval-examples",
                "8",
                "--batch-size",
                "4",
            ],
            "--layers: 3 exceeds the 2 decoder layers",
        ),
        (["convert", "--layers", "3"], "--layers: 3 exceeds the 2 decoder layers"),
    ],
)
def test_options_that_do_not_fit_the_model_or_data_exit_2(tiny_model_dir, wiki_file, capsys, argv, needle):
    """They exited 1 ("failed: ValueError") once the core's exit codes went by meaning."""
    code = main([*argv, "--model", str(tiny_model_dir), "--data", str(wiki_file), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and needle in err, err


def test_supported_architectures_agree_with_the_converter():
    from iclr25_cald import FAMILIES
    from iclr25_cald.cli import CONVERTIBLE

    assert tuple(sorted(FAMILIES)) == CONVERTIBLE


def test_allow_bidirectional_lets_linformer_through_on_request():
    from iclr25_cald.cli import ConvertConfig

    cfg = ConvertConfig(mixer="linformer", allow_bidirectional=True)
    assert cfg.mixer == "linformer"
    assert ConvertConfig().mixer == "mamba"


@pytest.mark.parametrize("start", ["pretrained", "official", None])
def test_student_start_official_converts_the_fine_tuned_teacher_for_target_guidance(
    tiny_model_dir, wiki_file, tmp_path, monkeypatch, start
):
    """Issue 41: the official target/hybrid script starts the student from the fine-tuned teacher's weights and
    keeps the teacher in train(); --student-start official does that and is the default (start None: the option
    not given); --student-start pretrained keeps the earlier start (every student from the pretrained prefix)."""
    import iclr25_cald._convert
    import iclr25_cald._distill

    sources, students, modes = [], [], []
    real_convert, real_distill = iclr25_cald._convert.convert, iclr25_cald._distill.distill

    def convert(model, *args, **kwargs):
        sources.append({k: v.clone() for k, v in model.state_dict().items()})
        out = real_convert(model, *args, **kwargs)
        students.append({k: v.clone() for k, v in out.model.state_dict().items()})
        return out

    def distill(student, batches, **kwargs):
        modes.append((kwargs["guidance"].strategy, kwargs["guidance"].teacher_mode))
        return real_distill(student, batches, **kwargs)

    monkeypatch.setattr(iclr25_cald._convert, "convert", convert)
    monkeypatch.setattr(iclr25_cald._distill, "distill", distill)
    argv = [
        "reproduce",
        "--model",
        str(tiny_model_dir),
        "--data",
        str(wiki_file),
        "--seq-len",
        "8",
        "--k",
        "4",
    ]
    argv += ["--train-examples", "16", "--eval-examples", "8", "--batch-size", "4", "--steps", "2"]
    argv += ["--teacher-steps", "2", "--seeds", "1", "--strategies", "unguided", "target", "hybrid"]
    argv += ["--no-other-start"] + (["--student-start", start] if start else [])
    code = main([*argv, "--out", str(tmp_path / "out"), "--quiet"])
    assert code == 0
    start = start or "official"
    teacher, unguided, target, hybrid = sources  # the raw conversion of the teacher comes first

    def same(a, b):
        return all(torch.equal(a[k], b[k]) for k in a)

    assert not same(unguided, teacher)  # unguided always starts from the pretrained prefix
    assert same(target, teacher) == same(hybrid, teacher) == (start == "official")
    assert same(target, unguided) == (start == "pretrained")
    # the student's initial weights: the fine-tuned teacher's wherever the two architectures share a tensor
    shared = [k for k in teacher if k in students[2]]
    assert len(shared) > len(teacher) // 2
    starts_as_teacher = all(torch.equal(students[2][k], teacher[k]) for k in shared)
    assert (
        starts_as_teacher
        == all(torch.equal(students[3][k], teacher[k]) for k in shared)
        == (start == "official")
    )
    mode = "train" if start == "official" else "eval"
    assert modes[1:] == [("unguided", "eval"), ("target", mode), ("hybrid", mode)]
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert any(f"student start: {start}" in n for n in res["notes"])
    assert res["tables"]["comparisons"][0]["name"] == f"target ({start} start) - unguided, held-out accuracy"


def test_size_gpu_sets_the_preset_where_options_are_at_their_quick_default():
    from iclr25_cald.cli import COMMANDS, DEFAULT, GPU_SIZE, PROG, ReproduceConfig
    from iclr25_shared.cli import parse

    quick = ReproduceConfig()
    assert quick.sized() == quick  # the quick default is unchanged
    _, cfg = parse(PROG, COMMANDS, ["reproduce", "--size", "gpu", "--steps", "7"], default=DEFAULT)
    sized = cfg.sized()
    assert sized.steps == 7  # given explicitly: it wins
    assert {k: getattr(sized, k) for k in GPU_SIZE if k != "steps"} == {
        "train_examples": 8000,
        "eval_examples": 1000,
        "batch_size": 32,
        "teacher_steps": 600,
    }
    assert sized.steps != quick.steps and sized.teacher_steps > quick.teacher_steps


def test_the_gpu_commands_of_pyproject_parse():
    import tomllib

    from iclr25_cald.cli import COMMANDS, DEFAULT, PROG
    from iclr25_shared.cli import parse

    table = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["tool"]["iclr25"]["gpu"]
    assert set(table) == {"bench", "reproduce"}
    for argv in table.values():
        name, cfg = parse(PROG, COMMANDS, [*argv, "--out", "/nonexistent/cald-gpu"], default=DEFAULT)
        assert name == argv[0] and cfg.device == "cuda"
    assert parse(PROG, COMMANDS, table["reproduce"], default=DEFAULT)[1].size == "gpu"
