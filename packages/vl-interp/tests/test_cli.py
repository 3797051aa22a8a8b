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
                "dog",
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
    assert {"c_o_before", "c_o_after"} <= set(res["tables"]["project_away"][0])
    # the rows the edit changes, counted here without the hook: the image rows of hidden state l_I = 2 with
    # <h, t> > 0 (the positive-only rule), in each of the two passes over the prompt (the lens and the caption's
    # prefill). Issue 38: the hook reported all 2 x 16 image rows.
    from iclr25_vl_interp import text_direction, vlm_parts
    from iclr25_vl_interp._lens import capture_hidden_states
    from iclr25_vl_interp._tiny import tiny_llava, tiny_prompt, tiny_tokenizer

    model, tok = tiny_llava(seed=0), tiny_tokenizer()
    x = tiny_prompt(tok, "Describe the image in detail.", seed=0)
    t = text_direction(model, torch.tensor([[tok.bos_token_id, *tok("dog", add_special_tokens=False)["input_ids"]]]),
                       layer=1)  # fmt: skip
    with torch.no_grad(), capture_hidden_states(vlm_parts(model)) as states:
        model(**x, use_cache=False)
    image = x["input_ids"][0] == vlm_parts(model).image_token_id
    positive = int((states[2][0][image].double() @ t.double() > 0).sum())
    assert 0 < positive < 16
    assert res["metrics"]["edited_image_rows_lens_and_prefill"] == 2 * positive


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
        (["lens", "--dtype", "float8"], "dtype"),
        (
            ["lens", "--model", "/nonexistent/folder", "--image", "x.png"],
            "--model: '/nonexistent/folder' does not exist",
        ),
        (
            ["reproduce", "--data-root", "/nonexistent/fmnist"],
            "--data-root: '/nonexistent/fmnist' does not exist",
        ),
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


@pytest.fixture(scope="module")
def bf16_model(local_model, tmp_path_factory):
    """The tiny LLaVA folder saved in bfloat16 (config.json says so): "auto" must keep it, not transformers'
    release-dependent default (float32 on 4.x)."""
    import shutil

    from iclr25_vl_interp._tiny import tiny_llava

    folder, img = local_model
    bf16 = tmp_path_factory.mktemp("tiny_llava_bf16")
    for f in folder.iterdir():
        if f.suffix != ".safetensors" and f.name != "config.json":
            shutil.copy(f, bf16 / f.name)
    tiny_llava(dtype=torch.bfloat16).save_pretrained(bf16)
    config = json.loads((bf16 / "config.json").read_text())
    assert "bfloat16" in (config.get("dtype"), config.get("torch_dtype"))
    return bf16, img


def test_a_model_loads_in_the_checkpoints_dtype_unless_dtype_is_given(bf16_model, tmp_path):
    from iclr25_vl_interp._loading import load_local_vlm

    folder, img = bf16_model
    model, _, inputs = load_local_vlm(folder, img, "a cat", torch.device("cpu"))
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert inputs["pixel_values"].dtype == torch.bfloat16
    for dtype, want in (("auto", "bfloat16"), ("float32", "float32"), ("float16", "float16")):
        out = tmp_path / dtype
        argv = ["lens", "--model", str(folder), "--image", str(img), "--objects", "cat", "--dtype", dtype]
        assert main([*argv, "--device", "cpu", "--quiet", "--out", str(out)]) == 0
        res = json.loads((out / "results.json").read_text())
        assert res["metrics"]["dtype"] == want, dtype
        assert 0 < res["tables"]["internal_confidence"][0]["c_o"] <= 1
    model, _, inputs = load_local_vlm(folder, img, "a cat", torch.device("cpu"), dtype="float32")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert inputs["pixel_values"].dtype == torch.float32


def test_the_weights_load_straight_onto_the_device(local_model, monkeypatch):
    """With accelerate, from_pretrained places the weights (device_map); without it they load and are moved."""
    from iclr25_vl_interp import _inputs

    folder, _ = local_model
    calls = []
    original = transformers.AutoModelForImageTextToText.from_pretrained

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForImageTextToText, "from_pretrained", spy)
    _, model = _inputs.load_hf_folder(folder, device=torch.device("cpu"), dtype="float32")
    if _inputs._can_place_while_loading():
        assert calls[-1]["device_map"] == {"": torch.device("cpu")}
    assert calls[-1]["dtype"] == torch.float32 and not model.training
    monkeypatch.setattr(_inputs, "_can_place_while_loading", lambda: False)
    _, model = _inputs.load_hf_folder(folder, device=torch.device("cpu"))
    assert "device_map" not in calls[-1] and calls[-1]["dtype"] == "auto"
    assert next(model.parameters()).device.type == "cpu"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_model_loads_directly_on_cuda(bf16_model, tmp_path, monkeypatch):
    from iclr25_vl_interp import _inputs

    folder, img = bf16_model
    seen = []
    original = transformers.AutoModelForImageTextToText.from_pretrained

    def spy(*args, **kwargs):
        model = original(*args, **kwargs)
        seen.append({p.device.type for p in model.parameters()})  # before any .to()
        return model

    monkeypatch.setattr(transformers.AutoModelForImageTextToText, "from_pretrained", spy)
    assert _inputs._can_place_while_loading(), "accelerate is installed in the workspace"
    out = tmp_path / "lens"
    argv = ["lens", "--model", str(folder), "--image", str(img), "--objects", "cat", "--device", "cuda"]
    assert main([*argv, "--quiet", "--out", str(out)]) == 0
    assert seen == [{"cuda"}]
    assert json.loads((out / "results.json").read_text())["metrics"]["dtype"] == "bfloat16"


