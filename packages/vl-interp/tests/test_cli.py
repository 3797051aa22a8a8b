"""The CLI end to end on the tiny random LLaVA and on a small local model folder (no hub)."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from iclr25_vl_interp.cli import main  # noqa: E402


def test_lens_writes_confidences_and_maps(tmp_path):
    out = tmp_path / "lens"
    assert main(["lens", "--objects", "cat", "dog", "--quiet", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    rows = res["tables"]["internal_confidence"]
    assert [r["object"] for r in rows] == ["cat", "dog"]
    assert all(0 < r["c_o"] <= 1 for r in rows)
    grid = np.load(out / "maps_grid.npy")
    per_layer = np.load(out / "maps_layer_position.npy")
    assert grid.shape == (2, 4, 4) and per_layer.shape == (2, 4, 16)
    np.testing.assert_allclose(grid.reshape(2, -1), per_layer.max(axis=1))
    assert rows[0]["c_o"] == pytest.approx(float(per_layer[0].max()), abs=1e-6)
    assert (out / "maps.png").is_file()


def test_edit_runs_and_reports_before_and_after(tmp_path):
    out = tmp_path / "edit"
    assert (
        main(
            [
                "edit",
                "--objects",
                "cat",
                "--alpha",
                "1.0",
                "--max-new-tokens",
                "3",
                "--quiet",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    res = json.loads((out / "results.json").read_text())
    assert res["metrics"]["edited_image_rows_lens_and_prefill"] == 32
    assert {"c_o_before", "c_o_after"} <= set(res["tables"]["project_away"][0])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["lens", "--objects", "cat", "zebra"],
            "'zebra' is not in the vocabulary: it tokenises to ['[UNK]']",
        ),
        (["edit", "--image-layer", "9"], "image_layer must be an integer in [1, 3] for this model, got 9"),
        (["edit", "--text-layer", "4"], "text_layer must be an integer in [0, 3] for this model, got 4"),
        (["edit", "--alpha", "-1"], "alpha must be"),
        (["lens", "--image", "x.png"], "image needs model"),
        (
            ["lens", "--model", "/nonexistent/folder", "--image", "x.png"],
            "model must be a local Hugging Face",
        ),
        (["reproduce", "--data-root", "/nonexistent/fmnist"], "data_root must be an existing folder"),
        (["reproduce", "--seeds", "0"], "seeds"),
        (["reproduce", "--lm-layers", "31"], "lm_layers"),
        (["reproduce", "--steps", "0"], "steps"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, message, capsys):
    assert main([*argv, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


@pytest.fixture(scope="module")
def local_model(tmp_path_factory):
    """A saved tiny LLaVA + LlavaProcessor folder: the loader for online users, exercised on local files."""
    from PIL import Image

    from iclr25_vl_interp._tiny import tiny_llava, tiny_tokenizer

    folder = tmp_path_factory.mktemp("tiny_llava")
    ip = transformers.CLIPImageProcessor(size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16})
    proc = transformers.LlavaProcessor(
        image_processor=ip,
        tokenizer=tiny_tokenizer(),
        patch_size=4,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        image_token="<image>",
    )
    tiny_llava().save_pretrained(folder)
    proc.save_pretrained(folder)
    img = folder / "img.png"
    Image.fromarray((np.random.default_rng(0).random((20, 24, 3)) * 255).astype("uint8")).save(img)
    return folder, img


def test_lens_on_a_local_model_folder_matches_the_library(local_model, tmp_path):
    from iclr25_vl_interp import internal_confidence
    from iclr25_vl_interp._experiment import load_local_vlm

    folder, img = local_model
    out = tmp_path / "lens"
    argv = ["lens", "--model", str(folder), "--image", str(img), "--prompt", "a cat", "--objects", "cat"]
    assert main([*argv, "--device", "cpu", "--quiet", "--out", str(out)]) == 0
    c_cli = json.loads((out / "results.json").read_text())["tables"]["internal_confidence"][0]["c_o"]
    model, tok, inputs = load_local_vlm(folder, img, "a cat", torch.device("cpu"))
    assert int((inputs["input_ids"] == 9).sum()) == 16  # processor expanded <image> to one id per feature
    conf, _ = internal_confidence(model, inputs, [tok("cat", add_special_tokens=False)["input_ids"]])
    assert c_cli == pytest.approx(float(conf[0]), abs=1e-6)


def test_unreadable_image_exits_2(local_model, tmp_path, capsys):
    folder, _ = local_model
    bad = tmp_path / "bad.png"
    bad.write_text("not an image")
    assert main(["lens", "--model", str(folder), "--image", str(bad), "--quiet"]) == 2
    assert "is not a readable image" in capsys.readouterr().err
