"""CSV formats of the VideoPhy release, prompt->video mappings, and the file-name matching failures of peers."""

import json

import numpy as np
import pytest

from iclr25_videophy import (
    Judgement,
    Prompt,
    match_videos,
    read_judge_output,
    read_labels,
    read_mapping,
    read_prompts,
    write_labels,
    write_mapping,
    write_prompts,
)

AWKWARD = [
    'videos/A ball, red; bouncing/clip\'s "1".mp4',
    "C:\\data\\odd,name;with'quotes\".mp4",
    "videos/ünïcödé — 動画.mp4",
    "line\nbreak.mp4",
]


def test_labels_round_trip_with_awkward_paths_and_captions(tmp_path):
    js = [
        Judgement(
            p,
            f'caption {i}, with "quotes"; and\'apostrophes',
            sa=0.25 * i,
            pc=1 - 0.2 * i,
            source=f"m,{i}",
            states_of_matter="solid_fluid",
            complexity=i % 2,
        )
        for i, p in enumerate(AWKWARD)
    ]
    path = write_labels(tmp_path / "labels.csv", js)
    assert read_labels(path) == js


def test_prompts_and_mapping_round_trip(tmp_path):
    ps = [Prompt('Water, "hot"; pours', "fluid_fluid", 1), Prompt("A ball's fall", "", None)]
    assert read_prompts(write_prompts(tmp_path / "p.csv", ps)) == ps
    entries = [(p, q, "model;x") for p, q in zip(AWKWARD, ps)]
    back = read_mapping(write_mapping(tmp_path / "m.csv", [(str(tmp_path / p), q, s) for p, q, s in entries]))
    assert [(b[1], b[2]) for b in back] == [(q, s) for _, q, s in entries]
    assert [b[0] for b in back] == [str(tmp_path / p) for p, _, _ in entries]


def test_published_test_and_train_headers_are_read(tmp_path):
    test = tmp_path / "test.csv"
    test.write_text(
        "video_url,caption,states_of_matter,source,complexity,majority_sa,majority_pc\n"
        "https://x/a.mp4,A b.,solid_solid,pika,0,1,0\nhttps://x/b.mp4,C d.,fluid_fluid,lavie,1,0,1\n"
    )
    train = tmp_path / "train.csv"
    train.write_text(
        "video_url,caption,states_of_matter,sa,physics,source,complexity\nhttps://x/a.mp4,A b.,solid_fluid,1,1,gen2,1\n"
    )
    t = read_labels(test)
    assert [(j.sa, j.pc, j.source, j.complexity, j.states_of_matter) for j in t] == [
        (1.0, 0.0, "pika", 0, "solid_solid"),
        (0.0, 1.0, "lavie", 1, "fluid_fluid"),
    ]
    assert [(j.sa, j.pc, j.source) for j in read_labels(train)] == [(1.0, 1.0, "gen2")]
    assert [p.caption for p in read_prompts(test)] == ["A b.", "C d."]


def test_unknown_label_format_names_its_columns(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("video,text,score\na,b,1\n")
    with pytest.raises(ValueError, match="video, text, score|'video', 'text', 'score'"):
        read_labels(p)


def test_judge_output_without_header_is_read(tmp_path):
    # two rows in the format of the authors' examples/videocon_physics_{sa,pc}_testing.csv
    p = tmp_path / "out.csv"
    p.write_text(
        'examples/Shoe_squishes_a_bug._0.mp4,"The following is a conversation between a curious human and AI '
        "assistant. The assistant gives helpful, detailed, and polite answers to the user's questions.\n"
        'Human: <|video|>\nHuman: Does this video entail the description: ""Shoe squishes a bug.""?\nAI: ",'
        "5.424022674560547e-06\n"
        'examples/Shoe_squishes_a_bug._0.mp4,"The following is a conversation between a curious human and AI '
        "assistant. The assistant gives helpful, detailed, and polite answers to the user's questions.\n"
        'Human: <|video|>\nHuman: Does this video follow the physical laws?\nAI: ",0.5\n'
    )
    rows = read_judge_output(p)
    assert rows == [
        ("examples/Shoe_squishes_a_bug._0.mp4", "sa", "Shoe squishes a bug.", 5.424022674560547e-06),
        ("examples/Shoe_squishes_a_bug._0.mp4", "pc", "", 0.5),
    ]


def test_read_prompts_errors(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("caption,states_of_matter\n")
    with pytest.raises(ValueError, match="empty"):
        read_prompts(empty)
    blank = tmp_path / "blank.csv"
    blank.write_text("caption\nok\n  \n")
    with pytest.raises(ValueError, match="line 3: empty caption"):
        read_prompts(blank)
    bad = tmp_path / "bad.csv"
    bad.write_text("caption,states_of_matter\na,gas\n")
    with pytest.raises(ValueError, match="states_of_matter must be one of"):
        read_prompts(bad)
    conflict = tmp_path / "c.csv"
    conflict.write_text("caption,complexity\na,0\na,1\n")
    with pytest.raises(ValueError, match="conflicting"):
        read_prompts(conflict)
    with pytest.raises(FileNotFoundError):
        read_prompts(tmp_path / "nope.csv")


def test_json_mapping_resolves_relative_paths(tmp_path):
    (tmp_path / "m.json").write_text(
        json.dumps({"a long prompt " * 30: "v/1.mp4", "b": ["v/2.mp4", "/abs/3.mp4"]})
    )
    got = read_mapping(tmp_path / "m.json")
    assert [g[0] for g in got] == [str(tmp_path / "v/1.mp4"), str(tmp_path / "v/2.mp4"), "/abs/3.mp4"]


def test_match_by_filename_finds_numbered_videos(tmp_path, numbered_video):
    for name in ("Shoe_squishes_a_bug._0.mp4", "Shoe_squishes_a_bug._1.mp4", "An_apple_falls.mp4"):
        numbered_video(3, name=name)
    got = match_videos([Prompt("Shoe squishes a bug."), Prompt("An apple falls")], tmp_path)
    assert sorted((p.caption, n.split("/")[-1]) for n, p, _ in got) == [
        ("An apple falls", "An_apple_falls.mp4"),
        ("Shoe squishes a bug.", "Shoe_squishes_a_bug._0.mp4"),
        ("Shoe squishes a bug.", "Shoe_squishes_a_bug._1.mp4"),
    ]


def test_no_matching_video_names_the_prompt_instead_of_returning_nothing(tmp_path, numbered_video):
    # Vchitect/VBench#4, #11, #17: an empty match list became NaN / ZeroDivisionError downstream
    numbered_video(3, name="something_else.mp4")
    with pytest.raises(ValueError, match="no video .* matches prompt #0 'A cat jumps'"):
        match_videos([Prompt("A cat jumps")], tmp_path)


def test_prompt_longer_than_a_file_name_asks_for_a_mapping(tmp_path):
    # Vchitect/VBench#79
    with pytest.raises(ValueError, match="255-byte limit; pass a prompt->video mapping"):
        match_videos([Prompt("word " * 80)], tmp_path)


def test_empty_prompt_set_is_refused(tmp_path):
    with pytest.raises(ValueError, match="prompt set is empty"):
        match_videos([], tmp_path)


def test_write_labels_binarises_and_keeps_scores(tmp_path):
    js = [Judgement("a.mp4", "c", 0.49, 0.5), Judgement("b.mp4", "c", np.nan, 0.9)]
    text = write_labels(tmp_path / "l.csv", js).read_text().splitlines()
    assert text[1].endswith(",0,1,0.49,0.5")
    assert text[2].endswith(",,1,,0.9")