def test_lens_on_a_local_model_folder_matches_the_library(local_model, tmp_path):
    from iclr25_vl_interp import internal_confidence
    from iclr25_vl_interp._loading import load_local_vlm

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
    assert "is not an image Pillow can decode" in capsys.readouterr().err


# -- the boundary: the user's model folder, image, data folder and cache (issue 37) -----------------------------


def _one_line(capsys):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("content", [b"", b"not an image", b"\x89PNG\r\n\x1a\n truncated"])
def test_a_bad_image_exits_2_naming_the_option_and_file(local_model, tmp_path, capsys, content):
    folder, _ = local_model
    bad = tmp_path / "bad.png"
    bad.write_bytes(content)
    for command in ("lens", "edit"):
        assert main([command, "--model", str(folder), "--image", str(bad), "--quiet"]) == 2
        err = _one_line(capsys)
        assert "--image" in err and str(bad) in err, err


@pytest.mark.parametrize("case", ["missing", "config only", "corrupt weights", "no processor"])
def test_a_bad_model_folder_exits_2_naming_it(local_model, tmp_path, capsys, case):
    import shutil

    folder, img = local_model
    model = tmp_path / "model"
    if case != "missing":
        shutil.copytree(folder, model)
    if case == "config only":
        for f in model.glob("*.safetensors"):
            f.unlink()
    elif case == "corrupt weights":
        (model / "model.safetensors").write_bytes(b"\x89junk, not safetensors")
    elif case == "no processor":
        for f in model.iterdir():
            if f.name not in ("config.json", "model.safetensors", "generation_config.json"):
                f.unlink()
    assert main(["lens", "--model", str(model), "--image", str(img), "--quiet"]) == 2
    err = _one_line(capsys)
    assert "--model" in err and str(model) in err, err


def test_an_object_word_outside_the_vocabulary_names_the_option(capsys):
    assert main(["lens", "--objects", "cat", "zebra", "--quiet"]) == 2
    err = _one_line(capsys)
    assert err.startswith("iclr25-vl-interp lens: error: --objects:") and "'zebra'" in err, err


@pytest.mark.parametrize("what", ["a file", "a folder without the IDX files", "junk IDX files"])
def test_a_bad_data_root_exits_2_before_any_work(tmp_path, capsys, what):
    root = tmp_path / "fmnist"
    if what == "a file":
        root.write_text("not a folder")
    else:
        root.mkdir()
        if what == "junk IDX files":
            for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                         "t10k-labels-idx1-ubyte.gz"):  # fmt: skip
                (root / name).write_bytes(b"junk, not gzip")
    out = tmp_path / "out"
    assert main(["reproduce", "--data-root", str(root), "--cache", str(tmp_path / "c"), "--out", str(out),
                 "--quiet"]) == 2  # fmt: skip
    err = _one_line(capsys)
    assert "--data-root" in err and str(root) in err, err
    assert not out.exists() and not (tmp_path / "c").exists()


def test_a_cache_that_is_a_file_exits_2_before_any_work(tmp_path, capsys):
    cache = tmp_path / "cache"
    cache.write_text("a file")
    assert main(["reproduce", "--cache", str(cache), "--quiet"]) == 2
    err = _one_line(capsys)
    assert "--cache" in err and str(cache) in err, err


def test_a_corrupt_cache_entry_is_recomputed_not_a_crash(tmp_path):
    from iclr25_vl_interp._repro import _cached_tensor

    path = tmp_path / "features-x.pt"
    calls = []

    def compute():
        calls.append(1)
        return torch.ones(2, 3)

    for content in (b"\x89 junk", None):  # a corrupt entry, then a NaN one
        if content is None:
            torch.save(torch.full((2, 3), float("nan")), path)
        else:
            path.write_bytes(content)
        got = _cached_tensor(path, compute, log=None)
        assert torch.equal(got, torch.ones(2, 3))
        assert torch.equal(torch.load(path, weights_only=True), torch.ones(2, 3))  # rewritten
    assert len(calls) == 2
    assert torch.equal(_cached_tensor(path, compute, log=None), torch.ones(2, 3)) and len(calls) == 2


def test_a_cached_projector_is_used_only_when_it_fits():
    from iclr25_vl_interp._repro import _fits
    from iclr25_vl_interp._vlm import Projector

    proj = Projector(6, 4, seed=0)
    assert _fits(proj, {k: v.clone() for k, v in proj.state_dict().items()})
    assert not _fits(proj, Projector(5, 4, seed=0).state_dict())
    assert not _fits(proj, {"weight": torch.zeros(4, 6)})


def test_size_gpu_is_10_to_100x_quick_in_training_samples():
    from iclr25_vl_interp._repro import SIZES
    from iclr25_vl_interp.cli import ReproduceConfig

    assert ReproduceConfig(size="gpu").size == "gpu"
    quick, gpu = SIZES["quick"], SIZES["gpu"]
    assert 10 <= gpu.steps * gpu.batch / (quick.steps * quick.batch) <= 100
    assert gpu.n_train >= 10 * quick.n_train and gpu.n_eval > quick.n_eval
