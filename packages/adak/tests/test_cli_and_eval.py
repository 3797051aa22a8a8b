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
        ("missing", [], "model must be 'wiki-moe' or a local Hugging Face model folder"),
        ("wiki-moe", [], "text can only be given with a --model folder"),
        ("moe", ["--allocators", "nope.pt"], "allocators must be an allocators.pt file"),
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
