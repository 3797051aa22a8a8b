"""VideoCon-Physics' scoring rule, Eq. (1) (the VideoCon-Physics score of arXiv:2406.03520), and its prompt templates."""

import numpy as np
import pytest
import torch

from iclr25_videophy import (
    PC_TEMPLATE,
    entailment_score,
    last_non_pad_index,
    pc_prompt,
    sa_prompt,
    task_prompt,
    yes_no_token_ids,
)

# Copied byte for byte from the authors' examples/sa_testing.csv and examples/physics_testing.csv (CSV quoting
# undone): the expected prompts do not come from the code under test.
PUBLISHED_SA = (
    "The following is a conversation between a curious human and AI assistant. The assistant gives helpful, "
    "detailed, and polite answers to the user's questions.\nHuman: <|video|>\nHuman: Does this video entail the "
    'description: "Shoe squishes a bug."?\nAI: '
)
PUBLISHED_PC = (
    "The following is a conversation between a curious human and AI assistant. The assistant gives helpful, "
    "detailed, and polite answers to the user's questions.\nHuman: <|video|>\nHuman: Does this video follow the "
    "physical laws?\nAI: "
)


def test_sa_template_is_byte_exact_with_the_published_prompt():
    assert sa_prompt("Shoe squishes a bug.").encode() == PUBLISHED_SA.encode()
    assert sa_prompt("Shoe squishes a bug.").endswith("AI: ")


def test_pc_template_is_byte_exact_and_caption_independent():
    assert pc_prompt().encode() == PUBLISHED_PC.encode()
    assert pc_prompt("anything") == pc_prompt("something else") == PC_TEMPLATE == PUBLISHED_PC
    assert task_prompt("pc", "x") == PUBLISHED_PC


def test_captions_with_quotes_and_braces_are_inserted_verbatim():
    cap = 'A "heavy" {box} falls; it\'s 5 kg'
    p = sa_prompt(cap)
    assert f'description: "{cap}"?\nAI: ' in p


@pytest.mark.parametrize("bad", ["", "   "])
def test_empty_caption_is_refused(bad):
    with pytest.raises(ValueError, match="caption"):
        sa_prompt(bad)


def test_unknown_task_is_refused():
    with pytest.raises(ValueError, match="task"):
        task_prompt("physics", "a")


def _softmax_ratio(row, y, n):
    # brute force in float64: full softmax over the vocabulary, then the ratio of Eq. (1)
    e = np.exp(row - row.max())
    p = e / e.sum()
    return p[y] / (p[y] + p[n])


def test_score_equals_brute_force_softmax_ratio():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, (5, 7, 50))
    mask = np.ones((5, 7), int)
    mask[1, 4:] = 0
    mask[3, 2:] = 0
    s = entailment_score(logits, yes_id=3, no_id=11, attention_mask=mask)
    last = [6, 3, 6, 1, 6]
    ref = [_softmax_ratio(logits[b, last[b]], 3, 11) for b in range(5)]
    np.testing.assert_allclose(s, ref, rtol=1e-12)


def test_score_in_unit_interval_half_on_equal_logits_and_swap_gives_complement():
    rng = np.random.default_rng(1)
    logits = rng.normal(0, 50, (64, 10))  # large logits: no overflow
    s = entailment_score(logits, yes_id=0, no_id=1)
    assert ((s >= 0) & (s <= 1)).all()
    swapped = logits.copy()
    swapped[:, [0, 1]] = swapped[:, [1, 0]]
    np.testing.assert_allclose(entailment_score(swapped, yes_id=0, no_id=1), 1 - s, atol=1e-15)
    logits[:, 1] = logits[:, 0]
    np.testing.assert_array_equal(entailment_score(logits, yes_id=0, no_id=1), 0.5)


def test_score_is_padding_invariant_right_and_left():
    rng = np.random.default_rng(2)
    real = rng.normal(size=(1, 5, 20))
    pad = rng.normal(size=(1, 3, 20)) * 100  # garbage at pad positions
    right = np.concatenate([real, pad], axis=1)
    left = np.concatenate([pad, real], axis=1)
    base = entailment_score(real, yes_id=2, no_id=9)
    r = entailment_score(right, yes_id=2, no_id=9, attention_mask=np.array([[1] * 5 + [0] * 3]))
    l_ = entailment_score(left, yes_id=2, no_id=9, attention_mask=np.array([[0] * 3 + [1] * 5]))
    np.testing.assert_allclose(r, base)
    np.testing.assert_allclose(l_, base)


def test_pad_id_path_matches_the_authors_first_pad_minus_one_rule_on_right_padding():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(3, 6, 12))
    ids = np.array([[5, 6, 7, 0, 0, 0], [5, 6, 7, 8, 9, 4], [5, 0, 0, 0, 0, 0]])
    got = entailment_score(logits, yes_id=1, no_id=2, input_ids=ids, pad_id=0)
    # the authors' loop: the first pad position minus one, else the last position
    pos = [2, 5, 0]
    ref = [_softmax_ratio(logits[b, pos[b]], 1, 2) for b in range(3)]
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_bf16_torch_logits_agree_with_float64():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(4, 3, 16)).astype(np.float32)
    t = torch.from_numpy(x).to(torch.bfloat16)
    got = entailment_score(t, yes_id=0, no_id=5)
    ref = entailment_score(t.float().numpy().astype(np.float64), yes_id=0, no_id=5)
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_last_non_pad_index_and_its_errors():
    np.testing.assert_array_equal(last_non_pad_index(np.array([[1, 1, 0], [0, 1, 1], [1, 0, 0]])), [1, 2, 0])
    with pytest.raises(ValueError, match="no real token"):
        last_non_pad_index(np.array([[0, 0]]))
    with pytest.raises(ValueError, match="only 0 and 1"):
        last_non_pad_index(np.array([[2, 1]]))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"yes_id": 3, "no_id": 3}, "differ"),
        ({"yes_id": 10, "no_id": 1}, "yes_id"),
        ({"yes_id": 0, "no_id": 1, "attention_mask": np.ones((2, 3))}, "attention_mask"),
        ({"yes_id": 0, "no_id": 1, "input_ids": np.ones((2, 4))}, "pad_id"),
    ],
)
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        entailment_score(np.zeros((2, 4, 10)), **kwargs)


def test_non_finite_logits_at_the_read_position_are_refused():
    x = np.zeros((1, 2, 4))
    x[0, 1, 0] = np.nan
    with pytest.raises(ValueError, match="not finite"):
        entailment_score(x, yes_id=0, no_id=1)
    x2 = np.zeros((1, 2, 4))
    x2[0, 1, 0] = np.nan  # nan only at a pad position: fine
    assert entailment_score(x2, yes_id=0, no_id=1, attention_mask=np.array([[1, 0]]))[0] == 0.5


class _Tok:
    def __init__(self, table):
        self.table = table

    def encode(self, word, add_special_tokens=False):
        return self.table[word]


def test_yes_no_token_ids_take_the_first_subtoken():
    assert yes_no_token_ids(_Tok({"Yes": [7, 8], "No": [9]})) == (7, 9)
    with pytest.raises(ValueError, match="share"):
        yes_no_token_ids(_Tok({"Yes": [7], "No": [7, 1]}))
    with pytest.raises(ValueError, match="no token"):
        yes_no_token_ids(_Tok({"Yes": [], "No": [1]}))
