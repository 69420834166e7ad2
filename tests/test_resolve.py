import json
from pathlib import Path

import pytest

from exporter.errors import IntegrityError
from exporter.resolve import resolve
from recipes.tiny_lm import RECIPE, synthesize


@pytest.fixture
def snapshot(tmp_path) -> Path:
    d = tmp_path / "snap"
    synthesize(d)
    return d


def test_pinned_snapshot_resolves_to_a_view_of_pinned_files_only(snapshot, tmp_path):
    (snapshot / "generation_config.json").write_text("{}")  # unpinned: must not be visible
    r = resolve(RECIPE, tmp_path / "cache", checkpoint=snapshot)
    assert r.pinned
    assert sorted(p.name for p in r.directory.iterdir()) == ["config.json", "model.safetensors"]
    assert r.files == RECIPE.pin.files


def test_pin_mismatch_is_refused_with_file_and_digests(snapshot, tmp_path):
    cfg = json.loads((snapshot / "config.json").read_text())
    cfg["rms_norm_eps"] = 1e-5
    (snapshot / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(IntegrityError) as e:
        resolve(RECIPE, tmp_path / "cache", checkpoint=snapshot)
    msg = str(e.value)
    assert "config.json" in msg and RECIPE.pin.files["config.json"] in msg and "--allow-unpinned" in msg
    assert e.value.exit_code == 5


def test_allow_unpinned_records_the_mismatch(snapshot, tmp_path):
    with open(snapshot / "model.safetensors", "r+b") as f:
        f.seek(-1, 2)
        b = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([b[0] ^ 1]))
    r = resolve(RECIPE, tmp_path / "cache", checkpoint=snapshot, allow_unpinned=True)
    assert not r.pinned
    j = r.to_json()
    assert j["pinned"] is False and j["pin_mismatches"][0]["file"] == "model.safetensors"


def test_missing_pinned_file_is_named(snapshot, tmp_path):
    (snapshot / "model.safetensors").unlink()
    with pytest.raises(IntegrityError, match="model.safetensors: pinned checkpoint file is missing"):
        resolve(RECIPE, tmp_path / "cache", checkpoint=snapshot)


def test_missing_tensor_is_refused_not_initialised(snapshot, tmp_path):
    from safetensors.numpy import load_file, save_file

    from exporter.backends.onnx_export import load_hf_model

    tensors = load_file(str(snapshot / "model.safetensors"))
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, str(snapshot / "model.safetensors"), metadata={"format": "pt"})
    r = resolve(RECIPE, tmp_path / "cache", checkpoint=snapshot, allow_unpinned=True)
    with pytest.raises(IntegrityError, match="model.layers.1.mlp.up_proj.weight"):
        load_hf_model(r.directory, RECIPE.architecture)


def test_pickle_checkpoints_are_refused(snapshot, tmp_path):
    from dataclasses import replace

    recipe = replace(RECIPE, pin=replace(RECIPE.pin, files={"pytorch_model.bin": "0" * 64}))
    with pytest.raises(IntegrityError, match="pickle"):
        resolve(recipe, tmp_path / "cache", checkpoint=snapshot)


def test_checkpoint_without_a_pin_is_refused_unless_allowed(tmp_path):
    """A spark-layout checkpoint the recipe has no pin for: named, hashed, refused; --allow-unpinned records it."""
    from recipes.spark import TINY_CONFIG, for_checkpoint, synthesize

    src = tmp_path / "ckpt"
    synthesize(src, {**TINY_CONFIG, "sliding_window": 16})
    recipe = for_checkpoint(json.loads((src / "config.json").read_text()))
    assert recipe.pin is None
    with pytest.raises(IntegrityError) as e:
        resolve(recipe, tmp_path / "cache", checkpoint=src)
    assert "has no pin" in e.value.message and str(src) in e.value.message and "--allow-unpinned" in e.value.hint
    r = resolve(recipe, tmp_path / "cache", checkpoint=src, allow_unpinned=True)
    assert not r.pinned and set(r.files) == {"config.json", "model.safetensors"} and not r.synthetic
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(IntegrityError, match="no config.json and \\*.safetensors"):
        resolve(recipe, tmp_path / "cache", checkpoint=empty, allow_unpinned=True)


def test_checkpoint_directory_without_config_is_a_usage_error(tmp_path):
    from exporter.errors import UsageError
    from exporter.pipeline import build

    with pytest.raises(UsageError) as e:
        build("spark", "sm8750", checkpoint=tmp_path, out_root=tmp_path / "out")
    assert "config.json" in e.value.message and "--checkpoint" in e.value.hint
