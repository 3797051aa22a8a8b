"""Evaluation helpers, the Wikipedia token pipeline on small local files, and the CLI end to end on a tiny local
Mixtral folder, with every bad input the issue names (exit 2, one line)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from iclr25_adak import apply_adak, evaluate_lm, interpolate_static, token_types
from iclr25_adak._zoo import wiki_tokens
from iclr25_adak.cli import main

WORDS = [
    "the",
    "river",
    "flows",
    "into",
    "a",
    "lake",
    "and",
    "the",
    "city",
    "lies",
    "on",
    "its",
    "bank",
    ".",
    "in",
    "1990",
    "the",
    "bridge",
    "was",
    "built",
    "by",
    "a",
    "company",
    "of",
    "the",
    "state",
    ";",
    "it",
    "is",
    "the",
    "longest",
    "bridge",
    "of",
    "the",
    "region",
    "and",
    "carries",
    "a",
    "road",
]


def _docs(n=40, seed=0):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(20, 60)))) for _ in range(n)]


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "[EOS]": 1, **{w: i + 2 for i, w in enumerate(sorted(set(WORDS)))}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", eos_token="[EOS]")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM

    root = tmp_path_factory.mktemp("models")
    tok = _tokenizer()
    small = dict(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        bos_token_id=None,
        eos_token_id=1,
        pad_token_id=None,
    )
    torch.manual_seed(0)
    moe = MixtralForCausalLM(
        MixtralConfig(intermediate_size=24, num_local_experts=6, num_experts_per_tok=2, **small)
    )
    moe.save_pretrained(root / "moe")
    tok.save_pretrained(root / "moe")
    LlamaForCausalLM(LlamaConfig(intermediate_size=24, **small)).save_pretrained(root / "dense")
    tok.save_pretrained(root / "dense")
    text = root / "text.txt"
    text.write_text("\n\n".join(_docs()), encoding="utf-8")
    wiki = root / "summaries.json"
    wiki.write_text(
        json.dumps(
            {
                str(i): {"title": f"T{i}", "extract": d, "description": "", "topic": "Geography"}
                for i, d in enumerate(_docs(30, 1))
            }
        ),
        encoding="utf-8",
    )
    return root


# -- evaluation ------------------------------------------------------------------------------------------------
def test_static_loss_equals_the_hf_loss(make_tiny):
    model = make_tiny("mixtral")
    ids = torch.randint(0, 64, (6, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = model(input_ids=ids, labels=ids).loss.item()
    patch = apply_adak(model)
    r = evaluate_lm(patch, ids.numpy(), mode="fixed", k=2, batch=6)
    assert r["loss"] == pytest.approx(ref, rel=1e-6)
    assert r["mean_k"] == 2.0 and r["flops_reduction"] == 0.0
    r1 = evaluate_lm(patch, ids.numpy(), mode="fixed", k=1, batch=4)
    assert r1["flops_reduction"] == 0.5 and r1["k_per_layer"] == [1.0, 1.0]


def test_token_types():
    pieces = ["<unk>", " the", " river", "ing", ",", " 1990", " a", "The", " x"]
    assert token_types(pieces).tolist() == [2, 0, 1, 2, 2, 2, 0, 2, 2]


def test_interpolate_static_is_linear_between_integer_k():
    assert interpolate_static([1, 2, 3], [3.0, 2.0, 1.5], 1.25) == pytest.approx(2.75)
    assert interpolate_static([1, 2, 3], [3.0, 2.0, 1.5], 2.5) == pytest.approx(1.75)
    with pytest.raises(ValueError, match="mean_k must be within"):
        interpolate_static([1, 2], [3.0, 2.0], 2.5)


def test_wiki_tokens_keeps_the_most_frequent_training_ids():
    tok = _tokenizer()
    docs = _docs(60)
    w = wiki_tokens(docs, tok, vocab=6, block_len=8, val_fraction=0.2, seed=0)
    assert w.train.shape[1] == 8 and w.val.shape[1] == 8
    assert w.train.max() < 6 and w.train.min() >= 0 and len(w.pieces) == 6 and w.pieces[0] == "<unk>"
    # brute force: the 5 most frequent ids of the training documents (same split), EOS included
    order = np.random.default_rng(0).permutation(60)
    train_docs = [docs[i] for i in order[12:]]
    counts: dict[int, int] = {}
    for d in train_docs:
        for t in [*tok(d, add_special_tokens=False)["input_ids"], tok.eos_token_id]:
            counts[t] = counts.get(t, 0) + 1
    top = sorted(counts, key=lambda t: (-counts[t], t))[:5]
    assert w.vocab_ids[1:].tolist() == top
    with pytest.raises(ValueError, match="at least 2 documents"):
        wiki_tokens(docs[:1], tok, vocab=6, block_len=8)
    with pytest.raises(ValueError, match="vocab must be"):
        wiki_tokens(docs, tok, vocab=1, block_len=8)


# -- CLI -------------------------------------------------------------------------------------------------------
def _results(folder):
    return json.loads((folder / "results.json").read_text())


def test_train_then_evaluate_end_to_end(folders, tmp_path):
    out = tmp_path / "train"
    args = [
        "train",
        "--model",
        str(folders / "moe"),
        "--text",
        str(folders / "text.txt"),
        "--steps",
        "3",
        "--batch",
        "2",
        "--seq-len",
        "16",
        "--eval-blocks",
        "4",
        "--lam",
        "0.1",
        "--quiet",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    res = _results(out)
    text = json.dumps(res)
    assert "adak_loss" in text and "topk_loss" in text
    assert (out / "allocators.pt").is_file()
    ev = tmp_path / "eval"
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(folders / "moe"),
                "--text",
                str(folders / "text.txt"),
                "--seq-len",
                "16",
                "--eval-blocks",
                "4",
                "--allocators",
                str(out / "allocators.pt"),
                "--quiet",
                "--out",
                str(ev),
            ]
        )
        == 0
    )
    rows = json.dumps(_results(ev))
    assert "static top-1" in rows and "Ada-K (argmax)" in rows


def test_model_folder_reads_wikipedia_summaries_from_a_local_file(folders, tmp_path):
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(folders / "moe"),
                "--wiki-path",
                str(folders / "summaries.json"),
                "--seq-len",
                "16",
                "--eval-blocks",
                "2",
                "--max-static-k",
                "2",
                "--quiet",
            ]
        )
        == 0
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--lam", "-0.5"], "lam must be"),
        (["--k-min", "0"], "k_min must be"),
        (["--k-max", "9"], "k_max must be"),
        (["--k-min", "3", "--k-max", "2"], "k_max must be"),
        (["--clip-eps", "1.0"], "clip_eps must be"),
    ],
)
def test_bad_settings_exit_2_with_one_line(folders, capsys, extra, message):
    code = main(
        [
            "train",
            "--model",
            str(folders / "moe"),
            "--text",
            str(folders / "text.txt"),
            "--steps",
            "1",
            "--seq-len",
            "16",
            "--quiet",
            *extra,
        ]
    )
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


@pytest.mark.parametrize(
    ("model", "extra", "message"),
    [
        ("dense", [], "has no MoE blocks"),
        ("missing", [], "does not exist; expected a Hugging Face model folder"),
        ("wiki-moe", [], "text can only be given with a --model folder"),
        ("moe", ["--allocators", "nope.pt"], "--allocators: 'nope.pt' does not exist"),
    ],
)
def test_bad_models_exit_2_with_one_line(folders, capsys, model, extra, message):
    path = model if model == "wiki-moe" else str(folders / model)
    cmd = "evaluate" if extra else "train"
    code = main(
        [cmd, "--model", path, "--text", str(folders / "text.txt"), "--seq-len", "16", "--quiet", *extra]
    )
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


# -- the boundary: the user's model folder, allocators and text files (issue 37) --------------------------------


def _one_line(capsys):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _evaluate(model, *extra):
    return main(["evaluate", "--model", str(model), "--seq-len", "16", "--eval-blocks", "2", "--max-static-k", "1",
                 "--quiet", *extra])  # fmt: skip


def _copy_moe(folders, tmp_path, name="moe"):
    import shutil

    target = tmp_path / name
    shutil.copytree(folders / "moe", target)
    return target


def test_a_config_only_model_folder_exits_2_naming_it(folders, tmp_path, capsys):
    model = _copy_moe(folders, tmp_path)
    for f in model.glob("*.safetensors"):
        f.unlink()
    assert _evaluate(model, "--text", str(folders / "text.txt")) == 2
    err = _one_line(capsys)
    assert "--model" in err and str(model) in err and "no weights" in err, err


def test_a_model_folder_with_corrupt_weights_exits_2_naming_it(folders, tmp_path, capsys):
    model = _copy_moe(folders, tmp_path)
    (model / "model.safetensors").write_bytes(b"\x89junk, not safetensors")
    assert _evaluate(model, "--text", str(folders / "text.txt")) == 2
    err = _one_line(capsys)
    assert "--model" in err and str(model) in err, err


def test_a_nan_weight_model_exits_2_naming_the_folder_and_the_tensor(folders, tmp_path, capsys):
    from transformers import MixtralForCausalLM

    moe = MixtralForCausalLM.from_pretrained(folders / "moe")
    with torch.no_grad():
        moe.model.layers[1].self_attn.q_proj.weight[0, 0] = float("nan")
    model = tmp_path / "nan-moe"
    moe.save_pretrained(model)
    _tokenizer().save_pretrained(model)
    capsys.readouterr()  # the progress bars of the save above
    assert _evaluate(model, "--text", str(folders / "text.txt")) == 2
    err = _one_line(capsys)
    assert str(model) in err and "model.layers.1.self_attn.q_proj.weight" in err and "NaN or inf" in err, err


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"\x89 garbage, not a checkpoint\n", "is not an allocators.pt written by `train --out`"),
        ({"unrelated.weight": torch.zeros(2)}, "holds no allocator tensors"),
        ({"model.layers.0.mlp.allocator.proj.weight": torch.zeros(3, 5)}, "do not fit this model"),
        ({"model.layers.0.mlp.allocator.proj.weight": torch.full((6, 32), float("nan"))}, "NaN or inf"),
        ([1, 2, 3], "expected a dict of allocator tensors"),
    ],
)
def test_bad_allocators_exit_2_naming_the_file(folders, tmp_path, capsys, content, needle):
    path = tmp_path / "allocators.pt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        torch.save(content, path)
    assert _evaluate(folders / "moe", "--text", str(folders / "text.txt"), "--allocators", str(path)) == 2
    err = _one_line(capsys)
    assert "--allocators" in err and str(path) in err and needle in err, err


@pytest.mark.parametrize("model", ["moe", "wiki-moe"])
def test_a_bad_wiki_path_exits_2_naming_the_option(folders, tmp_path, capsys, model):
    wiki = tmp_path / "summaries.json"
    wiki.write_text(json.dumps({"a": {"extract": "text without a topic"}}))
    model = model if model == "wiki-moe" else str(folders / model)
    assert _evaluate(model, "--wiki-path", str(wiki)) == 2
    err = _one_line(capsys)
    assert "--wiki-path" in err and str(wiki) in err and "topic" in err, err


def test_text_with_the_packaged_model_exits_2_before_any_work(folders, capsys, monkeypatch):
    import iclr25_adak._experiment as experiment

    monkeypatch.setattr(experiment, "_load", lambda *a: pytest.fail("the model was loaded"))
    assert main(["train", "--model", "wiki-moe", "--text", str(folders / "text.txt"), "--quiet"]) == 2
    assert "text can only be given with a --model folder" in _one_line(capsys)


@pytest.mark.parametrize("content", [b"", b"\xff\xfe\x00 not utf-8"])
def test_an_empty_or_binary_text_file_exits_2(folders, tmp_path, capsys, content):
    text = tmp_path / "corpus.txt"
    text.write_bytes(content)
    assert _evaluate(folders / "moe", "--text", str(text)) == 2
    err = _one_line(capsys)
    assert "--text" in err and str(text) in err, err


def test_reproduce_gpu_preset_fills_only_the_options_left_at_their_defaults():
    from iclr25_adak._experiment import GPU_PRESET, _apply_preset
    from iclr25_adak.cli import ReproduceConfig

    quick = ReproduceConfig()
    assert _apply_preset(quick) == quick
    gpu = _apply_preset(ReproduceConfig(size="gpu"))
    assert (
        (gpu.seeds, gpu.steps, gpu.batch, gpu.eval_blocks) == (8, 50, 32, 256) == tuple(GPU_PRESET.values())
    )
    # 8 seeds x 50 rollouts x 32 blocks against 3 x 25 x 8: the 10-100x of issue 40
    assert 10 <= (gpu.seeds * gpu.steps * gpu.batch) / (quick.seeds * quick.steps * quick.batch) <= 100
    mine = _apply_preset(ReproduceConfig(size="gpu", seeds=4))
    assert mine.seeds == 4 and mine.steps == 50


def test_reproduce_declares_its_primary_first_and_keeps_the_per_seed_values(folders, tmp_path, monkeypatch):
    """Issue 41: results.json's comparisons start with the README's primary (Ada-K at lam=0.03 against static
    top-k at the same mean k), the others secondary; per_seed holds the raw values that recompute it."""
    import iclr25_adak._reproduce as rep
    from iclr25_adak._experiment import _text_blocks
    from iclr25_adak._inputs import load_model_folder
    from iclr25_adak._zoo import WikiTokens

    def host(cfg, ctx, device):
        model, tok = load_model_folder(folders / "moe")
        train, val = _text_blocks(tok, _docs(80), 16)
        pieces = [tok.decode([i]) for i in range(len(tok))]
        return model, WikiTokens(train, val, np.arange(len(tok)), pieces), 0.0

    monkeypatch.setattr(rep, "_host", host)
    out = tmp_path / "r"
    argv = ["reproduce", "--steps", "2", "--batch", "2", "--seeds", "3", "--lams", "0", "0.03"]
    assert main([*argv, "--eval-blocks", "4", "--max-static-k", "3", "--out", str(out), "--quiet"]) == 0
    res = json.loads((out / "results.json").read_text())
    comp, per_seed = res["tables"]["comparisons"], res["tables"]["per_seed"]
    assert comp[0]["name"] == "Ada-K (lam=0.03) - static top-k at the same mean k, validation NLL"
    assert [r["role"] for r in comp] == ["primary"] + ["secondary"] * 3
    assert [r["name"] for r in comp[1:]] == [
        "Ada-K (lam=0) - static top-k at the same mean k",
        "Ada-K (lam=0) - static top-2",
        "Ada-K (lam=0.03) - static top-2",
    ]
    rows = [r for r in per_seed if r["lam"] == 0.03]
    assert [r["seed"] for r in rows] == [0, 1, 2]
    diffs = [r["loss"] - r["interp_loss"] for r in rows]
    assert comp[0]["mean_difference"] == pytest.approx(float(np.mean(diffs)), abs=1e-12)
    assert comp[0]["n"] == 3 and comp[0]["low"] <= comp[0]["mean_difference"] <= comp[0]["high"]
    static = {r["k"]: r["loss"] for r in res["tables"]["static"]}
    assert all(r["topK_loss"] == static[2] for r in per_seed)
    assert res["metrics"]["paper_effect"] == -0.01 and isinstance(res["metrics"]["verdict"], str)


def test_primary_lam_must_be_in_the_grid():
    from iclr25_adak.cli import ReproduceConfig

    with pytest.raises(ValueError, match="primary_lam must be one of lams"):
        ReproduceConfig(lams=(0.0, 0.01))
