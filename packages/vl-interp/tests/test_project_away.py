"""Paper Sec. 5.1 (arXiv:2410.02762): ProjectAway, h' = h - alpha <h,t>/||t||^2 t on image-token rows only."""

import pytest

from iclr25_vl_interp._tiny import N_IMAGE, tiny_inputs, tiny_llava

torch = pytest.importorskip("torch")

from iclr25_vl_interp import ProjectAway, project_away, text_direction, vlm_parts  # noqa: E402
from iclr25_vl_interp._lens import capture_hidden_states  # noqa: E402


def _orth(h, t):
    return h - (h @ t / (t @ t)).unsqueeze(-1) * t


@pytest.mark.parametrize("alpha", [0.5, 1.0, 1.5, 3.0])
def test_edited_rows_keep_1_minus_alpha_of_their_projection_and_all_of_the_orthogonal_part(alpha):
    g = torch.Generator().manual_seed(1)
    h = torch.randn(50, 8, dtype=torch.float64, generator=g)
    t = torch.randn(8, dtype=torch.float64, generator=g)
    out = project_away(h, t, alpha=alpha, only_positive=False)
    torch.testing.assert_close(out @ t, (1 - alpha) * (h @ t), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(_orth(out, t), _orth(h, t), rtol=1e-12, atol=1e-12)


def test_only_positive_leaves_negative_rows_bit_identical():
    g = torch.Generator().manual_seed(2)
    h = torch.randn(200, 6, generator=g)
    t = torch.randn(6, generator=g)
    out = project_away(h, t, alpha=1.0, only_positive=True)
    neg = (h @ t) <= 0
    assert neg.any() and (~neg).any()
    assert torch.equal(out[neg], h[neg])
    assert float((out[~neg] @ t).abs().max()) < 1e-5  # alpha = 1: orthogonal to t


def test_alpha_one_is_idempotent_and_alpha_half_is_not():
    g = torch.Generator().manual_seed(3)
    h = torch.randn(30, 5, dtype=torch.float64, generator=g)
    t = torch.randn(5, dtype=torch.float64, generator=g)
    once = project_away(h, t, alpha=1.0, only_positive=False)
    torch.testing.assert_close(project_away(once, t, alpha=1.0, only_positive=False), once)
    half = project_away(h, t, alpha=0.5, only_positive=False)
    assert not torch.allclose(project_away(half, t, alpha=0.5, only_positive=False), half)


def test_invariant_under_a_change_of_basis():
    g = torch.Generator().manual_seed(4)
    h = torch.randn(20, 6, dtype=torch.float64, generator=g)
    t = torch.randn(6, dtype=torch.float64, generator=g)
    q, _ = torch.linalg.qr(torch.randn(6, 6, dtype=torch.float64, generator=g))
    torch.testing.assert_close(
        project_away(h @ q, t @ q, alpha=1.3, only_positive=False),
        project_away(h, t, alpha=1.3, only_positive=False) @ q,
    )


def _captured(model, inputs, layer):
    with torch.no_grad(), capture_hidden_states(vlm_parts(model)) as store:
        logits = model(**inputs, use_cache=False).logits
    return store[layer][0], logits


@pytest.mark.parametrize("only_positive", [False, True])
def test_hook_edits_image_rows_exactly_and_leaves_text_rows_untouched(only_positive):
    model = tiny_llava()
    x = tiny_inputs()
    layer, alpha = 2, 1.5
    mask = x["input_ids"][0] == vlm_parts(model).image_token_id
    before, _ = _captured(model, x, layer)
    t = text_direction(model, torch.tensor([[1, 22]]), layer=1).float()
    with ProjectAway(model, [t], layer=layer, alpha=alpha, only_positive=only_positive) as hook:
        after, _ = _captured(model, x, layer)
    assert torch.equal(after[~mask], before[~mask])  # text rows bit for bit
    h, h2 = before[mask].double(), after[mask].double()
    td = t.double()
    edited = (h @ td > 0) if only_positive else torch.ones(N_IMAGE, dtype=torch.bool)
    # the hook counts the rows it changed, computed here from the captured states (issue 38: it counted all 16
    # image rows although the positive-only rule changed one)
    assert hook.edited_rows == int((after[mask] != before[mask]).any(-1).sum()) == int(edited.sum())
    if only_positive:
        assert 0 < hook.edited_rows < N_IMAGE, "this case must leave some image rows untouched"
    torch.testing.assert_close(h2[edited] @ td, (1 - alpha) * (h[edited] @ td), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(_orth(h2, td), _orth(h, td), rtol=1e-5, atol=1e-5)
    assert torch.equal(after[mask][~edited], before[mask][~edited])


def test_edited_rows_sums_changed_rows_over_calls_and_counts_none_at_alpha_zero():
    model = tiny_llava()
    x = tiny_inputs()
    t = torch.randn(32, generator=torch.Generator().manual_seed(6))
    mask = x["input_ids"][0] == vlm_parts(model).image_token_id
    before, _ = _captured(model, x, 1)
    positive = int((before[mask].double() @ t.double() > 0).sum())
    assert 0 < positive < N_IMAGE
    with ProjectAway(model, [t], layer=1, alpha=1.0) as hook:
        _captured(model, x, 1)
        _captured(model, x, 1)
    assert hook.edited_rows == 2 * positive
    with ProjectAway(model, [t], layer=1, alpha=0.0, only_positive=False) as hook:
        _captured(model, x, 1)
    assert hook.edited_rows == 0  # alpha = 0 changes nothing


def test_removing_the_hook_restores_outputs_bit_for_bit():
    model = tiny_llava()
    x = tiny_inputs()
    with torch.no_grad():
        base = model(**x).logits
        hook = ProjectAway(model, [torch.randn(32)], layer=1, alpha=2.0, only_positive=False)
        edited = model(**x).logits
        hook.remove()
        hook.remove()  # idempotent
        again = model(**x).logits
    assert not torch.equal(base, edited)
    assert torch.equal(base, again)


def test_decode_steps_are_not_edited_but_carry_the_edit_through_the_cache():
    model = tiny_llava()
    x = tiny_inputs()
    t = torch.randn(32, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        with ProjectAway(model, [t], layer=2, alpha=1.0, only_positive=False) as hook:
            out = model.generate(**x, max_new_tokens=4, do_sample=False, min_new_tokens=4)
            rows = hook.edited_rows
        # same generation without cache and with the hook on the full sequence each step gives the same tokens
        with ProjectAway(model, [t], layer=2, alpha=1.0, only_positive=False):
            seq = x["input_ids"]
            for _ in range(4):
                logits = model(input_ids=seq, pixel_values=x["pixel_values"], use_cache=False).logits
                seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert rows == N_IMAGE  # the prefill only
    assert torch.equal(out[0, -4:], seq[0, -4:])


def test_multi_object_edits_apply_in_the_given_order():
    g = torch.Generator().manual_seed(6)
    h = torch.randn(10, 4, dtype=torch.float64, generator=g)
    a, b = torch.randn(4, dtype=torch.float64, generator=g), torch.randn(4, dtype=torch.float64, generator=g)
    ab = project_away(project_away(h, a, only_positive=False), b, only_positive=False)
    ba = project_away(project_away(h, b, only_positive=False), a, only_positive=False)
    assert not torch.allclose(ab, ba)  # non-orthogonal directions: order matters
    model = tiny_llava()
    x = tiny_inputs()
    mask = x["input_ids"][0] == vlm_parts(model).image_token_id
    before, _ = _captured(model, x, 1)
    ta, tb = torch.randn(32, generator=g), torch.randn(32, generator=g)
    with ProjectAway(model, [ta, tb], layer=1, alpha=1.0, only_positive=False):
        after, _ = _captured(model, x, 1)
    expect = project_away(project_away(before[mask], ta, only_positive=False), tb, only_positive=False)
    torch.testing.assert_close(after[mask], expect, rtol=0, atol=0)


def test_text_direction_at_layer_zero_is_the_input_embedding():
    model = tiny_llava()
    t = text_direction(model, torch.tensor([[1, 22, 23]]), layer=0)
    assert torch.equal(t, model.get_input_embeddings().weight[23])


# ---- bad input ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layer", [0, 4, -2])
def test_hook_layer_out_of_range_is_refused(model, layer):
    with pytest.raises(ValueError, match=r"layer must be an integer in \[1, 3\]"):
        ProjectAway(model, [torch.randn(32)], layer=layer)


def test_bad_directions_and_alpha_are_refused(model):
    with pytest.raises(ValueError, match=r"directions\[0\] must have shape \(32,\)"):
        ProjectAway(model, [torch.randn(31)], layer=1)
    with pytest.raises(ValueError, match=r"directions\[1\] must be finite and nonzero"):
        ProjectAway(model, [torch.randn(32), torch.zeros(32)], layer=1)
    with pytest.raises(ValueError, match="at least one"):
        ProjectAway(model, [], layer=1)
    with pytest.raises(ValueError, match="alpha must be"):
        ProjectAway(model, [torch.randn(32)], layer=1, alpha=float("nan"))
    with pytest.raises(ValueError, match="zero vector"):
        project_away(torch.randn(3, 4), torch.zeros(4))
    assert len(model.model.language_model.layers[0]._forward_hooks) == 0  # failed constructions leave no hook


def test_text_direction_refuses_an_image_prompt_and_bad_layer(model, inputs):
    with pytest.raises(ValueError, match="must not contain the image token"):
        text_direction(model, inputs["input_ids"], layer=1)
    with pytest.raises(ValueError, match=r"layer must be an integer in \[0, 3\]"):
        text_direction(model, torch.tensor([[1, 2]]), layer=9)


def test_inputs_embeds_without_input_ids_is_a_clear_error(model, inputs):
    emb = model.get_input_embeddings()(inputs["input_ids"])
    with ProjectAway(model, [torch.randn(32)], layer=1), pytest.raises(RuntimeError, match="needs input_ids"):
        model(inputs_embeds=emb)
