"""Conversion (CALD Section 3.1): exact reductions to the teacher, weight transfer, key accounting, save/load."""

import sys
from pathlib import Path

import pytest
import torch
import transformers

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import tiny_bert, tiny_llama

from iclr25_cald import MambaConfig, convert, generate, load_converted, load_teacher_weights, save_converted
from iclr25_cald._convert import BertBiMambaSelfAttention, _reverse_valid

IDS = torch.randint(1, 40, (3, 16), generator=torch.Generator().manual_seed(0))


def test_identity_linformer_reproduces_the_llama_teacher_exactly():
    """k = n, E = F = I (no 1/sqrt(n)): the converted model equals the teacher run bidirectionally."""
    teacher = tiny_llama()
    student = convert(
        teacher, "linformer", k=16, max_seq_len=16, init="identity", scale="none", allow_bidirectional=True
    ).model
    bidirectional = torch.zeros(3, 1, 16, 16, dtype=torch.float64)  # a 4-D mask with nothing masked
    want = teacher(IDS, attention_mask=bidirectional, output_hidden_states=True)
    got = student(IDS, output_hidden_states=True)
    assert len(got.hidden_states) == 3
    for a, b in zip(got.hidden_states, want.hidden_states):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got.logits, want.logits, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("roberta", [False, True])
def test_identity_linformer_reproduces_the_bert_teacher_exactly(roberta):
    teacher = tiny_bert(roberta=roberta)
    student = convert(teacher, "linformer", k=16, max_seq_len=16, init="identity", scale="none").model
    ids = IDS.clamp_min(2)
    want = teacher(ids, output_hidden_states=True).hidden_states
    got = student(ids, output_hidden_states=True).hidden_states
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_identity_linformer_with_sqrt_n_scale_differs_from_the_teacher():
    """The official 1/sqrt(n) scaling rescales scores and values: not the teacher (so the option matters)."""
    teacher = tiny_bert()
    student = convert(teacher, "linformer", k=16, max_seq_len=16, init="identity", scale="sqrt_n").model
    assert not torch.allclose(student(IDS).last_hidden_state, teacher(IDS).last_hidden_state, atol=1e-3)


CASES = [("llama", "linformer"), ("llama", "mamba"), ("bert", "linformer"), ("bert", "mamba")]


def build(family, n_layers=2):
    return tiny_llama(n_layers) if family == "llama" else tiny_bert(n_layers)


@pytest.mark.parametrize(("family", "mixer"), CASES)
def test_conversion_keeps_every_non_attention_weight_bit_identical(family, mixer):
    teacher = build(family)
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    conv = convert(
        teacher, mixer, k=8, max_seq_len=16, mamba=MambaConfig(d_state=4), allow_bidirectional=True
    )
    s_state = conv.model.state_dict()
    kept = [k for k in before if k not in conv.report.removed_keys]
    assert kept and all(torch.equal(s_state[k], before[k]) for k in kept)
    assert all(torch.equal(v, before[k]) for k, v in teacher.state_dict().items())  # teacher untouched
    assert set(s_state) == (set(before) - set(conv.report.removed_keys)) | set(conv.report.new_keys)
    assert conv.report.layers == 2
    new_names = {k.rsplit(".", 2)[-2] + "." + k.rsplit(".", 1)[-1] for k in conv.report.new_keys}
    if mixer == "linformer":
        assert conv.report.removed_keys == []  # Q/K/V/O are kept
        assert new_names == {"linformer.proj_k", "linformer.proj_v"}
    else:
        qkv = ("q_proj", "k_proj", "v_proj", "o_proj") if family == "llama" else ("query", "key", "value")
        assert conv.report.removed_keys and all(any(q in k for q in qkv) for k in conv.report.removed_keys)


