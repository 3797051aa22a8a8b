"""Loaders of real inputs: the user's pairs file and image folder (tested on small files written here)."""

import numpy as np
import pytest
from PIL import Image

from iclr25_semiclip._data import (
    FASHION_NAMES,
    TEMPLATES,
    emoji_pairs,
    fashion_captions,
    fashion_split,
    read_image_folder,
    read_pairs,
)
from iclr25_semiclip._model import load_text_tower
from iclr25_shared.errors import ModelUnavailable


def write_png(path, value):
    Image.fromarray(np.full((10, 12, 3), value, dtype=np.uint8)).save(path)


def test_pairs_file_reads_images_and_captions_in_order(tmp_path):
    (tmp_path / "img").mkdir()
    write_png(tmp_path / "img" / "a.png", 10)
    write_png(tmp_path / "img" / "b.png", 200)
    (tmp_path / "pairs.tsv").write_text("img/a.png\ta red coat\n\nimg/b.png\t a blue dress \n")
    images, captions = read_pairs(tmp_path / "pairs.tsv", size=8)
    assert images.shape == (2, 3, 8, 8) and images.dtype == np.uint8
    assert images[0].max() == 10 and images[1].min() == 200
    assert captions == ["a red coat", "a blue dress"]


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("img/missing.png\ta coat\n", "caption without an image"),
        ("img/a.png a coat\n", "expected 'image_path<TAB>caption'"),
        ("img/a.png\t  \n", "empty caption"),
        ("\n\n", "holds no image"),
    ],
)
def test_bad_pairs_files_are_refused_with_file_and_line(tmp_path, content, match):
    (tmp_path / "img").mkdir()
    write_png(tmp_path / "img" / "a.png", 1)
    (tmp_path / "pairs.tsv").write_text(content)
    with pytest.raises(ValueError, match=match):
        read_pairs(tmp_path / "pairs.tsv")


def test_image_folder_is_read_sorted_and_an_empty_one_is_refused(tmp_path):
    write_png(tmp_path / "b.png", 2)
    write_png(tmp_path / "a.png", 1)
    (tmp_path / "notes.txt").write_text("not an image")
    images = read_image_folder(tmp_path, size=8)
    assert images.shape == (2, 3, 8, 8) and images[0].max() == 1
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no image"):
        read_image_folder(tmp_path / "empty")
    with pytest.raises(ValueError, match="does not exist"):
        read_image_folder(tmp_path / "nowhere")


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5, float("nan")])
def test_labelled_fraction_outside_the_unit_interval_is_refused(fraction):
    with pytest.raises(ValueError, match="labelled_fraction"):
        fashion_split(np.zeros((10, 2, 2)), np.zeros(10, dtype=int), labelled_fraction=fraction, seed=0)


def test_split_sizes_and_templated_captions_name_the_class():
    labels = np.arange(40) % 10
    split = fashion_split(np.arange(40), labels, labelled_fraction=0.25, seed=3)
    assert len(split.captions) == 10 and len(split.unlabelled_images) == 30
    assert sorted(np.concatenate([split.labelled_images, split.unlabelled_images]).tolist()) == list(
        range(40)
    )
    for c, cap in zip(split.labelled_classes, split.captions):
        assert FASHION_NAMES[int(c)] in cap
    caps = fashion_captions(np.zeros(200, dtype=int), np.random.default_rng(0))
    assert {c.replace("t-shirt", "{}") for c in caps} == set(TEMPLATES)
    with pytest.raises(ValueError, match="leaves no captioned image"):
        fashion_split(np.arange(3), np.zeros(3, dtype=int), labelled_fraction=0.1, seed=0)


def test_a_missing_text_tower_folder_names_what_is_missing(tmp_path):
    with pytest.raises(ModelUnavailable, match="config.json missing"):
        load_text_tower(tmp_path)


def test_emoji_package_layout_is_read_with_names_as_captions(tmp_path):
    import json

    folder = tmp_path / "img" / "google" / "64"
    folder.mkdir(parents=True)
    Image.new("RGBA", (64, 64), (255, 0, 0, 255)).save(folder / "1f600.png")
    Image.new("RGBA", (64, 64), (0, 0, 0, 0)).save(folder / "1f1ea-1f1ec.png")  # fully transparent → white
    entries = [
        {
            "name": "GRINNING FACE",
            "short_name": "grinning",
            "image": "1f600.png",
            "category": "Smileys & Emotion",
            "has_img_google": True,
        },
        {
            "name": None,
            "short_name": "flag-eg",
            "image": "1f1ea-1f1ec.png",
            "category": "Flags",
            "has_img_google": True,
        },
        {
            "name": "NO IMAGE",
            "short_name": "x",
            "image": "missing.png",
            "category": "Objects",
            "has_img_google": False,
        },
    ]
    (tmp_path / "emoji.json").write_text(json.dumps(entries))
    images, captions, categories = emoji_pairs(tmp_path, size=8)
    assert images.shape == (2, 3, 8, 8)
    assert captions == ["grinning face", "flag-eg"] and categories == ["Smileys & Emotion", "Flags"]
    assert images[0, 0].min() == 255 and images[0, 1].max() == 0 and images[1].min() == 255
    with pytest.raises(ValueError, match="npm install emoji-datasource-google"):
        emoji_pairs(tmp_path / "nowhere")
