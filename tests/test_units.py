"""Unit tests: metrics, mask and state semantics of the driver, cache, atomic writes, manifest paths."""

import json
import math

import numpy as np
import pytest

from exporter.atomic import staging_dir
from exporter.cache import StageCache
from manifests import manifest as mf
from recipes.tiny_lm import RECIPE
from verify import lm_driver
from verify.metrics import Accumulator, cosine, max_abs, psnr_db


def test_metrics():
    a = np.array([1.0, 2.0, 3.0])
    assert cosine(a, a) == pytest.approx(1.0)
    assert cosine(a, -a) == pytest.approx(-1.0)
    assert math.isinf(psnr_db(a, a))
    assert psnr_db(a, a + 0.1) == pytest.approx(10 * math.log10(4.0 / 0.01))
    assert max_abs(a, a + np.array([0, 0.5, -2])) == 2.0
    acc = Accumulator()
    acc.add(a, a)
    acc.add(a, a + 1)
    assert acc.to_json()["calls"] == 2 and acc.to_json()["max_abs"] == 1.0


def _graphs():
    return {c["name"]: lm_driver.GraphSpec.from_manifest_component(c) for c in RECIPE.to_json()["components"]}


def test_mask_rows_see_past_and_causal_new_columns():
    g = _graphs()["prefill"]
    m = lm_driver.build_mask(g, n_past=3, hidden=-100.0, visible=0.0)
    base = g.context - g.ar
    assert m.shape == (1, 1, 32, 256)
    assert (m[0, 0, :, :3] == 0).all() and (m[0, 0, :, 3:base] == -100).all()
    assert m[0, 0, 0, base] == 0 and m[0, 0, 0, base + 1] == -100
    assert (m[0, 0, 31, base:] == 0).all()


def test_state_writes_only_valid_rows_and_refuses_overflow():
    g = _graphs()
    st = lm_driver.KVState(RECIPE.state_layout)
    new = {f"new_{r}_{i}": np.ones((1, 2, 32, 16), np.float32) for i in range(2) for r in ("key", "value")}
    st.write(new, 5)
    assert st.n_past == 5
    buf = st.buffers["key_0"]
    assert buf[:, :, :5].sum() == 2 * 5 * 16 and buf[:, :, 5:].sum() == 0
    st.n_past = 250
    with pytest.raises(ValueError, match="context full"):
        lm_driver.step_feeds(g["prefill"], st, [1, 2])
    feeds = lm_driver.step_feeds(g["decode"], st, [7])
    assert feeds["position_ids"].tolist() == [[250]] and feeds["past_key_0"].shape == (1, 2, 255, 16)


def test_padded_prefill_positions_repeat_last_real_position():
    g = _graphs()["prefill"]
    st = lm_driver.KVState(RECIPE.state_layout)
    feeds = lm_driver.step_feeds(g, st, [4, 5, 6])
    assert feeds["position_ids"][0, :4].tolist() == [0, 1, 2, 2]
    assert feeds["input_ids"][0, :4].tolist() == [4, 5, 6, 0]


def test_cache_hit_miss_and_corrupted_entry_is_rebuilt(tmp_path):
    cache = StageCache(tmp_path)
    calls = []

    def build(d):
        calls.append(1)
        (d / "x.bin").write_bytes(b"abc")
        return {"n": len(calls)}

    r1 = cache.run("s", {"a": 1}, build)
    r2 = cache.run("s", {"a": 1}, build)
    assert (r1.hit, r2.hit, len(calls)) == (False, True, 1)
    (r2.path / "x.bin").write_bytes(b"abd")  # corrupt the entry
    r3 = cache.run("s", {"a": 1}, build)
    assert not r3.hit and len(calls) == 2 and (r3.path / "x.bin").read_bytes() == b"abc"
    assert cache.run("s", {"a": 2}, build).hit is False


def test_interrupted_build_leaves_no_entry(tmp_path):
    cache = StageCache(tmp_path)

    def build(d):
        (d / "half.bin").write_bytes(b"x")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cache.run("s", {"a": 1}, build)
    assert [p for p in (tmp_path / "s").rglob("*") if p.is_file()] == []
    with pytest.raises(RuntimeError):
        with staging_dir(tmp_path / "bundle") as t:
            (t / "f").write_text("x")
            raise RuntimeError("killed")
    assert not (tmp_path / "bundle").exists()
    assert not list(tmp_path.glob(".tmp-bundle-*"))


@pytest.mark.parametrize("bad", ["/etc/passwd", "../x.onnx", "a/../../x", "a\\b"])
def test_manifest_paths_must_stay_inside_the_bundle(tmp_path, bad):
    with pytest.raises(mf.ManifestInvalid, match="leaves the bundle|resolves outside"):
        mf.safe_relpath(tmp_path, bad)


def test_schema_rejects_traversal_in_file_list():
    with pytest.raises(mf.ManifestInvalid):
        mf.validate({"schema_version": mf.SCHEMA_VERSION, "files": {"../evil": {"sha256": "0" * 64, "size": 1}}})
    schema = mf.schema()
    assert schema["properties"]["schema_version"]["const"] == mf.SCHEMA_VERSION
    json.dumps(schema)