@pytest.mark.parametrize(("family", "mixer"), CASES)
def test_loading_the_teacher_reports_exactly_the_new_parameters_missing(family, mixer):
    """Official code: substitute layers, then load_state_dict(teacher, strict=False); we account every key."""
    teacher = build(family)
    conv = convert(
        teacher, mixer, k=8, max_seq_len=16, mamba=MambaConfig(d_state=4), allow_bidirectional=True
    )
    fresh = build(family, 2)
    torch.manual_seed(5)
    for p in fresh.parameters():
        torch.nn.init.normal_(p)
    fresh_conv = convert(
        fresh,
        mixer,
        k=8,
        max_seq_len=16,
        mamba=MambaConfig(d_state=4),
        inplace=True,
        allow_bidirectional=True,
    )
    assert fresh_conv.report.new_keys == conv.report.new_keys
    res = fresh_conv.model.load_state_dict(teacher.state_dict(), strict=False)
    assert sorted(res.missing_keys) == conv.report.new_keys
    assert sorted(res.unexpected_keys) == conv.report.removed_keys
    load_teacher_weights(fresh_conv.model, teacher.state_dict(), fresh_conv.report)
    s = fresh_conv.model.state_dict()
    assert all(torch.equal(s[k], v) for k, v in teacher.state_dict().items() if k in s)


