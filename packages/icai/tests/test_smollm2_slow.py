"""The packaged models (slow tier): SmolLM2-135M-Instruct as local judge and all-MiniLM-L6-v2 as embedder."""

from __future__ import annotations

import numpy as np
import pytest

from iclr25_icai import LocalChatBackend, MiniLMEmbedder, reconstruct, vote
from iclr25_icai._icai import choice_vote_messages, validate_pairs
from iclr25_shared.models import load_causal_lm
from iclr25_shared.testing import require

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    return LocalChatBackend(lm=require(load_causal_lm), batch_size=8)


def _pairs():
    import pandas as pd

    return validate_pairs(
        pd.DataFrame(
            {
                "text_a": [
                    "Paris is the capital of France.",
                    "Water boils at 100 degrees Celsius at sea level.",
                ],
                "text_b": ["The Moon orbits the Earth about every 27 days.", "Bach was a German composer."],
                "preferred_text": ["text_a", "text_b"],
            }
        )
    )


def test_smollm2_shared_prefix_scores_match_one_by_one_scoring(smollm2):
    pairs = _pairs()
    prompts = [
        choice_vote_messages("", r["text_a"], r["text_b"], p, ["A", "B"])
        for _, r in pairs.iterrows()
        for p in (
            "Select the response that is shorter",
            "Select the response about a person",
            "Select the response that mentions a number",
        )
    ]
    smollm2.batch_size, smollm2.share_prefix = 8, True
    shared = smollm2.choice_logprobs(prompts, ["A", "B"])
    smollm2.batch_size, smollm2.share_prefix = 1, False
    plain = smollm2.choice_logprobs(prompts, ["A", "B"])
    np.testing.assert_allclose(shared, plain, atol=2e-4)
    assert np.all(shared < 0)


def test_smollm2_runs_every_stage(smollm2):
    pairs = _pairs()
    smollm2.batch_size, smollm2.share_prefix = 8, True
    _, merged = vote(
        pairs,
        ["Select the response that is shorter"],
        smollm2,
        reannotations=2,
        flips="balanced",
        merge="logprob",
        options=("A", "B"),
    )
    assert set(merged["vote"]) <= {"for", "against", "abstain"}
    rec = reconstruct(["Select the response that is shorter"], pairs, smollm2)
    assert set(rec["predicted"]) <= {"text_a", "text_b", "tie"}
    reply = smollm2.chat(
        [
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "Select the response that"},
        ],
        max_tokens=8,
    )
    assert isinstance(reply, str) and reply


def test_minilm_puts_paraphrases_closer_than_unrelated_principles():
    embed = require(MiniLMEmbedder)
    e = embed(
        [
            "Select the response that is shorter",
            "Select the response that is more concise",
            "Select the response about a famous painter",
        ]
    )
    assert e.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    assert e[0] @ e[1] > e[0] @ e[2]


@pytest.mark.gpu
def test_local_judge_on_cuda_matches_cpu(smollm2):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    lm = require(load_causal_lm, device="cuda")
    gpu = LocalChatBackend(lm=lm)
    prompts = [choice_vote_messages("", "a", "b", "Select the response that is shorter", ["A", "B"])]
    np.testing.assert_allclose(
        gpu.choice_logprobs(prompts, ["A", "B"]), smollm2.choice_logprobs(prompts, ["A", "B"]), atol=1e-3
    )


def test_run_on_the_embedded_default_with_the_local_judge(tmp_path):
    import json

    from iclr25_icai.cli import main

    require(load_causal_lm)
    out = tmp_path / "out"
    code = main(
        [
            "run",
            "--max-pairs",
            "3",
            "--embedder",
            "tfidf",
            "--no-cache",
            "--reannotations",
            "2",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    metrics = json.loads((out / "results.json").read_text())["metrics"]
    assert metrics["pairs"] == 3 and metrics["llm_calls"] > 0
    assert 0.0 <= metrics["agreement_constitutional"]["value"] <= 1.0
    assert (out / "constitution.md").is_file() and (out / "votes.csv").is_file()


def test_minilm_puts_colour_paraphrases_above_the_merge_threshold_and_the_votes_keep_an_inverse():
    import pandas as pd

    from iclr25_icai import VOTE_KINDS, ICAIConfig, merge_near_duplicates

    embed = require(MiniLMEmbedder)
    texts = [
        "Select the response that mentions a colour",
        "Select the response that names a colour",
        "Select the response that refers to a colour",
        "Select the response that is shorter",
        "Select the response that is longer",
    ]
    threshold = ICAIConfig().dedup_similarity
    e = embed(texts)
    assert (e[:3] @ e[:3].T >= threshold).all()
    assert e[3] @ e[4] >= threshold  # an inverse is as close as a paraphrase: only the votes tell them apart
    counts = pd.DataFrame({"principle": texts, **{k: 0 for k in VOTE_KINDS}, "total": 0})
    votes = [["for", "for", "against"]] * 3 + [["for", "against", "for"], ["against", "for", "against"]]
    merged = pd.DataFrame(
        [{"pair": j, "principle": i, "vote": v} for i, vs in enumerate(votes) for j, v in enumerate(vs)]
    )
    kept, _ = merge_near_duplicates(counts, embed, votes=merged, min_similarity=threshold)
    assert list(kept["principle"]) == [texts[0], texts[3], texts[4]]
