"""Generation runner: any model, a prompt->file mapping instead of prompt file names, resumable."""

import numpy as np
import pytest

from iclr25_videophy import DiffusersGenerator, Prompt, count_frames, generate, read_mapping, read_video

AWKWARD = [
    Prompt('A "heavy" ball, red; it falls/bounces — twice'),
    Prompt("word " * 100),
    Prompt("Water pours."),
]


class Counting:
    def __init__(self):
        self.calls = []

    def __call__(self, prompt, seed):
        self.calls.append((prompt, seed))
        rng = np.random.default_rng(seed)
        return rng.integers(0, 255, (5, 16, 16, 3), dtype=np.uint8)


def test_generate_writes_videos_and_a_mapping_for_awkward_and_long_prompts(tmp_path):
    gen = Counting()
    entries = generate(gen, AWKWARD, tmp_path / "out", videos_per_prompt=2, fps=4)
    assert len(entries) == 6 and len(gen.calls) == 6
    back = read_mapping(tmp_path / "out" / "mapping.csv")
    assert sorted((p.caption, v) for v, p, _ in back) == sorted((p.caption, v) for v, p, _ in entries)
    for v, _, _ in entries:
        assert count_frames(v) == 5
    assert len({s for _, s in gen.calls}) == 6  # distinct seeds


def test_resume_skips_finished_videos_and_redoes_broken_ones(tmp_path):
    out = tmp_path / "out"
    first = generate(Counting(), AWKWARD, out)
    with open(first[1][0], "wb") as fh:
        fh.write(b"truncated")
    gen = Counting()
    second = generate(gen, AWKWARD, out)
    assert [c[0] for c in gen.calls] == [AWKWARD[1].caption]
    assert [v for v, _, _ in second] == [v for v, _, _ in first]
    np.testing.assert_array_equal(read_video(second[0][0], None), read_video(first[0][0], None))


def test_seeds_do_not_depend_on_prompt_order(tmp_path):
    a, b = Counting(), Counting()
    generate(a, AWKWARD, tmp_path / "a")
    generate(b, AWKWARD[::-1], tmp_path / "b")
    assert sorted(a.calls) == sorted(b.calls)


def test_refuses_to_overwrite_without_resume_and_reports_bad_output(tmp_path):
    generate(Counting(), AWKWARD[:1], tmp_path / "o")
    with pytest.raises(ValueError, match="exists; pass resume=True"):
        generate(Counting(), AWKWARD[:1], tmp_path / "o", resume=False)
    with pytest.raises(ValueError, match="prompt 'Water pours.'"):
        generate(lambda p, s: np.zeros((4, 4)), [Prompt("Water pours.")], tmp_path / "x")
    with pytest.raises(ValueError, match="empty"):
        generate(Counting(), [], tmp_path / "y")


@pytest.mark.slow
def test_tiny_random_diffusers_pipeline_runs_end_to_end(tmp_path):
    from iclr25_videophy._tiny import tiny_text_to_video_pipeline

    gen = DiffusersGenerator(
        tiny_text_to_video_pipeline(0), num_frames=4, num_inference_steps=2, height=32, width=32
    )
    entries = generate(gen, AWKWARD[:2], tmp_path / "d", source="tiny")
    assert len(entries) == 2
    f = read_video(entries[0][0], 32)
    assert f.shape == (32, 32, 32, 3)
    again = gen(AWKWARD[0].caption, 5)
    np.testing.assert_array_equal(again, gen(AWKWARD[0].caption, 5))  # seeded: deterministic