def test_loading_a_foreign_state_dict_is_refused_with_the_keys():
    teacher = tiny_llama()
    conv = convert(teacher, "linformer", k=8, max_seq_len=16, allow_bidirectional=True)
    state = dict(teacher.state_dict())
    del state["model.norm.weight"]
    with pytest.raises(ValueError, match=r"model\.norm\.weight"):
        load_teacher_weights(conv.model, state, conv.report)
    state = dict(teacher.state_dict(), **{"extra.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"extra\.weight"):
        load_teacher_weights(conv.model, state, conv.report)


def test_unsupported_architecture_is_refused_naming_the_supported_ones():
    gpt2 = transformers.GPT2Model(transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=40))
    with pytest.raises(ValueError, match="unsupported architecture: model_type='gpt2'.*bert, llama, roberta"):
        convert(gpt2, "linformer", k=4, max_seq_len=8)


def test_unknown_mixer_is_refused():
    with pytest.raises(ValueError, match="mixer must be one of linformer, mamba; got 'performer'"):
        convert(tiny_llama(), "performer")


def test_k_larger_than_the_sequence_length_is_refused_at_conversion():
    with pytest.raises(ValueError, match="k must be an integer in \\[1, max_seq_len=16\\]"):
        convert(tiny_llama(), "linformer", k=17, max_seq_len=16, allow_bidirectional=True)


def test_input_longer_than_the_linformer_projection_is_refused():
    student = convert(tiny_llama(seq=32), "linformer", k=4, max_seq_len=8, allow_bidirectional=True).model
    with pytest.raises(
        ValueError, match="sequence length 9 exceeds the Linformer projection size max_seq_len=8"
    ):
        student(IDS[:, :9])


@pytest.mark.parametrize("mixer", ["linformer", "mamba"])
def test_right_padding_does_not_change_real_token_outputs_llama(mixer):
    teacher = tiny_llama(labels=3)  # a classifier: Linformer needs no flag there
    student = convert(teacher, mixer, k=4, max_seq_len=16, mamba=MambaConfig(d_state=4)).model
    ids = IDS[:, :10]
    ref = student(ids, output_hidden_states=True).hidden_states[-1]
    padded = torch.cat([ids, torch.zeros(3, 6, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones(3, 10), torch.zeros(3, 6)], 1).long()
    got = student(padded, attention_mask=mask, output_hidden_states=True).hidden_states[-1]
    torch.testing.assert_close(got[:, :10], ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mixer", ["linformer", "mamba"])
def test_right_padding_does_not_change_real_token_outputs_bert(mixer):
    teacher = tiny_bert()
    student = convert(teacher, mixer, k=4, max_seq_len=16, mamba=MambaConfig(d_state=4)).model
    ids = IDS[:, :10]
    ref = student(ids).last_hidden_state
    padded = torch.cat([ids, torch.full((3, 6), 7)], 1)
    mask = torch.cat([torch.ones(3, 10), torch.zeros(3, 6)], 1).long()
    got = student(padded, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(got[:, :10], ref, rtol=1e-10, atol=1e-10)


def test_left_padding_is_refused_by_the_converted_model():
    student = convert(tiny_llama(), "mamba", mamba=MambaConfig(d_state=4)).model
    mask = torch.ones(3, 16, dtype=torch.long)
    mask[0, :3] = 0
    with pytest.raises(ValueError, match="right padding"):
        student(IDS, attention_mask=mask)


def test_bidirectional_mamba_reversal_symmetry():
    """Reversing the input and swapping the forward/backward mixers reverses the output."""
    torch.manual_seed(0)
    layer = BertBiMambaSelfAttention(8, MambaConfig(d_state=4), None).double()
    swapped = BertBiMambaSelfAttention(8, MambaConfig(d_state=4), None).double()
    swapped.forward_mixer.load_state_dict(layer.backward_mixer.state_dict())
    swapped.backward_mixer.load_state_dict(layer.forward_mixer.state_dict())
    x = torch.randn(2, 9, 8, dtype=torch.float64)
    torch.testing.assert_close(swapped(x.flip(1))[0].flip(1), layer(x)[0], rtol=1e-12, atol=1e-12)


def test_reverse_valid_keeps_pads_in_place():
    x = torch.arange(6.0).view(1, 6, 1)
    got = _reverse_valid(x, torch.tensor([[True, True, True, True, False, False]]))
    assert got.view(-1).tolist() == [3.0, 2.0, 1.0, 0.0, 4.0, 5.0]


def test_recurrent_generation_matches_the_parallel_forward():
    teacher = tiny_llama()
    student = convert(teacher, "mamba", mamba=MambaConfig(d_state=4, chunk=4)).model
    prompt = IDS[:2, :5]
    out = generate(student, prompt, max_new_tokens=6)
    assert out.shape == (2, 11) and torch.equal(out[:, :5], prompt)
    full = student(out).logits  # parallel form over the whole generated sequence
    torch.testing.assert_close(full[:, 4:-1].argmax(-1), out[:, 5:], rtol=0, atol=0)
    from iclr25_cald import RecurrentDecoder

    dec = RecurrentDecoder(student, batch=2)
    steps = torch.stack([dec.step(out[:, t]) for t in range(11)], 1)
    torch.testing.assert_close(steps, full, rtol=1e-10, atol=1e-10)


def test_linformer_model_refuses_incremental_decoding():
    student = convert(tiny_llama(), "linformer", k=4, max_seq_len=16, allow_bidirectional=True).model
    with pytest.raises(ValueError, match="no key/value cache"):
        student.generate(IDS[:1, :4], max_new_tokens=2, use_cache=True, do_sample=False)
    with pytest.raises(ValueError, match="mixer='mamba'"):
        generate(student, IDS[:1, :4], 2)


@pytest.mark.parametrize(("family", "mixer"), CASES)
def test_save_and_load_rebuild_the_converted_architecture(tmp_path, family, mixer):
    teacher = build(family)
    student = convert(
        teacher, mixer, k=8, max_seq_len=16, mamba=MambaConfig(d_state=4), seed=3, allow_bidirectional=True
    ).model
    save_converted(student, tmp_path / "m")
    again = load_converted(tmp_path / "m", dtype=torch.float64)
    out = lambda m: m(IDS, output_hidden_states=True).hidden_states[-1]  # noqa: E731
    torch.testing.assert_close(out(again), out(student), rtol=0, atol=0)


def test_conversion_needs_no_network(monkeypatch):
    """The Mamba config is built locally (the official LM code clones it from the Hub)."""

    def no_hub(*a, **k):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", no_hub)
    monkeypatch.setattr(transformers.PretrainedConfig, "from_pretrained", no_hub)
    convert(tiny_llama(), "mamba")


def test_conversion_is_deterministic_per_seed():
    t = tiny_llama()
    a = convert(t, "linformer", k=4, max_seq_len=16, allow_bidirectional=True, seed=1).model.state_dict()
    b = convert(t, "linformer", k=4, max_seq_len=16, allow_bidirectional=True, seed=1).model.state_dict()
    c = convert(t, "linformer", k=4, max_seq_len=16, allow_bidirectional=True, seed=2).model.state_dict()
    key = "model.layers.0.self_attn.linformer.proj_k"
    assert torch.equal(a[key], b[key]) and not torch.equal(a[key], c[key])


# ---- issue 38: a bidirectional mixer on a causal LM, Linformer's default size -----------------------------------


def changed_after(model, ids, t):
    """max |Δ logits| at positions <= t when token t + 1 changes (0 exactly for a causal model)."""
    other = ids.clone()
    other[:, t + 1] = other[:, t + 1] % 39 + 1  # another token, still in the vocabulary
    with torch.no_grad():
        a, b = model(ids).logits[:, : t + 1], model(other).logits[:, : t + 1]
    return float((a - b).abs().max())


def tiny_bert_lm(n_layers=2, seed=0):
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(
        vocab_size=40,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=n_layers,
        num_attention_heads=4,
        max_position_embeddings=16,
        is_decoder=True,
    )
    return transformers.BertLMHeadModel(cfg).double().eval()


def test_linformer_on_a_causal_lm_is_refused_naming_the_mixer():
    """Issue 38: convert(LlamaForCausalLM, "linformer") was accepted and the model saw future tokens."""
    with pytest.raises(
        ValueError, match="mixer 'linformer' is bidirectional.*LlamaForCausalLM.*allow_bidirectional"
    ):
        convert(tiny_llama(), "linformer", k=8, max_seq_len=16)
    with pytest.raises(ValueError, match="mixer 'linformer' is bidirectional.*BertLMHeadModel"):
        convert(tiny_bert_lm(), "linformer", k=8, max_seq_len=16)


def test_asking_for_a_bidirectional_causal_lm_explicitly_gives_one_that_sees_the_future():
    student = convert(tiny_llama(), "linformer", k=8, max_seq_len=16, allow_bidirectional=True).model
    assert student.config.cald_conversion["allow_bidirectional"] is True
    assert changed_after(student, IDS, 5) > 1e-6  # what the flag allows: position 5 reads token 6


@pytest.mark.parametrize("make", [tiny_llama, tiny_bert_lm], ids=["llama", "bert-decoder"])
def test_mamba_keeps_a_causal_lm_causal(make):
    """Perturbing token t + 1 leaves the logits at positions <= t unchanged, to 0 (float64)."""
    teacher = make()
    assert changed_after(teacher, IDS, 5) == 0.0  # the teacher is causal
    student = convert(teacher, "mamba", mamba=MambaConfig(d_state=4)).model
    for t in (0, 5, 13):
        assert changed_after(student, IDS, t) == 0.0, t


def test_bidirectional_mixers_stay_allowed_where_nothing_predicts_the_next_token():
    """Classification / encoding (the paper's Linformer setting) need no flag."""
    convert(tiny_llama(labels=3), "linformer", k=8, max_seq_len=16)
    convert(tiny_bert(), "linformer", k=8, max_seq_len=16)
    convert(tiny_bert(), "mamba", mamba=MambaConfig(d_state=4))  # BiMamba


def test_linformer_max_seq_len_defaults_to_512_not_the_position_table():
    """Issue 38: max_seq_len defaulted to max_position_embeddings: 8192 rows, 4.2 M new parameters per layer."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=40,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        num_labels=3,
        pad_token_id=0,
    )
    teacher = transformers.LlamaForSequenceClassification(cfg)

    def new_parameters(**kw):
        conv = convert(teacher, "linformer", k=256, **kw)
        state = conv.model.state_dict()
        return conv, sum(state[k].numel() for k in conv.report.new_keys)

    conv, n = new_parameters()
    assert conv.report.settings["max_seq_len"] == 512
    assert n == 2 * (2 * 512 * 256)  # 2 layers x (E, F) of 512 x 256
    _, n_long = new_parameters(max_seq_len=8192)
    assert n_long == 2 * (2 * 8192 * 256)  # asked for explicitly: 4.2 M per layer
    small = convert(tiny_llama(labels=3), "linformer", k=8).report.settings["max_seq_len"]
    assert small == 16  # never more rows than positions
